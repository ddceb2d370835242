"""The GRPO objective of §3.2.2, Eq. (2), at token level.

For every curator completion c^n of rollout n, each of its tokens t gets the rollout's advantage
A^n and the per-token importance ratio rho_t = pi(c_t | .) / pi_old(c_t | .). The loss is the
negated clipped surrogate averaged over all completion tokens of the batch (token-level mean, so
long completions weigh by their length rather than one vote per sequence):

    L = - (1/T) * sum_t min(rho_t * A_t, clip(rho_t, 1 - eps, 1 + eps_high) * A_t)
        + kl_coef * (1/T) * sum_t KL_t

KL_t is the k3 estimator exp(ref - logp) - (ref - logp) - 1 against a frozen reference policy;
it is only computed when kl_coef > 0 (the paper's text drops it).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch


@dataclass
class LossOutput:
    loss: torch.Tensor
    clip_fraction: float
    approx_kl_old: float     # mean(old - new) log-prob: how far this update moved from pi_old
    kl_ref: float            # mean k3 KL to the reference (0 when off)
    tokens: int


def clipped_surrogate_loss(
    logp: torch.Tensor,            # [B, T] log pi(c_t) of the current policy, with grad
    old_logp: torch.Tensor,        # [B, T] log pi_old(c_t), no grad
    advantages: torch.Tensor,      # [B] one advantage per completion (its rollout's)
    mask: torch.Tensor,            # [B, T] 1 on completion tokens, 0 on padding
    clip_eps: float = 0.2,
    clip_eps_high: float | None = None,
    ref_logp: torch.Tensor | None = None,
    kl_coef: float = 0.0,
    token_normalizer: float | None = None,  # T of the whole batch when micro-batching
) -> LossOutput:
    mask = mask.to(logp.dtype)
    high = clip_eps if clip_eps_high is None else clip_eps_high
    adv = advantages.to(logp.dtype).unsqueeze(1)          # same A on all tokens of c^n
    ratio = torch.exp(logp - old_logp.detach())
    unclipped = ratio * adv
    clipped = torch.clamp(ratio, 1.0 - clip_eps, 1.0 + high) * adv
    surrogate = torch.minimum(unclipped, clipped)
    n_tokens = mask.sum()
    denom = torch.as_tensor(token_normalizer if token_normalizer else n_tokens.clamp(min=1.0),
                            dtype=logp.dtype)
    loss = -(surrogate * mask).sum() / denom

    kl_ref_value = 0.0
    if kl_coef > 0.0:
        if ref_logp is None:
            raise ValueError("kl_coef > 0 needs the reference policy's log-probs")
        delta = ref_logp.detach() - logp
        k3 = torch.exp(delta) - delta - 1.0
        kl_term = (k3 * mask).sum() / denom
        loss = loss + kl_coef * kl_term
        kl_ref_value = float(((k3 * mask).sum() / n_tokens.clamp(min=1.0)).detach())

    with torch.no_grad():
        was_clipped = (clipped != unclipped).to(logp.dtype) * mask
        clip_fraction = float(was_clipped.sum() / n_tokens.clamp(min=1.0))
        approx_kl = float(((old_logp - logp) * mask).sum() / n_tokens.clamp(min=1.0))
    return LossOutput(loss, clip_fraction, approx_kl, kl_ref_value, int(n_tokens.item()))


def token_logprobs(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """log softmax(logits)[target] per position, without materialising the full log-softmax."""
    logits = logits.float()
    picked = torch.gather(logits, -1, targets.unsqueeze(-1)).squeeze(-1)
    return picked - torch.logsumexp(logits, dim=-1)
