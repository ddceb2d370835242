"""The run folder as a written contract (`skillos.protocol.runs`): what `skillos run`'s report writer
(`harness.report`) and `skillos train`'s metrics writer (`services.trainer.metrics`) write reads back through
the contract's models, field for field and byte for byte as before; the console reads both; and every run
folder kept under bench/evidence/ still reads. No LLM, no service: the writers are driven with small records.
"""

from __future__ import annotations

import json
from dataclasses import fields
from pathlib import Path
from types import SimpleNamespace

import pytest

from harness.report import RunLog, StreamRun, summarize, write_summary, write_task_records
from services.console.runs import RunStore
from services.trainer.metrics import (
    MetricsWriter,
    adapter_drift,
    disagreement_by_position,
    plot_report,
    read_metrics,
    render_report,
    reward_by_family,
    spread_by_family,
    task_family,
    write_report,
    write_rollouts,
)
from services.trainer.rollouts.curator_rewards import RewardParts
from skillos.protocol.runs import (
    TASK_FILE,
    MetricsRow,
    OpEntry,
    RolloutRow,
    RunFolder,
    RunState,
    RunSummary,
    TaskEntry,
    TrainSummary,
    read_json,
    read_jsonl,
    read_tasks,
    rollouts_file_name,
    task_file_name,
    to_dict,
)
from skillos.stream import OpRecord, TaskRecord

EVIDENCE = Path(__file__).resolve().parents[1] / "bench" / "evidence"


def _records(method: str, seed: int) -> list[TaskRecord]:
    out = []
    for pos in range(3):
        rec = TaskRecord(position=pos, task_id=f"valid_seen/t-{pos}", task_type="pick", method=method, seed=seed,
                         instruction=f"put a clean mug in cabinet {pos} – ünïcode kept", success=pos % 2 == 0,
                         reward=1.0 if pos % 2 == 0 else 0.0, steps=4 + pos, stop_reason="done",
                         self_judged_success=pos != 1, retrieved=[{"name": "clean-mug", "version": 1, "score": 2.5}],
                         used=["clean-mug"] if pos else [], tokens=120 + pos, episode_s=1.25, curate_s=0.5,
                         turns=[{"observation": "You see a mug.", "thought": "", "action": "take mug 1 from desk 1",
                                 "valid": True}],
                         method_info={"writer_tokens": 40, "nested": {"k": [1, 2]}})
        if method == "skillos":
            rec.repo = f"run-x-s{seed}"
            rec.ops = [OpRecord("new_skill_insert", "clean-mug", True, True, None, version=pos + 1),
                       OpRecord("skill_delete", "no-such", False, False, "skill_not_found: no")]
            rec.validity_rate, rec.repo_size, rec.curator_call_id = 0.5, pos + 1, f"call{pos}"
        out.append(rec)
    return out


def test_a_task_entry_is_a_task_record_field_for_field():
    assert list(TaskEntry.model_fields) == [f.name for f in fields(TaskRecord)]
    assert list(OpEntry.model_fields) == [f.name for f in fields(OpRecord)]


