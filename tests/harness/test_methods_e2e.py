"""Every method of `skillos run` on a short real stream over HTTP (skill repo with its MiniLM encoder,
ALFWorld games, executor, the embedded SmolLM2 as every LLM role): each method's state must land in the
repo, where its own rules say.

The env's verdict is what the methods learn from here (``--oracle-judge``): with two turns no `clean`
game can be won, so every outcome is a failure and the bookkeeping can be computed by hand.
"""

from __future__ import annotations

import json
import uuid

import pytest

from skillos.clients.skillrepo import SkillRepoClient
from skillos.methods.memp import procedure_body, task_key
from tests.conftest import SHARED_DATA
from tests.harness.stream_run import skillos_run

pytestmark = [pytest.mark.timeout(3000),
              pytest.mark.skipif(not (SHARED_DATA / "alfworld").exists(), reason="ALFWorld data not present")]

STREAM = ["--env", "alfworld", "--split", "valid_seen", "--task-type", "clean", "--limit", "2", "--seeds", "1",
          "--max-turns", "2", "--no-baseline", "--oracle-judge"]


@pytest.fixture
def stack(alfworld_stack):
    return alfworld_stack


def _records(out, method):
    return [json.loads(p.read_text()) for p in sorted((out / "tasks").glob(f"{method}-seed0-*.json"))]


def test_memp_and_skill1_keep_their_counters_in_the_repo(stack, tmp_path):
    repos = SkillRepoClient(stack.url("skillrepo"))
    seed = f"library-{uuid.uuid4().hex[:8]}"
    repos.create_repo(seed)
    instruction = "clean some apple and put it in fridge"
    repos.put_skill(seed, {"name": "procedure-clean", "description": f"Procedure for: {instruction}",
                           "body": procedure_body(instruction, ["go to sinkbasin 1", "clean apple 1 with sinkbasin 1"]),
                           "metadata": {"method": "memp", "key": task_key(instruction), "steps": 2}})
    repos.put_skill(seed, {"name": "clean-at-the-sink", "description": "Cleaning an object before placing it",
                           "body": "- Take the object to a sinkbasin and clean it there first.",
                           "metadata": {"method": "skill1", "utility": 0.8, "selected": 4}})
    out = tmp_path / "report"
    proc = skillos_run([*STREAM, "--method", "memp,skill1", "--from-repo", seed,
                        "--param", "memp.forget_after=2"], stack, out)
    assert proc.returncode == 0, proc.stderr[-3000:]

    memp = _records(out, "memp")
    assert [r["success"] for r in memp] == [False, False] and all(r["error"] is None for r in memp)
    # task 0: both skills given, both failed once; task 1: second failure in two uses → both forgotten
    assert sorted(memp[0]["method_info"]["updated"]) == ["clean-at-the-sink", "procedure-clean"]
    assert sorted(memp[1]["method_info"]["forgotten"]) == ["clean-at-the-sink", "procedure-clean"]
    assert memp[1]["repo_size"] == 0
    history = sorted(repos.skill_versions(memp[0]["repo"], "procedure-clean", content=True), key=lambda v: v.version)
    assert [v.deleted for v in history][-2:] == [False, True]  # counted once, then forgotten
    assert "uses: 1" in history[-2].content and "failures: 1" in history[-2].content

    skill1 = _records(out, "skill1")
    assert all(r["error"] is None and r["curator_error"] is None for r in skill1), [r["curator_error"] for r in skill1]
    assert all(sorted(r["method_info"]["candidates"]) == ["clean-at-the-sink", "procedure-clean"] for r in skill1)
    assert all(len(r["retrieved"]) == 1 for r in skill1)  # it acts with its top-ranked skill only
    assert all(r["method_info"]["variation"] < 0 and r["method_info"]["admitted"] is None for r in skill1)
    final = {s.name: s.metadata for s in repos.list_skills(skill1[0]["repo"])}
    # two failures: u ← 0.95·u each time, for every retrieved candidate
    assert final["clean-at-the-sink"]["utility"] == pytest.approx(0.8 * 0.95 ** 2, abs=1e-5)
    assert final["procedure-clean"]["utility"] == pytest.approx(0.5 * 0.95 ** 2, abs=1e-5)
    assert final["clean-at-the-sink"]["selected"] + final.get("procedure-clean", {}).get("selected", 0) == 4 + 2
    summary = (out / "summary.md").read_text()
    assert "| memp |" in summary and "| skill1 |" in summary and "Skill1: its own measures" in summary


