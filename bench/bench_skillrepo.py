"""Skill repo benchmarks: search latency, write cost, training regime, forks. One command, one table.

    .venv/bin/python -m bench.bench_skillrepo            # 1k, 10k, 50k skills (a few minutes)
    .venv/bin/python -m bench.bench_skillrepo --quick    # 1k, 5k skills (a minute)

Baselines run in the same process on the same corpus, tokens and queries: rank_bm25 (BM25Okapi) and bm25s
(method "lucene", the same scoring as ours), both of which must rebuild their index to add a document.
The corpus is synthetic and deterministic (seeded): ALFWorld-like words plus a Zipf-distributed tail.
PostgreSQL parts use SKILLOS_BENCH_PG_URL (default: the local server) and are skipped if unreachable.
"""

from __future__ import annotations

import argparse
import os
import random
import subprocess
import sys
import tempfile
import time
import uuid
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import httpx
import numpy as np

from services.skillrepo.search import tokenize
from skillos.protocol.skillrepo import Op, OpsRequest
from skillos.skills import SkillDoc

ROOT = Path(__file__).resolve().parent.parent
PG_ADMIN = os.environ.get("SKILLOS_BENCH_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/postgres")

BASE_WORDS = ["apple", "mug", "fridge", "microwave", "sinkbasin", "clean", "heat", "cool", "lamp", "desklamp", "desk", "drawer", "cabinet", "shelf", "knife", "pan", "pot", "tomato", "egg", "potato", "bread", "lettuce", "cup", "plate", "bowl", "spoon", "book", "pen", "cd", "keychain", "watch", "soapbar", "towel", "countertop", "diningtable", "sidetable", "coffeemachine", "toaster", "stoveburner", "garbagecan", "bathtub", "toilet", "dresser", "bed", "sofa", "armchair", "safe", "laptop", "pillow", "cellphone", "creditcard", "statue", "vase", "open", "close", "take", "put", "move", "go", "examine", "look", "use", "slice", "find", "search", "inventory", "first", "then", "after", "before", "carefully", "check", "each", "receptacle", "object", "target", "location", "hold", "place", "store", "wash"]


