"""`skillos train --config configs/train/cpu-tiny-agent.yaml` for real, one step per method: SmolLM2-135M
as the agent in real ALFWorld games (the executor's logic in the trainer's process), the skill repo over
HTTP, the embedded LLM as SkillRL's teacher. Checked: every segment of each method is sampled, the
advantages the trainer applied are the ones `segment_advantages` gives for what the rollouts logged,
the update follows the credit, and each method's state lands where it should (rollout repos gone,
SkillRL's bank kept and evolved)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from pathlib import Path

import pytest
from conftest import ROOT

from services.trainer.config import TrainConfig
from services.trainer.rollouts.agent_rewards import SegmentWeights, TaskPlay, segment_advantages
from tests.harness.stream_run import LLM_ENV

pytestmark = [pytest.mark.slow, pytest.mark.llm, pytest.mark.timeout(1800)]

CONFIG = ROOT / "configs" / "train" / "cpu-tiny-agent.yaml"
CFG = TrainConfig.from_yaml(CONFIG)
PLAYS = CFG.groups_per_step * CFG.rollouts_per_group * CFG.data.group_size   # task plays per step


def _train(stack, out: Path, *sets: str) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "skillos.cli", "train", "--config", str(CONFIG), "--output-dir", str(out)]
    for s in sets:
        cmd += ["--set", s]
    env = {**os.environ, **stack.env(), **LLM_ENV, "SKILLOS_LOG_FORMAT": "json"}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=1500, check=False)


def _trained(stack, out: Path, *sets: str) -> dict:
    """One training step of the tiny agent config with ``sets``; its metrics row, common checks made."""
    done = _train(stack, out, *sets)
    assert done.returncode == 0, done.stdout[-4000:] + done.stderr[-4000:]
    row = _row(out)
    _common(row, out)
    return row


def _no_rollout_repos(stack) -> list[str]:
    """The repos on the stack, none of them a rollout's (deleted with its companions after it)."""
    names = _repos(stack)
    assert not [n for n in names if n.startswith("train-")], "rollout repos or their companions left behind"
    return names


def _row(out: Path) -> dict:
    rows = [json.loads(line) for line in (out / "metrics.jsonl").read_text().splitlines() if line.strip()]
    assert [r["step"] for r in rows] == [1]
    return rows[0]


def _rollouts(out: Path) -> list[dict]:
    return [json.loads(line) for line in (out / "rollouts" / "step-000001.jsonl").read_text().splitlines()]


def _check_credit(logged: list[dict]) -> list[float]:
    """Recompute every logged sample's advantage from the logged tasks (act samples by their episode);
    return them all."""
    weights = SegmentWeights(CFG.agent.rerank_weight, CFG.agent.distill_weight, CFG.agent.generator_positive_weight)
    plays = [[TaskPlay(t["position"], dict(zip(t["episode_keys"], t["episodes"])), t["info"]) for t in r["tasks"]]
             for r in sorted(logged, key=lambda r: r["rollout"])]
    adv = segment_advantages(plays, weights)
    seen = []
    for r in logged:
        for s in r["samples"]:
            what = s["episode"] if s["segment"] == "act" else s["segment"]
            assert s["advantage"] == pytest.approx(adv.get((r["rollout"], s["position"], what), 0.0)), s
            seen.append(s["advantage"])
    return seen


def _common(row: dict, out: Path) -> None:
    assert row["groups"]["dropped"] == 0, row["groups"]["dropped_reasons"]
    assert row["signal"]["segments"]["act"] >= PLAYS            # at least one decision per episode
    assert row["update"]["sequences"] > 0
    assert (out / "checkpoints" / "latest").read_text().strip() == "step-000001"
    assert (out / "report.png").stat().st_size > 0


def _repos(stack) -> list[str]:
    from skillos.clients.skillrepo import SkillRepoClient

    with SkillRepoClient(stack.url("skillrepo")) as repo:
        return [r.name for r in repo.list_repos()]


