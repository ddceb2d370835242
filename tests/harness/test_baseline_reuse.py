"""`skillos run --baseline-from FOLDER`: No Memory's episodes taken from an earlier run with the same executor
settings, the rest played (harness/reuse.py)."""

from __future__ import annotations

import dataclasses
import json
import subprocess
import sys

import pytest

from harness.report import RunLog
from harness.resume import finished_records
from harness.reuse import BaselineError, baseline_records, executor_code
from skillos.protocol.runs import TaskEntry
from skillos.stream import TaskRecord
from tests.conftest import ROOT, SHARED_DATA
from tests.harness.stream_run import skillos_run

MODELS = {"executor": {"model": "qwen", "served_as": "qwen", "quant": "Q4_K - Medium", "size_bytes": 1,
                        "context": 12288}}


def _config(**over):
    config = {"env": "alfworld", "split": "valid_seen", "methods": ["skillos", "none"], "tasks": 4, "limit": None,
              "task_type": None, "per_type": None, "seeds": 2, "order": "grouped", "k": 5, "retrieval": "bm25",
              "from_repo": None, "max_turns": 30, "history_len": 30, "concurrency": 4, "acting": None,
              "run_id": "run-x", "self_judge": True, "params": {"skillos": {}, "none": {}}, "models": MODELS}
    config.update(over)
    return config


def _record(position, task_id, method="none", seed=0, error=None, code="now"):
    info = {"k": position} | ({"executor_code": executor_code() if code == "now" else code} if code else {})
    return TaskRecord(position=position, task_id=task_id, task_type="clean", instruction="i", method=method,
                      seed=seed, success=position % 2 == 0, steps=7, error=error, method_info=info,
                      turns=[{"observation": "o", "thought": "t", "action": "look", "valid": True}])


def _folder(path, records, **over):
    live = RunLog(path, _config(**over), total=8, repos=[])
    for r in records:
        live.task(r)
    return path


def _now(**over):
    """The new run's config as `harness.runner` passes it (only what a No Memory episode depends on)."""
    c = {"env": "alfworld", "split": "valid_seen", "max_turns": 30, "history_len": 30, "acting": None,
         "models": MODELS}
    c.update(over)
    return c


def test_no_memory_records_are_taken_by_task_and_seed_at_the_new_positions(tmp_path):
    folder = _folder(tmp_path, [_record(0, "t0"), _record(1, "t1"), _record(2, "t2", error="executor: timeout"),
                                _record(3, "t3"), _record(0, "t0", seed=1), _record(0, "t0", method="skillos")])
    found, skipped = baseline_records(folder, _now(), {0: ["t3", "t2", "t9", "t0"], 1: ["t1", "t0"]})
    # t2 ended with a harness error and t9 was never played: both are played again
    assert sorted(found[0]) == [0, 3] and sorted(found[1]) == [1] and skipped == {"harness error": 1}
    assert [found[0][0].task_id, found[0][3].task_id, found[1][1].task_id] == ["t3", "t0", "t0"]
    assert found[1][1].seed == 1 and found[0][3].position == 3
    kept = found[0][3]
    assert kept.method == "none" and kept.steps == 7 and kept.turns[0]["action"] == "look"
    assert kept.method_info == {"k": 0, "reused_from": str(folder), "executor_code": executor_code()}
    # the folder itself is left as it was (positions and notes are the new run's copies)
    assert finished_records(folder)[("none", 0)][0].method_info == {"k": 0, "executor_code": executor_code()}


