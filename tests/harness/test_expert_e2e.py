"""Issue 23 on real services: the expert command plays valid_train games through a real ALFWorld server;
`--method gold` seeds its six skills and BM25 gives each task its type's skill first; `--method
skillos-expert` has the curator service (the embedded SmolLM2) read an expert game before task 1."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

from skillos.clients.envs import EnvClient
from skillos.clients.skillrepo import SkillRepoClient
from skillos.methods.gold import gold_skills
from tests.conftest import ROOT, SHARED_DATA
from tests.harness.stream_run import skillos_run

pytestmark = [pytest.mark.timeout(3000),
              pytest.mark.skipif(not (SHARED_DATA / "alfworld").exists(), reason="ALFWorld data not present")]

STREAM = ["--env", "alfworld", "--seeds", "1", "--max-turns", "1", "--no-baseline", "--oracle-judge"]


def _records(out, method):
    return [json.loads(p.read_text()) for p in sorted((out / "tasks").glob(f"{method}-seed0-*.json"))]


def test_expert_command_wins_two_valid_train_games(tmp_path):
    out = tmp_path / "demos.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench.bench_expert", "--limit", "2", "--out", str(out),
                           "--admissible"], cwd=ROOT, capture_output=True, text=True, timeout=900, check=False)
    assert proc.returncode == 0, proc.stderr[-3000:]
    games = [json.loads(line) for line in out.read_text().splitlines()]
    assert len(games) == 2 and all(g["won"] and g["split"] == "valid_train" for g in games), proc.stdout
    for g in games:
        assert g["steps"][0]["observation"] == g["first_observation"] and "Your task is to:" in g["first_observation"]
        # every action the expert took was one the game offered
        assert all(s["action"] in s["admissible_actions"] for s in g["steps"])
    assert "2/2 won" in proc.stdout


@pytest.fixture
def stack(alfworld_stack):
    return alfworld_stack


def test_gold_seeds_six_skills_and_each_type_gets_its_own_first(stack, tmp_path):
    out = tmp_path / "report"
    # two episodes through the executor (one turn each: the embedded LLM is slow on a busy CPU) ...
    proc = skillos_run([*STREAM, "--split", "valid_seen", "--per-type", "1", "--limit", "2", "--method", "gold",
                        "--param", "gold.k=1"], stack, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    records = _records(out, "gold")
    gold = {s.metadata["task_type"]: s.name for s in gold_skills()}
    assert len(records) == 2 and records[0]["method_info"]["seeded"] == sorted(gold.values())
    for r in records:
        assert r["error"] is None, r["error"]
        assert [s["name"] for s in r["retrieved"]] == [gold[r["task_type"]]], (r["instruction"], r["retrieved"])
        assert r["method_info"]["right_skill_first"] is True and r["ops"] == [] and r["repo_size"] == 6
    repo = SkillRepoClient(stack.url("skillrepo"))
    name = records[0]["repo"]
    assert sorted(s.name for s in repo.list_skills(name)) == sorted(gold.values())
    summary = json.loads((out / "summary.json").read_text())
    assert summary["methods"]["gold"]["aggregate"]["method_measures"]["right_skill_first"]["mean"] == 1.0
    # ... and the search the executor makes, on the stream's repo, for the first task of every type
    first = {}
    for t in EnvClient(stack.url("alfworld")).tasks("valid_seen"):
        first.setdefault(t.type, t.instruction)
    assert sorted(first) == sorted(gold)
    for kind, instruction in first.items():
        assert repo.search(name, instruction, k=1)[0].name == gold[kind], instruction


def test_expert_seeded_skillos_curates_an_expert_game_before_task_one(stack, tmp_path):
    out = tmp_path / "report"
    proc = skillos_run([*STREAM, "--split", "valid_seen", "--task-type", "heat", "--limit", "1",
                        "--method", "skillos-expert", "--param", "trajectories=1", "--param", "types=heat"],
                       stack, out)
    assert proc.returncode == 0, proc.stderr[-3000:]
    [record] = _records(out, "skillos-expert")
    seed = record["method_info"]["expert_seed"]
    [call] = seed["calls"]
    game = next(json.loads(x) for x in (ROOT / seed["source"]).read_text().splitlines()
                if json.loads(x)["task_id"] == call["task_id"])
    assert game["type"] == "heat" and game["split"] == "valid_train" and seed["trajectories"] == 1
    # the curator service answered, and what it was shown is the expert's game, judged a success
    assert call["error"] is None and call["call_id"], call
    assert game["instruction"] in call["prompt"] and "SUCCEEDED" in call["prompt"]
    assert all(f"Action: {s['action']}" in call["prompt"] for s in game["steps"])
    # every call SmolLM2 made has its verdict; what was applied is the repo the stream started with
    assert all({"name", "valid", "applied", "reason"} <= set(op) for op in call["ops"])
    inserted = {op["skill_name"] for op in call["ops"] if op["applied"] and op["name"] == "new_skill_insert"}
    assert set(seed["skills"]) == inserted and seed["applied"] == len([o for o in call["ops"] if o["applied"]])
    if call["ops"]:  # the repo's op log starts with the seed's batch, before task 1's
        oldest = SkillRepoClient(stack.url("skillrepo")).op_log(record["repo"], limit=200).entries[-1]
        assert oldest.origin.position == -1 and oldest.origin.task_id == call["task_id"], oldest
