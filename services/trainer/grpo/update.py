"""One GRPO optimizer step over a batch of policy samples (§3.2.2, Eq. 2).

The old-policy log-probs come from the trainer's weights (never from a server), under the masks each
completion was sampled with (`decoding/constrained.py`); then every micro-batch runs
forward and backward through the clipped surrogate (`loss.py`), and the last one is the DeepSpeed
gradient-accumulation boundary and the optimizer step (`engine.py`).
"""

from __future__ import annotations

import time
from collections import Counter
from typing import Any

import torch

from services.trainer.config import TrainConfig
from services.trainer.grpo.engine import grad_norm, local_grad_norm, rank_world
from services.trainer.grpo.loss import clipped_surrogate_loss
from services.trainer.grpo.policy import sequence_logprobs
from services.trainer.grpo.sample import PolicySample


def _microbatches(samples: list[PolicySample], size: int) -> list[list[PolicySample]]:
    ordered = sorted(samples, key=lambda s: len(s.prompt_ids) + len(s.completion_ids))  # less padding
    return [ordered[i:i + size] for i in range(0, len(ordered), size)]


def _allowed(samples: list[PolicySample]) -> list[torch.Tensor | None]:
    # the masks each completion was sampled under, replayed from its ids (see decoding/constrained.py)
    return [s.constraint.masks(s.completion_ids) if s.constraint is not None else None for s in samples]


def _sync() -> None:
    # CUDA kernels run after their Python call returns: wait for them (this process's current device)
    # so that the seconds reported are the work's; no-op on the CPU
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        torch.cuda.synchronize()


def _chosen_tokens(s: PolicySample, allowed: torch.Tensor | None) -> int:
    return len(s.completion_ids) if allowed is None else int((allowed.sum(-1) > 1).sum())


def update_policy(engine, samples: list[PolicySample], cfg: TrainConfig, pad_id: int,
                  ref_model=None) -> dict[str, Any]:
    """One optimizer step on `samples` (each carries its rollout's advantage)."""
    samples = [s for s in samples if s.completion_ids]
    if not samples:
        return {"skipped": 1.0}
    # token mean over the tokens the policy chose (grammar-forced tokens carry no decision), over every
    # sample of the batch; a sample with A = 0 adds nothing to the surrogate's gradient, so without a KL
    # term only the others are run through the model (most agent decisions of a task whose episodes
    # all ended alike). Several ranks meet in every backward (the gradient all-reduce): there, every
    # sample runs, so that no rank waits for one that had nothing to do.
    masks = dict(zip(map(id, samples), _allowed(samples)))
    total_tokens = max(1.0, float(sum(_chosen_tokens(s, masks[id(s)]) for s in samples)))
    alone = rank_world()[1] == 1
    active = [s for s in samples if s.advantage != 0] if cfg.kl_coef == 0 and alone else samples
    if not active:
        return {"skipped": 1.0, "reason": "every advantage is 0: no gradient", "sequences": float(len(samples)),
                "tokens": total_tokens}
    mbs = _microbatches(active, cfg.deepspeed.micro_batch_sequences)
    allowed = [[masks[id(s)] for s in mb] for mb in mbs]
    start = time.perf_counter()
    # old-policy log-probs: recomputed here from token ids, never taken from a server. A step is one
    # optimizer step, so the weights that score the surrogate below are the old policy's: without
    # dropout the train-mode pass gives the same numbers, and its detached log-probs are the old ones
    # (ratio 1, as TRL's GRPOTrainer does when it updates once per generation), which saves a forward
    # pass per sample. With dropout on, the eval-mode pass is run.
    detached_old = not _has_dropout(engine.module)
    engine.module.eval()
    old: list[torch.Tensor | None] = []
    refs: list[torch.Tensor | None] = []
    with torch.no_grad():
        for mb, al in zip(mbs, allowed):
            if detached_old:
                old.append(None)
            else:
                old.append(sequence_logprobs(engine, [s.prompt_ids for s in mb], [s.completion_ids for s in mb],
                                             pad_id, cfg.temperature, al)[0])
            refs.append(_ref_logprobs(engine, ref_model, mb, pad_id, cfg, al) if cfg.kl_coef > 0 else None)
    _sync()
    old_s = time.perf_counter() - start
    engine.module.train()
    stats = Counter()
    pre_step_norm = None
    for i, mb in enumerate(mbs):
        logp, mask = sequence_logprobs(engine, [s.prompt_ids for s in mb], [s.completion_ids for s in mb],
                                       pad_id, cfg.temperature, allowed[i])
        out = clipped_surrogate_loss(logp, logp.detach() if old[i] is None else old[i], torch.tensor([s.advantage for s in mb], device=logp.device), mask,
                                     clip_eps=cfg.clip_eps, clip_eps_high=cfg.clip_eps_high,
                                     ref_logp=refs[i], kl_coef=cfg.kl_coef, token_normalizer=total_tokens)
        last = i == len(mbs) - 1
        engine.set_gradient_accumulation_boundary(last)
        engine.backward(out.loss)
        if last:   # before step(): step clips and zeroes the gradients
            pre_step_norm = local_grad_norm(engine.module)
        engine.step()
        n = out.tokens
        stats["loss"] += float(out.loss.detach())
        stats["clip_fraction"] += out.clip_fraction * n
        stats["approx_kl_old"] += out.approx_kl_old * n
        stats["kl_ref"] += out.kl_ref * n
        stats["active_tokens"] += n
    engine.module.eval()
    _sync()
    elapsed = time.perf_counter() - start
    ran = max(1.0, stats["active_tokens"])      # the per-token statistics are over the tokens that ran
    return {"loss": stats["loss"], "clip_fraction": stats["clip_fraction"] / ran,
            "approx_kl_old": stats["approx_kl_old"] / ran, "kl_ref": stats["kl_ref"] / ran,
            "grad_norm": grad_norm(engine, pre_step_norm), "tokens": total_tokens, "active_tokens": ran,
            "completion_tokens": float(sum(len(s.completion_ids) for s in samples)),
            "sequences": float(len(samples)), "active_sequences": float(len(active)),
            "microbatches": float(len(mbs)), "old_logprob_s": old_s, "old_logprobs_detached": float(detached_old),
            "seconds": elapsed, "tokens_per_s": ran / max(elapsed, 1e-9)}


def _has_dropout(module: torch.nn.Module) -> bool:
    """Whether train mode draws a random mask anywhere: a dropout module with p > 0, or a HF config's
    dropout probability (attention dropout is a functional call, not a module)."""
    if any(isinstance(m, torch.nn.modules.dropout._DropoutNd) and m.p > 0 for m in module.modules()):
        return True
    config = getattr(module, "config", None) or getattr(getattr(module, "module", None), "config", None)
    names = ("attention_dropout", "attn_pdrop", "hidden_dropout", "hidden_dropout_prob", "resid_pdrop",
             "embd_pdrop", "dropout")
    return any(isinstance(getattr(config, n, 0), float) and getattr(config, n, 0) > 0 for n in names)


def _ref_logprobs(engine, ref_model, mb, pad_id, cfg, allowed) -> torch.Tensor:
    prompts, comps = [s.prompt_ids for s in mb], [s.completion_ids for s in mb]
    if cfg.model.lora:
        with engine.module.disable_adapter():    # the base model is the reference
            return sequence_logprobs(engine, prompts, comps, pad_id, cfg.temperature, allowed)[0]
    return sequence_logprobs(ref_model, prompts, comps, pad_id, cfg.temperature, allowed)[0]
