"""Worked examples (skillos.worked_examples): a won episode compressed to the actions that mattered, which
examples a skill keeps, which one the executor is shown and in what words; on ALFWorld's own texts (the
expert's valid_train games, the committed records of won episodes) and hand-written cases per env."""

from __future__ import annotations

import json

import pytest

from skillos.acting.demos import DATA, expert_examples
from skillos.acting.options import ActingOptions
from skillos.acting.prompt import agent_messages, shown_examples
from skillos.protocol.executor import RetrievedSkill
from skillos.worked_examples import (
    MAX_PER_SKILL,
    ExampleStep,
    WorkedExample,
    compress,
    examples_block,
    merge,
    render,
    select,
    task_kind,
)
from skillos.worked_examples.follow import follow_share
from skillos.worked_examples.model import MAX_STEPS
from tests.conftest import ROOT

CLEAN = [  # a won clean game of the record (valid_seen), as the executor played it: a search, then the task
    {"observation": "-= Welcome to TextWorld, ALFRED! =-\n\nYou are in the middle of a room. Looking quickly around "
                    "you, you see a cabinet 1, a countertop 1, a countertop 2, a sinkbasin 1.", "action": "go to cabinet 1"},
    {"observation": "You arrive at cabinet 1. The cabinet 1 is closed.", "action": "open cabinet 1"},
    {"observation": "You open the cabinet 1. The cabinet 1 is open. In it, you see nothing.", "action": "look"},
    {"observation": "You are facing the cabinet 1.", "action": "go to countertop 2"},
    {"observation": "You arrive at countertop 2. On the countertop 2, you see a bread 1, a butterknife 1.",
     "action": "take butterknife 1 from countertop 2"},
    {"observation": "You pick up the butterknife 1 from the countertop 2.", "action": "move butterknife 1 to countertop 2"},
    {"observation": "You move the butterknife 1 to the countertop 2.", "action": "take butterknife 1 from countertop 2"},
    {"observation": "You pick up the butterknife 1 from the countertop 2.", "action": "go to sinkbasin 1"},
    {"observation": "You arrive at sinkbasin 1. On the sinkbasin 1, you see nothing.",
     "action": "clean butterknife 1 with sinkbasin 1"},
    {"observation": "You clean the butterknife 1 using the sinkbasin 1.", "action": "examine sinkbasin 1", "valid": False},
    {"observation": "Nothing happens.", "action": "go to countertop 1"},
    {"observation": "You arrive at countertop 1. On the countertop 1, you see a cup 1.",
     "action": "move butterknife 1 to countertop 1"},
]
TASK = "put a clean butterknife in countertop."


def test_a_won_alfworld_game_keeps_the_path_and_names_the_search():
    e = compress("alfworld", TASK, CLEAN, trajectory="run:3:valid_seen/x")
    assert e.actions() == ["go to countertop 2", "take butterknife 1 from countertop 2", "go to sinkbasin 1",
                           "clean butterknife 1 with sinkbasin 1", "go to countertop 1",
                           "move butterknife 1 to countertop 1"]
    assert e.steps[0].note == "searched first: cabinet 1"          # the visit where nothing was done
    assert e.steps[0].observation.startswith("You arrive at countertop 2. On the countertop 2, you see a bread 1")
    assert e.steps[-1].observation == "(task done)"
    assert (e.kind, e.taken, e.source, e.env) == ("clean", 12, "env", "alfworld") and len(e.id) == 12
    assert compress("alfworld", TASK, CLEAN).id == e.id                 # the same solution, the same example
    text = render(e)
    assert text.startswith(f"Task: {TASK}\n(searched first: cabinet 1)\n> go to countertop 2\n")
    assert text.endswith("> move butterknife 1 to countertop 1\n(task done)")


def test_a_gateway_agent_playing_alfworld_is_compressed_as_alfworld():
    """The gateway's turns: the observation messages carry the list of actions after the first line, and the
    last turn is the reported outcome (no action): the action before it won."""
    turns = [{"observation": t["observation"] + "\nActions: go to cabinet 1, look", "action": t["action"]}
             for t in CLEAN] + [{"observation": "The agent reported the outcome: the task succeeded.", "action": ""}]
    e = compress("gateway", TASK, turns, source="caller", trajectory="trj-1")
    assert e.env == "alfworld" and e.source == "caller" and e.actions()[-1] == "move butterknife 1 to countertop 1"
    assert all("Actions:" not in s.observation for s in e.steps) and e.steps[-1].observation == "(task done)"