def test_episodes_of_other_executor_code_or_of_unknown_code_are_played_again(tmp_path):
    folder = _folder(tmp_path, [_record(0, "t0", code="0123456789abcdef"), _record(1, "t1", code=None),
                                _record(2, "t2")])
    found, skipped = baseline_records(folder, _now(), {0: ["t0", "t1", "t2"]})
    assert sorted(found[0]) == [2] and skipped == {"other executor code": 1, "no code fingerprint": 1}
    # a run from before the fingerprint was recorded, taken on the user's word, says so in each record
    found, skipped = baseline_records(folder, _now(), {0: ["t0", "t1", "t2"]}, assume_same_code=True)
    assert sorted(found[0]) == [1, 2] and skipped == {"other executor code": 1}
    assert found[0][1].method_info["executor_code_assumed"] == executor_code()
    # taken again from a run that took it: the folder it was first played in is kept
    again = dataclasses.replace(found[0][2], method_info={**found[0][2].method_info})
    _folder(tmp_path / "second", [again])
    found, _ = baseline_records(tmp_path / "second", _now(), {0: ["t2"]})
    assert found[0][0].method_info["reused_from"] == str(folder)


@pytest.mark.parametrize("change, says", [
    ({"max_turns": 10}, "max_turns 30 there, 10 here"),
    ({"acting": {"state_line": False}}, "acting None there"),
    ({"split": "valid_train"}, "split 'valid_seen' there, 'valid_train' here"),
    ({"models": {"executor": {"model": "qwen", "served_as": "qwen", "size_bytes": 2, "context": 12288}}},
     "executor ('qwen', 1, 12288) there, ('qwen', 2, 12288) here"),
    ({"models": {"executor": {"model": "qwen", "served_as": "qwen", "size_bytes": 1, "context": 4096}}},
     "executor ('qwen', 1, 12288) there, ('qwen', 1, 4096) here"),
])
def test_episodes_played_with_other_settings_are_refused_naming_the_difference(tmp_path, change, says):
    folder = _folder(tmp_path, [_record(0, "t0")])
    with pytest.raises(BaselineError) as e:
        baseline_records(folder, _now(**change), {0: ["t0"]})
    if "acting" in change:
        assert "without --acting a run uses the executor service's own defaults" in str(e.value)
    assert says in str(e.value) and "drop --baseline-from" in str(e.value)


def test_a_folder_without_the_baseline_or_no_run_at_all_is_refused(tmp_path):
    with pytest.raises(BaselineError, match="not a `skillos run` folder"):
        baseline_records(tmp_path, _now(), {0: ["t0"]})
    folder = _folder(tmp_path / "gold", [_record(0, "t0", method="gold")], methods=["gold"])
    with pytest.raises(BaselineError, match="that run played gold, not the No Memory baseline"):
        baseline_records(folder, _now(), {0: ["t0"]})


