"""The bulk import of scenario 6 alone, with py-spy on the service (the profiles of RESULTS-reliability.md,
2026-12-04): N skills in 5,000-skill NDJSON batches from 2 streams into a fresh service and PostgreSQL.

    PYTHONPATH=. .venv/bin/python bench/evidence/million-import-2026-12-04/profile_import.py 1000000 out.raw

py-spy (not a project dependency: `pip install --target /tmp/tools py-spy`; PYSPY= its path) samples the
service at 40 Hz without stopping it; `shares.py out.raw` reads the result."""
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx

from bench.chaos import PgCluster
from bench.chaos_million import REPO, Service, _pg_cpu_s, batches
from bench.procstat import cpu_s

n, out = int(sys.argv[1]), (sys.argv[2] if len(sys.argv) > 2 else None)


def send(url: str, body: bytes) -> None:
    with httpx.Client(base_url=url, timeout=600) as h:
        h.post(f"/v1/repos/{REPO}/bulk", content=body, headers={"content-type": "application/x-ndjson"}).raise_for_status()


wd = Path(tempfile.mkdtemp(prefix="profile-import-"))
pg, svc, spy = PgCluster(), None, None
try:
    pg.start()
    env = {"SKILLOS_DATABASE_URL": pg.create_database("skillrepo"), "SKILLOS_INDEX_DIR": str(wd / "index"),
           "SKILLOS_LOG_LEVEL": "WARNING", "SKILLOS_MAX_BULK_SKILLS": "20000",
           "SKILLOS_INDEX_PERSIST_MIN_SKILLS": "1000", "SKILLOS_DATABASE_REQUEST_TIMEOUT_S": "600"}
    payloads = batches(n, 5000)
    svc = Service(env, wd / "service.log")
    svc.wait_healthy(300)
    httpx.post(f"{svc.url}/v1/repos", json={"name": REPO}, timeout=30).raise_for_status()
    httpx.get(f"{svc.url}/v1/repos/{REPO}/search", params={"q": "warm"}, timeout=30).raise_for_status()
    if out:
        spy = subprocess.Popen([os.environ.get("PYSPY", "/tmp/tools/bin/py-spy"), "record", "--pid",
                                str(svc.proc.pid), "--format", "raw", "-o", out, "--rate", "40", "--nonblocking"],
                               env={**os.environ, "PYTHONPATH": os.environ.get("PYSPY_PATH", "/tmp/tools")})
        time.sleep(1)
    cpu0, pg0, t = cpu_s(svc.proc.pid), _pg_cpu_s(pg), time.monotonic()
    with ThreadPoolExecutor(2) as pool:
        list(pool.map(lambda body: send(svc.url, body), payloads))
    dt = time.monotonic() - t
    cpu, pg_cpu = cpu_s(svc.proc.pid) - cpu0, _pg_cpu_s(pg) - pg0
    print(f"{n} skills: {dt:.1f} s, {n / dt:,.0f} skills/s; service CPU {cpu:.1f} s ({cpu / n * 1e6:.0f} µs a "
          f"skill, {cpu / dt:.2f} of a core), PostgreSQL {pg_cpu:.1f} s ({pg_cpu / n * 1e6:.0f} µs a skill)", flush=True)
finally:
    if spy is not None:
        spy.send_signal(signal.SIGINT)
        spy.wait(60)
    if svc is not None:
        svc.stop()
    pg.destroy()  # the cluster and its million-skill database, and the index files below
    shutil.rmtree(wd, ignore_errors=True)
