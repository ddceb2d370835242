"""What the executor's JSON-schema grammar costs per generated token on the embedded llama-server.

Every ALFWorld decision is asked with a JSON schema (a bounded thought, an action from the enum of admissible
actions; `skillos.acting.prompt.action_schema`), which llama.cpp turns into a grammar checked token by token on
the CPU. Section 0e of RESULTS-learning saw ~8.5 generated tokens/s for all slots together and named the grammar
as a suspect, unmeasured. This measures it:

1. real episodes are played in process (`EpisodePlayer`, the executor's own code, default acting options) on
   ALFWorld with the model alone on its server (one slot), and every decision's request is recorded;
2. every recorded decision is asked again three ways, each with the same messages (the first of the three
   computes the turn's new prompt tokens, the others find the whole prompt in the slot's cache: prompt time is
   not in the rates), the recorded sampling and seed, and at most as many tokens as the recorded answer had:
   the executor's schema (the enum), the same schema with a free-text action, and no schema (the baseline);
   the order of the three turns round from one decision to the next;
3. the table: llama-server's own timings per request (`timings.predicted_per_second`: generated tokens over the
   time spent generating them, sampling and grammar included), medians over the decisions, each decision's rate
   over its own no-schema rate (paired), and the enum's size.

    .venv/bin/python -m bench.bench_grammar [--episodes 3] [--max-turns 8] [--split valid_seen] [--out F.json]
    # ~5 min alone

Run it with nothing else on the machine: another process halves llama-server's rates (RESULTS-learning 0e).
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import statistics
from pathlib import Path

import httpx

from bench.bench_executor import service, table
from skillos.settings import DEFAULT_SHARED_DATA

VARIANTS = ("executor's schema (action enum)", "schema, free-text action", "no schema (baseline)")


class RecordingLLM:
    """A `ChatLLM` that passes every call on and keeps its request and answer."""

    def __init__(self, llm):
        self.llm, self.calls = llm, []

    async def chat(self, messages, **kw):
        res = await self.llm.chat(messages, **kw)
        self.calls.append((copy.deepcopy(messages), dict(kw), res))
        return res

    async def aclose(self):
        await self.llm.aclose()


def variant_body(body: dict, variant: int) -> dict:
    """The recorded request as ``variant`` asks it."""
    body = copy.deepcopy(body)
    if variant == 1:
        schema = body["response_format"]["json_schema"]["schema"]
        schema["properties"]["action"] = {"type": "string", "maxLength": 200}
    elif variant == 2:
        body.pop("response_format", None)
    return body


async def record(llm_url: str, alf_url: str, args) -> tuple[list[tuple[dict, int]], list[dict]]:
    """Plays the episodes; returns each decision's request body and its answer's completion tokens, and the
    episodes (task, type, turns, how each ended)."""
    from skillos.acting.options import PlayerOptions
    from skillos.acting.player import EpisodePlayer
    from skillos.llm import LLMClient, LLMSettings
    from skillos.protocol.executor import EpisodeRequest

    executor = LLMSettings.for_role("executor")   # the executor role's model, temperature and token budget
    client = LLMClient(executor.model_copy(update={"base_url": f"{llm_url}/v1", "timeout_s": 3600,
                                                   "max_retries": 0, "cache": None}))
    rec = RecordingLLM(client)
    player = EpisodePlayer(rec, PlayerOptions(env_urls={"alfworld": alf_url}, skillrepo_url="http://127.0.0.1:9"))
    episodes = []
    try:
        for i in range(args.episodes):
            first = len(rec.calls)
            ep = await player.play(EpisodeRequest(env="alfworld", split=args.split, index=i * args.stride,
                                                  max_turns=args.max_turns, seed=0))
            episodes.append({"index": i * args.stride, "task_id": ep.task_id, "task_type": ep.task_type,
                             "turns": ep.steps, "stop_reason": ep.stop_reason, "calls": [first, len(rec.calls)]})
            print(f"  episode {i + 1}/{args.episodes} ({ep.task_type}): {ep.steps} turns, {ep.stop_reason}", flush=True)
        if any("response_format" not in kw for _, kw, _ in rec.calls):
            raise SystemExit("a decision was asked without a schema: the executor's action format is not json")
        return [(client.build_payload(m, **kw), res.usage.completion_tokens) for m, kw, res in rec.calls], episodes
    finally:
        await player.aclose()


async def replay(llm_url: str, decisions: list[tuple[dict, int]]) -> dict[int, list[dict]]:
    out: dict[int, list[dict]] = {v: [] for v in range(len(VARIANTS))}
    async with httpx.AsyncClient(timeout=3600) as c:
        for i, (body, n) in enumerate(decisions):
            for k in range(len(VARIANTS)):
                v = (i + k) % len(VARIANTS)
                b = variant_body(body, v)
                b["max_tokens"] = max(1, n)
                r = await c.post(f"{llm_url}/v1/chat/completions", json=b)
                r.raise_for_status()
                data = r.json()
                t = data.get("timings")
                if not t:
                    raise SystemExit("the server's answer has no `timings`: this bench needs llama-server")
                out[v].append({**t, "decision": i, "content": data["choices"][0]["message"].get("content")})
            print(f"  decision {i + 1}/{len(decisions)} asked 3 ways", flush=True)
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="qwen2.5-coder-1.5b-instruct")
    ap.add_argument("--episodes", type=int, default=3)
    ap.add_argument("--stride", type=int, default=23, help="task index step between episodes (types vary)")
    ap.add_argument("--max-turns", type=int, default=8)
    ap.add_argument("--split", default="valid_seen")
    ap.add_argument("--n-threads", type=int, default=2)
    ap.add_argument("--out", help="also write every request's timings and answer here (JSON)")
    args = ap.parse_args()

    llm_args = ["llm", "--model", args.model, "--n-threads", str(args.n_threads), "--backend", "llama-server",
                "--parallel", "1", "--prompt-cache"]
    with service(["alfworld"], {"SKILLOS_ALFWORLD_DATA": str(DEFAULT_SHARED_DATA / "alfworld")}) as (alf, _), \
            service(llm_args, timeout=600) as (llm, _):
        decisions, episodes = asyncio.run(record(llm, alf, args))
        timings = asyncio.run(replay(llm, decisions))
    enum_sizes = [len(b["response_format"]["json_schema"]["schema"]["properties"]["action"].get("enum", []))
                  for b, _ in decisions]
    if args.out:
        Path(args.out).write_text(json.dumps({
            "args": vars(args), "episodes": episodes,
            "decisions": [{"enum_size": e, "recorded_completion_tokens": n}
                          for e, (_, n) in zip(enum_sizes, decisions)],
            "asked": {VARIANTS[v]: ts for v, ts in timings.items()}}, indent=1))
    same = sum(len({timings[v][i]["content"] for v in timings}) == 1 for i in range(len(decisions)))
    print(f"\n{same} of {len(decisions)} decisions got the same answer all three ways")
    base = timings[2]
    rows = []
    for v, name in enumerate(VARIANTS):
        ts = timings[v]
        # paired: each decision's rate over its own baseline rate (same prompt, same cache, same length cap)
        ratios = sorted(t["predicted_per_second"] / b["predicted_per_second"] for t, b in zip(ts, base))
        rows.append([name, len(ts), statistics.mean(t["predicted_n"] for t in ts),
                     statistics.median(t["predicted_per_second"] for t in ts),
                     statistics.median(t["predicted_ms"] / max(1, t["predicted_n"]) for t in ts),
                     statistics.median(ratios), f"{ratios[0]:.2f}-{ratios[-1]:.2f}"])
    table(f"generated tokens/s per decision, {args.model}, one slot, n_threads={args.n_threads}, "
          f"{len(decisions)} ALFWorld {args.split} decisions (action enum of {min(enum_sizes)}-{max(enum_sizes)}, "
          f"median {statistics.median(enum_sizes):g}; baseline: no schema)",
          ["asked with", "requests", "tokens generated (mean)", "tokens/s (median)", "ms per token (median)",
           "rate / baseline's, per decision (median)", "(range)"], rows)


if __name__ == "__main__":
    main()
