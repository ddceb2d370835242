"""The layers of ../shared/ARCHITECTURE.md, read off the code: imports go downward only.

application (`harness/`, `bench/`, `deploy/`) → services (`services/<part>/`) → core (`skillos/`). The core
imports no service and not the application; a service imports no other service's internals and not the
application; the executor service is imported by nobody (the trainer and the benchmarks play episodes
through `skillos.acting.player`); the curation core imports no wire schema, the protocol imports its
leaf modules. Function-local imports count too. (That the core imports no service
and not the application: tests/test_cli_commands.py.)
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]


def _imports(folder: str) -> list[tuple[str, int, str]]:
    out = []
    for path in sorted((ROOT / folder).rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if isinstance(node, ast.Import):
                names = [a.name for a in node.names]
            elif isinstance(node, ast.ImportFrom) and node.level == 0:
                names = [node.module or ""]
            else:
                continue
            out += [(str(path.relative_to(ROOT)), node.lineno, n) for n in names]
    return out


def _under(name: str, package: str) -> bool:
    return name == package or name.startswith(package + ".")


def test_no_service_imports_the_application():
    assert [f"{p}:{n} {m}" for p, n, m in _imports("services") if _under(m, "harness")] == []


@pytest.mark.parametrize("folder", ["skillos", "services", "harness", "bench", "deploy"])
def test_nobody_outside_the_executor_service_imports_it(folder):
    offenders = [f"{p}:{n} {m}" for p, n, m in _imports(folder)
                 if _under(m, "services.executor") and not p.startswith("services/executor/")]
    assert offenders == []


def test_a_service_imports_no_other_service():
    offenders = []
    for part in sorted(p.name for p in (ROOT / "services").iterdir() if (p / "__init__.py").exists()):
        offenders += [f"{p}:{n} {m}" for p, n, m in _imports(f"services/{part}")
                      if _under(m, "services") and not _under(m, f"services.{part}")]
    assert offenders == []


def test_the_curation_core_speaks_its_own_types():
    """`skillos/curation` imports no wire schema and no HTTP error (not even for type checking): the curator
    service and the trainer map its `Decision` and `CurationRequestError` to the wire themselves."""
    offenders = [f"{p}:{n} {m}" for p, n, m in _imports("skillos/curation")
                 if any(_under(m, x) for x in ("skillos.protocol", "skillos.errors", "skillos.service", "fastapi"))]
    assert offenders == []


def test_the_protocol_imports_curations_leaf_modules_not_the_package():
    offenders = [f"{p}:{n} {m}" for p, n, m in _imports("skillos/protocol")
                 if m in ("skillos.curation", "skillos.curation.decision")]
    assert offenders == []


@pytest.mark.parametrize(("folder", "may_import"), [
    ("services/trainer/decoding", ("services.trainer.decoding",)),
    ("services/trainer/grpo", ("services.trainer.grpo", "services.trainer.decoding", "services.trainer.config",
                               "services.trainer.data"))])
def test_the_trainers_engine_and_decoding_import_no_rollouts(folder, may_import):
    """Inside the trainer: rollouts → the GRPO engine (`grpo/`) → decoding, never back up."""
    offenders = [f"{p}:{n} {m}" for p, n, m in _imports(folder)
                 if _under(m, "services") and not any(_under(m, ok) for ok in may_import)]
    assert offenders == []


def test_function_local_imports_only_defer_something_heavy():
    """Outside the cli modules (whose docstrings say what their commands defer: every part's cli.py loads
    when any `skillos` command starts), an internal import inside a function is there only to defer a heavy
    dependency, and the line above it says which (`# deferred: ...`)."""
    offenders = []
    for folder in ("services", "harness"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            if path.name == "cli.py":
                assert "Imports inside the commands are deliberate" in path.read_text(), path
                continue
            lines = path.read_text().splitlines()
            for fn in ast.walk(ast.parse("\n".join(lines), str(path))):
                if not isinstance(fn, (ast.FunctionDef, ast.AsyncFunctionDef)):
                    continue
                for node in ast.walk(fn):
                    if (isinstance(node, ast.ImportFrom) and node.level == 0
                            and (node.module or "").split(".")[0] in ("skillos", "services", "harness")
                            and "# deferred" not in lines[node.lineno - 2]):
                        offenders.append(f"{path.relative_to(ROOT)}:{node.lineno} {node.module}")
    assert not offenders
