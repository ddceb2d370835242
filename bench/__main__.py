"""`python -m bench` (`make bench`): the benchmarks, what each measures and where its results are;
`python -m bench NAME [ARGS]` (`make bench BENCH="NAME ARGS"`) runs one, as `python -m bench.bench_NAME ARGS` does.

Each benchmark is one command that prints a table with its named baseline in the same run; most need the
embedded LLM or real services and take minutes to hours, so none runs unasked."""

from __future__ import annotations

import ast
import runpy
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent


def benchmarks() -> dict[str, Path]:
    """name -> module file: bench_<name>.py, and chaos.py (issue 26's suite)."""
    found = {p.stem.removeprefix("bench_"): p for p in sorted(HERE.glob("bench_*.py"))}
    found["chaos"] = HERE / "chaos.py"
    return found


def summary(path: Path) -> str:
    doc = ast.get_docstring(ast.parse(path.read_text())) or ""
    return " ".join(doc.split("\n\n")[0].split())


# where a benchmark's results are written up when the file is not RESULTS-<name>.md
RESULTS_ELSEWHERE = {"acting": "learning", "chaos": "reliability", "constrained": "trainer",
                     "gateway_examples": "learning", "grammar": "executor", "lora_update": "trainer",
                     "served_policy": "trainer", "turns": "learning", "weight_sync": "weight-sync"}


def results_of(name: str) -> str:
    path = HERE / f"RESULTS-{RESULTS_ELSEWHERE.get(name, name)}.md"
    return f"bench/{path.name}" if path.is_file() else "-"


def listing() -> str:
    lines = ["| benchmark | what it measures | results |", "|---|---|---|"]
    lines += [f"| `{name}` | {summary(path)} | {results_of(name)} |" for name, path in benchmarks().items()]
    return "\n".join(lines) + "\n\nRun one: .venv/bin/python -m bench NAME [--help | its options]"


def main(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help", "list"):
        print(listing())
        return 0
    name, rest = argv[0], argv[1:]
    found = benchmarks()
    if name not in found:
        print(f"no benchmark {name!r}; the benchmarks are: {', '.join(found)}", file=sys.stderr)
        return 2
    module = f"bench.{found[name].stem}"
    sys.argv = [module, *rest]
    runpy.run_module(module, run_name="__main__", alter_sys=True)
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
