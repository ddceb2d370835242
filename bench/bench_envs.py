"""Environment servers benchmark: HTTP step overhead against the same environment in-process, ALFWorld
reset latency, memory per open session, throughput at 1/4/16 concurrent sessions, and a soak.

    .venv/bin/python -m bench.bench_envs                 # the default run (a few minutes on 2 cores)
    .venv/bin/python -m bench.bench_envs --soak-steps 10000 --steps 500

Baselines in the same run: the same `Environment` called in-process (no HTTP, no session manager)
for step latency; 1 session for throughput; the warmed-up server for the soak's memory.
The servers are the real `skillos serve ...` processes on loopback.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from contextlib import contextmanager
from pathlib import Path

import httpx
import psutil

from skillos.clients.envs import EnvClient
from skillos.net import free_port
from skillos.settings import DEFAULT_SHARED_DATA

ROOT = Path(__file__).resolve().parent.parent
ALFWORLD = DEFAULT_SHARED_DATA / "alfworld"
WEBSHOP = DEFAULT_SHARED_DATA / "webshop"
# ALFWorld actions that are always admissible and do not end the game
CHEAP_ACTIONS = ("look", "inventory")
WEBSHOP_ACTIONS = ("search[white cotton shirt]", "click[next >]", "click[< prev]", "click[back to search]")


def ms(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return 1000 * xs[min(len(xs) - 1, int(q / 100 * len(xs)))]


@contextmanager
def server(name: str, env: dict[str, str] | None = None):
    port = free_port()
    log = open(f"/tmp/bench-envs-{name}-{port}.log", "wb")  # noqa: SIM115 - closed below
    proc = subprocess.Popen([sys.executable, "-m", "skillos.cli", "serve", name, "--port", str(port)],
                            cwd=ROOT, env={**os.environ, "SKILLOS_LOG_LEVEL": "WARNING",
                                           # long fixed-action episodes: lift the per-episode step cap
                                           "SKILLOS_ENV_MAX_EPISODE_STEPS": "1000000", **(env or {})},
                            stdout=log, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        for _ in range(600):
            try:
                # ready, not just alive: WebShop loads spaCy in the background after it starts serving
                if httpx.get(f"{url}/readyz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            time.sleep(0.2)
        else:
            raise RuntimeError(f"{name} server did not start")
        yield url, proc
    finally:
        proc.terminate()
        proc.wait(timeout=60)
        log.close()


def tree_rss_mib(pid: int) -> float:
    p = psutil.Process(pid)
    procs = [p, *p.children(recursive=True)]
    total = 0
    for q in procs:
        try:
            total += q.memory_info().rss
        except psutil.NoSuchProcess:
            pass
    return total / 2**20


def paired(name: str, local_step, remote_step, actions, steps: int) -> list[str]:
    """The same action in-process and over HTTP, alternately, so both see the same machine load;
    the overhead is the median of the per-pair differences."""
    local, remote = [], []
    for i in range(steps):
        a = actions[i % len(actions)]
        t = time.perf_counter()
        local_step(a)
        local.append(time.perf_counter() - t)
        t = time.perf_counter()
        remote_step(a)
        remote.append(time.perf_counter() - t)
    overhead = statistics.median(r - loc for r, loc in zip(remote, local, strict=True)) * 1000
    return [f"| {name} step, in-process (baseline) | {steps} | {ms(local, 50):.2f} | {ms(local, 95):.2f} | |",
            (f"| {name} step over HTTP | {steps} | {ms(remote, 50):.2f} | {ms(remote, 95):.2f} | "
             f"overhead: median of pairs {overhead:+.2f} ms (target <= 5) |")]


def step_latency_alfworld(url: str, steps: int) -> list[str]:
    from services.envs.alfworld.environment import AlfworldEnvironment

    env = AlfworldEnvironment(ALFWORLD, spare_workers=0)
    try:
        task = env.tasks("valid_seen")[0]
        game = env.open(task)
        game.start()
        with EnvClient(url) as c:
            s = c.create_session(task_id=task.id)
            rows = paired("ALFWorld", game.step, lambda a: c.step(s.session_id, a), CHEAP_ACTIONS, steps)
            c.close_session(s.session_id)
        game.close()
    finally:
        env.close()
    return rows


def step_latency_webshop(steps: int) -> list[str]:
    """WebShop steps are sub-millisecond, so they show the server's own overhead best."""
    try:
        from services.envs.webshop.environment import WebShopEnvironment
    except ImportError:
        return ["| WebShop | - | - | - | not built yet |"]
    env = WebShopEnvironment(WEBSHOP)
    while env.warming_up():  # its background load would slow this process's HTTP client too
        time.sleep(0.2)
    task = env.tasks(env.splits()[0])[0]
    game = env.open(task)
    game.start()
    with server("webshop") as (url, _), EnvClient(url) as c:
        s = c.create_session(task_id=task.id)
        return paired("WebShop", game.step, lambda a: c.step(s.session_id, a), WEBSHOP_ACTIONS, steps)


