"""bench.procstat: the benchmarks' and tests' reader of /proc (CPU seconds, status memory lines, the machine's busy time)."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from bench import procstat


def test_cpu_seconds_of_a_process_and_of_the_children_it_reaped():
    before, reaped_before = procstat.cpu_s(os.getpid()), procstat.cpu_s(os.getpid(), children=True)
    busy_before = procstat.machine_busy_s()
    x = 0
    for i in range(3_000_000):   # ~0.1-0.3 s of this process's own CPU
        x += i
    own = procstat.cpu_s(os.getpid()) - before
    assert own > 0.02
    # a child that burns CPU and is reaped: in the children's part only, and as much as the kernel's own count of it
    # (os.times' children fields read the same ticks through another call), however fast the machine is
    children_before = os.times().children_user + os.times().children_system
    subprocess.run([sys.executable, "-c", "sum(range(60_000_000))"], check=True)
    child = os.times().children_user + os.times().children_system - children_before
    assert child > 0.2
    with_children = procstat.cpu_s(os.getpid(), children=True) - reaped_before
    assert with_children >= own + child - 0.05   # 0.05: rounding of the two reads to clock ticks
    assert procstat.machine_busy_s() - busy_before >= child   # the machine's count has both in it


def test_memory_lines_in_mib():
    rss, peak = procstat.status_mb(os.getpid(), "VmRSS"), procstat.status_mb("self", "VmHWM")
    assert 5 < rss <= peak < 64 * 1024
    with pytest.raises(KeyError):
        procstat.status_mb(os.getpid(), "NoSuchLine")
    assert procstat.status_mb(os.getpid(), "NoSuchLine", default=0.0) == 0.0
