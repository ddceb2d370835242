"""Stream bookkeeping without services: task order, skill-usage attribution, summary and plots."""

from __future__ import annotations

import json

import pytest

from harness.report import StreamRun, summarize, summary_markdown, write_plots
from harness.runner import order_tasks
from skillos.protocol.executor import EpisodeResponse, RetrievedSkill, Timing, TokenCount, Turn
from skillos.stream import OpRecord, TaskRecord, TaskSpec, skills_used
from skillos.stream.step import echoed_steps


def _tasks():
    return [TaskSpec("a", "clean"), TaskSpec("b", "heat"), TaskSpec("c", "clean"), TaskSpec("d", "heat"),
            TaskSpec("e", "look")]


def test_grouped_order_puts_related_tasks_together_and_keeps_split_order():
    assert [t.id for t in order_tasks(_tasks(), "grouped", 0)] == ["a", "c", "b", "d", "e"]


def test_shuffled_order_depends_on_seed_only():
    one = [t.id for t in order_tasks(_tasks(), "shuffled", 1)]
    assert one == [t.id for t in order_tasks(_tasks(), "shuffled", 1)]
    assert sorted(one) == ["a", "b", "c", "d", "e"]
    assert any([t.id for t in order_tasks(_tasks(), "shuffled", s)] != one for s in range(2, 8))


def _episode(turns, skills):
    return EpisodeResponse(episode_id="e", env="alfworld", task_id="t", success=False, steps=len(turns),
                           stop_reason="max_turns", turns=turns, skills=skills, tokens=TokenCount(),
                           timing=Timing())


def _turn(action, thought="", valid=True):
    return Turn(index=0, observation="o", thought=thought, action=action, valid=valid, parse="exact")


def test_skill_counts_as_used_when_cited_or_followed():
    skills = [RetrievedSkill(name="clean-then-place", body="1. go to sinkbasin 1\n2. clean apple 2 with sinkbasin 1"),
              RetrievedSkill(name="heat-food", body="use the microwave"),
              RetrievedSkill(name="cool-things", body="fridge")]
    turns = [_turn("clean apple 1 with sinkbasin 1"), _turn("look", thought="I follow cool things now"),
             _turn("use microwave 1", valid=False)]
    assert skills_used(_episode(turns, skills)) == ["clean-then-place", "cool-things"]
    assert skills_used(_episode([_turn("look")], skills)) == []


def test_single_turn_answer_counts_a_skill_used_when_it_repeats_two_of_its_steps():
    skill = RetrievedSkill(name="count-letter", body="Use when asked how many times a letter appears.\n"
                           "1. Read the text and identify all occurrences of the letter.\n"
                           "2. Count these occurrences and give the count as the answer.")
    problem = "How many times does the letter e appear in the text: the cheese?"
    follows = _turn("3", thought="I read the text and identify all occurrences of the letter e. Then I count "
                    "these occurrences and give the count.")
    restates = _turn("3", thought="How many times does the letter e appear in the text? I see three.")
    def reasoning(turns):
        return _episode(turns, [skill]).model_copy(update={"instruction": problem, "env": "reasoning"})

    assert echoed_steps(follows.thought, skill.body, problem) == 2
    assert skills_used(reasoning([follows])) == ["count-letter"]
    # the problem's own words ("how many times ... the letter") are no step of the skill's being followed
    assert echoed_steps(restates.thought, skill.body, problem) == 0
    assert skills_used(reasoning([restates])) == []
    # one step repeated is not enough; ALFWorld (a one-turn episode too) keeps the action rules alone
    assert skills_used(reasoning([_turn("3", thought="I read the text and identify all occurrences of it")])) == []
    assert skills_used(_episode([follows], [skill])) == []
    # one word run shared by two steps counts for one of them
    shared = "1. Identify all occurrences of the letter.\n2. Then identify all occurrences of the letter again."
    assert echoed_steps("I identify all occurrences of the letter.", shared, problem) == 1


def _record(pos, success, ttype, used=(), retrieved=(), ops=(), size=None, seed=0, method="skillos"):
    return TaskRecord(position=pos, task_id=f"t{pos}", task_type=ttype, instruction="", method=method, seed=seed,
                      success=success, steps=10, used=list(used), retrieved=[{"name": n} for n in retrieved],
                      ops=list(ops), validity_rate=1.0 if ops else None, repo_size=size)


def test_summary_metrics_and_plots(tmp_path):
    ins = OpRecord("new_skill_insert", "s1", True, True, None)
    bad = OpRecord(None, None, False, False, "unreadable")
    sk = StreamRun("skillos", 0, "r", [
        _record(0, False, "clean", ops=[ins, bad], size=1),
        _record(1, True, "clean", used=["s1"], retrieved=["s1"], size=1),
        _record(2, False, "heat", retrieved=["s1"], size=1)])
    base = StreamRun("none", 0, None, [_record(i, i == 2, t, method="none")
                                       for i, t in enumerate(["clean", "clean", "heat"])])
    summary = summarize([sk, base], {"env": "alfworld", "split": "valid_seen", "tasks": 3, "seeds": 1})
    a = summary["methods"]["skillos"]["aggregate"]
    assert a["sr_per_type"]["clean"]["mean"] == 0.5 and a["sr_per_type"]["heat"]["mean"] == 0.0
    assert a["sr_macro"]["mean"] == 0.25
    assert a["usage_rate"]["mean"] == pytest.approx(1 / 3, abs=1e-3) and a["success_when_used"]["mean"] == 1.0
    assert a["coverage"]["mean"] == 1.0 and a["skills_per_example"]["mean"] == pytest.approx(1 / 3, abs=1e-3)
    assert a["op_mix"] == {"new_skill_insert:applied": 1, "unreadable:refused": 1}
    assert summary["methods"]["none"]["aggregate"]["sr"]["mean"] == pytest.approx(1 / 3, abs=1e-3)
    md = summary_markdown(summary)
    assert "| skillos |" in md and "| none |" in md and "usage rate" in md
    # the first paragraph says the comparison with its N, and that 3 games tell nothing
    first = md.split("\n\n")[1]
    assert first.startswith("In short: SkillOS won 1 of 3; No Memory won 1 of 3") and "proves nothing either way" in first and "RESULTS-learning" in first
    json.dumps(summary)
    files = write_plots([sk, base], tmp_path)
    assert [f.name for f in files] == ["success_over_stream.png", "repo_size.png", "op_mix.png"]
    for f in files:
        assert f.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and f.stat().st_size > 5000


