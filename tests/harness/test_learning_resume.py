"""bench_learning curation started again carries each of its run folders on: a fresh folder starts, a stopped
run resumes from its folder (no completion cache needed), a finished one is left alone."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from bench.bench_learning import resumed
from skillos.protocol.runs import RunFolder

ROOT = Path(__file__).resolve().parents[2]

RUN = ["python", "-m", "skillos.cli", "run", "--env", "reasoning", "--method", "skillos,gold", "--no-baseline",
       "--seeds", "1", "--max-turns", "20", "--concurrency", "1", "--split", "valid", "--per-type", "75",
       "--oracle-judge", "--task-type", "gsm_symbolic"]
CONFIG = {"run_id": "run-x", "env": "reasoning", "split": "valid", "task_type": "gsm_symbolic", "per_type": 75,
          "methods": ["skillos", "gold"], "max_turns": 20, "self_judge": False}


def _folder(tmp_path: Path, status: str | None, **config) -> Path:
    folder = tmp_path / "gsm_symbolic"
    if status:
        folder.mkdir(exist_ok=True)
        RunFolder(folder).run_state.write_text(json.dumps({"status": status, "config": {**CONFIG, **config}}))
    return folder


def test_a_folder_without_a_run_gets_the_command_itself(tmp_path):
    folder = _folder(tmp_path, None)
    assert resumed(RUN + ["--out", str(folder)]) == RUN + ["--out", str(folder)]


def test_a_stopped_run_is_resumed_from_its_folder(tmp_path):
    for status in ("failed", "running", "held"):
        folder = _folder(tmp_path, status)
        assert resumed(RUN + ["--out", str(folder)]) == ["python", "-m", "skillos.cli", "run", "--resume", str(folder),
                                                         "--concurrency", "1"]
        RunFolder(folder).run_state.unlink()
        folder.rmdir()


def test_a_finished_run_is_not_played_again(tmp_path):
    folder = _folder(tmp_path, "done")
    assert resumed(RUN + ["--out", str(folder)]) is None


def test_a_run_of_other_options_is_refused_not_reported_as_this_one(tmp_path):
    """the 25-per-family run in the folder must not stand for the 75 asked, finished or not"""
    for status in ("done", "failed"):
        folder = _folder(tmp_path, status, per_type=25)
        with pytest.raises(SystemExit, match="per_type 25 there, 75 asked"):
            resumed(RUN + ["--out", str(folder)])
    folder = _folder(tmp_path, "failed", methods=["skillos"])
    with pytest.raises(SystemExit, match="methods"):
        resumed(RUN + ["--out", str(folder)])


def test_an_unreadable_run_json_is_refused_not_overwritten(tmp_path):
    folder = _folder(tmp_path, "failed")
    RunFolder(folder).run_state.write_text('{"status": "exploded"}')
    with pytest.raises(SystemExit, match="not a stream run folder"):
        resumed(RUN + ["--out", str(folder)])


def test_stream_per_type_gives_the_baseline_no_method_parameters(tmp_path):
    """gold beside SkillOS-base in each type's process; No Memory's processes must not get `--param gold.k=1`
    (`skillos run` refuses a parameter of a method it does not play)."""
    from bench.bench_learning import curation_runs, parser

    args = parser().parse_args(["curation", "--env", "reasoning", "--split", "valid", "--per-type", "75",
                                "--task-type", "gsm_symbolic,chain_sum", "--stream-per-type", "--method",
                                "skillos,gold", "--param", "gold.k=1", "--oracle-judge"])
    runs = curation_runs(args, tmp_path)
    assert [r[r.index("--out") + 1] for r in runs] == [str(tmp_path / t) for t in
                                                       ("gsm_symbolic", "chain_sum", "none-gsm_symbolic",
                                                        "none-chain_sum")]
    methods = [r[r.index("--method") + 1] for r in runs]
    assert methods == ["skillos,gold", "skillos,gold", "none", "none"]
    assert all("--no-baseline" in r and "--oracle-judge" in r for r in runs)
    assert [r.count("gold.k=1") for r in runs] == [1, 1, 0, 0]
    assert all("--param" not in r for r in runs[2:])


def test_a_stopped_run_of_other_executor_code_is_refused_before_anything_starts(tmp_path):
    """its own `skillos run --resume` would refuse too, but only once started (all 8 at once, one failure each)"""
    from harness.reuse import executor_code

    folder = _folder(tmp_path, "failed")
    record = json.loads((ROOT / "bench/evidence/reasoning-valid-300/gsm_symbolic/tasks.jsonl").open().readline())
    record["method_info"]["executor_code"] = executor_code()
    RunFolder(folder).tasks_log.write_text(json.dumps(record) + "\n")
    assert resumed(RUN + ["--out", str(folder)])[4] == "--resume"
    record["method_info"]["executor_code"] = "0123456789abcdef"
    RunFolder(folder).tasks_log.write_text(json.dumps(record) + "\n")
    with pytest.raises(SystemExit, match=f"executor code 0123456789abcdef, this checkout's is {executor_code()}"):
        resumed(RUN + ["--out", str(folder)])