def test_reasoningbank_skillrl_and_sapo_build_their_banks(stack, tmp_path):
    out = tmp_path / "report"
    proc = skillos_run([*STREAM, "--method", "reasoningbank,skillrl,sapo",
                        "--param", "skillrl.evolve_every=2", "--param", "sapo.promote_every=2"], stack, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    repos = SkillRepoClient(stack.url("skillrepo"))

    bank = _records(out, "reasoningbank")
    assert all(r["error"] is None and r["curator_error"] is None for r in bank), [r["curator_error"] for r in bank]
    written = [(r["position"], n) for r in bank for n in r["method_info"]["items"]]
    assert written, [r["curator_completion"] for r in bank]
    items = {s.name: s.metadata for s in repos.list_skills(bank[0]["repo"])}
    assert sorted(items) == sorted(n for _, n in written)
    assert all(m["method"] == "reasoningbank" and m["outcome"] == "failure" for m in items.values())
    first = written[0][0]
    assert all(r["retrieved"] for r in bank if r["position"] > first)  # k = 1 by meaning, once there is one

    skillrl = _records(out, "skillrl")
    assert all(r["error"] is None and r["curator_error"] is None for r in skillrl), \
        [r["curator_error"] for r in skillrl]
    trajectories = repos.list_skills(skillrl[0]["repo"] + "-trajectories")
    assert [t.name for t in trajectories] == ["t00000", "t00001"]
    assert all(t.metadata["category"] == "clean" and t.metadata["success"] is False for t in trajectories)
    evolution = skillrl[1]["method_info"]["evolution"]
    assert evolution["round"] == 1 and evolution["evolved"] == ["clean"] and evolution["success"] == {"clean": 0.0}
    assert sorted(evolution["failures_read"]) == ["t00000", "t00001"]
    for s in repos.list_skills(skillrl[0]["repo"]):
        assert s.metadata["tier"] in ("general", "specific"), s.metadata
        assert s.metadata["tier"] == "general" or s.metadata["category"] == "clean"

    sapo = _records(out, "sapo")
    assert all(r["error"] is None and r["curator_error"] is None for r in sapo), [r["curator_error"] for r in sapo]
    made = [r for r in sapo if r["method_info"]["candidate"]]
    assert made, [r["curator_completion"] for r in sapo]
    assert all(r["rollouts"] == 2 and r["method_info"]["utility"] == 0.0 for r in made)  # 0 − 0: no gain
    candidates = {s.name: s.metadata for s in repos.list_skills(sapo[0]["repo"] + "-candidates")}
    assert sorted(candidates) == sorted(r["method_info"]["candidate"] for r in made)
    # the promotion after task 2 found no positive utility: nothing promoted, every candidate discarded
    assert sapo[1]["method_info"]["promotion"]["promoted"] == []
    assert all(m["status"] == "discarded" for m in candidates.values())
    assert repos.get_repo(sapo[0]["repo"]).skill_count == 0
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["sapo"]["aggregate"]["method_measures"]["promotion_rounds"]["mean"] == 1.0
    assert summary["methods"]["skillrl"]["aggregate"]["method_measures"]["evolution_rounds"]["mean"] == 1.0


def test_from_repo_that_does_not_exist_is_refused(stack, tmp_path):
    proc = skillos_run([*STREAM, "--method", "memp", "--from-repo", "no-such-library"], stack, tmp_path / "r")
    assert proc.returncode != 0 and "--from-repo 'no-such-library'" in proc.stderr, proc.stderr[-2000:]
