"""`bench/bench_gateway.py` end to end at a tiny size: the skill repo, the bench's echo backend and the
executor as real processes, the trajectories in SQLite; the tables come out and no streaming call fails."""

from __future__ import annotations

import subprocess
import sys

import pytest
from conftest import ROOT

pytestmark = pytest.mark.slow


def test_bench_gateway_tiny_run_prints_its_tables_without_streaming_errors():
    proc = subprocess.run([sys.executable, "-m", "bench.bench_gateway", "--skills", "200", "--calls", "40",
                           "--stream-clients", "8", "--stream-calls", "2", "--memory-calls", "200"],
                          cwd=ROOT, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = proc.stdout
    for title in ("## latency of a non-streaming call (ms)", "## CPU time per call", "## streaming: 8 concurrent",
                  "## executor memory (VmRSS, MiB)"):
        assert title in out, out
    assert "| direct to the backend (baseline) | 40 |" in out and "| gateway, all calls | 40 |" in out
    stream_row = next(line for line in out.splitlines() if line.startswith("| 16 |"))
    assert stream_row.split("|")[2].strip() == "0", out   # 16 streaming calls, 0 errors
    assert "errors:" not in out
    assert "skillos_gateway_overhead_seconds" in out and "no calls" not in out
