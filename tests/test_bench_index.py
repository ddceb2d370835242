"""`python -m bench` (`make bench`): the index of the benchmarks, and one run by name."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def bench(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench", *args], cwd=ROOT, capture_output=True, text=True,
                          timeout=120, check=False)


def test_the_index_names_every_benchmark_and_its_results_file():
    out = bench()
    assert out.returncode == 0, out.stderr
    rows = {line.split("`")[1]: line for line in out.stdout.splitlines() if line.startswith("| `")}
    for module in sorted((ROOT / "bench").glob("bench_*.py")):
        row = rows.get(module.stem.removeprefix("bench_"))
        assert row, f"{module.name} is not in the index"
        assert row.rstrip(" |").endswith(".md"), f"no results file named for {module.name}: {row}"
        assert (ROOT / row.rstrip(" |").rsplit("| ", 1)[1]).is_file()


def test_a_benchmark_runs_by_name_with_its_own_options():
    out = bench("grammar", "--help")
    assert out.returncode == 0 and "usage: bench_grammar.py" in out.stdout, out.stderr


def test_an_unknown_name_is_refused_with_the_names():
    out = bench("nosuch")
    assert out.returncode == 2 and "no benchmark 'nosuch'" in out.stderr and "learning" in out.stderr
