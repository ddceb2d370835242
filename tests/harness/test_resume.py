"""`skillos run --resume`: a stopped run plays on from its last finished task.

The end-to-end test kills a real `skillos run` (SIGKILL, no clean-up) after its first SkillOS task ended,
spoils the stream's repo on the real skill repo, and resumes: the finished task is kept as it was, the repo is
the snapshot the finished task left, and only the unfinished task is played.
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import time

import pytest

from harness.report import RunLog
from harness.resume import (
    ResumeError,
    check_models,
    check_positions,
    finished_records,
    last_prefix,
    options_config,
    record_from_entry,
    resume_point,
    run_lock,
)
from harness.runner import held_methods, resumed_options
from skillos.clients.skillrepo import SkillRepoClient
from skillos.protocol.runs import RunState, TaskEntry
from skillos.stream import TaskRecord, TaskSpec, run_stream
from skillos.stream.types import OpRecord
from tests.conftest import ROOT, SHARED_DATA
from tests.harness.stream_run import LLM_ENV, skillos_run


def _config(**over):
    config = {"env": "alfworld", "split": "valid_seen", "methods": ["skillos", "none"], "tasks": 4, "limit": None,
              "task_type": "clean", "per_type": None, "seeds": 1, "order": "grouped", "k": 5, "retrieval": "bm25",
              "from_repo": None, "max_turns": 2, "history_len": 30, "concurrency": 2, "acting": None,
              "run_id": "run-x", "self_judge": False, "params": {"skillos": {}, "none": {}}}
    config.update(over)
    return config


def _record(position, method="skillos", task_id=None):
    return TaskRecord(position=position, task_id=task_id or f"t{position}", task_type="clean", instruction="i",
                      method=method, seed=0, success=position % 2 == 0, steps=2,
                      ops=[OpRecord("new_skill_insert", "s", True, True, None, version=1)],
                      method_info={"k": position})


def test_a_record_reads_back_as_it_was_written(tmp_path):
    live = RunLog(tmp_path, _config(), total=2, repos=[])
    live.task(_record(0))
    back = finished_records(tmp_path)[("skillos", 0)][0]
    assert back == _record(0)


def test_a_resumed_log_keeps_the_start_counts_the_resume_and_ends_a_partial_line(tmp_path):
    live = RunLog(tmp_path, _config(), total=2, repos=[])
    live.task(_record(0))
    with (tmp_path / "tasks.jsonl").open("a") as f:
        f.write('{"position": 1, "task_id": "t1", "meth')   # killed mid-write
    before = RunState.model_validate_json((tmp_path / "run.json").read_text())
    again = RunLog(tmp_path, _config(), total=2, repos=[], previous=before)
    again.task(_record(1))
    state = RunState.model_validate_json((tmp_path / "run.json").read_text())
    assert state.started_at == before.started_at and len(state.resumed_at) == 1
    assert sorted(finished_records(tmp_path)[("skillos", 0)]) == [0, 1]   # the partial line is skipped


def test_options_come_from_run_json_and_an_old_folder_keeps_its_task_count_as_limit(tmp_path):
    RunLog(tmp_path, _config(limit=3, concurrency=4), total=2, repos=[])
    opts = resumed_options(tmp_path)
    assert (opts.env, opts.split, opts.methods, opts.limit, opts.concurrency, opts.task_type) == \
        ("alfworld", "valid_seen", ["skillos", "none"], 3, 4, "clean")
    assert opts.resume and opts.out == tmp_path and opts.self_judge is False
    old = _config()
    del old["limit"]
    assert options_config(RunState(config=old))["limit"] == 4


@pytest.mark.parametrize("config, says", [
    (None, "not a stream run folder"),
    ({"run_id": "run-x", "env": "alfworld"}, "lacks what a resume needs"),
    (_config(methods=["nope"], params={}), "lacks nope"),
])
def test_a_folder_that_cannot_resume_is_refused_with_the_reason(tmp_path, config, says):
    if config is not None:
        RunLog(tmp_path, config, total=1, repos=[])
    with pytest.raises(ResumeError, match=says.replace("lacks nope", "this version lacks: nope")):
        resumed_options(tmp_path)


def test_positions_are_held_against_the_tasks_the_run_now_plays():
    check_positions({0: _record(0, task_id="a")}, ["a", "b"], "skillos seed 0")
    with pytest.raises(ResumeError, match="the split's tasks changed"):
        check_positions({1: _record(1, task_id="a")}, ["a", "b"], "skillos seed 0")
    assert last_prefix({0: 1, 1: 1, 3: 1}) == 2 and last_prefix({1: 1}) == 0


def test_a_stream_keeps_no_more_than_its_newest_snapshot(tmp_path):
    (tmp_path / "resume").mkdir()
    for pos in (3, 4, 12):
        (tmp_path / "resume" / f"run-x-s0@{pos:04d}.tar.gz").write_bytes(b"")
    (tmp_path / "resume" / "run-x-s0-trajectories@0011.tar.gz").write_bytes(b"")   # a companion's
    assert resume_point(tmp_path, "run-x-s0", 13) == 13      # the last finished task's snapshot is there
    assert resume_point(tmp_path, "run-x-s0", 12) == 5       # 5..11 are played again from the one of task 4
    assert resume_point(tmp_path, "run-x-s0", 3) == 0        # none: from the first task, on a fresh repo


def test_one_run_at_a_time_in_a_folder(tmp_path):
    with run_lock(tmp_path), pytest.raises(ResumeError, match=f"another `skillos run` is playing in .* \\(pid {os.getpid()}\\)"), run_lock(tmp_path):
        pass
    with run_lock(tmp_path):   # released
        pass


def test_a_resume_on_other_models_is_refused():
    before = {"executor": {"model": "qwen2.5-coder-1.5b-instruct", "served_as": "qwen2.5-coder-1.5b-instruct"}}
    check_models(before, {"executor": {"model": "qwen2.5-coder-1.5b-instruct"}, "curator": {"model": "x"}})
    with pytest.raises(ResumeError, match="executor: qwen2.5-coder-1.5b-instruct then, smollm2-135m-instruct now"):
        check_models(before, {"executor": {"model": "smollm2-135m-instruct"}})


def test_a_task_played_again_after_a_resume_is_curated_under_a_new_key():
    """The repo remembers idempotency keys: the replay of a task curated before the stop must not be
    answered "replayed" (its ops never applied to the restored repo)."""
    from skillos.protocol.curator import Trajectory
    from skillos.stream.step import curate_trajectory
    from skillos.stream.types import StreamConfig

    keys = []

    class Curator:
        async def curate(self, request):
            keys.append(request.idempotency_key)
            raise RuntimeError("enough")

    for attempt in (0, 2):
        config = StreamConfig(env="alfworld", repo="run-x-s0", run_id="run-x", attempt=attempt)
        asyncio.run(curate_trajectory(3, TaskSpec(id="t3"), Trajectory(task="t"), False, [], config, Curator(),
                                      _record(3)))
    assert keys == ["run-x-s0:3:t3", "run-x-s0:3:t3:r2"]


class _Counting:
    """A method in process: what the loop does with finished records needs no service."""

    def __init__(self, sequential):
        self.sequential, self.played, self.hooks = sequential, [], []

    def check(self, ctx):
        pass

    async def setup(self, ctx):
        self.hooks.append("setup")

    async def resume(self, ctx):
        self.hooks.append("resume")

    async def play(self, position, spec, ctx):
        self.played.append(position)
        return _record(position, task_id=spec.id)


@pytest.mark.parametrize("sequential", [True, False])
def test_the_loop_keeps_finished_records_and_plays_only_the_rest(sequential):
    tasks = [TaskSpec(id=f"t{i}") for i in range(4)]
    method = _Counting(sequential)
    kept = {0: _record(0), 1: _record(1)}
    ended = []
    records = asyncio.run(run_stream(tasks, method, None, finished=kept, on_task=ended.append))
    assert method.played == [2, 3] and [r.position for r in ended] == [2, 3]
    assert records[0] is kept[0] and [r.position for r in records] == [0, 1, 2, 3]
    assert method.hooks == (["resume"] if sequential else ["setup"])


def test_a_sequential_stream_with_a_gap_is_refused():
    with pytest.raises(ValueError, match="finished prefix"):
        asyncio.run(run_stream([TaskSpec(id="t0"), TaskSpec(id="t1")], _Counting(True), None,
                               finished={1: _record(1)}))


def test_hold_names_methods_of_the_run_and_not_all_of_them():
    assert held_methods(["skillos", "gold", "none"], "gold, gold") == ("gold",)
    with pytest.raises(ValueError, match="--hold sapo: the run plays skillos, none"):
        held_methods(["skillos", "none"], "sapo")
    with pytest.raises(ValueError, match="nothing to play"):
        held_methods(["skillos", "none"], "none,skillos")


def test_a_held_finish_can_be_resumed_and_the_resume_drops_its_report_files(tmp_path):
    log = RunLog(tmp_path, _config(), total=8, repos=[])
    log.task(_record(0))
    (tmp_path / "tasks").mkdir()
    (tmp_path / "tasks" / "skillos-s0-0000.json").write_text("{}")
    (tmp_path / "summary.md").write_text("old")
    log.finish(held=True)
    state = RunState.model_validate_json((tmp_path / "run.json").read_text())
    assert state.status == "held"
    assert resumed_options(tmp_path).methods == ["skillos", "none"]     # not refused as finished
    RunLog(tmp_path, _config(), total=8, repos=[], previous=state)
    assert not (tmp_path / "tasks").exists() and not (tmp_path / "summary.md").exists()
    assert len(finished_records(tmp_path)[("skillos", 0)]) == 1           # the log itself is kept


def test_resume_of_a_folder_that_is_no_run_exits_non_zero_and_says_so(tmp_path):
    proc = subprocess.run([sys.executable, "-m", "skillos.cli", "run", "--resume", str(tmp_path), "--no-start"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0 and "not a stream run folder" in proc.stdout + proc.stderr


def test_resume_refuses_options_that_would_be_ignored(tmp_path):
    RunLog(tmp_path, _config(), total=2, repos=[])
    proc = subprocess.run([sys.executable, "-m", "skillos.cli", "run", "--resume", str(tmp_path), "--no-start",
                           "--method", "sapo", "--max-turns", "5"],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode != 0
    assert "drop --method, --max-turns" in " ".join((proc.stdout + proc.stderr).split())


@pytest.mark.timeout(3600)
@pytest.mark.skipif(not (SHARED_DATA / "alfworld").exists(), reason="ALFWorld data not present")
def test_a_killed_run_resumes_from_its_last_finished_task(alfworld_stack, tmp_path):
    """... and a resume may hold a stream back (``--hold none``): it plays nothing of it, keeps what it had
    finished and leaves the run 'held'; the next resume plays the rest of it."""
    state = alfworld_stack
    out = tmp_path / "report"
    urls = ["--no-start", "--skillrepo-url", state.url("skillrepo"), "--executor-url", state.url("executor"),
            "--curator-url", state.url("curator"), "--env-url", state.url("alfworld")]
    cmd = [sys.executable, "-m", "skillos.cli", "run", "--env", "alfworld", "--split", "valid_seen",
           "--task-type", "clean", "--limit", "2", "--seeds", "1", "--max-turns", "2",
           "--oracle-judge", "--method", "skillos", "--out", str(out), *urls]
    env = {**os.environ, **state.env(), **LLM_ENV}
    proc = subprocess.Popen(cmd, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    log = out / "tasks.jsonl"

    def lines(method):   # complete records only: a kill may cut the last line
        out = []
        for line in log.read_text().splitlines():
            try:
                if json.loads(line)["method"] == method:
                    out.append(line)
            except ValueError:
                continue
        return out

    deadline = time.monotonic() + 1800
    while not (log.exists() and lines("skillos")):
        assert proc.poll() is None, proc.stderr.read().decode()[-3000:]
        assert time.monotonic() < deadline, "the first task did not end in 30 min"
        time.sleep(0.2)
    proc.send_signal(signal.SIGKILL)   # no clean-up: run.json still says running, no summary
    proc.wait(timeout=30)
    first = lines("skillos")[0]
    # as if the baseline had finished nothing yet (at concurrency 1 it may have run ahead): the held resume
    # must then leave it with nothing and the run 'held'
    log.write_text("".join(line + "\n" for line in lines("skillos")))
    baseline_before = lines("none")
    assert json.loads((out / "run.json").read_text())["status"] == "running"
    repo = json.loads(first)["repo"]
    # what a kill between a task's curation and its record leaves: the repo ahead of its snapshot
    repos = SkillRepoClient(state.url("skillrepo"))
    repos.put_skill(repo, {"name": "spoiled-after-the-snapshot", "description": "must not survive the resume",
                           "body": "- nothing"})
    # the next task may have been under way: the resume plays it again

    refused = skillos_run(["--resume", str(out), "--hold", "sapo"], state, out)
    assert refused.returncode != 0 and "the run plays skillos, none" in " ".join((refused.stdout + refused.stderr).split())
    resumed = skillos_run(["--resume", str(out), "--hold", "none"], state, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    records = [TaskEntry.model_validate_json(p.read_text()) for p in sorted((out / "tasks").glob("skillos-*.json"))]
    assert [r.position for r in records] == [0, 1]
    assert record_from_entry(records[0]) == record_from_entry(TaskEntry.model_validate_json(first))  # kept, not replayed
    assert lines("none") == baseline_before    # held: nothing of it played
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "held" and len(run["resumed_at"]) == 1 and run["config"]["held"] == ["none"]
    assert run["config"]["run_id"] in repo
    assert "spoiled-after-the-snapshot" not in {s.name for s in repos.list_skills(repo)}
    assert "held back" in (out / "summary.md").read_text()
    resumed = skillos_run(["--resume", str(out)], state, out)
    assert resumed.returncode == 0, resumed.stderr[-3000:]
    assert sorted(json.loads(line)["position"] for line in lines("none")) == [0, 1]
    assert len(lines("skillos")) == 2          # the finished stream is not played again
    run = json.loads((out / "run.json").read_text())
    assert run["status"] == "done" and len(run["resumed_at"]) == 2 and "held" not in run["config"]
    assert len(list((out / "tasks").glob("*.json"))) == 4
    again = skillos_run(["--resume", str(out)], state, out)   # a finished run: nothing to play, folder untouched
    assert again.returncode != 0 and "nothing to resume" in " ".join((again.stdout + again.stderr).split())
    assert json.loads((out / "run.json").read_text()) == run
