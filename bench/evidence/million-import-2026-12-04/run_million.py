"""One paired run of scenario 6 at a million skills, as in RESULTS-reliability.md (2026-12-04): the scenario's
command, plus the machine's /proc/stat times over the run (steal: another tenant's share of these cores).

    cd CHECKOUT && PYTHONPATH=CHECKOUT /path/to/main/.venv/bin/python /path/to/main/bench/evidence/million-import-2026-12-04/run_million.py OUT

writes OUT.json (the scenario's result) and OUT.md (its table). CHECKOUT is the code measured (a worktree of
the commit before, `git worktree add ../before <commit>`, then this checkout): the service is started from
the PYTHONPATH's code, with the main checkout's virtual environment."""
import json
import os
import sys
import time

from bench.chaos_million import million, render_million

STAT = ["user", "nice", "system", "idle", "iowait", "irq", "softirq", "steal"]


def cpu_times() -> list[float]:
    with open("/proc/stat") as f:
        return [int(x) / os.sysconf("SC_CLK_TCK") for x in f.readline().split()[1:len(STAT) + 1]]


out = sys.argv[1]
t, c0 = time.time(), cpu_times()
r = million(skills=1_000_000, rebuild=False, pg_fts_on=False, baselines_on=False)
r["wall_s"] = time.time() - t
r["proc_stat_s"] = {n: round(b - a, 1) for n, a, b in zip(STAT, c0, cpu_times(), strict=True)}
with open(out + ".json", "w") as f:
    json.dump(r, f, default=str, indent=1)
with open(out + ".md", "w") as f:
    f.write(render_million(r, "..."))
print(render_million(r, "..."))
