"""bench/skill_echo.py: a reasoning run's usage read off its records (skill texts replayed from the curator's
calls, the No Memory answer to the same problem as the control)."""

from __future__ import annotations

import json

from bench.skill_echo import curated_texts, echo_line

PROBLEM = "How many times does the letter e appear in the text: the cheese?"
STEPS_V1 = ["Read the text and identify all occurrences of the letter.", "Say a number."]
STEPS_V2 = ["Read the text and identify all occurrences of the letter.",
            "Count these occurrences and give the count as the answer."]


def _call(name: str, steps: list[str]) -> dict:
    return {"name": name, "arguments": {"skill_name": "count-letter", "description": "Count a letter.",
                                        "steps": steps}}


def _rec(pos: int, method: str, success: bool, thought: str, retrieved=(), calls=(), ops=()) -> dict:
    return {"position": pos, "task_id": f"t{pos}", "method": method, "repo": "r1", "success": success,
            "instruction": PROBLEM, "retrieved": [{"name": n, "version": v} for n, v in retrieved],
            "curator_completion": json.dumps({"calls": list(calls)}) if calls else "", "ops": list(ops),
            "turns": [{"observation": PROBLEM, "thought": thought, "action": "3"}]}


FOLLOWS = ("I read the text and identify all occurrences of the letter e. I count these occurrences and give "
           "the count.")
PLAIN = "There are three."


def test_versions_are_replayed_from_the_calls_and_answers_measured_against_the_version_shown():
    a = [_rec(0, "skillos", False, PLAIN, calls=[_call("new_skill_insert", STEPS_V1)],
              ops=[{"name": "new_skill_insert", "skill_name": "count-letter", "applied": True, "version": 1}]),
         # a refused update writes no version; the next applied one writes version 2
         _rec(1, "skillos", True, FOLLOWS, retrieved=[("count-letter", 1)],
              calls=[_call("skill_update", ["x"]), _call("skill_update", STEPS_V2)],
              ops=[{"name": "skill_update", "skill_name": "count-letter", "applied": False, "version": None},
                   {"name": "skill_update", "skill_name": "count-letter", "applied": True, "version": 2}]),
         _rec(2, "skillos", True, FOLLOWS, retrieved=[("count-letter", 2)]),
         _rec(3, "skillos", False, PLAIN, retrieved=[("count-letter", 2)])]
    texts = curated_texts(a)
    assert sorted(texts) == [("r1", "count-letter", 1), ("r1", "count-letter", 2)]
    assert "Count these occurrences" in texts[("r1", "count-letter", 2)]
    b = [_rec(i, "none", False, FOLLOWS if i == 3 else PLAIN) for i in range(4)]
    line = echo_line("skillos", "none", list(zip(a, b, strict=True)))
    # task 1 was shown version 1, of which the answer repeats one step only; task 2 version 2, both steps
    assert "in 1 of 3 problems (33.3 %)" in line
    assert "for the same skills in 1 (33.3 %" in line   # the control answer to task 3 repeats them
    assert "success when it repeats them 100.0 % vs 50.0 % when not" in line


def test_gold_answers_are_measured_against_the_gold_files():
    thought = ("Take the words of the text one at a time. For each word, write its letters separated by spaces. "
               "Add up the numbers of all the words.")
    a = [_rec(0, "gold", True, thought, retrieved=[("count-letter-in-text", 1)])]
    line = echo_line("gold", "none", [(a[0], _rec(0, "none", False, PLAIN))])
    assert "in 1 of 1 problems" in line and "same skills in 0 (0.0 %" in line
