"""The CPU loop's update, before and after its two savings (issue 27): one GRPO update of the curator policy
with LoRA, on the same batch, in three rows.

- before: LoRA on every block, the old-policy log-probs recomputed in a no-grad pass (the trainer until
  2026-11-29);
- detached old: the old log-probs are the surrogate pass's own, detached (no dropout: `grpo/update.py`);
- + last N blocks: LoRA on the last N blocks only (`model.lora_layers`): the backward pass stops there.

Every row is `services.trainer.grpo.update.update_policy` on the DeepSpeed engine, from the same weights (the
0.5B's dequantised copy in the model cache, `skillos train` made it) and the same synthetic sequences (random
token ids, P prompt + C completion, advantages +-1), micro-batches of 2 as in the loop's config. One untimed
warm-up update, then --repeats timed ones per row, interleaved across the rows.

    .venv/bin/python -m bench.bench_lora_update [--sequences 4] [--prompt 1024] [--completion 192] [--repeats 1]
"""

from __future__ import annotations

import argparse
import copy
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

from services.trainer.config import TrainConfig
from services.trainer.grpo import update
from services.trainer.grpo.engine import build_engine
from services.trainer.grpo.policy import apply_lora, load_policy
from services.trainer.grpo.sample import PolicySample
from services.trainer.trainer import converted_cache

CONFIG = Path("configs/train/cpu-qwen0.5b-served.yaml")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--config", type=Path, default=CONFIG)
    ap.add_argument("--sequences", type=int, default=4)
    ap.add_argument("--prompt", type=int, default=1024)
    ap.add_argument("--completion", type=int, default=192)
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--last-layers", type=int, default=8)
    args = ap.parse_args()
    cfg = TrainConfig.from_options(args.config)
    m = cfg.model
    base, tok = load_policy(m.path, m.gguf_file, m.dtype, cache_dir=converted_cache(cfg) / "torch")
    rng = random.Random(0)
    vocab = base.config.vocab_size
    samples = [PolicySample([rng.randrange(vocab) for _ in range(args.prompt)],
                            [rng.randrange(vocab) for _ in range(args.completion)],
                            advantage=1.0 if i % 2 == 0 else -1.0) for i in range(args.sequences)]
    rows = {"before": (None, True), "detached old": (None, False),
            f"+ last {args.last_layers} blocks": (args.last_layers, False)}
    engines = {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, (layers, _) in rows.items():
            torch.manual_seed(0)
            model = apply_lora(copy.deepcopy(base), m.lora_r, m.lora_alpha, m.lora_dropout, m.lora_target_modules,
                               layers)
            engines[name] = build_engine(model, cfg.model_copy(update={"output_dir": Path(tmp) / name}))
        del base
        real = update._has_dropout
        times: dict[str, list[dict]] = {name: [] for name in rows}
        for rep in range(args.repeats + 1):
            for name, (_, recompute) in rows.items():
                update._has_dropout = (lambda module: True) if recompute else real
                batch = samples[:1] if rep == 0 else samples   # the warm-up: one sequence
                t0 = time.perf_counter()
                stats = update.update_policy(engines[name], [copy.copy(s) for s in batch], cfg, tok.pad_token_id)
                if rep:
                    times[name].append({"s": time.perf_counter() - t0, "old": stats["old_logprob_s"]})
                print(f"{name}: rep {rep} {time.perf_counter() - t0:.1f} s", file=sys.stderr, flush=True)
        update._has_dropout = real
    first = statistics.median(x["s"] for x in times["before"])
    print(f"`{' '.join(['.venv/bin/python -m bench.bench_lora_update', *sys.argv[1:]])}`\n")
    print(f"{args.sequences} sequences x ({args.prompt} prompt + {args.completion} completion) tokens, {m.path}, "
          f"LoRA r {m.lora_r} on {', '.join(m.lora_target_modules)}, micro-batches of "
          f"{cfg.deepspeed.micro_batch_sequences}, {args.repeats} timed update(s) per row (median)\n")
    print("| row | update s | of which old log-probs s | completion tok/s | vs before |")
    print("|---|---|---|---|---|")
    for name in rows:
        s = statistics.median(x["s"] for x in times[name])
        old = statistics.median(x["old"] for x in times[name])
        print(f"| {name} | {s:.1f} | {old:.1f} | {args.sequences * args.completion / s:.1f} | {first / s:.2f}x |")


if __name__ == "__main__":
    main()
