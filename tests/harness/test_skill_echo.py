"""bench/skill_echo.py: a reasoning run's usage read off its records (skill texts replayed from the curator's
calls, the No Memory answer to the same problem as the control)."""

from __future__ import annotations

import json

from bench.skill_echo import curated_texts, echo_line

PROBLEM = "How many times does the letter e appear in the text: the cheese?"
STEPS_V1 = ["Read the text and identify all occurrences of the letter.", "Say a number."]
STEPS_V2 = ["Read the text and identify all occurrences of the letter.",
            "Count these occurrences and give the count as the answer."]
FOLLOWS = ("I read the text and identify all occurrences of the letter e. I count these occurrences and give "
           "the count.")
PLAIN = "There are three."


def _call(name: str, skill: str = "count-letter", steps: list[str] | None = None, **args) -> dict:
    arguments = {"skill_name": skill, **args}
    if steps is not None:
        arguments |= {"description": "Count a letter.", "steps": steps}
    return {"name": name, "arguments": arguments}


def _op(name: str, skill: str = "count-letter", applied: bool = True, version: int | None = 1) -> dict:
    return {"name": name, "skill_name": skill, "applied": applied, "version": version if applied else None}


def _rec(pos: int, method: str, success: bool, thought: str, retrieved=(), calls=(), ops=()) -> dict:
    return {"position": pos, "task_id": f"t{pos}", "method": method, "repo": "r1", "success": success,
            "instruction": PROBLEM, "retrieved": [{"name": n, "version": v} for n, v in retrieved],
            "curator_completion": json.dumps({"calls": list(calls)}) if calls else "", "ops": list(ops),
            "turns": [{"observation": PROBLEM, "thought": thought, "action": "3"}]}


def test_each_answer_is_measured_against_the_text_it_was_shown_and_the_control_on_the_same_skills():
    a = [_rec(0, "skillos", False, PLAIN, calls=[_call("new_skill_insert", steps=STEPS_V1)],
              ops=[_op("new_skill_insert")]),
         # a refused update writes nothing; the applied one after it rewrites the skill
         _rec(1, "skillos", True, FOLLOWS, retrieved=[("count-letter", 1)],
              calls=[_call("skill_update", steps=["x y z w"]), _call("skill_update", steps=STEPS_V2)],
              ops=[_op("skill_update", applied=False), _op("skill_update", version=2)]),
         _rec(2, "skillos", True, FOLLOWS, retrieved=[("count-letter", 2)]),
         _rec(3, "skillos", False, PLAIN, retrieved=[("count-letter", 2)])]
    shown, mismatched = curated_texts(a)
    assert mismatched == 0 and shown[("r1", 0)] == {}
    assert "Say a number" in shown[("r1", 1)]["count-letter"]
    assert "Count these occurrences" in shown[("r1", 2)]["count-letter"]
    b = [_rec(i, "none", False, FOLLOWS if i == 3 else PLAIN) for i in range(4)]
    line = echo_line("skillos", "none", list(zip(a, b, strict=True)))
    # task 1 was shown the first text, of which the answer repeats one step only; task 2 the second, both
    assert "in 1 of 3 problems (33.3 %)" in line
    assert "for the same skills in 1 (33.3 %: chance wording)" in line   # the control answer to task 3
    assert "success when it repeats them 100.0 % vs 50.0 % when not." in line


def test_replay_goes_by_name_through_deletes_renames_and_normalised_names():
    a = [_rec(0, "skillos", False, PLAIN, calls=[_call("new_skill_insert", "Count Letter", STEPS_V2)],
              ops=[_op("new_skill_insert")]),   # the repo stored the name normalised
         _rec(1, "skillos", False, PLAIN, retrieved=[("count-letter", 1)], calls=[_call("skill_delete")],
              ops=[_op("skill_delete", version=2)]),
         # inserted again: version 1 once more, another text (content without frontmatter)
         _rec(2, "skillos", False, PLAIN, calls=[_call("new_skill_insert", content="Say a number out loud now.")],
              ops=[_op("new_skill_insert")]),
         _rec(3, "skillos", False, PLAIN, retrieved=[("count-letter", 1)],
              calls=[_call("skill_update", new_name="guess-count")], ops=[_op("skill_update", "guess-count", version=2)]),
         _rec(4, "skillos", False, PLAIN, retrieved=[("count-letter", 1), ("guess-count", 2)])]
    shown, _ = curated_texts(a)
    assert "Count these occurrences" in shown[("r1", 1)]["count-letter"]
    assert shown[("r1", 3)] == {"count-letter": "Say a number out loud now."}
    assert shown[("r1", 4)] == {"guess-count": "Say a number out loud now."}


def test_ops_that_do_not_line_up_with_the_calls_are_counted_not_guessed():
    a = [_rec(0, "skillos", False, PLAIN, calls=[_call("new_skill_insert", steps=STEPS_V2)],
              ops=[_op("new_skill_insert"), _op("new_skill_insert", "other")]),
         _rec(1, "skillos", True, FOLLOWS, retrieved=[("count-letter", 1)])]
    shown, mismatched = curated_texts(a)
    assert mismatched == 1 and shown[("r1", 1)] == {}
    line = echo_line("skillos", "none", [(a[1], _rec(1, "none", False, PLAIN))], all_a=a)
    assert line.startswith("skillos: no answer")


def test_skills_written_on_unpaired_tasks_are_replayed():
    a = [_rec(0, "skillos", False, PLAIN, calls=[_call("new_skill_insert", steps=STEPS_V2)],
              ops=[_op("new_skill_insert")]),
         _rec(1, "skillos", True, FOLLOWS, retrieved=[("count-letter", 1)])]
    pairs = [(a[1], _rec(1, "none", False, PLAIN))]   # task 0 has no No Memory record yet
    assert "in 1 of 1 problems" in echo_line("skillos", "none", pairs, all_a=a)
    assert echo_line("skillos", "none", pairs).startswith("skillos: no answer")


def test_gold_answers_are_measured_against_the_gold_files():
    thought = ("Take the words of the text one at a time. For each word, write its letters separated by spaces. "
               "Add up the numbers of all the words.")
    a = _rec(0, "gold", True, thought, retrieved=[("count-letter-in-text", 1)])
    line = echo_line("gold", "none", [(a, _rec(0, "none", False, PLAIN))])
    assert "in 1 of 1 problems" in line and "same skills in 0 (0.0 %" in line