def test_other_envs():
    web = compress("webshop", "buy a blue shirt", [
        {"observation": "Search", "action": "search[shirt]"},
        {"observation": "Page 1 [SEP] nothing blue", "action": "search[blue cotton shirt]"},
        {"observation": "Page 1 [SEP] B07X1 [SEP] Blue Shirt", "action": "click[b07x1]"},
        {"observation": "size [SEP] large", "action": "click[large]"},
        {"observation": "Buy Now", "action": "click[buy now]"}])
    assert web.actions() == ["search[blue cotton shirt]", "click[b07x1]", "click[large]", "click[buy now]"]
    assert web.kind == ""
    maths = compress("reasoning", "What is 2+3?", [{"observation": "What is 2+3?", "action": "5", "thought": "2+3=5"}])
    assert render(maths) == "Problem: What is 2+3?\nReasoning: 2+3=5\nAnswer: 5"
    chat = compress("gateway", "summarise the log", [
        {"observation": "here is the log", "action": "read_file(log)"},
        {"observation": "error: refused", "action": "read_file(log)"},
        {"observation": "error: refused", "action": "read_file(log)"},
        {"observation": "contents", "action": "Done: 3 errors"}])
    assert chat.actions() == ["read_file(log)", "read_file(log)", "Done: 3 errors"]   # the exact repeat dropped
    assert compress("alfworld", TASK, []) is None and compress("alfworld", "", CLEAN) is None