def test_a_stream_run_written_by_the_harness_reads_back_through_the_contract(tmp_path):
    out = tmp_path / "20260101-000000"
    config = {"env": "alfworld", "split": "valid_seen", "methods": ["none", "skillos"], "tasks": 3, "seeds": 1,
              "run_id": "run-x", "path": Path("/somewhere")}
    live = RunLog(out, config, total=6, repos=["run-x-s0"])
    folder = RunFolder(out)
    state = read_json(folder.run_state, RunState)
    assert state is not None and state.status == "running" and state.finished_at is None and state.total == 6
    runs = []
    for method in ("none", "skillos"):
        records = _records(method, 0)
        for r in records:
            live.task(r)
        runs.append(StreamRun(method, 0, "run-x-s0" if method == "skillos" else None, records))
    # live: run.json and tasks.jsonl only; every line is the record as it was always written
    lines = folder.tasks_log.read_text(encoding="utf-8").splitlines()
    assert lines == [json.dumps(r.to_dict(), ensure_ascii=False, default=str) for run in runs for r in run.records]
    assert [to_dict(t) for t in read_jsonl(folder.tasks_log, TaskEntry)] == \
        [json.loads(json.dumps(r.to_dict())) for run in runs for r in run.records]
    write_task_records(runs, out)
    write_summary(summarize(runs, config), out)
    live.finish()

    state = read_json(folder.run_state, RunState)
    assert state.status == "done" and state.finished_at and state.repos == ["run-x-s0"]
    assert state.config["path"] == "/somewhere"       # what json could not say is written as its str
    assert list(json.loads(folder.run_state.read_text())) == list(RunState.model_fields)
    tasks = read_tasks(folder)                          # finished: tasks/*.json
    assert len(tasks) == 6 and all(TASK_FILE.match(p.name) for p in folder.task_files())
    assert folder.task_file("skillos", 0, 2).name == task_file_name("skillos", 0, 2) == "skillos-seed0-0002.json"
    skillos = [t for t in tasks if t.method == "skillos"]
    assert [o.name for o in skillos[0].ops] == ["new_skill_insert", "skill_delete"]
    assert skillos[2].method_info == {"writer_tokens": 40, "nested": {"k": [1, 2]}}
    assert folder.task_file("none", 0, 1).read_text() == json.dumps(runs[0].records[1].to_dict(), indent=2,
                                                                      ensure_ascii=False, default=str)
    summary = read_json(folder.summary, RunSummary)
    assert summary is not None and set(summary.methods) == {"none", "skillos"} and summary.config["run_id"] == "run-x"

    # the console reads the same folder through the same contract
    store = RunStore(tmp_path)
    info = store.get(out.name)
    assert (info.kind, info.status, info.total, info.repos, info.run_id) == ("stream", "done", 6, ["run-x-s0"], "run-x")
    index = store.tasks(info)
    assert len(index.rows) == 6 and index.rows[4].ops[0] == ("new_skill_insert", True, "clean-mug", 2)
    assert index.record(index.rows[4]) == json.loads(lines[4])


def _curator_rollout(n: int) -> SimpleNamespace:
    """What `services.trainer.rollouts.curator.RolloutResult.log_row` gives (without importing torch for it)."""
    reward = RewardParts(task=0.5, fc=1.0, cnt=0.25, comp=-0.1, total=0.6 + n)
    return SimpleNamespace(log_row=lambda: {
        "rollout": n, "reward": reward.as_dict(), "advantage": 0.1 * n, "successes": [True, False],
        "decisions": [{"completion": '{"calls": []}', "readable_calls": 0, "calls": [], "parse_ok": True,
                       "judge": 0.0, "repo_tokens": 0, "context_tokens": 900}]})


def _agent_rollout(n: int) -> SimpleNamespace:
    """What `services.trainer.agent.AgentRolloutResult.log_row` gives."""
    return SimpleNamespace(log_row=lambda: {
        "rollout": n, "outcome": 0.5, "successes": [True, False],
        "tasks": [{"position": 0, "episodes": [1.0], "episode_keys": ["e0"], "info": {}}],
        "samples": [{"segment": "act", "position": 0, "episode": "e0", "advantage": 0.25, "completion_tokens": 7}]})


