"""`skillos eval-curator`'s pairing and adapter lookup (pure parts; the command itself runs against real
services in tests/trainer/test_trainer_e2e.py)."""

from __future__ import annotations

import pytest

from harness.curator_eval import EvalError, compare, find_adapter


def _rollout(task: float, fc: float, successes: list[bool], repo: int) -> dict:
    total = task + fc
    return {"reward": {"total": total, "task": task, "fc": fc, "cnt": 0.5, "comp": -0.1},
            "successes": successes, "repo_size": repo, "calls": 2, "valid_calls": 2 if fc == 1 else 1}


def _row(arm: str, group: str, rollouts: list[dict]) -> dict:
    tasks = [f"{group}-t{i}" for i in range(len(rollouts[0]["successes"]))]
    return {"arm": arm, "group": group, "family": "chain_sum", "tasks": tasks, "rollouts": rollouts}


def test_arms_are_paired_per_group_and_per_task():
    rows = [
        _row("untrained", "g1", [_rollout(0.0, 0.5, [True, False, False], 1), _rollout(0.5, 0.5, [False, True, False], 1)]),
        _row("trained", "g1", [_rollout(0.5, 1.0, [True, True, False], 2), _rollout(0.5, 1.0, [False, True, False], 2)]),
        _row("untrained", "g2", [_rollout(0.0, 1.0, [False, False], 0), _rollout(0.0, 1.0, [False, False], 0)]),
        _row("trained", "g2", [_rollout(1.0, 1.0, [False, True], 3), _rollout(0.0, 1.0, [False, False], 3)]),
        # a group one arm dropped is left out of every pair
        {"arm": "untrained", "group": "g3", "family": "chain_sum", "dropped": "rollout 0 failed"},
        _row("trained", "g3", [_rollout(1.0, 1.0, [True, True], 9), _rollout(1.0, 1.0, [True, True], 9)]),
    ]
    out = compare(rows)
    assert out["groups"] == 2 and out["dropped_groups"] == ["g3"]
    task = out["metrics"]["r_task"]
    # group means: g1 0.25 -> 0.5, g2 0.0 -> 0.5
    assert task["untrained"] == pytest.approx(0.125) and task["trained"] == pytest.approx(0.5)
    assert task["diff"] == pytest.approx(0.375) and task["n"] == 2
    assert out["metrics"]["repo_size"]["diff"] == pytest.approx(2.0)
    assert out["metrics"]["valid_call_rate"]["untrained"] == pytest.approx(0.75)
    pairs = out["task_pairs"]
    assert pairs["n"] == 10                            # 2 x 3 tasks in g1, 2 x 2 in g2
    assert pairs["discordant"] == [2, 0]               # trained won g1 r0 task 2 and g2 r0 task 2
    assert pairs["untrained"] == pytest.approx(0.2) and pairs["trained"] == pytest.approx(0.4)


def test_arms_that_played_different_things_are_not_paired():
    a = _row("untrained", "g1", [_rollout(0.0, 1.0, [True, False], 1)])
    b = _row("trained", "g1", [_rollout(0.0, 1.0, [True, False], 1), _rollout(0.0, 1.0, [True, False], 1)])
    with pytest.raises(EvalError, match="different tasks or rollout counts in g1"):
        compare([a, b])


def test_nothing_to_pair_is_said_not_invented():
    out = compare([_row("trained", "g1", [_rollout(1.0, 1.0, [True, True], 1)])])
    assert out["groups"] == 0 and out["metrics"] == {} and "task_pairs" not in out


def test_the_adapter_is_found_as_a_file_a_folder_or_a_run(tmp_path):
    run = tmp_path / "run"
    for step in (2, 10):
        d = run / "adapters" / f"step-{step:06d}"
        d.mkdir(parents=True)
        (d / "adapter.gguf").write_bytes(b"GGUF")
    latest = run / "adapters" / "step-000010" / "adapter.gguf"
    assert find_adapter(run) == latest
    assert find_adapter(latest.parent) == latest
    assert find_adapter(latest) == latest
    with pytest.raises(EvalError, match="no adapter at"):
        find_adapter(tmp_path / "nothing")


def test_a_half_written_adapter_folder_is_not_the_latest(tmp_path):
    for name in ("step-000005", "step-000005.incoming"):
        (tmp_path / "adapters" / name).mkdir(parents=True)
        (tmp_path / "adapters" / name / "adapter.gguf").write_bytes(b"GGUF")
    assert find_adapter(tmp_path).parent.name == "step-000005"


