"""`skillos run` end to end over HTTP: real skill repo, ALFWorld games, embedded LLM, executor, curator.

A short stream of ALFWorld `clean` tasks (related tasks, so a skill written after one can be retrieved
for the next): the curator's ops must land in the repo and a later task must retrieve them.
"""

from __future__ import annotations

import json

import httpx
import pytest

from tests.conftest import SHARED_DATA, free_port, run_service
from tests.harness.stream_run import skillos_run as _run

pytestmark = [pytest.mark.timeout(3000),
              pytest.mark.skipif(not (SHARED_DATA / "alfworld").exists(), reason="ALFWorld data not present")]


@pytest.fixture
def stack(alfworld_stack):
    return alfworld_stack


def test_stream_curated_skills_land_and_are_retrieved(stack, tmp_path):
    out = tmp_path / "report"
    proc = _run(["--env", "alfworld", "--split", "valid_seen", "--task-type", "clean", "--limit", "3",
                 "--seeds", "1", "--max-turns", "2", "--no-baseline"], stack, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = [json.loads(p.read_text()) for p in sorted((out / "tasks").glob("skillos-seed0-*.json"))]
    assert [r["position"] for r in records] == [0, 1, 2]
    assert all(r["task_type"] == "clean" and r["error"] is None for r in records), [r["error"] for r in records]
    # the curator ran after every task and its ops landed in the repo
    assert all(r["curator_error"] is None and r["ops"] for r in records), [r["curator_error"] for r in records]
    applied = [(r["position"], o["skill_name"]) for r in records for o in r["ops"] if o["applied"]]
    assert applied, [o for r in records for o in r["ops"]]
    assert records[-1]["repo_size"] >= 1
    # a later task retrieved a skill that the curator wrote after an earlier task
    reused = [(r["position"], s["name"]) for r in records for s in r["retrieved"]
              if any(pos < r["position"] and name == s["name"] for pos, name in applied)]
    assert reused, (applied, [r["retrieved"] for r in records])
    # the report
    summary = json.loads((out / "summary.json").read_text())
    agg = summary["methods"]["skillos"]["aggregate"]
    assert summary["config"]["tasks"] == 3 and agg["retrieval_rate"]["mean"] > 0
    assert "| skillos |" in (out / "summary.md").read_text()
    for png in ("success_over_stream.png", "repo_size.png", "op_mix.png"):
        assert (out / png).read_bytes()[:4] == b"\x89PNG"
    exported = list((out / "repo" / "seed0").glob("*/SKILL.md"))
    assert len(exported) == records[-1]["repo_size"]
    assert all(p.read_text().startswith("---\nname: ") for p in exported)
    # measured utility: each task's outcome counted for each skill it was shown, as `skillos repo stats` says
    served: dict[str, list[bool]] = {}
    for r in records:
        for name in {s["name"] for s in r["retrieved"]}:
            served.setdefault(name, []).append(r["success"])
    utility = json.loads((out / "repo" / "seed0" / "utility.json").read_text())
    assert {u["name"]: (u["served"], u["served_success"], u["withheld"]) for u in utility["skills"]} == \
        {name: (len(won), sum(won), 0) for name, won in served.items()}, utility


def test_llm_down_episode_is_a_failure_with_reason(stack, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}/v1"
    env = {**stack.env(), "SKILLOS_EXECUTOR_LLM_BASE_URL": dead, "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "0",
           "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "2"}
    with run_service(["executor"], env=env, tmp_path=tmp_path) as executor:
        out = tmp_path / "report"
        proc = _run(["--env", "alfworld", "--split", "valid_seen", "--limit", "2", "--seeds", "1",
                     "--max-turns", "3"], stack, out, executor_url=executor.url)
        assert proc.returncode == 0, proc.stderr[-3000:]
        records = [json.loads(p.read_text()) for p in sorted((out / "tasks").glob("*.json"))]
        assert len(records) == 4  # skillos and the No Memory baseline, 2 tasks each
        for r in records:
            assert r["success"] is False and r["error"] and "LLM" in r["error"], r["error"]
            assert r["ops"] == []  # nothing is curated from a broken episode
        summary = json.loads((out / "summary.json").read_text())
        assert summary["methods"]["skillos"]["aggregate"]["sr"]["mean"] == 0.0
        assert summary["methods"]["none"]["aggregate"]["episode_errors"] == 2
    assert httpx.get(f"{stack.url('skillrepo')}/healthz").status_code == 200
