"""The policy's measured-utility rule as a decision procedure (no service): how often it promotes a candidate
that does not help. Judged after every task with a 95 % interval it would promote about one neutral skill in
six; judged at N, 2N, 4N, ... served tasks with a 99 % interval it stays under the nominal 2.5 %."""

from __future__ import annotations

import random

from services.skillrepo.lifecycle.serving import checkpoint, rule_verdict
from services.skillrepo.utility.serving import utility_of
from skillos.protocol.skillrepo import RepoPolicy
from skillos.utility import Z95, Z99


def _promoted(policy: RepoPolicy, *, every_task: bool, z: float, trials: int = 300, tasks: int = 3000,
              share: float = 0.1, p_served: float = 0.5, p_withheld: float = 0.5) -> int:
    """Candidates promoted among ``trials`` whose tasks succeed at ``p_served`` when shown (at ``share``)."""
    rng, promoted = random.Random(0), 0
    for _ in range(trials):
        arms = {"served": [0, 0], "withheld": [0, 0]}
        for _ in range(tasks):
            shown = rng.random() < share
            arm = arms["served" if shown else "withheld"]
            arm[0] += 1
            arm[1] += rng.random() < (p_served if shown else p_withheld)
            if not shown:
                continue
            u = utility_of("s", {k: tuple(v) for k, v in arms.items()}, z)
            if every_task:   # the naive rule: look after every served task
                if u.served >= policy.promote_after and u.interval and u.interval[0] >= 0:
                    promoted += 1
                    break
            elif rule_verdict("candidate", u, policy) is not None:
                promoted += 1
                break
    return promoted


def test_checkpoints_are_n_times_a_power_of_two():
    assert [s for s in range(1, 200) if checkpoint(s, 20)] == [20, 40, 80, 160]
    assert [s for s in range(1, 40) if checkpoint(s, 1)] == [1, 2, 4, 8, 16, 32]


def test_a_neutral_candidate_is_rarely_promoted_and_a_useful_one_is():
    policy = RepoPolicy(candidates=True, promote_after=20)
    naive = _promoted(policy, every_task=True, z=Z95)
    ruled = _promoted(policy, every_task=False, z=Z99)
    assert naive > 30 and ruled <= 12, (naive, ruled)     # 300 neutral candidates: 47 (16 %) against 4 (1.3 %)
    useful = _promoted(policy, every_task=False, z=Z99, trials=100, p_served=0.8, p_withheld=0.4)
    assert useful >= 90, useful                           # a skill that lifts success 40 points is found


def test_the_rule_retires_what_hurts_and_leaves_a_persons_choice_alone():
    policy = RepoPolicy(candidates=True, promote_after=10, retire_harmful=True)
    harmful = utility_of("s", {"served": (10, 0), "withheld": (30, 24)}, Z99)
    assert rule_verdict("active", harmful, policy)[0] == "retired"
    assert rule_verdict("retired", harmful, policy) is None
    assert rule_verdict("active", utility_of("s", {"served": (11, 0), "withheld": (30, 24)}, Z99), policy) is None
    no_rules = RepoPolicy(candidates=True)
    assert rule_verdict("candidate", utility_of("s", {"served": (10, 10), "withheld": (30, 0)}, Z99), no_rules) is None
