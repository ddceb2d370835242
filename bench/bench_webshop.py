"""WebShop engine benchmark: load time, search / click / buy step latency, search quality, memory,
a 10,000-step memory soak, and search on a 100x larger synthetic catalog; baselines in the same run.

    .venv/bin/python -m bench.bench_webshop [--http] [--scale 100] [--soak 10000]

Baselines: rank_bm25's BM25Okapi (the pure-Python BM25 WebShop's engine imports) and bm25s, both
over the same analyzed tokens; the target is a <= 20 ms p50 search step on 1,000 products.
"""

from __future__ import annotations

import argparse
import gc
import os
import subprocess
import sys
import time
import tracemalloc
from pathlib import Path

import numpy as np

from bench.procstat import status_mb
from services.envs.webshop.environment import WebShopEnvironment, search_query
from services.envs.webshop.search import BM25Index, analyze
from skillos.settings import DEFAULT_SHARED_DATA

ROOT = Path(__file__).resolve().parent.parent


def pct(xs: list[float], q: float) -> float:
    return float(np.percentile(np.array(xs) * 1000.0, q))


def row(name: str, xs: list[float], note: str = "") -> str:
    return f"| {name} | {len(xs)} | {pct(xs, 50):.3f} | {pct(xs, 95):.3f} | {note} |"


def timed(fn, *args) -> float:
    t = time.perf_counter()
    fn(*args)
    return time.perf_counter() - t


def rank_of(asins: list[str], asin: str) -> int | None:
    return asins.index(asin) if asin in asins else None


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--data-dir", type=Path, default=DEFAULT_SHARED_DATA / "webshop")
    ap.add_argument("--queries", type=int, default=500)
    ap.add_argument(
        "--scale", type=int, default=100, help="copies of the catalog for the large-index run (0: skip)"
    )
    ap.add_argument(
        "--http", action="store_true", help="also time search steps over HTTP (skillos serve webshop)"
    )
    ap.add_argument("--soak", type=int, default=10_000, help="steps of the memory soak (0: skip)")
    args = ap.parse_args()

    t0 = time.perf_counter()
    env = WebShopEnvironment(args.data_dir)
    load_s = time.perf_counter() - t0
    data = env.data
    tasks = env.tasks("test")[: args.queries]
    goals = [env.goal(t) for t in tasks]
    queries = [search_query(g) for g in goals]
    products = data.catalog.products
    print(f"\nWebShop engine, {len(products)} products, {len(tasks)} test goals as queries")
    print(f"load (products + index + {sum(len(v) for v in data.splits.values())} goals): {load_s:.2f} s\n")

    # --- search step: ours vs baselines on the same tokens ---
    texts = [p.search_text for p in products]
    tokens = [analyze(t) for t in texts]
    q_tokens = [analyze(q) for q in queries]
    lines = ["| search (1 query, top 50) | n | p50 ms | p95 ms | note |", "|---|---|---|---|---|"]

    ours: list[float] = []
    ranks_ours = []
    for q, g in zip(queries, goals, strict=True):
        t = time.perf_counter()
        hits = data.search(q)
        ours.append(time.perf_counter() - t)
        ranks_ours.append(rank_of([p.asin for p in hits], g.asin))

    steps: list[float] = []
    for task, q in zip(tasks, queries, strict=True):
        game = env.open(task)
        game.start()
        steps.append(timed(game.step, f"search[{q}]"))

    from rank_bm25 import BM25Okapi

    t = time.perf_counter()
    okapi = BM25Okapi(tokens, k1=0.9, b=0.4)
    okapi_build = time.perf_counter() - t
    okapi_times, ranks_okapi = [], []
    for qt, g in zip(q_tokens, goals, strict=True):
        t = time.perf_counter()
        scores = okapi.get_scores(qt)
        top = np.argsort(-scores, kind="stable")[:50]
        okapi_times.append(time.perf_counter() - t)
        ranks_okapi.append(rank_of([products[i].asin for i in top if scores[i] > 0], g.asin))

    import bm25s

    t = time.perf_counter()
    bm = bm25s.BM25(k1=0.9, b=0.4, method="lucene")
    bm.index(tokens, show_progress=False)
    bm25s_build = time.perf_counter() - t
    bm_times, ranks_bm = [], []
    for qt, g in zip(q_tokens, goals, strict=True):
        t = time.perf_counter()
        res, sc = bm.retrieve([qt or ["_"]], k=50, show_progress=False, n_threads=1)
        bm_times.append(time.perf_counter() - t)
        ranks_bm.append(
            rank_of([products[i].asin for i, s in zip(res[0], sc[0], strict=True) if s > 0], g.asin)
        )

    t = time.perf_counter()
    BM25Index(texts)
    ours_build = time.perf_counter() - t
    lines.append(row("ours: BM25Index.search", ours, f"index build {ours_build * 1000:.0f} ms"))
    lines.append(row("ours: full search[...] step (search + page)", steps, "target <= 20 ms p50"))
    lines.append(
        row("baseline: rank_bm25 BM25Okapi", okapi_times, f"index build {okapi_build * 1000:.0f} ms")
    )
    lines.append(row("baseline: bm25s (lucene)", bm_times, f"index build {bm25s_build * 1000:.0f} ms"))
    print("\n".join(lines))

    def quality(ranks):
        n = len(ranks)
        return (
            f"top1 {sum(r == 0 for r in ranks) / n:.1%}, top10 {sum(r is not None and r < 10 for r in ranks) / n:.1%}"
            f", top50 {sum(r is not None for r in ranks) / n:.1%}"
        )

    print("\ngoal product found for its own instruction:")
    print(f"  ours      {quality(ranks_ours)}")
    print(f"  BM25Okapi {quality(ranks_okapi)}")
    print(f"  bm25s     {quality(ranks_bm)}")

    # --- clicks and purchases ---
    clicks, buys_cold, buys = [], [], []
    for i, (task, q, g) in enumerate(zip(tasks, queries, goals, strict=True)):
        game = env.open(task)
        game.start()
        r = game.step(f"search[{q}]")
        action = next((a for a in r.admissible_actions if a.startswith("click[") and len(a) == 17), None)
        if action is None:
            continue
        clicks.append(timed(game.step, action))
        clicks.append(timed(game.step, "click[description]"))
        clicks.append(timed(game.step, "click[< prev]"))
        (buys_cold if i < 1 else buys).append(timed(game.step, "click[buy now]"))
    print("\n| step | n | p50 ms | p95 ms | note |\n|---|---|---|---|---|")
    print(row("click (item, sub-page, prev)", clicks))
    print(row("buy now (reward, spaCy warm)", buys))
    print(row("buy now, first in process", buys_cold, "spaCy preloaded in background at start"))

    # --- memory per open game ---
    gc.collect()
    tracemalloc.start()
    before = tracemalloc.take_snapshot()
    games = []
    for task, q in zip(tasks[:200], queries[:200], strict=True):
        g = env.open(task)
        g.start()
        g.step(f"search[{q}]")
        games.append(g)
    after = tracemalloc.take_snapshot()
    tracemalloc.stop()
    grown = sum(s.size_diff for s in after.compare_to(before, "filename"))
    print(
        f"\nmemory per open game after one search: {grown / len(games) / 1024:.1f} KiB ({len(games)} games)"
    )

    # --- a larger catalog: the same texts repeated (vocabulary stays small: an easy case for BM25) ---
    if args.scale:
        big = [f"{t} v{i}" for i in range(args.scale) for t in texts]
        t = time.perf_counter()
        big_index = BM25Index(big)
        build = time.perf_counter() - t
        times = [timed(big_index.search, q, 50) for q in queries[:100]]
        print("\n| large index | docs | build s | p50 ms | p95 ms |\n|---|---|---|---|---|")
        print(
            f"| ours, {args.scale}x catalog | {len(big)} | {build:.1f} | {pct(times, 50):.2f} | {pct(times, 95):.2f} |"
        )
        del big, big_index

    if args.soak:
        soak(env, args.soak)

    if args.http:
        http_bench(args.data_dir, tasks[:100], queries[:100], steps[:100])


