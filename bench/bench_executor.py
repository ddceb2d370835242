"""Executor and embedded-LLM benchmark.

    .venv/bin/python -m bench.bench_executor               # LLM backend + executor (several minutes)
    .venv/bin/python -m bench.bench_executor --only llm    # just the embedded LLM backend
    .venv/bin/python -m bench.bench_executor --only executor --episodes 2 --max-turns 3
    .venv/bin/python -m bench.bench_executor --only prefix --episodes 2 --max-tokens 0   # ~15 min, the 1.5B

What it measures, against baselines in the same run:
- embedded LLM (llama.cpp serving SmolLM2-135M): start time until /healthz, completion tokens/s at
  1, 2 and 4 concurrent requests (baseline: concurrency 1), json-schema structured output and a forced
  tool call (valid or not);
- executor: orchestration overhead per turn (episode time not spent in the LLM, the env or retrieval;
  target <= 10 ms p50) against the in-process baseline (our prompt building + action parsing alone,
  no HTTP), and episodes/min at concurrency 1, 2 and 4 (baseline: concurrency 1) on real ALFWorld;
- prompt-prefix reuse: median seconds per executor turn and episodes/min with a real model (default
  the 1.5B) at concurrency 1, 2 and 4, llama-server with its per-slot prompt cache against the same
  server with the cache off (the baseline).
All services are the real `skillos serve ...` processes on loopback.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import statistics
import time
from contextlib import contextmanager
from pathlib import Path

import httpx

from bench.processes import started
from skillos.settings import DEFAULT_SHARED_DATA

ROOT = Path(__file__).resolve().parent.parent


def pct(xs: list[float], q: float) -> float:
    xs = sorted(xs)
    return xs[min(len(xs) - 1, int(q / 100 * len(xs)))] if xs else float("nan")


@contextmanager
def service(args: list[str], env: dict[str, str] | None = None, timeout: float = 300):
    """``skillos serve <args>``, up; yields (url, seconds it took to answer /healthz)."""
    with started(["skillos.cli", "serve", *args, "--port"], f"executor-{args[0]}", env, timeout) as p:
        yield p.url, p.seconds


def table(title: str, header: list[str], rows: list[list]) -> None:
    print(f"\n## {title}\n")
    print("| " + " | ".join(header) + " |")
    print("|" + "---|" * len(header))
    for r in rows:
        print("| " + " | ".join(f"{c:.3g}" if isinstance(c, float) else str(c) for c in r) + " |")


# ---------------------------------------------------------------- LLM backend
async def _tok_per_s(base_url: str, concurrency: int, requests: int, max_tokens: int) -> tuple[float, float]:
    from skillos.llm import LLMClient, LLMSettings

    async with LLMClient(LLMSettings(base_url=base_url, timeout_s=900, max_retries=0)) as c:
        async def one(i):
            return await c.chat([{"role": "user", "content": f"Write a short story about robot number {i}."}],
                                max_tokens=max_tokens, temperature=0.8, seed=i)

        sem = asyncio.Semaphore(concurrency)

        async def limited(i):
            async with sem:
                return await one(i)

        t = time.perf_counter()
        results = await asyncio.gather(*(limited(i) for i in range(requests)))
        wall = time.perf_counter() - t
    toks = sum(r.usage.completion_tokens for r in results)
    return toks / wall, statistics.median(r.latency_s for r in results)


async def _structured(base_url: str) -> tuple[str, str]:
    from skillos.llm import LLMClient, LLMSettings

    schema = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["success", "failure"]}},
              "required": ["verdict"]}
    tool = {"type": "function", "function": {"name": "skill_delete", "description": "delete a skill",
                                             "parameters": {"type": "object", "required": ["skill_name"],
                                                            "properties": {"skill_name": {"type": "string"}}}}}
    async with LLMClient(LLMSettings(base_url=base_url, timeout_s=900, max_retries=0)) as c:
        r = await c.chat([{"role": "user", "content": "Did it work? Answer as JSON."}], max_tokens=32,
                         response_format={"type": "json_object", "schema": schema})
        try:
            json_ok = "valid" if json.loads(r.content)["verdict"] in ("success", "failure") else "invalid"
        except (ValueError, KeyError, TypeError):
            json_ok = f"invalid: {r.content[:40]!r}"
        r = await c.chat([{"role": "user", "content": "Delete the skill named heat-food."}], tools=[tool],
                         tool_choice={"type": "function", "function": {"name": "skill_delete"}}, max_tokens=48)
        try:
            args = json.loads(r.tool_calls[0]["function"]["arguments"])
            tool_ok = f"valid ({args.get('skill_name')!r})"
        except (IndexError, KeyError, ValueError, TypeError):
            tool_ok = f"invalid: {r.content[:40]!r}"
        r = await c.chat([{"role": "user", "content": "Delete the skill named heat-food."}], tools=[tool],
                         tool_choice="auto", max_tokens=48)
        auto = "tool_calls" if r.tool_calls else "text only"
    return json_ok, f"forced: {tool_ok}; auto: {auto}"


def bench_llm(args) -> None:
    rows = []
    with service(["llm", "--n-threads", str(args.n_threads)]) as (url, started):
        base = f"{url}/v1"
        asyncio.run(_tok_per_s(base, 1, 1, 8))  # warm-up
        base_tps = None
        for conc in (1, 2, 4):
            tps, p50 = asyncio.run(_tok_per_s(base, conc, conc * args.llm_requests, args.llm_max_tokens))
            base_tps = base_tps or tps
            rows.append([conc, conc * args.llm_requests, tps, tps / base_tps, p50])
        json_ok, tool_ok = asyncio.run(_structured(base))
    table(f"embedded LLM: llama.cpp, SmolLM2-135M Q4_1, n_threads={args.n_threads} (start {started:.1f}s)",
          ["concurrency", "requests", "completion tok/s", "vs concurrency 1", "p50 latency s"], rows)
    print(f"\nstructured output (response_format json_object+schema): {json_ok}")
    print(f"tool calls: {tool_ok}")


# ---------------------------------------------------------------- executor
def _inprocess_overhead(n: int = 300) -> float:
    """Baseline: prompt building + parsing alone, in-process (no HTTP, no pydantic wire models)."""
    from skillos.acting.parse import parse_action
    from skillos.acting.prompt import agent_messages
    from skillos.protocol.executor import RetrievedSkill

    skills = [RetrievedSkill(name=f"skill-{i}", description="d" * 100, body="b " * 300) for i in range(5)]
    adm = [f"go to cabinet {i}" for i in range(1, 30)] + ["look", "inventory"]
    hist = [("You arrive at cabinet 1. The cabinet 1 is closed.", "open cabinet 1")] * 3
    times = []
    for i in range(n):
        t = time.perf_counter()
        agent_messages("alfworld", "put a clean mug in the coffeemachine", "You see a cabinet 3." * 10,
                       skills=skills, history=hist, admissible=adm)
        parse_action("<think>I need the mug</think><action>go to the cabinet 3</action>", adm)
        times.append(time.perf_counter() - t)
    return statistics.median(times)


async def _episodes(url: str, tasks: list[str], concurrency: int, args, repo: str | None = "bench"
                    ) -> tuple[float, list[dict]]:
    sem = asyncio.Semaphore(concurrency)
    async with httpx.AsyncClient(timeout=3600) as c:
        async def one(task_id):
            async with sem:
                r = await c.post(f"{url}/v1/episodes", json={
                    "env": "alfworld", "task_id": task_id, "max_turns": args.max_turns, "repo": repo,
                    "seed": 0, **({"sampling": {"max_tokens": args.max_tokens}} if args.max_tokens else {})})
                r.raise_for_status()
                return r.json()

        t = time.perf_counter()
        eps = await asyncio.gather(*(one(tid) for tid in tasks))
        return time.perf_counter() - t, eps


def bench_executor(args) -> None:
    import tempfile

    from skillos.clients.skillrepo import SkillRepoClient

    tmp = tempfile.mkdtemp(prefix="bench-executor-")
    with service(["llm", "--n-threads", str(args.n_threads)]) as (llm, _), \
            service(["alfworld"], {"SKILLOS_ALFWORLD_DATA": str(DEFAULT_SHARED_DATA / "alfworld")}) as (alf, _), \
            service(["skillrepo"], {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp}/repo.db"}) as (repo, _):
        with SkillRepoClient(repo) as rc:
            rc.create_repo("bench")
            for name, text in (("find-objects", "find an object: go to each receptacle, open it, look inside"),
                               ("clean-objects", "clean an object: take it to the sinkbasin and clean it"),
                               ("heat-objects", "heat an object: use the microwave")):
                rc.put_skill("bench", {"name": name, "description": text, "body": text})
        tasks = [t["id"] for t in httpx.get(f"{alf}/v1/tasks", params={"split": "valid_seen"}).json()["tasks"]]
        env = {"SKILLOS_EXECUTOR_LLM_BASE_URL": f"{llm}/v1", "SKILLOS_ALFWORLD_URL": alf,
               "SKILLOS_SKILLREPO_URL": repo, "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "3600",
               "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "0"}
        with service(["executor"], env) as (url, _):
            rows, overheads, base_rate = [], [], None
            for conc in args.concurrency:
                n = max(args.episodes, conc)
                wall, eps = asyncio.run(_episodes(url, tasks[:n], conc, args))
                steps = sum(e["steps"] for e in eps)
                per_turn = [e["timing"]["overhead_s"] / e["steps"] for e in eps if e["steps"]]
                overheads += per_turn
                rate = 60 * n / wall
                base_rate = base_rate or rate
                rows.append([conc, n, steps, rate, rate / base_rate, 60 * steps / wall,
                             1000 * statistics.median(per_turn) if per_turn else float("nan"),
                             sum(e["success"] for e in eps)])
    table(f"executor on ALFWorld valid_seen (max_turns={args.max_turns}, max_tokens={args.max_tokens}/turn, "
          f"embedded LLM n_threads={args.n_threads})",
          ["concurrency", "episodes", "turns", "episodes/min", "vs concurrency 1", "turns/min",
           "overhead ms/turn p50", "won"], rows)
    base = _inprocess_overhead() * 1000
    table("orchestration overhead per turn (time not in LLM, env or retrieval)",
          ["what", "p50 ms", "p95 ms", "target"],
          [["executor service (HTTP to env, wire models, logging)", 1000 * pct(overheads, 50),
            1000 * pct(overheads, 95), "<= 10 ms p50"],
           ["baseline: prompt + parse in-process", base, base, "-"]])


# ---------------------------------------------------------------- prompt-prefix reuse
def bench_prefix(args) -> None:
    """Seconds per executor turn and episodes/min with a real model (default the 1.5B), the embedded
    server with its per-slot prompt cache against the same server with the cache off (the baseline:
    every prompt recomputed), and with --with-llama-cpp-python against llama-cpp-python's server, at
    each concurrency."""
    configs = [("llama-server", False), ("llama-server", True)]
    if args.with_llama_cpp_python:
        configs.append(("llama-cpp-python", True))
    rows, base = [], {}
    with service(["alfworld"], {"SKILLOS_ALFWORLD_DATA": str(DEFAULT_SHARED_DATA / "alfworld")}) as (alf, _):
        all_tasks = httpx.get(f"{alf}/v1/tasks", params={"split": "valid_seen"}).json()["tasks"]
        tasks = [t["id"] for t in all_tasks[:: max(1, len(all_tasks) // 16)]]
        for backend, cache in configs:
            llm_args = ["llm", "--model", args.model, "--n-threads", str(args.n_threads), "--backend", backend]
            if backend == "llama-server":
                llm_args += ["--parallel", str(max(args.concurrency)),
                             "--prompt-cache" if cache else "--no-prompt-cache"]
            with service(llm_args, timeout=600) as (llm, _):
                env = {"SKILLOS_EXECUTOR_LLM_BASE_URL": f"{llm}/v1", "SKILLOS_ALFWORLD_URL": alf,
                       "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "3600", "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "0",
                       "SKILLOS_SKILLREPO_URL": "http://127.0.0.1:9"}
                with service(["executor"], env) as (url, _):
                    for conc in args.concurrency:
                        n = max(args.episodes, conc)
                        wall, eps = asyncio.run(_episodes(url, tasks[:n], conc, args, repo=None))
                        turns = [t["llm_s"] for e in eps for t in e["turns"]]
                        steps = len(turns)
                        per_turn = statistics.median(turns) if turns else float("nan")
                        label = f"{backend}, prompt cache {'on' if cache else 'off'}"
                        if backend == "llama-server" and not cache:
                            base[conc] = per_turn
                        rows.append([label, conc, n, steps, per_turn, 60 * n / wall, 60 * steps / wall,
                                     base.get(conc, float("nan")) / per_turn if per_turn else float("nan")])
                        print(f"  {label} c={conc}: {per_turn:.2f} s/turn, {60 * n / wall:.2f} episodes/min",
                              flush=True)
    table(f"executor turn time, {args.model}, ALFWorld valid_seen, max_turns={args.max_turns}, "
          f"n_threads={args.n_threads} (baseline: llama-server with its prompt cache off)",
          ["backend", "concurrency", "episodes", "turns", "median s/turn (LLM)", "episodes/min", "turns/min",
           "x fewer s/turn than baseline"], rows)


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--only", choices=["llm", "executor", "prefix"])
    p.add_argument("--model", default="qwen2.5-coder-1.5b-instruct", help="prefix: the model to serve")
    p.add_argument("--with-llama-cpp-python", action="store_true", help="prefix: add llama-cpp-python's server")
    p.add_argument("--n-threads", type=int, default=int(os.environ.get("SKILLOS_LLM_N_THREADS", "2")))
    p.add_argument("--llm-requests", type=int, default=2, help="requests per concurrent slot")
    p.add_argument("--llm-max-tokens", type=int, default=64)
    p.add_argument("--episodes", type=int, default=4, help="episodes per concurrency level (at least C)")
    p.add_argument("--max-turns", type=int, default=5)
    p.add_argument("--max-tokens", type=int, default=48,
                   help="max_tokens per executor turn (0: the executor's own default)")
    p.add_argument("--concurrency", type=lambda s: [int(x) for x in s.split(",")], default=[1, 2, 4])
    args = p.parse_args()
    print(f"# bench_executor  ({time.strftime('%Y-%m-%d %H:%M:%S')} UTC, {os.cpu_count()} CPUs, "
          f"load {os.getloadavg()[0]:.1f})")
    if args.only in (None, "llm"):
        bench_llm(args)
    if args.only in (None, "executor"):
        bench_executor(args)
    if args.only in (None, "prefix"):
        bench_prefix(args)


if __name__ == "__main__":
    main()
