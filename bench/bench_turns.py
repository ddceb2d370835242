"""Executor turns per minute at 1 and 4 episodes at once, and the tokens a turn costs the LLM server.

    skillos up -d                                   # the stack to measure (embedded 1.5B by default)
    .venv/bin/python -m bench.bench_turns --label after --out bench/evidence/turn-speed
    .venv/bin/python -m bench.bench_turns --table bench/evidence/turn-speed     # the table of every label

No Memory episodes (the executor alone: no repo, no curator) on the first ``--per-type`` tasks of each
ALFWorld type of ``--split``, ``--max-turns`` each, played through the executor service at each
concurrency level in turn. Tokens come from llama-server's own counters (``/metrics``:
``llamacpp:prompt_tokens_total`` counts the prompt tokens it processed, those its prompt cache held not
among them (``llamacpp:prompt_tokens_cached_total``); ``llamacpp:tokens_predicted_total`` the generated ones), read before and after each level, so
the numbers are the server's and include every request of the level. Run it on a quiet machine: any other
work on 2 cores slows llama-server many times over. Label each run (``before`` in a worktree of the old
code with its own `skillos up`, ``after`` here) and the table pairs them.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import time
from pathlib import Path

import httpx

from skillos.clients.envs import AsyncEnvClient
from skillos.clients.executor import AsyncExecutorClient
from skillos.protocol.executor import EpisodeRequest

_METRIC = re.compile(r"^(llamacpp:[a-z_]+)(?:\{[^}]*\})?\s+([0-9.eE+-]+)$", re.MULTILINE)


async def llm_counters(llm_url: str) -> dict[str, float]:
    async with httpx.AsyncClient(timeout=10) as c:
        text = (await c.get(llm_url.rstrip("/").removesuffix("/v1") + "/metrics")).text
    return {k: float(v) for k, v in _METRIC.findall(text)}


async def tasks_of(env_url: str, split: str, per_type: int) -> list[str]:
    async with AsyncEnvClient(env_url) as env:
        infos = await env.tasks(split)
    seen: dict[str, int] = {}
    out = []
    for t in infos:
        seen[t.type] = seen.get(t.type, 0) + 1
        if seen[t.type] <= per_type:
            out.append(t.id)
    return out


async def level(executor_url: str, llm_url: str, tasks: list[str], concurrency: int, max_turns: int,
                seed: int, acting: dict | None) -> dict:
    before = await llm_counters(llm_url)
    slots = asyncio.Semaphore(concurrency)
    episodes: list[dict] = []

    async def one(task_id: str, client: AsyncExecutorClient) -> None:
        async with slots:
            # the request is sent as JSON: the older executor of a "before" run knows only its own acting keys
            req = {"env": "alfworld", "task_id": task_id, "max_turns": max_turns, "seed": seed, "acting": acting}
            r = await client.episode(EpisodeRequest.model_construct(**req))
            episodes.append({"task_id": task_id, "steps": r.steps, "won": r.success, "stop_reason": r.stop_reason,
                             "llm_s": r.timing.llm_s, "total_s": r.timing.total_s,
                             "prompt_tokens": r.tokens.prompt, "completion_tokens": r.tokens.completion})

    start = time.perf_counter()
    async with AsyncExecutorClient(executor_url, timeout=3600) as client:
        await asyncio.gather(*(one(t, client) for t in tasks))
    wall = time.perf_counter() - start
    after = await llm_counters(llm_url)
    turns = sum(e["steps"] for e in episodes)
    delta = {k: after.get(k, 0.0) - before.get(k, 0.0) for k in after}
    processed, generated = delta.get("llamacpp:prompt_tokens_total", 0.0), delta.get("llamacpp:tokens_predicted_total", 0.0)
    return {"concurrency": concurrency, "episodes": len(episodes), "turns": turns, "won": sum(e["won"] for e in episodes),
            "wall_s": round(wall, 1), "turns_per_min": round(60 * turns / wall, 2) if wall else None,
            "new_prompt_tokens_per_turn": round(processed / turns, 1) if turns else None,
            "generated_tokens_per_turn": round(generated / turns, 1) if turns else None,
            "cached_prompt_tokens_per_turn": round(delta.get("llamacpp:prompt_tokens_cached_total", 0.0) / turns, 1)
            if turns else None,
            "prompt_tokens_per_turn_asked": round(sum(e["prompt_tokens"] for e in episodes) / turns, 1) if turns else None,
            "server_prompt_tok_s": round(processed / delta.get("llamacpp:prompt_seconds_total", 1), 1)
            if delta.get("llamacpp:prompt_seconds_total") else None,
            "episodes_detail": sorted(episodes, key=lambda e: e["task_id"])}


def table(folder: Path) -> str:
    rows = []
    for path in sorted(folder.glob("*.json")):
        data = json.loads(path.read_text())
        for lv in data["levels"]:
            rows.append((data["label"], data.get("commit", "?"), lv))
    lines = [("| label | commit | episodes at once | episodes | turns | won | turns/min | new prompt tokens/turn | "
             "generated tokens/turn | prompt tokens/turn (asked) | server prompt tok/s |"),
             "|---" * 11 + "|"]
    for label, commit, lv in rows:
        lines.append(f"| {label} | {commit} | {lv['concurrency']} | {lv['episodes']} | {lv['turns']} | {lv['won']} | "
                     f"{lv['turns_per_min']} | {lv['new_prompt_tokens_per_turn']} | {lv['generated_tokens_per_turn']} | "
                     f"{lv['prompt_tokens_per_turn_asked']} | {lv['server_prompt_tok_s']} |")
    return "\n".join(lines)


async def main_async(args) -> None:
    tasks = await tasks_of(args.env_url, args.split, args.per_type)
    out = {"label": args.label, "commit": args.commit, "split": args.split, "per_type": args.per_type,
           "max_turns": args.max_turns, "acting": args.acting, "tasks": tasks, "levels": []}
    for c in [int(x) for x in args.levels.split(",")]:
        picked = tasks if c > 1 else tasks[: args.solo]
        result = await level(args.executor_url, args.llm_url, picked, c, args.max_turns, args.seed,
                             json.loads(args.acting) if args.acting else None)
        out["levels"].append(result)
        print(json.dumps({k: v for k, v in result.items() if k != "episodes_detail"}), flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / f"{args.label}.json").write_text(json.dumps(out, indent=1))
    print(table(args.out))


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--label", default="run")
    ap.add_argument("--commit", default="", help="the code measured (written in the table)")
    ap.add_argument("--out", type=Path, default=Path("runs/turn-speed"))
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--per-type", type=int, default=1, help="tasks of each type (6 types): the 4-at-once level plays all")
    ap.add_argument("--solo", type=int, default=4, help="of them, how many the 1-at-a-time level plays")
    ap.add_argument("--levels", default="1,4")
    ap.add_argument("--max-turns", type=int, default=10)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--acting", default='{"demos": "generic"}',
                    help="the episodes' acting options as JSON, keys both codes know ('' for the executor's own)")
    ap.add_argument("--executor-url", default="http://127.0.0.1:8002")
    ap.add_argument("--env-url", default="http://127.0.0.1:8010")
    ap.add_argument("--llm-url", default="http://127.0.0.1:8080/v1")
    ap.add_argument("--table", type=Path, help="print the table of the runs in this folder and stop")
    args = ap.parse_args()
    if args.table:
        print(table(args.table))
        return
    asyncio.run(main_async(args))


if __name__ == "__main__":
    main()
