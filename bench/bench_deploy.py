"""Deployment benchmark: cold start of every SkillOS service under the compose configuration.

    .venv/bin/python -m bench.bench_deploy [--runs 3]

What a new replica costs before it takes traffic (HPA scale-out, a rolling update, a rescheduled
pod): seconds from process start to GET /healthz (alive: the liveness/startup probes) and to
GET /readyz (dependencies reachable: the readiness probe). Each service runs `skillos serve <name>`
with exactly the environment docker-compose.yml gives its container, addresses moved to loopback
(the same translation as tests/deploy/test_deploy_smoke.py), PostgreSQL/Redis from
SKILLOS_BENCH_PG_URL / SKILLOS_BENCH_REDIS_URL. Baseline, same run and machine: an empty service
built with skillos.service.create_app (the floor of any of our Python services). The chart's
startup probe budget (probes.startup: 5 s x 60) is printed beside the worst case.
"""

from __future__ import annotations

import argparse
import os
import re
import statistics
import subprocess
import sys
import time
import uuid
from pathlib import Path

import httpx

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "deploy"))
from deploy_tools import PORTS, load_compose, service_env

from skillos.net import free_port

PG_ADMIN = os.environ.get("SKILLOS_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")
REDIS = os.environ.get("SKILLOS_BENCH_REDIS_URL", "redis://127.0.0.1:6379/0")
SHARED_DATA = ROOT.parent / "shared" / "data"
ORDER = ("llm", "skillrepo", "reasoning", "alfworld", "webshop", "executor", "curator")
BASELINE = ("from skillos.service import create_app, serve; import sys; "
            "serve(create_app('baseline'), '127.0.0.1', int(sys.argv[1]))")
STARTUP_BUDGET_S = 5 * 60


def loopback_env(env: dict[str, str], ports: dict[str, int], db_url: str) -> dict[str, str]:
    out = {}
    for key, value in env.items():
        for name, port in PORTS.items():
            value = re.sub(rf"//{name}:{port}\b", f"//127.0.0.1:{ports[name]}", value)
        out[key] = re.sub(r"^/data/", f"{SHARED_DATA}/", value)
    out.pop("HEALTHCHECK_PORT", None)
    if "SKILLOS_DATABASE_URL" in out:
        out["SKILLOS_DATABASE_URL"] = db_url
    out["SKILLOS_REDIS_URL"] = REDIS
    return out


def wait(url: str, proc: subprocess.Popen, timeout: float = 600) -> float:
    start = time.monotonic()
    while time.monotonic() - start < timeout:
        if proc.poll() is not None:
            raise RuntimeError(f"exited with {proc.returncode} before {url} answered")
        try:
            if httpx.get(url, timeout=2).status_code == 200:
                return time.monotonic()
        except httpx.HTTPError:
            pass
        time.sleep(0.05)
    raise TimeoutError(url)


def start(argv: list[str], env: dict[str, str], port: int, log: Path) -> tuple[subprocess.Popen, float, float]:
    t0 = time.monotonic()
    with open(log, "wb") as out:
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **env}, cwd=ROOT)
    healthy = wait(f"http://127.0.0.1:{port}/healthz", proc) - t0
    ready = wait(f"http://127.0.0.1:{port}/readyz", proc) - t0
    return proc, healthy, ready


def stop(proc: subprocess.Popen) -> None:
    proc.terminate()
    try:
        proc.wait(timeout=30)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def one_round(compose: dict, db_url: str, logs: Path) -> dict[str, tuple[float, float]]:
    ports = {name: free_port() for name in PORTS}
    times, procs = {}, []
    try:
        port = free_port()
        proc, h, r = start([sys.executable, "-c", BASELINE, str(port)], {}, port, logs / "baseline.log")
        times["baseline (empty create_app service)"] = (h, r)
        stop(proc)
        for name in ORDER:
            env = loopback_env(service_env(compose, name), ports, db_url)
            argv = [sys.executable, "-m", "skillos.cli", *service_cmd(compose, name, ports[name])]
            proc, h, r = start(argv, env, ports[name], logs / f"{name}.log")
            procs.append(proc)  # kept running: later services depend on earlier ones
            times[name] = (h, r)
    finally:
        for proc in reversed(procs):
            stop(proc)
    return times


def service_cmd(compose: dict, name: str, port: int) -> list[str]:
    cmd = list(compose["services"][name]["command"])
    cmd[cmd.index("--host") + 1] = "127.0.0.1"
    cmd[cmd.index("--port") + 1] = str(port)
    return cmd


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    import psycopg

    compose = load_compose({"SKILLOS_API_TOKEN": "bench-token"})
    admin = PG_ADMIN.replace("+psycopg", "")
    logs = Path(os.environ.get("TMPDIR", "/tmp")) / f"bench-deploy-{uuid.uuid4().hex[:6]}"
    logs.mkdir(parents=True)
    results: dict[str, list[tuple[float, float]]] = {}
    for i in range(args.runs):
        db = f"skillos_bench_deploy_{uuid.uuid4().hex[:8]}"  # a fresh database: migrations run each time
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'CREATE DATABASE "{db}"')
        try:
            for name, t in one_round(compose, f"{PG_ADMIN.rsplit('/', 1)[0]}/{db}", logs).items():
                results.setdefault(name, []).append(t)
        finally:
            with psycopg.connect(admin, autocommit=True) as c:
                c.execute(f'DROP DATABASE IF EXISTS "{db}" WITH (FORCE)')
        print(f"run {i + 1}/{args.runs} done", file=sys.stderr)

    print(f"\nCold start under the compose configuration ({args.runs} runs, median [min-max], seconds; "
          f"{os.cpu_count()} CPUs; logs in {logs})\n")
    print(f"{'service':40} {'to /healthz':>22} {'to /readyz':>22}")
    for name, runs in results.items():
        cols = []
        for k in (0, 1):
            xs = [r[k] for r in runs]
            cols.append(f"{statistics.median(xs):6.2f} [{min(xs):5.2f}-{max(xs):5.2f}]")
        print(f"{name:40} {cols[0]:>22} {cols[1]:>22}")
    worst = max(r[1] for name, runs in results.items() for r in runs)
    print(f"\nworst time to ready {worst:.1f} s; chart startup-probe budget {STARTUP_BUDGET_S} s "
          f"(probes.startup.periodSeconds x failureThreshold)")


if __name__ == "__main__":
    main()
