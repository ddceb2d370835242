"""The composite reward of §3.2.2, Eq. (1), and the group-relative advantage.

r = r_task + lambda_f * r_fc + lambda_u * r_cnt + lambda_c * r_comp

- r_task: executor success averaged over tasks 2..|G| (task 1 always runs on the empty repo);
- r_fc:   mean over curation decisions of the fraction of that decision's calls that the repo
          accepted (a decision with no calls counts as 1.0: doing nothing is a valid decision —
          see docs/training.md; a decision whose output could not be parsed counts as 0.0);
- r_cnt:  mean content-judge score over decisions (0..1);
- r_comp: mean over decisions of 1 - |S_i| / |chi_i| in tokens, S_i the repo after decision i and
          chi_i the curator's input at position i.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import asdict, dataclass, field


@dataclass
class Decision:
    """What one curation step produced, enough to score it."""

    num_calls: int                 # function calls the curator emitted
    num_valid: int                 # calls the repo accepted and applied
    parse_ok: bool = True          # False: the output could not be read as calls at all
    judge_score: float | None = None   # content judge in [0, 1]; None when not judged
    repo_tokens: int = 0           # |S_i|
    context_tokens: int = 1        # |chi_i|
    op_counts: dict[str, int] = field(default_factory=dict)  # op name -> count (for Fig. 4)

    def valid_fraction(self) -> float:
        if not self.parse_ok:
            return 0.0
        if self.num_calls == 0:
            return 1.0
        return self.num_valid / self.num_calls


@dataclass
class RewardParts:
    task: float
    fc: float
    cnt: float
    comp: float
    total: float

    def as_dict(self) -> dict[str, float]:
        return asdict(self)


def task_reward(successes: Sequence[bool]) -> float:
    if len(successes) < 2:
        raise ValueError("a task group needs at least 2 tasks: r_task averages tasks 2..|G|")
    later = successes[1:]
    return sum(1.0 for s in later if s) / len(later)


def function_call_reward(decisions: Sequence[Decision]) -> float:
    if not decisions:
        return 0.0
    return sum(d.valid_fraction() for d in decisions) / len(decisions)


def content_reward(decisions: Sequence[Decision]) -> float:
    if not decisions:
        return 0.0
    return sum(min(1.0, max(0.0, d.judge_score or 0.0)) for d in decisions) / len(decisions)


def compression_reward(decisions: Sequence[Decision]) -> float:
    if not decisions:
        return 0.0
    return sum(1.0 - d.repo_tokens / max(1, d.context_tokens) for d in decisions) / len(decisions)


def composite_reward(successes: Sequence[bool], decisions: Sequence[Decision],
                     lambda_fc: float, lambda_cnt: float, lambda_comp: float) -> RewardParts:
    """Eq. 1 of the paper. The weights have no default here: they are `TrainConfig.lambda_*`
    (`TrainConfig.reward_weights()`), the one place the paper's values are written."""
    r_task = task_reward(successes)
    r_fc = function_call_reward(decisions)
    r_cnt = content_reward(decisions)
    r_comp = compression_reward(decisions)
    total = r_task + lambda_fc * r_fc + lambda_cnt * r_cnt + lambda_comp * r_comp
    return RewardParts(r_task, r_fc, r_cnt, r_comp, total)


def group_advantages(rewards: Sequence[float]) -> list[float]:
    """A^n = r^n - mean(r) within one group (no std normalisation, as in the paper)."""
    if not rewards:
        return []
    mean = sum(rewards) / len(rewards)
    return [r - mean for r in rewards]