def test_a_training_run_written_by_the_metrics_writer_reads_back_through_the_contract(tmp_path):
    out = tmp_path / "train-run"
    folder = RunFolder(out)
    metrics = MetricsWriter(out, tensorboard=False)
    for step in (1, 2, 3):
        metrics.write(step, {"reward": {"total": 0.5 * step, "task": 0.25}, "success_rate": 0.5,
                             "ops": {"new_skill_insert": 0.5}, "time": {"rollout_s": 3.0}})
        groups = [SimpleNamespace(group_id="alfworld-pick-0000", rollouts=[_curator_rollout(0), _curator_rollout(1)]),
                  SimpleNamespace(group_id="alfworld-look-0001", rollouts=[_agent_rollout(0), _agent_rollout(1)])]
        assert write_rollouts(out, step, groups) == folder.rollouts(step)
    metrics.close()
    assert folder.rollouts(3).name == rollouts_file_name(3) == "step-000003.jsonl"

    # byte for byte what the writer always wrote
    assert folder.metrics.read_text().splitlines()[0] == json.dumps(
        {"step": 1, "reward": {"total": 0.5, "task": 0.25}, "success_rate": 0.5, "ops": {"new_skill_insert": 0.5},
         "time": {"rollout_s": 3.0}})
    assert folder.rollouts(1).read_text().splitlines()[0] == json.dumps(
        {"group": "alfworld-pick-0000", **_curator_rollout(0).log_row()}, ensure_ascii=False)

    rows = list(read_jsonl(folder.metrics, MetricsRow))
    assert [r.step for r in rows] == [1, 2, 3] and rows[1].reward == {"total": 1.0, "task": 0.25}
    assert read_metrics(folder.metrics) == [to_dict(r) for r in rows]
    rollouts = list(read_jsonl(folder.rollouts(2), RolloutRow))
    assert [(r.group, r.rollout) for r in rollouts] == [("alfworld-pick-0000", 0), ("alfworld-pick-0000", 1),
                                                        ("alfworld-look-0001", 0), ("alfworld-look-0001", 1)]
    assert rollouts[0].reward["total"] == 0.6 and rollouts[2].samples[0]["segment"] == "act"

    # the report's family panel: each step's groups by family, the curator's Eq. 1 total and the agent's outcome;
    # a group id without a family is left out, and so are steps metrics.jsonl does not have (redone on a resume)
    by_family = {"pick": [(1, 1.1), (2, 1.1), (3, 1.1)], "look": [(1, 0.5), (2, 0.5), (3, 0.5)]}  # (0.6 + 1.6) / 2
    assert reward_by_family(folder.rollouts_dir) == by_family
    assert reward_by_family(folder.rollouts_dir, {1, 3}) == {k: [v[0], v[2]] for k, v in by_family.items()}
    assert [task_family(g) for g in ("reasoning-gsm_symbolic-0130", "alfworld-pick_two-0003", "reasoning-00012",
                                     "pick-0")] == ["gsm_symbolic", "pick_two", None, None]
    with folder.rollouts(3).open("a") as f:
        f.write('{"group": "alfworld-pick-0000", "rollo')         # a live file's torn last line is skipped
    assert reward_by_family(folder.rollouts_dir) == by_family
    assert plot_report(folder.metrics, folder.train_report).stat().st_size > 0
    assert write_report(out) == (folder.train_report, folder.train_report_md)
    md = folder.train_report_md.read_text()
    assert md.startswith("# Training run `train-run`: 3 GRPO steps") and "![metrics](report.png)" in md
    assert "| 2 | alfworld-look-0001, alfworld-pick-0000 | 1.000 | task 0.250 |" in md
    assert "| pick | 1, 2, 3 | 1.100 | 1.100 | 1.100 |" in md and "| look | 1, 2, 3 | 0.500 |" in md
    # where the spread within groups comes from: the totals 0.6 and 1.6 (std 0.5), r_task 0.5 in both rollouts;
    # the agent's groups have no Eq. 1 reward
    assert "| pick | 3 | 0.500 | 3 of 3 | 0.500 | 0.000 |" in md and "| look | 3 |" not in md
    assert "weights not in config.json" in md
    # credit on later tasks: the curator's three groups only (the agent's successes are its own episodes')
    assert "| 1 (empty repo) | 3 | 0 (0%) | 100% |" in md and "| 2 | 3 | 0 (0%) | 0% |" in md
    # each term's part of the total's spread: covariance with the total over its std, the parts adding up to it
    # (here r_task and r_fc pull against each other); a group drawn twice in a step counts as two groups
    def row(n, task, fc, total):
        return RolloutRow(group="reasoning-chain_sum-0001", rollout=n,
                          reward={"task": task, "fc": fc, "cnt": 0.5, "comp": 0.2, "total": total})
    drawn = [row(0, 0.0, 1.0, 1.0), row(1, 1.0, 0.5, 1.5), row(0, 0.5, 0.5, 1.0), row(1, 0.5, 0.5, 1.0)]
    spread = spread_by_family({1: drawn}, {"task": 1.0, "fc": 1.0, "cnt": 0.1, "comp": 0.05})["chain_sum"]
    assert (spread["groups"], spread["flat_task"]) == (2, 1)
    assert spread["std"] == pytest.approx(0.25 / 2)          # std 0.25 and 0
    assert spread["parts"] == pytest.approx({"task": 0.5 / 2, "fc": -0.25 / 2, "cnt": 0.0, "comp": 0.0})
    assert sum(spread["parts"].values()) == pytest.approx(spread["std"])
    # credit on later tasks: per position, the groups whose rollouts disagreed (task 1: the executor's own noise);
    # a curator's rows only (an agent's successes are its own), a group drawn twice in a step counted twice
    def played(n, successes, group="reasoning-chain_sum-0002"):
        return RolloutRow(group=group, rollout=n, successes=successes, reward={"task": 0.5, "total": 1.0})
    positions = disagreement_by_position({1: [played(0, [1, 0, 1]), played(1, [1, 1, 0]), played(2, [1, 1]),
                                              played(0, [0, 1]), played(1, [0, 0])],
                                          2: [played(0, [0, 1]), played(1, [0, 1]),
                                              RolloutRow(group="alfworld-pick-0001", rollout=0, successes=[1]),
                                              RolloutRow(group="alfworld-pick-0001", rollout=1, successes=[0])]})
    assert [(p["position"], p["groups"], p["disagreed"]) for p in positions] == [(1, 3, 0), (2, 3, 2)]
    assert [p["success"] for p in positions] == pytest.approx([3 / 7, 5 / 7])
    assert disagreement_by_position({1: drawn}) == []    # no successes recorded: nothing to say

    metrics.truncate_after(2)                           # a resume from step 2 redoes step 3
    assert [r.step for r in read_jsonl(folder.metrics, MetricsRow)] == [1, 2]

    # the trainer's summary at the end, and the console's view of the folder
    folder.train_config.write_text(json.dumps({"steps": 3, "data": {"env": "alfworld"}, "output_dir": str(out)}))
    folder.summary.write_text(json.dumps(to_dict(TrainSummary.model_validate({"start_step": 0, "end_step": 2}))))
    assert json.loads(folder.summary.read_text()) == {"start_step": 0, "end_step": 2}
    info = RunStore(tmp_path).get(out.name)
    assert (info.kind, info.status, info.total, info.summary) == ("train", "done", 3, {"start_step": 0, "end_step": 2})
    assert [r["step"] for r in RunStore(tmp_path).steps(info).rows] == [1.0, 2.0]