def make_corpus(n: int, seed: int = 42) -> list[SkillDoc]:
    rng = random.Random(seed)
    tail = [f"w{i}" for i in range(20000)]
    weights = [1.0 / (i + 1) for i in range(len(tail))]

    def words(k: int) -> list[str]:
        base = rng.choices(BASE_WORDS, k=k // 2)
        return base + rng.choices(tail, weights=weights, k=k - len(base))

    docs = []
    for i in range(n):
        name_words = rng.sample(BASE_WORDS, 2)
        name = f"{name_words[0]}-{name_words[1]}-{i}"
        desc = " ".join(words(rng.randint(8, 20)))
        body = "\n".join(" ".join(words(rng.randint(6, 14))) for _ in range(rng.randint(4, 10)))
        docs.append(SkillDoc(name, f"Use when {desc}", body, {}))
    return docs


def make_queries(n: int, seed: int = 7) -> list[str]:
    rng = random.Random(seed)
    return [" ".join(rng.choices(BASE_WORDS, k=rng.randint(6, 15))) + f" w{rng.randint(0, 300)}" for _ in range(n)]


def pct(values: list[float], p: float) -> float:
    return float(np.percentile(np.array(values), p))


def timed(fn, items) -> list[float]:
    out = []
    for it in items:
        t = time.perf_counter()
        fn(it)
        out.append((time.perf_counter() - t) * 1000)
    return out


class Table:
    def __init__(self):
        self.rows: list[tuple[str, str, str, str]] = []

    def add(self, what: str, system: str, value: str, target: str = "") -> None:
        self.rows.append((what, system, value, target))
        print(f"  {what:<44} {system:<26} {value:<28} {target}", flush=True)

    def render(self) -> str:
        head = ("measure", "system", "result", "target")
        widths = [max(len(r[i]) for r in [head, *self.rows]) for i in range(4)]
        lines = ["| " + " | ".join(h.ljust(w) for h, w in zip(head, widths, strict=True)) + " |",
                 "|" + "|".join("-" * (w + 2) for w in widths) + "|"]
        lines += ["| " + " | ".join(c.ljust(w) for c, w in zip(r, widths, strict=True)) + " |" for r in self.rows]
        return "\n".join(lines)


def service_for(url: str, **settings):
    from services.skillrepo.serving import SkillRepoService
    from services.skillrepo.settings import SkillRepoSettings

    return SkillRepoService(SkillRepoSettings(database_url=url, redis_url=None, sync_interval_s=3600, **settings))


def machine_line(note: str) -> str:
    """What the numbers ran on, printed under a benchmark's table."""
    load = os.getloadavg()
    return (f"machine: {os.cpu_count()} cores, load average {load[0]:.1f} / {load[1]:.1f} / {load[2]:.1f} during "
            f"the run; python {sys.version.split()[0]}; {note}")


def load_repo(svc, repo: str, docs: list[SkillDoc], batch: int = 2000) -> float:
    t = time.perf_counter()
    svc.create_repo(repo)
    for i in range(0, len(docs), batch):
        with svc.store.write(repo) as tx:
            for d in docs[i:i + batch]:
                tx.put(d, "import")
    return time.perf_counter() - t


def start_http(db_url: str) -> tuple[subprocess.Popen, str]:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    env = {**os.environ, "SKILLOS_DATABASE_URL": db_url, "SKILLOS_LOG_LEVEL": "WARNING"}
    proc = subprocess.Popen([sys.executable, "-m", "skillos.cli", "serve", "skillrepo", "--port", str(port)],
                            env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    url = f"http://127.0.0.1:{port}"
    for _ in range(300):
        try:
            if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                return proc, url
        except httpx.HTTPError:
            pass
        time.sleep(0.2)
    proc.kill()
    raise RuntimeError("service did not start")


def bench_search(table: Table, sizes: list[int], n_queries: int, tmp: Path) -> None:
    import bm25s
    from rank_bm25 import BM25Okapi

    from services.skillrepo.search import document_tokens

    queries = make_queries(n_queries)
    qtokens = [tokenize(q) for q in queries]
    for n in sizes:
        db = f"sqlite:///{tmp}/search-{n}.db"
        svc = service_for(db)
        docs = make_corpus(n)
        load_s = load_repo(svc, "big", docs)
        svc.search("big", "warm up")  # builds the index from the database
        table.add(f"load {n} skills (SQLite, then index)", "skillos", f"{load_s:.1f} s")
        lat = timed(lambda q, svc=svc: svc.search("big", q, 5), queries)
        table.add(f"top-5 search, {n} skills, in-process", "skillos (incl. seq check)",
                  f"p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms", "p50 <= 1 ms" if n == 50000 else "")
        idx = svc.indexes.peek(svc.store.repo_seq("big")[0])
        lat = timed(lambda qt, idx=idx: idx.search(qt, 5), qtokens)
        table.add(f"top-5 search, {n} skills, in-process", "skillos index only",
                  f"p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms")

        corpus_tokens = [document_tokens(d.name, d.description, d.body) for d in docs]
        t = time.perf_counter()
        ref = bm25s.BM25(k1=1.2, b=0.75, method="lucene")
        ref.index(corpus_tokens, show_progress=False)
        build = time.perf_counter() - t
        vocab = ref.vocab_dict
        qids = [[vocab[t] for t in qt if t in vocab] for qt in qtokens]
        lat = timed(lambda ids, ref=ref: ref.retrieve([ids], k=5, show_progress=False, n_threads=1)
                    if ids else None, qids)
        table.add(f"top-5 search, {n} skills, in-process", "bm25s (lucene)",
                  f"p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms")
        table.add(f"add 1 skill to {n} (full rebuild)", "bm25s", f"{build * 1000:.0f} ms")
        t = time.perf_counter()
        okapi = BM25Okapi(corpus_tokens, k1=1.2, b=0.75)
        build = time.perf_counter() - t
        few = qtokens[: max(10, n_queries // max(1, n // 1000))]
        lat = timed(lambda qt, okapi=okapi: np.argpartition(-okapi.get_scores(qt), 5)[:5], few)
        table.add(f"top-5 search, {n} skills, in-process", "rank_bm25 (BM25Okapi)",
                  f"p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms")
        table.add(f"add 1 skill to {n} (full rebuild)", "rank_bm25", f"{build * 1000:.0f} ms")

        if n == max(sizes):
            bench_writes(table, svc, n)
        svc.stop()

        proc, url = start_http(db)
        try:
            with httpx.Client(base_url=url, timeout=30) as h:
                h.get("/v1/repos/big/search", params={"q": "warm", "k": 5})
                lat = timed(lambda q: h.get("/v1/repos/big/search", params={"q": q, "k": 5}).raise_for_status(),
                            queries)
            table.add(f"top-5 search, {n} skills, over HTTP", "skillos (loopback, 1 client)",
                      f"p50 {pct(lat, 50):.3f} ms  p99 {pct(lat, 99):.3f} ms", "p50 <= 5 ms" if n == 50000 else "")
        finally:
            proc.terminate()
            proc.wait(timeout=20)


def bench_writes(table: Table, svc, n: int) -> None:
    """One curator op on the large repo, then a search that must already see it."""
    lat, after, visible = [], [], 0
    queries = make_queries(200, seed=3)
    for i in range(200):
        marker = f"marker{i}x"
        req = OpsRequest(ops=[Op(name="skill_update", arguments={
            "skill_name": f"{BASE_WORDS[0]}-probe", "new_content": f"probe {marker}"})] if i else [
            Op(name="new_skill_insert", arguments={"skill_name": f"{BASE_WORDS[0]}-probe", "content": "probe"})])
        t = time.perf_counter()
        res = svc.apply_ops("big", req)
        lat.append((time.perf_counter() - t) * 1000)
        assert res.applied, res
        t = time.perf_counter()
        svc.search("big", queries[i], 5)
        after.append((time.perf_counter() - t) * 1000)
        if i and svc.search("big", marker, 1)[0].name == f"{BASE_WORDS[0]}-probe":
            visible += 1
    table.add(f"write 1 op at {n} skills (SQLite)", "skillos",
              f"p50 {pct(lat, 50):.2f} ms  p99 {pct(lat, 99):.2f} ms", "<= 5 ms")
    table.add("searchable right after the write", "skillos", f"{visible}/199")
    # every write moves N and avgdl, so the first search after it recomputes its terms' weights
    table.add(f"top-5 search right after a write, {n} skills", "skillos in-process",
              f"p50 {pct(after, 50):.3f} ms  p99 {pct(after, 99):.3f} ms")


def bench_training(table: Table, tmp: Path, db_url: str | None = None, label: str = "SQLite") -> None:
    """256 repos forked from one seed, each grown to 50 skills by ops, a search before every op."""
    svc = service_for(db_url or f"sqlite:///{tmp}/train.db")
    seed_docs = make_corpus(10, seed=5)
    load_repo(svc, "seed", seed_docs)
    queries = make_queries(64, seed=11)
    rng = random.Random(1)
    t0 = time.perf_counter()
    repos = [f"roll-{i}" for i in range(256)]
    for r in repos:
        svc.fork_repo("seed", r)
    fork_s = time.perf_counter() - t0
    calls = 0
    t, cpu = time.perf_counter(), time.process_time()
    for step in range(40):
        for r in repos:
            svc.search(r, queries[rng.randrange(64)], 5)
            op = (Op(name="new_skill_insert", arguments={"skill_name": f"s{step}", "content": f"skill {step} "
                     + queries[rng.randrange(64)]}) if step % 4 != 3 else
                  Op(name="skill_update", arguments={"skill_name": f"s{step - 1}", "new_content": "better"}))
            svc.apply_ops(r, OpsRequest(ops=[op]))
            calls += 2
    elapsed, cpu = time.perf_counter() - t, time.process_time() - cpu
    # calls per CPU-second: what one dedicated core gives, whatever else the machine runs
    table.add(f"training: 256 repos x <=50 skills ({label})", "skillos in-process",
              f"{calls / elapsed:,.0f} calls/s wall; {calls / cpu:,.0f} per CPU-s", ">= 2,000 calls/s")
    table.add(f"fork seed of 10 skills x256 ({label})", "skillos", f"{fork_s / 256 * 1000:.2f} ms/fork")
    svc.stop()


def bench_fork(table: Table, tmp: Path, db_url: str, label: str) -> None:
    svc = service_for(db_url)
    load_repo(svc, "thousand", make_corpus(1000, seed=9))
    lat = []
    for i in range(20):
        t = time.perf_counter()
        svc.fork_repo("thousand", f"fork-{i}")
        lat.append((time.perf_counter() - t) * 1000)
    table.add(f"fork a repo of 1,000 skills ({label})", "skillos",
              f"p50 {pct(lat, 50):.1f} ms  max {max(lat):.1f} ms", "<= 50 ms")
    svc.stop()


def bench_pg_sustained(table: Table, db_url: str, seconds: float = 8.0) -> None:
    svc = service_for(db_url)
    svc.create_repo("sustained")
    stop = time.monotonic() + seconds
    counts = []

    def worker(w: int) -> int:
        n = 0
        while time.monotonic() < stop:
            name = f"w{w}-{n % 50}"
            op = (Op(name="new_skill_insert", arguments={"skill_name": name, "content": f"written by {w} {n}"})
                  if n < 50 else Op(name="skill_update", arguments={"skill_name": name, "new_content": f"v {n}"}))
            assert svc.apply_ops("sustained", OpsRequest(ops=[op], atomic=False)).applied
            n += 1
        return n

    with ThreadPoolExecutor(4) as pool:
        counts = list(pool.map(worker, range(4)))
    table.add("sustained ops/s, 4 writers, one repo (PostgreSQL)", "skillos in-process",
              f"{sum(counts) / seconds:,.0f} ops/s")
    svc.stop()


def pg_database():
    import psycopg

    admin = PG_ADMIN.replace("+psycopg", "")
    try:
        psycopg.connect(admin, connect_timeout=3).close()
    except Exception as e:  # noqa: BLE001
        print(f"PostgreSQL not reachable ({e}): its rows are skipped")
        return None, None
    name = f"skillos_bench_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')

    def drop():
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')

    return f"{PG_ADMIN.rsplit('/', 1)[0]}/{name}", drop


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--quick", action="store_true", help="smaller corpora (1k, 5k)")
    ap.add_argument("--sizes", default="", help="comma-separated corpus sizes (default 1000,10000,50000)")
    ap.add_argument("--queries", type=int, default=300)
    args = ap.parse_args()
    sizes = [int(s) for s in args.sizes.split(",") if s] or ([1000, 5000] if args.quick else [1000, 10000, 50000])
    import logging

    logging.disable(logging.WARNING)
    table = Table()
    with tempfile.TemporaryDirectory(prefix="skillos-bench-") as d:
        tmp = Path(d)
        bench_search(table, sizes, args.queries, tmp)
        bench_training(table, tmp)
        bench_fork(table, tmp, f"sqlite:///{tmp}/fork.db", "SQLite")
        pg, drop = pg_database()
        if pg:
            try:
                bench_fork(table, tmp, pg, "PostgreSQL")
                bench_pg_sustained(table, pg)
            finally:
                drop()
    print()
    print(table.render())
    print("\n" + machine_line("HTTP rows: one uvicorn worker, one sequential client"))


if __name__ == "__main__":
    main()
