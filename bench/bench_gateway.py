"""Skill-gateway benchmark: the gateway's overhead over a direct call to its LLM backend, streaming under
concurrency, and the executor's memory over many calls.

    .venv/bin/python -m bench.bench_gateway --write          # full run: 10k skills, 2000 + 10000 calls (~2 min idle)
    .venv/bin/python -m bench.bench_gateway --pg --write     # the same with the trajectories in PostgreSQL
    .venv/bin/python -m bench.bench_gateway --skills 2000 --calls 300 --stream-clients 64 --stream-calls 2 \
        --memory-calls 1000                                  # quick run (~2 min)
    .venv/bin/python -m bench.bench_gateway --backend http://HOST:PORT/v1   # a real OpenAI-compatible LLM instead

All real processes on loopback: the skill repo (`skillos serve skillrepo`, SQLite) with one repo filled with
``--skills`` generated ALFWorld-like skills (bulk import), an LLM backend (default: the echo server below), and
the executor (`skillos serve executor`) whose `/v1/chat/completions` is the gateway. The tables:

- latency: ``--calls`` sequential non-streaming calls straight to the backend (the baseline), then the same
  number through the gateway in pairs: a call that opens a new trajectory (a new task: a BM25 search of the
  repo runs, the trajectory is created) and one that continues it (``X-SkillOS-Trajectory``: no search).
  p50/p90/p99 of each, and the overhead = gateway minus direct at the same percentile (target <= 10 ms p50
  with 10k skills). Then the CPU time per call of each process (the load-independent cost: on a busy machine
  the wall-clock overhead also holds the waits for a CPU), and the executor's own
  ``skillos_gateway_overhead_seconds`` histogram over those calls (the call's time in the executor minus
  its wait on the backend: the skill search, the trajectory's creation or lookup and the record included):
  it only gives the bucket bound the percentile falls under.
- streaming: ``--stream-clients`` concurrent clients, each ``--stream-calls`` ``stream: true`` calls (a new
  trajectory, then continuing it), every chunk read to ``data: [DONE]``; errors = a non-200, a missing
  ``[DONE]`` or an exception; time to first chunk and total time per call.
- memory: the executor's RSS (VmRSS) sampled every ``--calls/10`` calls over ``--memory-calls`` gateway calls
  at concurrency 8; growth is from the 2nd sample (after warm-up) to the last.
"""

from __future__ import annotations

import argparse
import asyncio
import io
import json
import os
import random
import sys
import tarfile
import tempfile
import time
import uuid
from collections import Counter
from contextlib import ExitStack, contextmanager
from pathlib import Path

import httpx

from bench import procstat
from bench.processes import started

ROOT = Path(__file__).resolve().parent.parent
ECHO_MODEL = "echo"
ECHO_TEXT = "<think>I should look for the mug first.</think><action>go to countertop 1</action>"

OBJECTS = ["mug", "apple", "egg", "potato", "tomato", "bread", "lettuce", "cup", "plate", "bowl", "pan", "pot",
           "knife", "fork", "spoon", "spatula", "kettle", "soapbar", "cloth", "towel", "book", "pen", "pencil",
           "cd", "cellphone", "laptop", "keychain", "creditcard", "watch", "vase", "candle", "statue", "pillow"]
RECEPS = ["countertop", "cabinet", "drawer", "shelf", "fridge", "microwave", "sinkbasin", "stoveburner", "desk",
          "coffeemachine", "diningtable", "sidetable", "dresser", "bed", "sofa", "armchair", "safe", "cart"]
VERBS = ["heat", "cool", "clean", "examine", "find", "take", "put", "place", "slice", "rinse", "move", "carry"]
HOW = ["open it if it is closed", "look inside before leaving", "check every receptacle in order",
       "hold the object while using the appliance", "use the desklamp to examine it", "close it afterwards",
       "go back to the first receptacle when stuck", "do not put the object inside the appliance with move"]


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] if xs else float("nan")