def test_a_rerun_resumes_only_the_same_evaluation(tmp_path):
    """eval-plan.json pins what eval.jsonl's rows were played with; a torn last line and a dropped group play again."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from harness.curator_eval import EvalPlan, _check_plan, _plan_record, _rows
    from services.trainer.config import TrainConfig

    cfg = TrainConfig.from_yaml(Path(__file__).resolve().parents[2] / "configs/train/cpu-qwen0.5b-served.yaml")
    adapter = tmp_path / "adapter.gguf"
    adapter.write_bytes(b"GGUF one")
    groups = [SimpleNamespace(id="g1", tasks=[SimpleNamespace(id="t1"), SimpleNamespace(id="t2")])]
    plan = EvalPlan(cfg, adapter, "valid", 1, 2, tmp_path)
    _check_plan(plan, _plan_record(plan, groups))
    _check_plan(plan, _plan_record(plan, groups))               # the same evaluation: resumes
    with pytest.raises(EvalError, match="differs in rollouts"):
        other = EvalPlan(cfg, adapter, "valid", 1, 3, tmp_path)
        _check_plan(other, _plan_record(other, groups))
    # more groups extend the evaluation (the split's first N: the played rows stay valid); the plan names them all
    more = groups + [SimpleNamespace(id="g2", tasks=[SimpleNamespace(id="t3"), SimpleNamespace(id="t4")])]
    bigger = EvalPlan(cfg, adapter, "valid", 2, 2, tmp_path)
    _check_plan(bigger, _plan_record(bigger, more))
    assert json.loads((tmp_path / "eval-plan.json").read_text())["groups"] == {"g1": ["t1", "t2"], "g2": ["t3", "t4"]}
    _check_plan(plan, _plan_record(plan, groups))               # and the first N again: still the same evaluation
    with pytest.raises(EvalError, match="differs in groups"):  # a shared group with other tasks is not
        _check_plan(plan, _plan_record(plan, [SimpleNamespace(id="g1", tasks=[SimpleNamespace(id="t9")])]))
    with pytest.raises(EvalError, match="differs in groups"):  # nor groups that do not begin the same way
        _check_plan(plan, _plan_record(plan, more[1:]))
    adapter.write_bytes(b"GGUF two")
    with pytest.raises(EvalError, match="adapter_sha256"):
        _check_plan(plan, _plan_record(plan, groups))

    log = tmp_path / "eval.jsonl"
    log.write_text(json.dumps({"arm": "trained", "group": "g1", "dropped": "timeout"}) + "\n"
                   + json.dumps(_row("trained", "g1", [_rollout(1.0, 1.0, [True, True], 1)])) + "\n"
                   + '{"arm": "untrained", "group": "g1", "rollo')   # killed mid-write
    rows = _rows(log)
    assert len(rows) == 1 and rows[0]["arm"] == "trained" and "dropped" not in rows[0]


def test_the_untrained_arm_is_reused_from_the_same_plan_only(tmp_path):
    """--untrained-from: an earlier evaluation's untrained groups are copied when its plan differs only in the
    adapter; its trained arm, its dropped groups and groups this plan does not have are not."""
    import json
    from pathlib import Path
    from types import SimpleNamespace

    from harness.curator_eval import EvalPlan, _check_plan, _plan_record, _rows, reuse_untrained
    from services.trainer.config import TrainConfig

    cfg = TrainConfig.from_yaml(Path(__file__).resolve().parents[2] / "configs/train/cpu-qwen0.5b-served.yaml")
    groups = [SimpleNamespace(id=g, tasks=[SimpleNamespace(id=f"{g}-t0"), SimpleNamespace(id=f"{g}-t1")])
              for g in ("g1", "g2")]
    first, second = tmp_path / "step-5", tmp_path / "step-10"
    for d, content in ((first, b"GGUF five"), (second, b"GGUF ten")):
        d.mkdir()
        (d / "adapter.gguf").write_bytes(content)
    earlier = EvalPlan(cfg, first / "adapter.gguf", "valid", 2, 1, first)
    _check_plan(earlier, _plan_record(earlier, groups))
    played = [_row("untrained", "g1", [_rollout(0.0, 1.0, [True, False], 1)]),
              _row("trained", "g1", [_rollout(1.0, 1.0, [True, True], 1)]),
              {"arm": "untrained", "group": "g2", "family": "chain_sum", "dropped": "timeout"},
              _row("untrained", "g9", [_rollout(0.0, 1.0, [True, False], 1)])]
    (first / "eval.jsonl").write_text("".join(json.dumps(r) + "\n" for r in played))

    plan = EvalPlan(cfg, second / "adapter.gguf", "valid", 2, 1, second, untrained_from=first)
    want = _plan_record(plan, groups)
    _check_plan(plan, want)
    # this folder had g1 dropped in its untrained arm: the completed copy takes its place
    (second / "eval.jsonl").write_text(json.dumps({"arm": "untrained", "group": "g1", "dropped": "timeout"}) + "\n")
    assert reuse_untrained(plan, want) == 1                      # g1's untrained row, not g2's dropped one
    rows = _rows(second / "eval.jsonl")
    assert [(r["arm"], r["group"], r["copied_from"]) for r in rows] == [("untrained", "g1", str(first))]
    assert "dropped" not in rows[0] and rows[0]["rollouts"] == played[0]["rollouts"]
    assert reuse_untrained(plan, want) == 0                      # a rerun copies nothing twice

    # a chain (step 15 from step 10, which copied from step 5) names the folder that played the row
    third = tmp_path / "step-15"
    third.mkdir()
    (third / "adapter.gguf").write_bytes(b"GGUF fifteen")
    chained = EvalPlan(cfg, third / "adapter.gguf", "valid", 2, 1, third, untrained_from=second)
    assert reuse_untrained(chained, _plan_record(chained, groups)) == 1
    assert _rows(third / "eval.jsonl")[0]["copied_from"] == str(first)

    # a plan of more groups copies what the earlier one played of them
    fourth = tmp_path / "step-20"
    fourth.mkdir()
    (fourth / "adapter.gguf").write_bytes(b"GGUF twenty")
    wider = EvalPlan(cfg, fourth / "adapter.gguf", "valid", 3, 1, fourth, untrained_from=first)
    g3 = SimpleNamespace(id="g3", tasks=[SimpleNamespace(id="g3-t0"), SimpleNamespace(id="g3-t1")])
    assert reuse_untrained(wider, _plan_record(wider, groups + [g3])) == 1

    other = EvalPlan(cfg, second / "adapter.gguf", "valid", 2, 2, tmp_path / "x", untrained_from=first)
    with pytest.raises(EvalError, match="differs in rollouts"):
        reuse_untrained(other, _plan_record(other, groups))
    with pytest.raises(EvalError, match="no eval-plan.json"):
        gone = EvalPlan(cfg, second / "adapter.gguf", "valid", 2, 1, second, untrained_from=tmp_path)
        reuse_untrained(gone, want)