@pytest.mark.parametrize("args, says", [
    (["--baseline-from", "{missing}"], "not a `skillos run` folder"),
    (["--baseline-from", "{folder}", "--no-baseline"], "drop --no-baseline, or add none to --method"),
    (["--resume", "{folder}", "--baseline-from", "{folder}"], "drop --baseline-from"),
    (["--baseline-from", "{folder}", "--out", "{folder}"], "--out is the --baseline-from folder"),
    (["--assume-same-executor-code"], "--assume-same-executor-code goes with --baseline-from"),
])
def test_the_command_refuses_what_it_cannot_reuse_before_starting_anything(tmp_path, args, says):
    folder = _folder(tmp_path / "run", [_record(0, "t0")])
    args = [a.format(folder=folder, missing=tmp_path / "missing") for a in args]
    proc = subprocess.run([sys.executable, "-m", "skillos.cli", "run", *args, "--no-start"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert says in " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.timeout(1800)
@pytest.mark.skipif(not (SHARED_DATA / "alfworld").exists(), reason="ALFWorld data not present")
def test_a_run_plays_only_the_no_memory_episodes_the_earlier_run_lacks(alfworld_stack, tmp_path):
    """Real stack (embedded SmolLM2): a first run plays No Memory on 2 clean games; a second run on 3 takes
    those 2 from the first run's folder and plays the third; a setting that differs is refused."""
    shape = ["--method", "none", "--task-type", "clean", "--seeds", "1", "--max-turns", "1", "--oracle-judge"]
    first = skillos_run([*shape, "--limit", "2"], alfworld_stack, tmp_path / "first")
    assert first.returncode == 0, first.stderr[-3000:]
    second = skillos_run([*shape, "--limit", "3", "--baseline-from", str(tmp_path / "first")], alfworld_stack,
                         tmp_path / "second")
    assert second.returncode == 0, second.stderr[-3000:]
    before = {json.loads(line)["task_id"]: json.loads(line) for line in
              (tmp_path / "first" / "tasks.jsonl").read_text().splitlines()}
    now = [TaskEntry.model_validate_json(p.read_text()) for p in sorted((tmp_path / "second" / "tasks").glob("*.json"))]
    assert [r.position for r in now] == [0, 1, 2]
    reused = [r for r in now if r.method_info.get("reused_from") == str(tmp_path / "first")]
    assert [r.task_id for r in reused] == [r.task_id for r in now[:2]] and set(before) == {r.task_id for r in reused}
    for r in reused:   # the same episode, turn for turn
        assert r.turns == before[r.task_id]["turns"] and r.success == before[r.task_id]["success"]
    assert "reused_from" not in now[2].method_info and now[2].steps >= 1
    assert now[2].method_info["executor_code"] == executor_code()
    # the run's own log holds them too: a resume, the console and the analysis read it, not tasks/*.json
    logged = [json.loads(line) for line in (tmp_path / "second" / "tasks.jsonl").read_text().splitlines()]
    assert sorted(r["position"] for r in logged) == [0, 1, 2]
    assert sum("reused_from" in r["method_info"] for r in logged) == 2
    run = json.loads((tmp_path / "second" / "run.json").read_text())
    assert run["status"] == "done"
    assert run["config"]["baseline_from"] == {"from": str(tmp_path / "first"), "taken": 2, "played_again": {},
                                              "assumed_same_code": False}
    assert "No Memory: 2 episodes taken from" in (tmp_path / "second" / "summary.md").read_text()
    other = skillos_run([*shape[:-3], "--max-turns", "2", "--limit", "3", "--baseline-from", str(tmp_path / "first")],
                        alfworld_stack, tmp_path / "third")
    assert other.returncode != 0
    assert "max_turns 1 there, 2 here" in " ".join((other.stdout + other.stderr).split())


def test_a_resume_on_other_executor_code_is_refused_unless_asked_for(tmp_path):
    """The arms of a run must play the same executor code: `--resume` from a checkout whose skillos/acting or
    services/executor changed since the run's episodes is refused, naming both fingerprints and the way to play
    on from the run's own commit; `--new-executor-code` lets it go on (it then fails on the stack, not the code)."""
    folder = _folder(tmp_path / "run", [_record(0, "t0", code="0123456789abcdef"), _record(1, "t1", code=None)])
    base = [sys.executable, "-m", "skillos.cli", "run", "--resume", str(folder), "--no-start",
            "--executor-url", "http://127.0.0.1:9"]
    refused = subprocess.run(base, cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    said = " ".join((refused.stdout + refused.stderr).split())
    assert refused.returncode != 0 and "played by executor code 0123456789abcdef" in said
    assert executor_code() in said and "git worktree add" in said and "--new-executor-code" in said
    allowed = subprocess.run([*base, "--new-executor-code"], cwd=ROOT, capture_output=True, text=True, timeout=120,
                             check=False)
    assert "played by executor code" not in " ".join((allowed.stdout + allowed.stderr).split())
    same = _folder(tmp_path / "same", [_record(0, "t0")])   # this checkout's own code: no question asked
    again = subprocess.run([*base[:4], str(same), *base[5:]], cwd=ROOT, capture_output=True, text=True, timeout=120,
                           check=False)
    assert "played by executor code" not in " ".join((again.stdout + again.stderr).split())
