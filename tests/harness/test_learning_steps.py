"""bench_learning's ALFWorld step measure: the task's object taken and the change its task asks for made,
read off an episode's own turns (what a procedure would have the executor do, skill or no skill)."""

from __future__ import annotations

from bench.bench_learning import _steps_line, alfworld_steps

WELCOME = "-= Welcome to TextWorld, ALFRED! =- You are in the middle of a room."


def _record(instruction: str, steps: list[tuple[str, str]], success: bool = False, last_valid: bool = True) -> dict:
    """A record as the harness writes it: each turn's observation is what the agent saw *before* its action
    (the result of the action before it), so the last action's result is not kept."""
    observations = ([WELCOME] + [result for _, result in steps[:-1]]) if steps else []
    turns = [{"observation": o, "action": a, "valid": True} for o, (a, _) in zip(observations, steps, strict=True)]
    if turns:
        turns[-1]["valid"] = last_valid
    return {"instruction": instruction, "success": success, "turns": turns}


def test_a_cool_task_done_counts_the_object_and_the_change():
    r = _record("put a cool apple in countertop.", [
        ("go to diningtable 1", "You arrive at diningtable 1. On the diningtable 1, you see a apple 1."),
        ("take apple 1 from diningtable 1", "You pick up the apple 1 from the diningtable 1."),
        ("go to fridge 1", "You arrive at fridge 1. The fridge 1 is closed."),
        ("cool apple 1 with fridge 1", "You cool the apple 1 using the fridge 1."),
        ("go to countertop 1", "You arrive at countertop 1."),
    ], success=True)
    assert alfworld_steps(r) == (True, True)


def test_a_change_on_the_last_turn_is_read_from_its_valid_action():
    steps = [("take apple 1 from diningtable 1", "You pick up the apple 1 from the diningtable 1."),
             ("go to fridge 1", "You arrive at fridge 1."),
             ("cool apple 1 with fridge 1", "(not recorded)")]
    assert alfworld_steps(_record("put a cool apple in countertop.", steps)) == (True, True)
    assert alfworld_steps(_record("put a cool apple in countertop.", steps, last_valid=False)) == (True, False)


def test_another_object_or_another_change_does_not_count():
    r = _record("put a hot apple in countertop.", [
        ("take tomato 1 from diningtable 1", "You pick up the tomato 1 from the diningtable 1."),
        ("cool tomato 1 with fridge 1", "You cool the tomato 1 using the fridge 1."),
        ("take apple 2 from countertop 1", "You pick up the apple 2 from the countertop 1."),
        ("cool apple 2 with fridge 1", "You cool the apple 2 using the fridge 1."),   # cooled, not heated
        ("go to countertop 1", "You arrive at countertop 1."),
    ])
    assert alfworld_steps(r) == (True, False)


def test_a_task_without_a_change_has_none_and_the_line_counts_only_those_that_ask():
    pick = _record("put some book on sidetable.", [("take book 1 from bed 1", "You pick up the book 1 from the bed 1."),
                                                   ("go to sidetable 1", "You arrive at sidetable 1.")], success=True)
    clean = _record("put a clean mug in coffeemachine.", [
        ("take mug 1 from cabinet 2", "You pick up the mug 1 from the cabinet 2."),
        ("clean mug 1 with sinkbasin 1", "You clean the mug 1 using the sinkbasin 1."),
        ("go to coffeemachine 1", "You arrive at coffeemachine 1."),
    ])
    assert alfworld_steps(pick) == (True, None)
    line = _steps_line("none", [pick, clean, _record("put a clean mug in coffeemachine.", [])])
    assert "taken in 2 of 3 episodes" in line
    assert "made in 1 of 2 (50.0 %), success when made 0.0 %" in line