def test_a_completion_cut_inside_a_character_is_recorded_not_fatal(tmp_path):
    """A served completion can end in a lone surrogate (an emoji cut at the token budget, decoded from a
    ``\\ud83c`` escape): UTF-8 cannot hold it, and writing it raised and ended the 0.5B learning run at step 4.
    It is recorded as U+FFFD, and the line reads back through the contract."""
    cut = SimpleNamespace(log_row=lambda: {**_curator_rollout(0).log_row(), "decisions": [
        {"completion": '{"calls": [{"name": "new_skill_insert", "arguments": {"content": "done \ud83c', "calls": []}]})
    groups = [SimpleNamespace(group_id="reasoning-gsm_symbolic-0001", rollouts=[cut, _curator_rollout(1)])]
    path = write_rollouts(tmp_path, 4, groups)
    rows = list(read_jsonl(path, RolloutRow))
    assert [r.rollout for r in rows] == [0, 1]
    assert to_dict(rows[0])["decisions"][0]["completion"].endswith('"done \ufffd')


def _evidence_folders() -> list[Path]:
    names = {"run.json", "summary.json", "tasks.jsonl", "tasks", "metrics.jsonl"}
    return sorted({p.parent for p in EVIDENCE.rglob("*") if p.name in names})


def test_there_is_evidence_to_read():
    assert len(_evidence_folders()) >= 5


