"""bench.procstat: the benchmarks' and tests' reader of /proc (CPU seconds, memory lines, the machine's busy time)."""

from __future__ import annotations

import os
import subprocess
import sys

from bench import procstat


def test_cpu_seconds_of_a_process_and_of_the_children_it_reaped():
    before, reaped_before = procstat.cpu_s(os.getpid()), procstat.cpu_s(os.getpid(), children=True)
    busy_before = procstat.machine_busy_s()
    x = 0
    for i in range(3_000_000):   # ~0.1-0.3 s of this process's own CPU
        x += i
    own = procstat.cpu_s(os.getpid()) - before
    assert own > 0.02
    # a child that burns CPU and is reaped: in the children's part only
    subprocess.run([sys.executable, "-c", "sum(range(20_000_000))"], check=True)
    with_children = procstat.cpu_s(os.getpid(), children=True) - reaped_before
    assert with_children >= own + 0.1
    assert procstat.machine_busy_s() - busy_before >= 0.1   # the machine's count has both in it


def test_memory_lines_in_mib():
    rss, peak = procstat.status_mb(os.getpid(), "VmRSS"), procstat.status_mb("self", "VmHWM")
    assert 5 < rss <= peak < 64 * 1024
    assert procstat.status_mb(os.getpid(), "NoSuchLine") == 0.0