def resets(url: str, n: int) -> tuple[list[str], list[str]]:
    with EnvClient(url) as c:
        tasks = c.tasks("valid_train")
        times, ids = [], []
        for i in range(n):
            t = time.perf_counter()
            s = c.create_session(task_id=tasks[i].id)
            times.append(time.perf_counter() - t)
            ids.append(s.session_id)
            time.sleep(0.5)  # let the pool start its next spare, as between real episodes
        for sid in ids:
            c.close_session(sid)
    return [(f"| ALFWorld create session (reset) | {n} | {ms(times, 50):.0f} | {ms(times, 95):.0f} | "
            "game load + first observation; spare workers pre-started |")], ids


def memory_per_session(url: str, pid: int, n: int) -> str:
    with EnvClient(url) as c:
        time.sleep(2)
        before = tree_rss_mib(pid)
        ids = [c.create_session(split="valid_train", index=40 + i).session_id for i in range(n)]
        time.sleep(2)  # spares refilled
        during = tree_rss_mib(pid)
        for sid in ids:
            c.close_session(sid)
        time.sleep(3)
        after = tree_rss_mib(pid)
    return (f"| memory per open ALFWorld session | {n} | {(during - before) / n:.1f} MiB | server+workers "
            f"{before:.0f} -> {during:.0f} -> {after:.0f} MiB (idle, {n} open, closed) |")


def throughput(url: str, concurrency: int, seconds: float) -> tuple[float, float]:
    with EnvClient(url, timeout=300) as c:
        sessions = [c.create_session(split="valid_train", index=60 + i).session_id for i in range(concurrency)]
        stop = time.monotonic() + seconds
        lat: list[float] = []

        def drive(sid: str) -> int:
            n = 0
            while time.monotonic() < stop:
                t = time.perf_counter()
                c.step(sid, CHEAP_ACTIONS[n % 2])
                lat.append(time.perf_counter() - t)
                n += 1
            return n

        started = time.monotonic()
        with ThreadPoolExecutor(concurrency) as pool:
            total = sum(pool.map(drive, sessions))
        elapsed = time.monotonic() - started
        for sid in sessions:
            c.close_session(sid)
    return total / elapsed, ms(lat, 50)


def warm_up(url: str, split: str) -> None:
    """One episode that reaches every code path (WebShop: search, item page, buy, so that spaCy is
    loaded), so the soak's warm reference point does not include one-time loading."""
    with EnvClient(url, timeout=300) as c:
        s = c.create_session(split=split, index=0)
        actions = s.admissible_actions
        for _ in range(6):
            nav = [a for a in actions if a.startswith("search[")]
            pick = ("search[white cotton shirt]" if nav else
                    next((a for a in actions if "buy now" in a.lower()), None) or
                    next((a for a in actions if a.startswith("click[") and "<" not in a and ">" not in a
                          and "back to search" not in a.lower()), actions[0] if actions else "look"))
            r = c.step(s.session_id, pick)
            actions = r.admissible_actions
            if r.done:
                break
        c.close_session(s.session_id)