@pytest.mark.parametrize("path", _evidence_folders(), ids=lambda p: str(p.relative_to(EVIDENCE)))
def test_every_run_folder_under_bench_evidence_reads_through_the_contract(path):
    folder = RunFolder(path)
    if folder.run_state.exists():
        RunState.model_validate_json(folder.run_state.read_bytes())
    if folder.summary.exists():
        RunSummary.model_validate_json(folder.summary.read_bytes())
    files = sorted(folder.tasks_dir.glob("*.json")) if folder.tasks_dir.exists() else []
    assert all(TASK_FILE.match(p.name) for p in files)
    for p in files:
        TaskEntry.model_validate_json(p.read_bytes())
    lines = [x for x in folder.tasks_log.read_bytes().splitlines() if x.strip()] if folder.tasks_log.exists() else []
    for line in lines:
        TaskEntry.model_validate_json(line)
    if folder.metrics.exists():
        for line in folder.metrics.read_bytes().splitlines():
            if line.strip():
                MetricsRow.model_validate_json(line)
    assert len(read_tasks(folder)) == (len(files) or len(lines))


def test_no_module_but_the_contract_spells_a_run_folder_file_name():
    """Writers and readers take the names from `skillos.protocol.runs` (docstrings and comments may name them)."""
    import ast

    root = Path(__file__).resolve().parents[1]
    names = ("run.json", "tasks.jsonl", "metrics.jsonl", "summary.json", "summary.md", "success_over_stream.png",
             "repo_size.png", "op_mix.png")
    offenders = []
    for folder in ("skillos", "services", "harness", "bench", "deploy"):
        for path in sorted((root / folder).rglob("*.py")):
            if path == root / "skillos" / "protocol" / "runs.py":
                continue
            tree = ast.parse(path.read_text(), str(path))
            docstrings = {id(n.body[0].value) for n in ast.walk(tree)
                          if isinstance(n, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef))
                          and n.body and isinstance(n.body[0], ast.Expr) and isinstance(n.body[0].value, ast.Constant)}
            offenders += [f"{path.relative_to(root)}:{n.lineno} {n.value!r}" for n in ast.walk(tree)
                          if isinstance(n, ast.Constant) and isinstance(n.value, str) and id(n) not in docstrings
                          and any(name in n.value for name in names)]
    assert offenders == []


