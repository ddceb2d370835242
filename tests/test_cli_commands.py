"""The `skillos` command finds every part's commands through the entry points in pyproject.toml."""

from __future__ import annotations

import ast
import subprocess
import sys
import tomllib
from importlib.metadata import entry_points
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _modules_with_register() -> set[str]:
    found = set()
    for path in [*ROOT.glob("services/*/cli.py"), *ROOT.glob("skillos/**/cli.py"), *ROOT.glob("harness/cli.py")]:
        tree = ast.parse(path.read_text())
        if any(isinstance(n, ast.FunctionDef) and n.name == "register" for n in tree.body):
            found.add(".".join(path.relative_to(ROOT).with_suffix("").parts))
    return found


def test_every_part_with_commands_is_declared_and_installed():
    declared = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"]["skillos.commands"]
    assert {v.split(":")[0] for v in declared.values()} == _modules_with_register()
    installed = {ep.name: ep.value for ep in entry_points(group="skillos.commands")}
    assert installed == declared, "the installed entry points differ from pyproject.toml: re-run `make setup`"


def test_the_core_is_a_library_that_imports_no_service_and_no_application():
    """skillos/ is what every part shares: it may not depend on a service or on the harness."""
    offenders = []
    for path in ROOT.glob("skillos/**/*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            names = ([a.name for a in node.names] if isinstance(node, ast.Import)
                     else [node.module or ""] if isinstance(node, ast.ImportFrom) and not node.level else [])
            offenders += [f"{path.relative_to(ROOT)}: {n}" for n in names if n.split(".")[0] in ("services", "harness")]
    assert not offenders


def test_serve_lists_every_service():
    out = subprocess.run([sys.executable, "-m", "skillos.cli", "serve", "--help"], capture_output=True,
                         text=True, timeout=120, cwd=ROOT, check=True).stdout
    for name in ("skillrepo", "alfworld", "webshop", "reasoning", "executor", "curator", "console", "mcp", "llm"):
        assert name in out


def test_each_parts_cli_imports_first_in_a_fresh_interpreter():
    """A part's cli.py imports skillos.cli.common; registering every part at that import loaded the part
    again half-initialised (`import services.skillrepo.cli` first failed with an import circle)."""
    from importlib.metadata import entry_points

    modules = sorted({ep.value.split(":")[0] for ep in entry_points(group="skillos.commands")})
    assert "services.skillrepo.cli" in modules
    for module in modules:
        code = (f"import {module}; import skillos.cli as c; "
                "assert 'serve' in [g.name for g in c.app.registered_groups]")
        proc = subprocess.run([sys.executable, "-c", code],
                              capture_output=True, text=True, timeout=120, cwd=ROOT, check=False)
        assert proc.returncode == 0, (module, proc.stderr[-2000:])


def test_run_refuses_bad_options_before_anything_starts():
    """An unknown method, method parameter, order or retrieval mode, or a parameter out of its range, is a
    clear error, not a started stack."""
    for args, says in ((["--method", "memgpt"], "unknown method"), (["--method", "skillos,memq"], "'memq'"),
                       (["--method", "sapo", "--param", "sapo.top_fraction=1.5"], "top_fraction"),
                       (["--method", "memp", "--param", "alpha=0.1"], "no method played"),
                       (["--method", "skill1", "--param", "memp.k=2"], "'memp' is not among those played"),
                       (["--order", "random"], "unknown order"),
                       (["--retrieval", "semantic"], "unknown retrieval")):
        proc = subprocess.run([sys.executable, "-m", "skillos.cli", "run", "--no-start", *args], capture_output=True, check=False,
                              text=True, timeout=120, cwd=ROOT)
        assert proc.returncode != 0 and says in proc.stdout + proc.stderr, (args, proc.stdout, proc.stderr)


def test_methods_lists_every_method_with_its_parameters():
    out = subprocess.run([sys.executable, "-m", "skillos.cli", "methods"], capture_output=True, text=True,
                         timeout=120, cwd=ROOT, check=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line and not line.startswith(" ")]
    assert names == ["none", "skillos", "skillrl", "sapo", "skill1", "reasoningbank", "memp", "gold", "skillos-expert",
                     "expert-demos"]
    assert "    alpha = 0.05" in out and "    top_fraction = 0.2" in out
