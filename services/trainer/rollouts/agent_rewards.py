"""Per-segment credit of the agent-policy mode (`policy: agent`), one task group at a time.

N rollouts play the same task group; in rollout n, the task at position i is played by one or more
episodes e (SAPO plays its base and augmented rollouts), each with its outcome r_e (the environment's
reward: ALFWorld's win, WebShop's graded score). Every completion of the policy is a sample with a
segment, and its advantage is:

    act      A = r_e − mean{ r_e' : every episode at position i, all N rollouts }   (GRPO, one group per task)
    query    the advantage of the episode it retrieved for (Skill1 Eq. 8: the query prefixes the actions)
    rerank   A = w_rank · NDCG(π; u)                                       (Skill1 Eq. 6, 9: REINFORCE)
    distill  A = w_distill · (v_n − mean_n v),  v = r − u*                 (Skill1 Eq. 7, 10: own groups)
    induce   A = λ·U if U > 0 else U,  U = mean(r_aug) − mean(r_base)      (SAPO Eq. 7: W-REINFORCE)

u are the trends of the candidates before the task, π the policy's ranking of them, u* the best of them.
Group advantages are centred, not divided by the std, as the curator's are (`curator_rewards.group_advantages`).
A weight multiplies an advantage rather than its loss term: the surrogate is linear in A, so the two
are the same. The papers' equations did not survive in our copies of their texts; each line above
follows their prose (docs/training.md, "Agent-policy mode").
"""

from __future__ import annotations

import math
from collections import defaultdict
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Any


@dataclass
class TaskPlay:
    """What one rollout did at one task position: its episodes' outcomes (play order; the first is the
    one the stream scored) and what the method recorded (`TaskRecord.method_info`)."""
    position: int
    episodes: dict[str, float] = field(default_factory=dict)   # episode key -> r
    info: dict[str, Any] = field(default_factory=dict)

    @property
    def scored(self) -> str | None:
        return next(iter(self.episodes), None)


@dataclass(frozen=True)
class SegmentWeights:
    rerank: float = 0.3          # Skill1 Table 4
    distill: float = 0.3         # Skill1 Table 4
    positive: float = 0.1        # SAPO's λ (W-REINFORCE's value; lost from the paper's text)


def ndcg(ranked: Sequence[str], relevance: dict[str, float]) -> float:
    """NDCG of a ranking against graded relevance (the candidates' trends). A ranking among equals
    carries no information: 0 (no reinforcement) when every relevance is the same."""
    rel = [relevance.get(name, 0.0) for name in ranked]
    if len(set(relevance.values())) <= 1 or not rel:
        return 0.0
    dcg = sum(r / math.log2(k + 2) for k, r in enumerate(rel))
    ideal = sum(r / math.log2(k + 2) for k, r in enumerate(sorted(relevance.values(), reverse=True)[:len(rel)]))
    return dcg / ideal if ideal > 0 else 0.0


def generator_advantage(utility: float, positive_weight: float) -> float:
    """SAPO's asymmetric weight: useful skills reinforced by λ·U, harmful ones suppressed by the full U."""
    return positive_weight * utility if utility > 0 else utility


def _centred(values: dict[Any, float]) -> dict[Any, float]:
    if not values:
        return {}
    m = sum(values.values()) / len(values)
    return {k: v - m for k, v in values.items()}


def segment_advantages(plays: Sequence[Sequence[TaskPlay]], weights: SegmentWeights
                       ) -> dict[tuple[int, int, str], float]:
    """The credit of one group. ``plays[n]`` are rollout n's tasks. Returns advantages keyed by
    (rollout, position, what): what is an episode key for act samples, or the segment name (query,
    rerank, distill, induce) for the method's own calls. A key absent from the result has no credit."""
    out: dict[tuple[int, int, str], float] = {}
    by_position: dict[int, dict[tuple[int, str], float]] = defaultdict(dict)
    variations: dict[int, dict[int, float]] = defaultdict(dict)
    for n, tasks in enumerate(plays):
        for t in tasks:
            for key, r in t.episodes.items():
                by_position[t.position][(n, key)] = r
            if isinstance(t.info.get("variation"), (int, float)):
                variations[t.position][n] = float(t.info["variation"])
    for position, episodes in by_position.items():
        for (n, key), a in _centred(episodes).items():
            out[(n, position, key)] = a
    for position, vs in variations.items():
        for n, a in _centred(vs).items():
            out[(n, position, "distill")] = weights.distill * a
    for n, tasks in enumerate(plays):
        for t in tasks:
            if t.scored is not None:
                out[(n, t.position, "query")] = out[(n, t.position, t.scored)]
            ranked, candidates = t.info.get("ranked"), t.info.get("candidates")
            if t.info.get("rank_read") and ranked and candidates:
                relevance = dict(zip(candidates, t.info.get("candidate_utilities", [])))
                out[(n, t.position, "rerank")] = weights.rerank * ndcg(ranked, relevance)
            if isinstance(t.info.get("utility"), (int, float)):
                out[(n, t.position, "induce")] = generator_advantage(float(t.info["utility"]), weights.positive)
    return out