def test_adapter_drift_is_the_lora_update_against_the_weight_it_adapts(tmp_path, monkeypatch):
    """||scale B A|| / ||W|| per adapted module (peft's scale: alpha over the module's rank, read from the tensors),
    from peft's files and the base's safetensors; a module the base does not have, or of another shape, is
    counted apart; None when the base is not there; a damaged adapter is a row of the report, not a crash."""
    torch = pytest.importorskip("torch")
    from safetensors.torch import save_file

    base = tmp_path / "base"
    base.mkdir()
    save_file({"model.layers.0.self_attn.q_proj.weight": torch.eye(4) * 2.0,      # norm 4
               "model.layers.0.self_attn.v_proj.weight": torch.ones(4, 4),        # norm 4
               "model.layers.0.self_attn.k_proj.weight": torch.ones(8, 8)}, str(base / "model.safetensors"))
    run = tmp_path / "run"
    adapter = RunFolder(run).adapter_dir(5)
    adapter.mkdir(parents=True)
    a, b = torch.zeros(2, 4), torch.zeros(4, 2)
    a[0, 0], b[0, 0] = 1.0, 0.5                    # B A has one entry, 0.5; scale 8 / rank 2 = 4: ||dW|| 2
    prefix = "base_model.model.model.layers.0.self_attn."
    save_file({prefix + "q_proj.lora_A.weight": a, prefix + "q_proj.lora_B.weight": b,
               prefix + "v_proj.lora_A.weight": a.clone(), prefix + "v_proj.lora_B.weight": torch.zeros(4, 2),
               prefix + "k_proj.lora_A.weight": a.clone(), prefix + "k_proj.lora_B.weight": b.clone(),  # 4x4 vs 8x8
               prefix + "o_proj.lora_A.weight": a.clone(), prefix + "o_proj.lora_B.weight": b.clone()},  # no o_proj
              str(adapter / "adapter_model.safetensors"))
    # the config's r is not the tensors' (peft's rank_pattern): the scale is taken from the tensors
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "base_model_name_or_path":
                                                              str(base)}))
    assert adapter_drift(adapter) == pytest.approx({"modules": 2, "missing": 2, "mean": (2 / 4 + 0) / 2,
                                                    "max": 2 / 4})
    assert adapter_drift(adapter, tmp_path / "elsewhere") is None
    # trained on a GGUF read directly (peft names its folder): the torch copy converted from it in the model cache
    from skillos.models.store import converted_dir

    monkeypatch.setenv("SKILLOS_MODELS_DIR", str(tmp_path / "models"))
    gguf_dir = tmp_path / "models" / "some-model"
    gguf_dir.mkdir(parents=True)
    (gguf_dir / "model.gguf").write_bytes(b"GGUF")
    converted_dir(gguf_dir, "model.gguf").mkdir(parents=True)
    (base / "model.safetensors").rename(converted_dir(gguf_dir, "model.gguf") / "model.safetensors")
    assert adapter_drift(adapter, tmp_path / "elsewhere") is None   # a base named explicitly is taken as is
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "base_model_name_or_path":
                                                              str(gguf_dir)}))
    assert adapter_drift(adapter) is None                       # no torch/ folder: nothing converted here
    (converted_dir(gguf_dir, "model.gguf") / "model.safetensors").rename(base / "model.safetensors")
    torch_dir = converted_dir(gguf_dir, "model.gguf") / "torch"
    torch_dir.mkdir()
    (base / "model.safetensors").rename(torch_dir / "model.safetensors")
    assert adapter_drift(adapter)["mean"] == pytest.approx(0.25)
    (adapter / "adapter_config.json").write_text(json.dumps({"r": 4, "lora_alpha": 8, "base_model_name_or_path":
                                                              str(torch_dir)}))
    other = tmp_path / "other"
    other.mkdir()
    save_file({"lm_head.weight": torch.ones(4, 4)}, str(other / "model.safetensors"))
    assert adapter_drift(adapter, other) is None

    # in the report: a row per kept adapter, a damaged one said as such, a half-written one not listed
    folder = RunFolder(run)
    damaged = folder.adapter_dir(10)
    damaged.mkdir()
    (damaged / "adapter_config.json").write_text("{not json")
    (damaged / "adapter_model.safetensors").write_bytes(b"")
    (run / "adapters" / "step-000015.incoming").mkdir()
    assert [p.name for p in folder.adapter_dirs()] == ["step-000005", "step-000010"]
    md = render_report(folder, [], {})
    assert "| step-000005 | 2 (2 not in the base) | 2.50e-01 | 5.00e-01 |" in md
    assert "| step-000010 | left out, unreadable (JSONDecodeError" in md and "incoming" not in md