def test_run_log_appends_a_line_per_task_and_records_the_status(tmp_path):
    from harness.report import RunLog

    live = RunLog(tmp_path, {"run_id": "run-x", "env": "alfworld"}, total=3, repos=["run-x-s0"])
    state = json.loads((tmp_path / "run.json").read_text())
    assert state["status"] == "running" and state["total"] == 3 and state["repos"] == ["run-x-s0"]
    assert (tmp_path / "tasks.jsonl").read_text() == ""
    ins = OpRecord("new_skill_insert", "s1", True, True, None, version=1)
    live.task(_record(0, True, "clean", ops=[ins], size=1))
    live.task(_record(1, False, "heat", method="none"))
    lines = (tmp_path / "tasks.jsonl").read_text().splitlines()
    assert [json.loads(x)["position"] for x in lines] == [0, 1]
    assert json.loads(lines[0])["ops"][0] == {"name": "new_skill_insert", "skill_name": "s1", "valid": True,
                                              "applied": True, "reason": None, "version": 1}
    live.finish()
    state = json.loads((tmp_path / "run.json").read_text())
    assert state["status"] == "done" and state["finished_at"] >= state["started_at"] and state["error"] is None
    RunLog(tmp_path / "b", {}, total=1, repos=[]).finish(error="RuntimeError: boom")
    assert json.loads((tmp_path / "b" / "run.json").read_text())["status"] == "failed"


def test_methods_table_pairs_every_method_with_no_memory_and_skillos(tmp_path):
    from bench.bench_methods import table

    wins = {"none": [0, 0, 0, 1], "skillos": [1, 0, 0, 1], "memp": [1, 1, 1, 1]}
    (tmp_path / "tasks").mkdir()
    for method, outcome in wins.items():
        for seed in (0, 1):
            for pos, won in enumerate(outcome):
                r = _record(pos, bool(won), "clean", seed=seed, method=method)
                r.method_info = {"writer_tokens": 100} if method == "memp" else {}
                (tmp_path / "tasks" / f"{method}-seed{seed}-{pos:04d}.json").write_text(json.dumps(r.to_dict()))
    text = table(tmp_path)
    rows = {line.split(" | ")[0].strip("| "): line for line in text.splitlines() if line.startswith("| ")}
    assert rows["none"].split(" | ")[2] == "25.0" and rows["memp"].split(" | ")[2] == "100.0"
    # memp vs none: 6 of 8 pairs discordant in memp's favour; vs skillos: 4 of 8
    assert "+75.0 [" in rows["memp"].split(" | ")[7] and "p = 0.031" in rows["memp"].split(" | ")[7]
    assert "+50.0 [" in rows["memp"].split(" | ")[8]
    assert "+ 100" in rows["memp"] and rows["none"].split(" | ")[7] == "–"
    assert (tmp_path / "methods.md").read_text() == text
    assert "score" not in text      # success only: the env is not a graded one


def test_methods_table_pairs_webshop_scores_too(tmp_path):
    """A graded env: the score's paired Δ next to success's (success alone is all zeros on a small model)."""
    from bench.bench_methods import table

    scores = {"none": [0.5, 0.0], "skillos": [0.0, 0.0], "sapo": [1.0, 0.5], "memp": [1.0, 0.0]}
    (tmp_path / "tasks").mkdir()
    (tmp_path / "summary.json").write_text(json.dumps({"config": {"env": "webshop", "split": "test"}}))
    for method, rewards in scores.items():
        for pos, reward in enumerate(rewards):
            r = _record(pos, reward == 1.0, "fashion", method=method)
            r.reward = reward
            (tmp_path / "tasks" / f"{method}-seed0-{pos:04d}.json").write_text(json.dumps(r.to_dict()))
    text = table(tmp_path)
    assert "score Δ vs none" in text
    cells = {line.split(" | ")[0].strip("| "): line.strip("| ").split(" | ")
             for line in text.splitlines() if line.startswith("| ") and "---" not in line}
    assert cells["sapo"][3] == "75.0"                       # the mean score, in %
    assert cells["sapo"][10].startswith("+50.0 [")         # vs none: (+0.5 + +0.5) / 2
    assert cells["sapo"][11].startswith("+75.0 [")         # vs skillos: (+1.0 + +0.5) / 2
    assert cells["skillos"][10].startswith("-25.0 [") and cells["skillos"][11] == "–"
    assert "p =" in cells["memp"][9] and "p =" not in cells["memp"][11]   # McNemar for success only