def table(out: list[str], title: str, header: list[str], rows: list[list]) -> None:
    out += [f"\n## {title}\n", "| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    out += ["| " + " | ".join(f"{c:.3g}" if isinstance(c, float) else str(c) for c in r) + " |" for r in rows]


def progress(msg: str) -> None:
    print(f"  [{time.strftime('%H:%M:%S')}] {msg}", file=sys.stderr, flush=True)


# ---------------------------------------------------------------- the echo backend
def serve_echo(port: int) -> None:
    """A tiny OpenAI-compatible LLM backend that answers at once with a fixed short answer (non-streaming:
    one completion with a ``usage`` block; ``stream: true``: 16 SSE chunks, then ``data: [DONE]``). It
    isolates the gateway's own cost: the LLM's time is not the gateway's, so proxy benchmarks measure against
    a backend that costs (almost) nothing, and the direct call to it is the baseline."""
    import uvicorn
    from starlette.applications import Starlette
    from starlette.requests import Request
    from starlette.responses import JSONResponse, StreamingResponse
    from starlette.routing import Route

    words = ECHO_TEXT.replace("><", "> <").split(" ")
    pieces = [" ".join(words[i::16]) for i in range(16)]  # 16 non-empty pieces
    usage = {"prompt_tokens": 64, "completion_tokens": 16, "total_tokens": 80}

    async def models(_):
        return JSONResponse({"object": "list", "data": [{"id": ECHO_MODEL, "object": "model", "owned_by": "bench"}]})

    async def chat(request: Request):
        body = await request.json()
        cid, now = "chatcmpl-" + uuid.uuid4().hex[:12], int(time.time())
        if not body.get("stream"):
            return JSONResponse({"id": cid, "object": "chat.completion", "created": now, "model": ECHO_MODEL,
                                 "choices": [{"index": 0, "finish_reason": "stop",
                                              "message": {"role": "assistant", "content": ECHO_TEXT}}],
                                 "usage": usage})

        async def events():
            for i, piece in enumerate(pieces):
                last = i == len(pieces) - 1
                chunk = {"id": cid, "object": "chat.completion.chunk", "created": now, "model": ECHO_MODEL,
                         "choices": [{"index": 0, "delta": {"content": piece + ("" if last else " ")},
                                      "finish_reason": "stop" if last else None}],
                         **({"usage": usage} if last else {})}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    app = Starlette(routes=[Route("/healthz", lambda _: JSONResponse({"status": "ok"})), Route("/v1/models", models),
                            Route("/v1/chat/completions", chat, methods=["POST"])])
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


# ---------------------------------------------------------------- processes
@contextmanager
def process(argv: list[str], name: str, env: dict[str, str] | None = None, timeout: float = 120):
    """A real process on a free loopback port (``argv`` ends with ``--port``); yields (url, pid)."""
    with started(argv, f"gateway-{name}", env, timeout) as p:
        yield p.url, p.pid


@contextmanager
def pg_database():
    """A fresh PostgreSQL database on 127.0.0.1:5432 (trust auth, user postgres, else root), dropped after."""
    import psycopg

    name = f"bench_gateway_{uuid.uuid4().hex[:10]}"
    for user in ("postgres", "root"):
        admin = f"postgresql://{user}@127.0.0.1:5432/postgres"
        try:
            with psycopg.connect(admin, autocommit=True, connect_timeout=5) as c:
                c.execute(f'CREATE DATABASE "{name}"')
            break
        except psycopg.OperationalError:
            if user == "root":
                raise
    try:
        yield f"postgresql+psycopg://{user}@127.0.0.1:5432/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def skills_archive(n: int, start: int, rng: random.Random) -> bytes:
    """A tar.gz of ``n`` varied ALFWorld-like <name>/SKILL.md folders."""
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for i in range(start, start + n):
            verb, obj, verb2, rec = rng.choice(VERBS), rng.choice(OBJECTS), rng.choice(VERBS), rng.choice(RECEPS)
            name = f"{verb}-{obj}-then-{verb2}-{i}"
            steps = "\n".join(f"{j + 1}. {rng.choice(VERBS)} the {rng.choice(OBJECTS)} at the {rng.choice(RECEPS)} "
                              f"{rng.randint(1, 9)}; {rng.choice(HOW)}." for j in range(rng.randint(3, 7)))
            text = (f"---\nname: {name}\ndescription: Use when an ALFWorld task asks to {verb} a {obj} and then "
                    f"{verb2} it in or on the {rec}; {rng.choice(HOW)}.\ndomain: alfworld\n---\n\n"
                    f"# {verb.title()} a {obj}, then {verb2} it\n\n{steps}\n\nPitfall: {rng.choice(HOW)}.\n")
            data = text.encode()
            info = tarfile.TarInfo(f"{name}/SKILL.md")
            info.size, info.mode = len(data), 0o644
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def fill_repo(url: str, repo: str, n: int, candidates: int = 0) -> None:
    """``n`` skills written by a person, then (``candidates``) that many more from op batches in a repo whose
    policy keeps them as candidates: every search then filters states and over-fetches by their number."""
    from skillos.clients.skillrepo import SkillRepoClient

    rng = random.Random(0)
    with SkillRepoClient(url, timeout=600) as rc:
        rc.create_repo(repo, {"candidates": True} if candidates else None)
        for start in range(0, n, 2000):
            rc.import_(repo, skills_archive(min(2000, n - start), start, rng))
            progress(f"repo {repo}: {min(n, start + 2000)}/{n} skills")
        for start in range(0, candidates, 50):
            with tarfile.open(fileobj=io.BytesIO(skills_archive(min(50, candidates - start), n + start, rng))) as tar:
                docs = [tar.extractfile(m).read().decode() for m in tar.getmembers()]
            rc.apply_ops(repo, [{"name": "new_skill_insert", "arguments": {"skill_name": d.split("\n")[1][6:],
                                                                            "content": d}} for d in docs])
            progress(f"repo {repo}: {min(candidates, start + 50)}/{candidates} candidates")


# ---------------------------------------------------------------- the calls
def task_text(i: int) -> str:
    r = random.Random(i)
    return (f"Your task is to: {r.choice(VERBS)} some {r.choice(OBJECTS)} and put it in {r.choice(RECEPS)} "
            f"{r.randint(1, 9)} (game {i}).")


def first_messages(i: int) -> list[dict]:
    return [{"role": "system", "content": "You are an agent in a household. Answer with <action>...</action>."},
            {"role": "user", "content": task_text(i) + " You are in the middle of a room. You see a cabinet 1, "
                                                       "a countertop 1, a fridge 1 and a microwave 1."}]


def next_messages(i: int) -> list[dict]:
    return [*first_messages(i), {"role": "assistant", "content": ECHO_TEXT},
            {"role": "user", "content": "You arrive at countertop 1. On the countertop 1, you see a mug 1."}]


async def gateway_pair(c: httpx.AsyncClient, url: str, model: str, i: int, times: dict[str, list[float]]) -> None:
    """One call opening a new trajectory (a skill search runs) and one continuing it."""
    headers = {}
    for kind, messages in (("new", first_messages(i)), ("continue", next_messages(i))):
        t = time.perf_counter()
        r = await c.post(f"{url}/v1/chat/completions", headers=headers,
                         json={"model": model, "messages": messages, "max_tokens": 16})
        r.raise_for_status()
        times[kind].append(time.perf_counter() - t)
        headers = {"X-SkillOS-Trajectory": r.headers["X-SkillOS-Trajectory"]}


def overhead_hist(metrics: str) -> dict[float, float]:
    """Cumulative bucket counts of skillos_gateway_overhead_seconds, by upper bound."""
    out = {}
    for line in metrics.splitlines():
        if line.startswith("skillos_gateway_overhead_seconds_bucket{"):
            le = line.split('le="', 1)[1].split('"', 1)[0]
            out[float(le)] = float(line.rsplit(" ", 1)[1])
    return out


def hist_bound(before: dict[float, float], after: dict[float, float], q: float) -> str:
    """The bucket bound (ms) under which the q-th percentile of the calls between the two readings falls."""
    counts = {le: after[le] - before.get(le, 0.0) for le in sorted(after)}
    total = counts.get(float("inf"), 0.0)
    le = next((le for le, n in counts.items() if total and n >= q / 100 * total), None)
    return "no calls" if le is None else "> last bucket" if le == float("inf") else f"<= {1000 * le:g}"


async def latency(gw: str, backend: str, model: str, calls: int, pids: dict, out: list[str]) -> None:
    async with httpx.AsyncClient(timeout=60) as c:
        for i in range(20):   # warm-up: connections, caches, the store's first writes
            await c.post(f"{backend}/v1/chat/completions",
                         json={"model": model, "messages": first_messages(-i), "max_tokens": 16})
            await gateway_pair(c, gw, model, -1 - i, {"new": [], "continue": []})
        direct, cpu0 = [], {k: cpu_s(v) for k, v in pids.items()}
        for i in range(calls):
            msgs = first_messages(i) if i % 2 == 0 else next_messages(i)
            t = time.perf_counter()
            r = await c.post(f"{backend}/v1/chat/completions", json={"model": model, "messages": msgs,
                                                                      "max_tokens": 16})
            r.raise_for_status()
            direct.append(time.perf_counter() - t)
        progress(f"direct: {calls} calls")
        cpu1 = {k: cpu_s(v) for k, v in pids.items()}
        before = overhead_hist((await c.get(f"{gw}/metrics")).text)
        times: dict[str, list[float]] = {"new": [], "continue": []}
        for i in range(calls // 2):
            await gateway_pair(c, gw, model, i, times)
        progress(f"gateway: {calls} calls")
        cpu2 = {k: cpu_s(v) for k, v in pids.items()}
        after = overhead_hist((await c.get(f"{gw}/metrics")).text)
    both = times["new"] + times["continue"]
    ms = [50, 90, 99]
    rows = [["direct to the backend (baseline)", len(direct), *(1000 * pct(direct, q) for q in ms), "-", "-", "-"]]
    for label, xs in (("gateway, all calls", both), ("gateway, new trajectory (skill search)", times["new"]),
                      ("gateway, continuing a trajectory", times["continue"])):
        rows.append([label, len(xs), *(1000 * pct(xs, q) for q in ms),
                     *(1000 * (pct(xs, q) - pct(direct, q)) for q in ms)])
    table(out, "latency of a non-streaming call (ms)",
          ["calls", "n", "p50", "p90", "p99", "overhead p50", "overhead p90", "overhead p99"], rows)
    n = 2 * (calls // 2)
    table(out, "CPU time per call (ms; user + system of each process, independent of the machine's load; "
          "/proc counts 10 ms ticks: take a few hundred calls)",
          ["calls", "executor (gateway)", "skill repo (search)", "backend"],
          [["direct to the backend", "-", "-", 1000 * (cpu1["backend"] - cpu0["backend"]) / calls],
           ["through the gateway", *(1000 * (cpu2[k] - cpu1[k]) / n for k in ("executor", "skillrepo", "backend"))]])
    out.append(f"\nexecutor histogram `skillos_gateway_overhead_seconds` over the gateway calls (bucket bound, ms; "
               f"the call's time in the executor minus its wait on the backend): p50 {hist_bound(before, after, 50)}, "
               f"p99 {hist_bound(before, after, 99)}; target <= 10 ms p50 overall")


async def streaming(gw: str, model: str, clients: int, per_client: int, out: list[str]) -> None:
    first, total, errors = [], [], Counter()

    async def one(c: httpx.AsyncClient, k: int) -> None:
        tid = None
        i = 1_000_000 + k   # one conversation per client: a new trajectory, then continuing it
        for _ in range(per_client):
            try:
                t, got_first, done = time.perf_counter(), None, False
                async with c.stream("POST", f"{gw}/v1/chat/completions",
                                    json={"model": model, "stream": True, "max_tokens": 16,
                                          "messages": first_messages(i) if tid is None else next_messages(i)},
                                    headers={"X-SkillOS-Trajectory": tid} if tid else {}) as r:
                    if r.status_code != 200:
                        await r.aread()
                        errors[f"HTTP {r.status_code}"] += 1
                        continue
                    tid = tid or r.headers.get("X-SkillOS-Trajectory")
                    async for line in r.aiter_lines():
                        if line.startswith("data:"):
                            got_first = got_first or time.perf_counter() - t
                            if line[5:].strip() == "[DONE]":
                                done = True
                            elif '"error"' in line:
                                errors["error event in the stream"] += 1
                if not done:
                    errors["no [DONE]"] += 1
                    continue
                first.append(got_first)
                total.append(time.perf_counter() - t)
            except Exception as e:  # noqa: BLE001 - every failure is counted
                errors[type(e).__name__] += 1

    limits = httpx.Limits(max_connections=clients, max_keepalive_connections=clients)
    async with httpx.AsyncClient(timeout=120, limits=limits) as c:
        t = time.perf_counter()
        await asyncio.gather(*(one(c, k) for k in range(clients)))
        wall = time.perf_counter() - t
    progress(f"streaming: {clients} clients x {per_client} calls in {wall:.1f}s")
    err = sum(errors.values())
    table(out, f"streaming: {clients} concurrent clients x {per_client} calls (16 chunks each)",
          ["calls", "errors", "calls/s", "first chunk p50 ms", "first chunk p99 ms", "total p50 ms", "total p99 ms"],
          [[clients * per_client, err, len(total) / wall, 1000 * pct(first, 50), 1000 * pct(first, 99),
            1000 * pct(total, 50), 1000 * pct(total, 99)]])
    if errors:
        out.append("\nerrors: " + ", ".join(f"{k}: {v}" for k, v in sorted(errors.items())))


def cpu_s(pid: int | None) -> float:
    """User + system CPU seconds of a process so far (what calls cost it, however busy the machine is)."""
    return float("nan") if pid is None else procstat.cpu_s(pid)


def rss_mb(pid: int) -> float:
    return procstat.status_mb(pid, "VmRSS")


async def memory(gw: str, model: str, pid: int, calls: int, every: int, out: list[str]) -> None:
    samples, done, due, next_i = [rss_mb(pid)], 0, every, iter(range(2_000_000, 2_000_000 + calls // 2))

    async def worker(c: httpx.AsyncClient) -> None:
        nonlocal done, due
        for i in next_i:
            await gateway_pair(c, gw, model, i, {"new": [], "continue": []})
            done += 2
            if done >= due:
                due += every
                samples.append(rss_mb(pid))
                if len(samples) % 10 == 0:
                    progress(f"memory: {done}/{calls} calls, RSS {samples[-1]:.1f} MiB")

    async with httpx.AsyncClient(timeout=60) as c:
        await asyncio.gather(*(worker(c) for _ in range(8)))
    samples.append(rss_mb(pid))
    base = samples[1] if len(samples) > 2 else samples[0]
    table(out, f"executor memory (VmRSS, MiB) over {done} gateway calls, concurrency 8, a sample every {every} calls",
          ["samples", "first", "after warm-up (2nd)", "last", "max", "growth 2nd -> last"],
          [[len(samples), samples[0], base, samples[-1], max(samples), f"{100 * (samples[-1] - base) / base:+.1f}%"]])


# ---------------------------------------------------------------- main
def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--skills", type=int, default=10000, help="skills in the gateway's repo")
    p.add_argument("--backend", default="echo", help="'echo' (the bench's own) or an OpenAI-compatible base URL")
    p.add_argument("--pg", action="store_true", help="trajectories in a fresh PostgreSQL database (else SQLite)")
    p.add_argument("--calls", type=int, default=2000, help="sequential calls, direct and through the gateway")
    p.add_argument("--stream-clients", type=int, default=64)
    p.add_argument("--stream-calls", type=int, default=5, help="streaming calls per client")
    p.add_argument("--memory-calls", type=int, default=10000)
    p.add_argument("--withhold-share", type=float, default=0.1,
                   help="SKILLOS_GATEWAY_WITHHOLD_SHARE (measured utility's control arm; the service's default)")
    p.add_argument("--candidates", type=int, default=0,
                   help="candidate skills in the repo besides --skills (skill states filtered on every search)")
    p.add_argument("--write", action="store_true", help="append the tables to bench/RESULTS-gateway.md")
    p.add_argument("--serve-echo", type=int, metavar="PORT", help=argparse.SUPPRESS)
    args = p.parse_args()
    if args.serve_echo:
        return serve_echo(args.serve_echo)
    setup = (f"skills: {args.skills} + {args.candidates} candidates; withhold share {args.withhold_share}; "
             f"backend: {args.backend}; store: {'PostgreSQL' if args.pg else 'SQLite'}; "
             f"calls: {args.calls} latency, {args.stream_clients}x{args.stream_calls} streaming, "
             f"{args.memory_calls} memory; {os.cpu_count()} CPUs, load {os.getloadavg()[0]:.1f}")
    out = [setup]
    print(f"# bench_gateway  ({time.strftime('%Y-%m-%d %H:%M:%S')} UTC)\n\n{setup}", flush=True)
    with ExitStack() as stack:
        tmp = stack.enter_context(tempfile.TemporaryDirectory(prefix="bench-gateway-"))  # removed last
        serve = ["skillos.cli", "serve"]
        repo_url, repo_pid = stack.enter_context(process([*serve, "skillrepo", "--host", "127.0.0.1", "--port"],
                                                         "skillrepo", {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp}/repo.db"}))
        fill_repo(repo_url, "bench", args.skills, args.candidates)
        if args.backend == "echo":
            backend, backend_pid = stack.enter_context(process(["bench.bench_gateway", "--serve-echo"], "echo"))
        else:
            backend, backend_pid = args.backend.rstrip("/").removesuffix("/v1"), None
        backend_model = httpx.get(f"{backend}/v1/models", timeout=30).json()["data"][0]["id"]
        db = stack.enter_context(pg_database()) if args.pg else f"sqlite:///{tmp}/gateway.db"
        env = {"SKILLOS_EXECUTOR_LLM_BASE_URL": f"{backend}/v1", "SKILLOS_EXECUTOR_LLM_MODEL": backend_model,
               "SKILLOS_SKILLREPO_URL": repo_url, "SKILLOS_GATEWAY_DEFAULT_REPO": "bench",
               "SKILLOS_GATEWAY_DATABASE_URL": db, "SKILLOS_CURATOR_URL": "http://127.0.0.1:9",
               "SKILLOS_GATEWAY_WITHHOLD_SHARE": str(args.withhold_share)}
        gw, pid = stack.enter_context(process([*serve, "executor", "--host", "127.0.0.1", "--port"], "executor", env))
        asyncio.run(latency(gw, backend, backend_model, args.calls,
                            {"executor": pid, "skillrepo": repo_pid, "backend": backend_pid}, out))
        asyncio.run(streaming(gw, backend_model, args.stream_clients, args.stream_calls, out))
        asyncio.run(memory(gw, backend_model, pid, args.memory_calls, max(1, args.calls // 10), out))
    text = "\n".join(out[1:])
    print(text)
    if args.write:   # a section per run, its tables one heading level down
        path, cmd = ROOT / "bench" / "RESULTS-gateway.md", "python -m bench.bench_gateway " + " ".join(sys.argv[1:])
        head = "" if path.exists() else "# Skill-gateway benchmark results (`bench/bench_gateway.py`)\n"
        with open(path, "a") as f:
            f.write(f"{head}\n## {time.strftime('%Y-%m-%d %H:%M')} UTC: `{cmd}`\n\n{setup}\n"
                    + text.replace("\n## ", "\n### ") + "\n")


if __name__ == "__main__":
    main()
