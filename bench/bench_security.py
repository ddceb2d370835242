"""Security evidence (issue 51): each attack of tests/security against the real stack, on this tree and on an older commit.

    .venv/bin/python -m bench.bench_security [--before 4ea572f] [-k EXPR]

Runs ``pytest tests/security`` on this checkout and, with ``--before REV``, on a git worktree of REV (made in a
temporary folder, removed afterwards) with this checkout's tests/security copied in and ``PYTHONPATH`` set to
the worktree, so that pytest and every ``skillos serve`` process it starts import REV's code; which code they
import is checked first (a subprocess started as tests/conftest.py's ``run_service`` starts services says where
it imports ``services`` and ``skillos`` from). Prints one row per test: its outcome before and after, and the
first line of the assertion that failed. The baseline is REV, the code before the defences; what each test
attacks and which defence stops it: bench/RESULTS-security.md. PostgreSQL and Redis as for the tests
(SKILLOS_TEST_PG_URL, SKILLOS_TEST_REDIS_URL); the WebShop data of this checkout (SKILLOS_WEBSHOP_DATA).
"""

from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys
import tempfile
import time
import xml.etree.ElementTree as ET
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
TESTS = "tests/security"


def _env(tree: Path) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": str(tree)}
    env.setdefault("SKILLOS_WEBSHOP_DATA", str(ROOT.parent / "shared" / "data" / "webshop"))
    return env


def imported_from(tree: Path) -> str:
    """Where a process started in ``tree`` with its PYTHONPATH imports the services and the core from."""
    out = subprocess.run([sys.executable, "-c", "import services, skillos; print(services.__file__, skillos.__file__)"],
                         cwd=tree, env=_env(tree), capture_output=True, text=True, check=True)
    return out.stdout.strip()


def run_tests(tree: Path, report: Path, select: str | None) -> tuple[dict[str, tuple[str, str]], float, str]:
    """pytest tests/security in ``tree``: {test id: (outcome, first line of its failure)}, wall seconds, summary."""
    cmd = [sys.executable, "-m", "pytest", TESTS, "-q", "-p", "no:cacheprovider", f"--junitxml={report}",
           "-o", "junit_family=xunit1"] + (["-k", select] if select else [])
    start = time.monotonic()
    out = subprocess.run(cmd, cwd=tree, env=_env(tree), capture_output=True, text=True, check=False)
    wall = time.monotonic() - start
    summary = (out.stdout.strip().splitlines() or ["(no output)"])[-1]
    results: dict[str, tuple[str, str]] = {}
    if not report.exists():
        raise SystemExit(f"pytest wrote no report in {tree}:\n{out.stdout[-3000:]}\n{out.stderr[-3000:]}")
    for case in ET.parse(report).getroot().iter("testcase"):
        test = f"{case.get('file') or case.get('classname', '').replace('.', '/') + '.py'}::{case.get('name')}"
        outcome, why = "passed", ""
        for tag in ("failure", "error", "skipped"):
            found = case.find(tag)
            if found is not None:
                outcome = {"failure": "failed", "error": "error", "skipped": "skipped"}[tag]
                why = (found.get("message") or found.text or "").strip().splitlines()[0][:160] if (
                    found.get("message") or found.text) else ""
                break
        results[test] = (outcome, why)
    return results, wall, summary


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--before", metavar="REV", help="also run the attacks on this commit (e.g. 4ea572f)")
    ap.add_argument("-k", dest="select", help="only the tests pytest -k selects")
    args = ap.parse_args()

    with tempfile.TemporaryDirectory(prefix="bench-security-") as tmp:
        runs: list[tuple[str, dict[str, tuple[str, str]], float, str]] = []
        if args.before:
            tree = Path(tmp) / "before"
            subprocess.run(["git", "worktree", "add", "--detach", str(tree), args.before], cwd=ROOT, check=True,
                           capture_output=True)
            try:
                shutil.rmtree(tree / TESTS, ignore_errors=True)
                shutil.copytree(ROOT / TESTS, tree / TESTS, ignore=shutil.ignore_patterns("__pycache__"))
                where = imported_from(tree)
                print(f"{args.before}: pytest and the services import {where}")
                if not all(p.startswith(str(tree)) for p in where.split()):
                    raise SystemExit(f"the worktree of {args.before} does not import its own code: {where}")
                runs.append((args.before, *run_tests(tree, Path(tmp) / "before.xml", args.select)))
            finally:
                subprocess.run(["git", "worktree", "remove", "--force", str(tree)], cwd=ROOT, check=False,
                               capture_output=True)
        print(f"this tree: pytest and the services import {imported_from(ROOT)}")
        runs.append(("this tree", *run_tests(ROOT, Path(tmp) / "after.xml", args.select)))

    print()
    for name, _, wall, summary in runs:
        print(f"{name}: {summary} (wall {wall:.0f} s)")
    print()
    tests = sorted({t for _, results, _, _ in runs for t in results})
    print("| test | " + " | ".join(name for name, *_ in runs) + " |")
    print("|---|" + "---|" * len(runs))
    for t in tests:
        cells = []
        for _, results, _, _ in runs:
            outcome, why = results.get(t, ("not run", ""))
            cells.append(f"{outcome}: {why.replace('|', '/')}" if why else outcome)
        print(f"| `{t}` | " + " | ".join(cells) + " |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