def test_long_episodes_keep_the_start_and_the_end_within_the_bounds():
    turns = [{"observation": f"You arrive at shelf {i}. On the shelf {i}, you see a vase {i}.",
              "action": f"take vase {i} from shelf {i}"} for i in range(60)]
    e = compress("alfworld", "put a vase in shelf.", turns)
    assert len(e.steps) == MAX_STEPS and "more actions" in e.steps[MAX_STEPS // 3].note
    assert e.actions()[0] == "take vase 0 from shelf 0" and e.actions()[-1] == "take vase 59 from shelf 59"


def test_kinds_are_read_off_the_task_sentence():
    """Every task of the committed 60-game record: the kind read off the sentence is the env's task type."""
    records = [json.loads(line) for line in (ROOT / "bench/evidence/alfworld-valid_seen-60/tasks.jsonl").open()]
    assert len(records) > 100
    for r in records:
        assert task_kind("alfworld", r["instruction"]) == r["task_type"], r["instruction"]
    assert task_kind("webshop", "put a clean mug") == ""


def test_every_won_episode_of_the_record_compresses_within_the_bounds():
    records = [json.loads(line) for line in (ROOT / "bench/evidence/alfworld-valid_seen-60/tasks.jsonl").open()]
    won = [r for r in records if r["success"]]
    assert len(won) > 50
    for r in won:
        e = compress("alfworld", r["instruction"], r["turns"])
        assert e is not None and 1 <= len(e.steps) <= len(r["turns"]), r["task_id"]
        assert e.steps[-1].action == r["turns"][-1]["action"]       # the winning action is always kept
        assert len(render(e)) < 1600                                  # one example fits the default budget


def _example(kind: str, steps: int, source: str = "env", task: str = "put a clean mug in shelf.") -> WorkedExample:
    return WorkedExample(task=task, env="alfworld", kind=kind, source=source, taken=steps,
                         steps=[ExampleStep(action=f"go to shelf {i}") for i in range(steps)]).finish()


def test_a_skill_keeps_few_short_verified_examples():
    kept, said = merge([], _example("clean", 6))
    assert said == "added" and len(kept) == 1
    kept, said = merge(kept, _example("clean", 4))           # same kind, shorter: replaces
    assert said.startswith("replaced") and [len(e.steps) for e in kept] == [4]
    kept, said = merge(kept, _example("clean", 5))           # same kind, longer: not kept
    assert said.startswith("not kept") and [len(e.steps) for e in kept] == [4]
    kept, said = merge(kept, kept[0])
    assert said == "unchanged"
    kept, said = merge(kept, _example("clean", 2, source="judge"))   # self-judged ranks after a verified one
    assert said.startswith("not kept")
    for kind, n in (("heat", 5), ("cool", 7)):
        kept, _ = merge(kept, _example(kind, n))
    assert len(kept) == MAX_PER_SKILL
    kept, said = merge(kept, _example("look", 3))            # full: the worst-ranked goes
    assert said.startswith("replaced") and sorted(e.kind for e in kept) == ["clean", "heat", "look"]
    kept, said = merge(kept, _example("pick", 9))
    assert said.startswith("not kept") and len(kept) == MAX_PER_SKILL


def test_the_executor_is_shown_an_example_of_its_own_kind_within_the_budget():
    clean = compress("alfworld", TASK, CLEAN)
    heat = _example("heat", 3, task="heat some egg and put it in fridge.")
    skills = [RetrievedSkill(name="place-object", body="1. take it", examples=[heat, clean])]
    assert select(skills, "put a clean spatula in drawer.", "alfworld", 2, 4000) == [clean]   # never another kind
    assert select(skills, "put a clean spatula in drawer.", "alfworld", 1, 100) == []        # over the budget
    assert select(skills, "put a clean spatula in drawer.", "alfworld", 0, 4000) == []
    # no kinds (the gateway): the example sharing more words with the task first
    assert select(skills, "heat the egg for the fridge", "gateway", 1, 4000) == [heat]
    msgs = agent_messages("alfworld", "put a clean spatula in drawer.", "You are in the middle of a room.",
                          skills=skills, history=[], admissible=["go to drawer 1"], options=ActingOptions())
    opening = msgs[1]["content"]
    assert opening.startswith(examples_block([clean], "alfworld")) and "Your task: put a clean spatula" in opening
    assert "Example (another room" not in msgs[0]["content"]   # the made-up format game gives way to a real one
    bare = agent_messages("alfworld", "put a clean spatula in drawer.", "You are in the middle of a room.",
                          skills=[], history=[], admissible=["go to drawer 1"], options=ActingOptions())
    assert "Example (another room" in bare[0]["content"] and "Solved examples" not in bare[1]["content"]
    none = agent_messages("alfworld", "put a clean spatula in drawer.", "You are in the middle of a room.",
                          skills=skills, history=[], admissible=["go to drawer 1"],
                          options=ActingOptions(examples=0, demos="none"))
    assert "Solved examples" not in none[1]["content"] and "Example (another room" not in none[0]["content"]


@pytest.mark.skipif(not DATA.exists(), reason="the expert games are not committed")
def test_the_ceiling_arm_shows_the_experts_games_in_the_same_format():
    task_id = "valid_seen/pick_clean_then_place_in_recep-ButterKnife-None-CounterTop-1/trial_x"
    demos = expert_examples("clean", 1, task_id=task_id)
    assert len(demos) == 1 and demos[0].kind == "clean" and demos[0].trajectory.startswith("valid_train/")
    assert not demos[0].trajectory.split("/")[1].endswith("-1")      # never the task's own floorplan
    shown = shown_examples("alfworld", TASK, [], ActingOptions(demos="expert"), "clean", task_id)
    assert shown == demos
    assert shown_examples("alfworld", TASK, [], ActingOptions(), "clean", task_id) == []   # the paper's setting


def test_follow_share_counts_the_examples_key_steps_in_order():
    example = compress("alfworld", TASK, CLEAN).actions()
    same_kind = ["go to drawer 1", "take spatula 2 from drawer 1", "go to sinkbasin 1",
                 "clean spatula 2 with sinkbasin 1", "move spatula 2 to drawer 2"]
    assert follow_share(same_kind, example) == 1.0 and follow_share(same_kind, example, "exact") == 0.0
    assert follow_share(["go to sinkbasin 1", "take spatula 2 from drawer 1"], example) == pytest.approx(1 / 3)
    assert follow_share(example, example, "exact") == 1.0 and follow_share(example, ["go to desk 1"]) is None


def test_an_untrusted_source_never_displaces_what_the_environment_verified():
    """A gateway caller can report any success: its example (and a self-judged one) ranks after the env's, so
    a made-up one-step "success" does not evict a verified example of the same kind."""
    env = _example("clean", 6)
    kept, said = merge([env], _example("clean", 1, source="caller"))
    assert said.startswith("not kept") and kept == [env]
    kept, said = merge([_example("clean", 6, source="caller")], _example("clean", 7))
    assert said.startswith("replaced") and kept[0].source == "env"


def test_compression_cleans_untrusted_text_and_leaves_the_time_to_the_repo():
    e = compress("gateway", "summarise\x00 the log", [{"observation": "x", "action": "read\x00 \ud800log"}])
    assert "\x00" not in e.task and "\x00" not in e.steps[0].action and "\ud800" not in e.steps[0].action
    assert e.created_at == "" and e.id   # a retried curation sends the same batch (the idempotency key's hash)
