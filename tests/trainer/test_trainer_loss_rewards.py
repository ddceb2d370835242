"""The GRPO loss and the composite reward against values computed by hand."""

import math

import pytest
import torch

from services.trainer.grpo.loss import clipped_surrogate_loss, token_logprobs
from services.trainer.rollouts.curator_rewards import (
    Decision,
    composite_reward,
    group_advantages,
    task_reward,
)


def test_loss_equals_hand_computed_value():
    # two completions: 2 tokens (A=+1) and 1 token (A=-0.5); eps = 0.2
    old = torch.tensor([[0.0, 0.0], [0.0, 0.0]])
    logp = torch.tensor([[math.log(1.5), math.log(0.9)], [math.log(0.7), 0.0]], requires_grad=True)
    mask = torch.tensor([[1.0, 1.0], [1.0, 0.0]])
    adv = torch.tensor([1.0, -0.5])
    out = clipped_surrogate_loss(logp, old, adv, mask, clip_eps=0.2)
    # token 1: rho=1.5, A=1  -> min(1.5, 1.2) = 1.2
    # token 2: rho=0.9, A=1  -> min(0.9, 0.9) = 0.9
    # token 3: rho=0.7, A=-.5 -> min(-0.35, 0.8*-0.5=-0.4) = -0.4
    expected = -(1.2 + 0.9 - 0.4) / 3
    assert out.loss.item() == pytest.approx(expected, abs=1e-6)
    assert out.tokens == 3
    assert out.clip_fraction == pytest.approx(2 / 3)   # tokens 1 and 3 were clipped
    out.loss.backward()
    # clipped tokens carry no gradient; token 2: d/dlogp of -(rho*A)/3 = -0.9/3
    assert logp.grad[0, 0].item() == 0.0
    assert logp.grad[0, 1].item() == pytest.approx(-0.9 / 3, abs=1e-6)
    assert logp.grad[1, 0].item() == 0.0
    assert logp.grad[1, 1].item() == 0.0                 # padding


def test_kl_term_k3_and_requires_reference():
    logp = torch.tensor([[math.log(0.5)]])
    ref = torch.tensor([[math.log(0.25)]])
    mask = torch.ones(1, 1)
    out = clipped_surrogate_loss(logp, logp.detach(), torch.tensor([0.0]), mask, ref_logp=ref, kl_coef=0.1)
    d = math.log(0.25) - math.log(0.5)
    assert out.loss.item() == pytest.approx(0.1 * (math.exp(d) - d - 1), abs=1e-6)
    with pytest.raises(ValueError, match="reference"):
        clipped_surrogate_loss(logp, logp, torch.tensor([0.0]), mask, kl_coef=0.1)


def test_token_logprobs_matches_log_softmax():
    logits = torch.randn(3, 7)
    tgt = torch.tensor([1, 4, 6])
    want = torch.log_softmax(logits, -1)[torch.arange(3), tgt]
    assert torch.allclose(token_logprobs(logits, tgt), want, atol=1e-6)


def test_composite_reward_by_hand():
    successes = [True, False, True, True]          # task 1 is not counted: 2 of 3 later tasks
    decisions = [
        Decision(num_calls=2, num_valid=1, judge_score=0.5, repo_tokens=50, context_tokens=200),
        Decision(num_calls=0, num_valid=0, judge_score=None, repo_tokens=50, context_tokens=100),
        Decision(num_calls=1, num_valid=0, parse_ok=False, judge_score=0.0, repo_tokens=150, context_tokens=100),
        Decision(num_calls=3, num_valid=3, judge_score=1.0, repo_tokens=100, context_tokens=400),
    ]
    r = composite_reward(successes, decisions, 1.0, 0.1, 0.05)
    assert r.task == pytest.approx(2 / 3)
    assert r.fc == pytest.approx((0.5 + 1.0 + 0.0 + 1.0) / 4)
    assert r.cnt == pytest.approx((0.5 + 0 + 0 + 1.0) / 4)
    assert r.comp == pytest.approx(((1 - 0.25) + (1 - 0.5) + (1 - 1.5) + (1 - 0.25)) / 4)
    assert r.total == pytest.approx(r.task + r.fc + 0.1 * r.cnt + 0.05 * r.comp)


def test_task_reward_needs_two_tasks_and_advantages_center():
    with pytest.raises(ValueError, match="at least 2"):
        task_reward([True])
    adv = group_advantages([1.0, 2.0, 3.0, 6.0])
    assert adv == pytest.approx([-2.0, -1.0, 0.0, 3.0])
    assert sum(adv) == pytest.approx(0.0)
