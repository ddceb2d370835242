"""What a process (or the machine) has used so far, read from Linux's /proc: the benchmarks' and tests' one reader.

CPU seconds are what work cost a process however busy the machine is; memory is in MiB.
"""

from __future__ import annotations

import os
from pathlib import Path


def cpu_s(pid: int, children: bool = False) -> float:
    """User + system CPU seconds of a process so far; with ``children`` also those of the children it reaped."""
    # the fields after the ")" that ends the command name (which may hold spaces): utime stime cutime cstime at 11-14
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    ticks = int(fields[11]) + int(fields[12]) + (int(fields[13]) + int(fields[14]) if children else 0)
    return ticks / os.sysconf("SC_CLK_TCK")


def status_mb(pid: int | str, key: str, default: float | None = None) -> float:
    """A memory line of /proc/<pid>/status (``VmRSS``, ``VmHWM``, ...) in MiB.

    A process that has exited but not been reaped has no memory lines: that raises KeyError unless ``default`` is
    given, so a benchmark does not report a dead process's memory as 0 MiB.
    """
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith(key + ":"):
            return int(line.split()[1]) / 1024
    if default is None:
        raise KeyError(f"/proc/{pid}/status has no {key} line")
    return default


def machine_busy_s() -> float:
    """CPU seconds the whole machine spent not idle so far, every core and process (/proc/stat's first line)."""
    # user nice system idle iowait irq softirq steal, in clock ticks; idle and iowait are the idle ones
    t = list(map(int, Path("/proc/stat").read_text().split()[1:9]))
    return (sum(t) - t[3] - t[4]) / os.sysconf("SC_CLK_TCK")