def rss_kib() -> int:
    return round(status_mb("self", "VmRSS") * 1024)


def soak(env: WebShopEnvironment, steps: int) -> None:
    """Play episodes (expert moves mixed with random clicks and searches) for `steps` steps and
    compare the process' memory after the first 10 % with the end."""
    import random

    rng = random.Random(1)
    tasks = env.tasks("train")
    done_steps, episodes, base = 0, 0, None
    while done_steps < steps:
        game = env.open(tasks[rng.randrange(len(tasks))], expert=True)
        r = game.start()
        for _ in range(15):
            if rng.random() < 0.6 and r.info.get("expert_action"):
                action = r.info["expert_action"]
            elif r.admissible_actions and rng.random() < 0.8:
                action = rng.choice(r.admissible_actions).replace(
                    "<your query>", rng.choice(("shirt", "tea", "lamp"))
                )
            else:
                action = "click[nothing]"
            r = game.step(action)
            done_steps += 1
            if done_steps == steps // 10:
                gc.collect()
                base = rss_kib()
            if r.done or done_steps >= steps:
                break
        game.close()
        episodes += 1
    gc.collect()
    end = rss_kib()
    grow = (end - base) / base * 100 if base else 0.0
    print(
        f"\nsoak: {steps} steps in {episodes} episodes; RSS after {steps // 10} steps {base / 1024:.1f} MiB, "
        f"at the end {end / 1024:.1f} MiB ({grow:+.1f} %, limit +10 %)"
    )


def http_bench(data_dir: Path, tasks, queries, inproc: list[float]) -> None:
    import httpx

    from skillos.clients.envs import EnvClient

    port = 18911
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "skillos.cli",
            "serve",
            "webshop",
            "--port",
            str(port),
            "--data-dir",
            str(data_dir),
        ],
        cwd=ROOT,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        env={**os.environ},
    )
    try:
        url = f"http://127.0.0.1:{port}"
        for _ in range(300):
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                time.sleep(0.1)
        times = []
        with EnvClient(url) as c:
            for task, q in zip(tasks, queries, strict=True):
                s = c.create_session(task_id=task.id)
                times.append(timed(c.step, s.session_id, f"search[{q}]"))
                c.close_session(s.session_id)
        print("\n| search step | n | p50 ms | p95 ms | note |\n|---|---|---|---|---|")
        print(row("in-process", inproc))
        print(row("over HTTP (EnvClient)", times, f"overhead p50 {pct(times, 50) - pct(inproc, 50):.2f} ms"))
        print()
    finally:
        proc.terminate()
        proc.wait(timeout=10)


if __name__ == "__main__":
    main()