def test_skill1_query_rerank_act_distill(alfworld_stack, tmp_path):
    from skillos.clients.skillrepo import SkillRepoClient

    # a library whose trends differ, so the ranking has something to agree with
    seed = f"agent-seed-{uuid.uuid4().hex[:6]}"
    with SkillRepoClient(alfworld_stack.url("skillrepo")) as repo:
        repo.create_repo(seed)
        for name, u, body in (("find-then-take", 0.9, "Go to each receptacle, open it, take the object."),
                              ("look-under-lamp", 0.5, "Take the object, go to the desklamp, use it."),
                              ("wander", 0.1, "Walk around the room.")):
            repo.put_skill(seed, {"name": name, "description": f"{name} in a household task", "body": body,
                                  "metadata": {"utility": u, "selected": 0}})
    out = tmp_path / "skill1"
    row = _trained(alfworld_stack, out, "agent.method=skill1", f"rollout.seed_repo={seed}")
    segments = row["signal"]["segments"]
    assert segments["query"] == segments["rerank"] == segments["distill"] == PLAYS, segments
    logged = _rollouts(out)
    advantages = _check_credit(logged)
    # a readable ranking of candidates whose trends differ is credited with 0.3·NDCG > 0
    read = [t for r in logged for t in r["tasks"] if t["info"].get("rank_read")]
    assert read, "SmolLM2 wrote no readable ranking in 4 tries"
    assert row["signal"]["adv_abs_mean"]["rerank"] > 0
    assert any(a != 0 for a in advantages) and row["update"]["grad_norm"] > 0, row["update"]
    _no_rollout_repos(alfworld_stack)


def test_sapo_split_rollouts_and_induction(alfworld_stack, tmp_path):
    out = tmp_path / "sapo"
    row = _trained(alfworld_stack, out, "agent.method=sapo")
    assert row["signal"]["segments"]["induce"] == PLAYS
    logged = _rollouts(out)
    _check_credit(logged)
    for r in logged:
        for t in r["tasks"]:
            # 1 base + 1 augmented rollout when a candidate was induced (its utility recorded)
            assert len(t["episodes"]) == (2 if "utility" in t["info"] else 1), t
            if "utility" in t["info"]:
                u = t["info"]["utility"]
                assert u == pytest.approx(t["episodes"][1] - t["episodes"][0])
                assert [s["advantage"] for s in r["samples"] if s["segment"] == "induce"
                        and s["position"] == t["position"]] == [pytest.approx(0.1 * u if u > 0 else u)]
    assert row["method"]["rollouts_per_task"] >= 1
    _no_rollout_repos(alfworld_stack)


def test_skillrl_bank_evolves_between_steps(alfworld_stack, tmp_path):
    out = tmp_path / "skillrl-run"
    row = _trained(alfworld_stack, out, "agent.method=skillrl")
    assert set(row["signal"]["segments"]) == {"act"}       # the teacher writes; only the agent is trained
    advantages = _check_credit(_rollouts(out))
    if not any(advantages):   # every episode ended alike: nothing to learn, and no pass through the model
        assert row["update"]["skipped"] == 1.0 and "advantage" in row["update"]["reason"], row["update"]
    evolution = row["evolution"]
    assert evolution["round"] == 1 and "bank_skills" in evolution, evolution
    bank = evolution["bank"]
    assert bank.startswith("skillrl-run-") and bank.endswith("-skillrl-bank")
    names = _no_rollout_repos(alfworld_stack)
    assert bank in names and f"{bank}-trajectories" in names
    from skillos.clients.skillrepo import SkillRepoClient

    with SkillRepoClient(alfworld_stack.url("skillrepo")) as repo:
        recorded = repo.list_skills(f"{bank}-trajectories")
        skills = repo.list_skills(bank)
    assert len(recorded) == PLAYS                             # every trajectory the step played
    assert {s.metadata["step"] for s in recorded} == {1}
    assert len(skills) == evolution["bank_skills"]
    assert {s.name for s in skills} >= set(evolution["added"])