def soak(name: str, url: str, pid: int, steps: int, actions: tuple[str, ...], split: str,
         concurrency: int = 4, episode: int = 250) -> str:
    """``steps`` steps over ``concurrency`` sessions, each session replaced every ``episode`` steps.
    Memory is compared between two moments with the same number of open sessions: after 20 % of
    the steps (warm) and at the end of the run, before the last sessions close."""
    proc = psutil.Process(pid)
    warm_up(url, split)
    per = steps // concurrency
    samples: list[tuple[int, float, float, int]] = []  # steps done, server RSS, server+workers RSS, threads
    done = [0]
    with EnvClient(url) as c:
        n_tasks = len(c.tasks(split))

    def drive(k: int) -> None:
        with EnvClient(url, timeout=300) as c:
            sid = None
            for i in range(per):
                if i % episode == 0:
                    if sid:
                        c.close_session(sid)
                    sid = c.create_session(split=split, index=(k * 7 + i // episode) % n_tasks).session_id
                c.step(sid, actions[i % len(actions)])
                done[0] += 1
                if k == 0 and i % 50 == 0:
                    samples.append((done[0], proc.memory_info().rss / 2**20, tree_rss_mib(pid), proc.num_threads()))
            c.close_session(sid)

    started = time.monotonic()
    with ThreadPoolExecutor(concurrency) as pool:
        for f in [pool.submit(drive, k) for k in range(concurrency)]:
            f.result()
    rate = steps / (time.monotonic() - started)
    time.sleep(3)
    open_now = httpx.get(f"{url}/v1/sessions").json()["count"]
    warm = next((x for x in samples if x[0] >= steps * 0.2), samples[0])
    last = samples[-1]
    workers = sum(1 for p in proc.children(recursive=True) if "forkserver" not in " ".join(p.cmdline()))
    return (f"| {name} | {steps} ({rate:.0f}/s) | {warm[1]:.0f} -> {last[1]:.0f} MiB "
            f"({100 * (last[1] - warm[1]) / warm[1]:+.1f} %) | {warm[2]:.0f} -> {last[2]:.0f} MiB "
            f"({100 * (last[2] - warm[2]) / warm[2]:+.1f} %) | {warm[3]} -> {last[3]} | {open_now} | {workers} |")


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--steps", type=int, default=300, help="steps per latency measurement")
    ap.add_argument("--resets", type=int, default=6)
    ap.add_argument("--seconds", type=float, default=15, help="per throughput level")
    ap.add_argument("--soak-steps", type=int, default=10_000, help="WebShop soak (cheap steps: the server's own leaks)")
    ap.add_argument("--alfworld-soak-steps", type=int, default=1_000, help="ALFWorld soak (worker processes)")
    ap.add_argument("--skip-webshop", action="store_true")
    args = ap.parse_args(argv)

    print(f"\nenvironment servers; load average {os.getloadavg()[0]:.1f} on {os.cpu_count()} cores\n")
    table = ["| measurement | n | p50 ms | p95 ms | note |", "|---|---|---|---|---|"]
    env = {"SKILLOS_ALFWORLD_DATA": str(ALFWORLD), "SKILLOS_ENV_MAX_SESSIONS": "64"}
    with server("alfworld", env) as (url, proc):
        table += step_latency_alfworld(url, args.steps)
        if not args.skip_webshop:
            table += step_latency_webshop(args.steps)
        rows, _ = resets(url, args.resets)
        table += rows
        print("\n".join(table) + "\n")

        print("| memory | n | per session | note |\n|---|---|---|---|")
        print(memory_per_session(url, proc.pid, 8) + "\n")

        print("| concurrent sessions | steps/s | p50 step ms | vs 1 session |\n|---|---|---|---|")
        base = None
        for k in (1, 4, 16):
            rate, p50 = throughput(url, k, args.seconds)
            base = base or rate
            print(f"| {k} | {rate:.0f} | {p50:.1f} | x{rate / base:.2f} |", flush=True)
        print()
    if args.soak_steps or args.alfworld_soak_steps:
        print("| soak (4 sessions, a new one every 250 steps) | steps | server RSS warm -> end | "
              "server+workers RSS | server threads | sessions open after | worker processes after (spares included) |")
        print("|---|---|---|---|---|---|---|")
    if args.alfworld_soak_steps:
        with server("alfworld", env) as (url, proc):
            print(soak("ALFWorld", url, proc.pid, args.alfworld_soak_steps, CHEAP_ACTIONS, "valid_train"), flush=True)
    if args.soak_steps and not args.skip_webshop:
        with server("webshop") as (url, proc):
            print(soak("WebShop", url, proc.pid, args.soak_steps, WEBSHOP_ACTIONS, "test"), flush=True)


if __name__ == "__main__":
    main()
