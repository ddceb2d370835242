"""The executor's prompt is append-only across the turns of an episode, so a server's prompt cache
reuses all but the newest turn (strictly so when the episode keeps what each turn was asked and the
model's own answer, as `react` does); the history window moves in chunks; ALFWorld's go-to actions are
not repeated every turn."""

from __future__ import annotations

import json

from skillos.acting.prompt import (
    HISTORY_CHUNK,
    action_schema,
    agent_messages,
    hide_more,
    judge_messages,
    show_observation,
    stale_actions,
    turn_tail,
)
from skillos.protocol.executor import RetrievedSkill

SKILLS = [RetrievedSkill(name="heat-object", description="Heat something.", body="1. take it\n2. heat it")]
ROOM = "You are in the middle of a room. You see a cabinet 1, a microwave 1 and a countertop 1."
PLACES = ["go to cabinet 1", "go to microwave 1", "go to countertop 1"]


def turn(history, obs, adm, history_len=30):
    return agent_messages("alfworld", "heat an egg", obs, skills=SKILLS, history=history, admissible=adm,
                          history_len=history_len, first_observation=ROOM)


def render(messages) -> str:
    return "".join(f"<{m['role']}>{m['content']}" for m in messages)


def test_each_turn_extends_the_previous_prompt():
    """As `react` keeps the turns (what closed each message, the model's own answer): every prompt is the
    previous one with the answer and the next message appended, word for word."""
    history: list[tuple[str, ...]] = []
    obs, prev = ROOM, None
    for i in range(12):
        adm = [*PLACES, "help", "look", f"take egg {i} from countertop 1"]
        msgs = turn(history, obs, adm)
        assert msgs[0]["role"] == "system" and [m["role"] for m in msgs[1:]] == (["user", "assistant"] * 40)[:len(msgs) - 2] + ["user"]
        if prev is not None:
            assert render(msgs).startswith(render(prev))
            assert len(msgs) == len(prev) + 2
            # the model's answer replayed as it wrote it (its spacing too)
            assert msgs[len(prev)]["content"] == f'{{"thought":"go on {i - 1}", "action": "go to cabinet {i - 1}"}}'
        prev = msgs
        history.append((obs, f"go to cabinet {i}", f"go on {i}", turn_tail(history, obs, "alfworld", adm),
                        f'{{"thought":"go on {i}", "action": "go to cabinet {i}"}}'))
        obs = f"You arrive at cabinet {i}. Nothing here."


def test_a_history_without_records_keeps_all_but_the_last_message():
    """A caller of /v1/act sends (observation, action, thought) only: the earlier turns stay as they were."""
    history: list[tuple[str, ...]] = []
    obs, prev = ROOM, None
    for i in range(6):
        msgs = turn(history, obs, [*PLACES, "look"])
        if prev is not None:
            assert render(msgs).startswith(render(prev[:-1]))
            assert msgs[len(prev) - 1]["content"].startswith(prev[-1]["content"].split("Actions now")[0].rstrip())
        prev = msgs
        history.append((obs, f"go to cabinet {i}"))
        obs = f"You arrive at cabinet {i}. Nothing here."


def test_actions_listed_without_help_and_schema_allows_only_them():
    msgs = turn([], ROOM, [*PLACES, "help", "inventory", "look"])
    text = msgs[-1]["content"]
    listed = text.split("Actions now:")[1]
    assert listed.strip().split(" | ") == ["inventory", "look", "go to PLACE"]   # help never shown, places once
    assert "Places you can go to" not in text          # the opening observation names every place already
    elsewhere = agent_messages("alfworld", "heat an egg", "You are in a room.", skills=SKILLS, history=[],
                               admissible=[*PLACES, "look"])[-1]["content"]
    assert "Places you can go to: cabinet 1, microwave 1, countertop 1." in elsewhere
    assert "heat-object" in text and "Your task: heat an egg" in text
    schema = action_schema([*PLACES, "help", "look"])
    assert schema["properties"]["action"] == {"enum": [*PLACES, "look"]} and schema["required"] == ["thought", "action"]
    assert schema["properties"]["thought"]["maxLength"] == 150      # a runaway thought still leaves an action
    web = action_schema(["search[<your query>]", "click[buy now]"])["properties"]["action"]["anyOf"]
    assert web[0] == {"enum": ["click[buy now]"]} and web[1]["pattern"].startswith("^search")
    assert action_schema(None) is None


def test_history_replays_thoughts_in_the_chosen_format():
    msgs = turn([(ROOM, "go to cabinet 1", "the egg may be there")], "The cabinet 1 is closed.", PLACES)
    assert json.loads(msgs[2]["content"]) == {"thought": "the egg may be there", "action": "go to cabinet 1"}
    tags = agent_messages("alfworld", "t", "o", skills=[], history=[("a", "b", "c")], admissible=None,
                          action_format="tags")
    assert tags[2]["content"] == "<think>c</think>\n<action>b</action>"
    assert '{"thought": "' in tags[0]["content"] or "<think>" in tags[0]["content"]


def test_no_progress_is_pointed_out():
    h = [(ROOM, "go to cabinet 1", ""), ("The cabinet 1 is closed.", "examine cabinet 1", ""),
         ("The cabinet 1 is closed.", "examine cabinet 1", "")]
    assert "changed nothing" in turn(h, "The cabinet 1 is closed.", PLACES)[-1]["content"]
    assert "changed nothing" in turn(h[:1], "Nothing happens.", PLACES)[-1]["content"]
    assert "changed nothing" not in turn(h[:2], "You open the cabinet 1.", PLACES)[-1]["content"]


def test_history_window_moves_in_chunks_and_keeps_earlier_actions():
    h = 3
    history = [(f"obs {i}", f"act {i}") for i in range(20)]
    shown = []
    for n in range(1, 21):
        msgs = turn(history[:n], f"obs {n}", PLACES, history_len=h)
        full = sum(1 for m in msgs if m["role"] == "assistant")
        assert h <= full <= h + HISTORY_CHUNK - 1 or full == n
        if full < n:
            assert f"Steps 1-{n - full} are not shown" in msgs[1]["content"]
            assert "act 0" in msgs[1]["content"]
        shown.append(n - full)
    # the first hidden index changes only at chunk boundaries
    assert set(shown) <= {0, *range(0, 21, HISTORY_CHUNK)}


def test_a_prompt_over_the_context_hides_the_oldest_steps_a_chunk_at_a_time():
    """`hide_more`: each call moves the window's start on by a chunk, never past the last step; the turns
    after it grow append-only from the new start (cached again)."""
    history = [(f"obs {i}", f"act {i}") for i in range(20)]
    hidden, starts = 0, []
    while (more := hide_more(20, 30, hidden)) is not None:
        assert more > hidden and (more % HISTORY_CHUNK == 0 or more == 19)   # chunks, at most the last step
        hidden = more
        msgs = agent_messages("alfworld", "heat an egg", "obs 20", skills=SKILLS, history=history, admissible=PLACES,
                              first_observation=ROOM, hidden=hidden)
        shown = sum(1 for m in msgs if m["role"] == "assistant")
        starts.append(20 - shown)
        assert shown >= 1 and f"Steps 1-{20 - shown} are not shown" in msgs[1]["content"]
        assert "act 0" in msgs[1]["content"]          # the hidden actions are still named, in one line
    assert starts == [8, 16, 19]                      # chunks, then only the last step
    assert hide_more(20, 30, hidden) is None and hide_more(1, 30, 0) is None and hide_more(0, 30, 0) is None
    # the next turn keeps the start: its prompt extends this one's (append-only)
    now = agent_messages("alfworld", "heat an egg", "obs 20", skills=SKILLS, history=history[:17], admissible=PLACES,
                         first_observation=ROOM, hidden=16)
    nxt = agent_messages("alfworld", "heat an egg", "obs 21", skills=SKILLS, history=history[:18], admissible=PLACES,
                         first_observation=ROOM, hidden=16)
    assert render(nxt).startswith(render(now[:-1]))
    # after the deepest hide too: the start stays at the step it reached, the next turns extend the prompt
    deepest = hide_more(17, 30, 16)
    assert deepest is None and hide_more(18, 30, 8) == 16 and hide_more(10, 30, 0) == 8 and hide_more(5, 30, 0) == 4
    prev = None
    for n in range(5, 9):
        msgs = agent_messages("alfworld", "heat an egg", f"obs {n}", skills=SKILLS, history=history[:n],
                              admissible=PLACES, first_observation=ROOM, hidden=4)
        assert "Steps 1-4 are not shown" in msgs[1]["content"]
        if prev is not None:
            assert render(msgs).startswith(render(prev[:-1]))
        prev = msgs


def test_history_len_zero_still_shows_the_last_step():
    msgs = turn([("a", "b"), ("c", "d")], "e", PLACES, history_len=0)
    assert sum(1 for m in msgs if m["role"] == "assistant") >= 1 and "Step 3. e" in msgs[-1]["content"]


def test_webshop_observation_drops_the_repeated_instruction():
    obs = "Instruction: [SEP] i want red shoes [SEP] Back to Search [SEP] Page 1 (Total results: 3)"
    assert show_observation("webshop", obs) == "Back to Search [SEP] Page 1 (Total results: 3)"
    assert show_observation("alfworld", obs) == obs


def test_judge_is_told_how_the_episode_ended():
    ended = judge_messages("alfworld", "put a mug in the cabinet", [("x", "y")], "", ended_by_env=True)
    assert "environment ended the episode after step 1" in ended[1]["content"]
    out = judge_messages("alfworld", "t", [("x", "y")], "", ended_by_env=False, max_turns=30)
    assert "used all 30 steps" in out[1]["content"]
    assert "ended" not in judge_messages("webshop", "t", [("x", "y")], "")[1]["content"].split("did: y")[1]


def test_actions_taken_in_the_same_situation_are_not_offered_again():
    h = [(ROOM, "go to cabinet 1"), ("The cabinet 1 is closed.", "examine cabinet 1"),
         ("The cabinet 1 is closed.", "look"), ("You face the cabinet 1.", "examine cabinet 1")]
    assert stale_actions(h, "The cabinet 1 is closed.") == ["examine cabinet 1", "look"]
    assert stale_actions(h, "You open the cabinet 1.") == []
    refused = [("At the fridge.", "cool apple 1 with fridge 1"), ("Nothing happens.", "look")]
    assert stale_actions(refused, "Nothing happens.") == ["cool apple 1 with fridge 1", "look"]
    schema = action_schema([*PLACES, "look", "examine cabinet 1"], avoid=["look", "examine cabinet 1"])
    assert schema["properties"]["action"]["enum"] == PLACES
    assert action_schema(["look"], avoid=["look"])["properties"]["action"]["enum"] == ["look"]  # never empty


def test_state_line_and_held_back_actions_keep_the_prompt_append_only():
    """With every acting option on (state line, held-back actions, expert demonstrations), each turn's
    prompt is the previous turn's and the new turn, word for word, when the episode keeps its turns as
    `react` does (what closed each message)."""
    from skillos.acting.options import ActingOptions
    from skillos.acting.prompt import avoided, turn_tail

    opts = ActingOptions(demos="expert")
    first_adm = [*PLACES, "look", "inventory"]
    history: list[tuple[str, ...]] = []
    obs, adm, prev = ROOM, first_adm, None
    script = [("go to countertop 1", "You arrive at countertop 1. On the countertop 1, you see a egg 1, and a knife 1.",
               ["go to cabinet 1", "take egg 1 from countertop 1", "take knife 1 from countertop 1", "look"]),
              ("take egg 1 from countertop 1", "You pick up the egg 1 from the countertop 1.", [*PLACES, "look"]),
              ("go to microwave 1", "You arrive at microwave 1. The microwave 1 is closed.",
               ["open microwave 1", "heat egg 1 with microwave 1", "examine microwave 1", "go to cabinet 1"])]
    for action, nxt, nxt_adm in script:
        avoid = avoided("alfworld", "heat an egg", history, obs, adm, ROOM, first_adm, opts)
        msgs = agent_messages("alfworld", "heat an egg", obs, skills=SKILLS, history=history, admissible=adm,
                              first_observation=ROOM, first_admissible=first_adm, avoid=avoid, options=opts,
                              task_type="heat")
        shown = msgs[-1]["content"].split("Actions now:")[-1]
        assert "look" not in shown and "inventory" not in shown and "examine" not in shown
        assert "take knife 1" not in shown  # the task names no knife
        if prev is not None:
            assert render(msgs).startswith(render(prev))
        prev = msgs
        history.append((obs, action, "thought", turn_tail(history, obs, "alfworld", adm, avoid)))
        obs, adm = nxt, nxt_adm
    last = agent_messages("alfworld", "heat an egg", obs, skills=SKILLS, history=history, admissible=adm,
                          first_observation=ROOM, first_admissible=first_adm, options=opts)[-1]["content"]
    assert "In your hand: egg 1." in last and "You are at" not in last   # the observation just said where
    # the egg in hand, not heated yet: where to heat it, not the places left to search
    assert "Next: go to microwave 1 and heat the egg 1 with it." in last and "Not searched" not in last


def test_options_off_give_the_prompt_of_before():
    from skillos.acting.options import ActingOptions

    off = ActingOptions(state_line=False, hold_back=False, demos="generic")
    msgs = agent_messages("alfworld", "heat an egg", ROOM, skills=SKILLS, history=[], admissible=[*PLACES, "look"],
                          options=off, task_type="heat")
    assert "In your hand" not in msgs[1]["content"] and "Example (another room" in msgs[0]["content"]
    assert "Actions now: look | go to PLACE" in msgs[1]["content"]


def test_webshop_schema_refuses_the_search_placeholder():
    """The 1.5B typed WebShop's placeholder as it reads (search[<your query>]) in 5 of 12 plays: the
    schema's search pattern admits a query of words and refuses the placeholder."""
    import re

    schema = action_schema(["search[<your query>]", "click[b07x1]"])
    pattern = next(c["pattern"] for c in schema["properties"]["action"]["anyOf"] if "pattern" in c)
    assert re.match(pattern, "search[blue cotton t-shirt men]")
    assert not re.match(pattern, "search[<your query>]")


def test_the_prompt_of_the_recorded_episodes_stays_append_only_but_for_the_closing_question():
    """bench_acting prefix over the committed speed-c1 records (RESULTS-learning §0): each turn's prompt begins
    with the whole turn before's but its closing question, and the acting options add more per turn."""
    from bench.bench_acting import prefix
    from tests.conftest import ROOT

    rows = prefix(ROOT / "bench/evidence/acting-valid_seen/speed-c1", ["before", "all"]).splitlines()[2:]
    cells = {r.split("|")[1].strip(): [float(c) for c in r.split("|")[2:6]] for r in rows}
    for turns, _first, lost, added in cells.values():
        assert turns > 30 and lost <= len(" What do you do next?") * 2 and added > 0
    assert cells["all"][3] > cells["before"][3]


def test_ask_fitting_hides_until_it_fits_and_stops_when_nothing_is_left():
    """`ask_fitting` over a `ChatLLM` that refuses prompts above a length, with the wordings real backends use;
    any other error is raised at once."""
    import asyncio

    import pytest

    from skillos.acting.episode import ask_fitting
    from skillos.llm.client import ChatResult, LLMError

    history = [(f"obs {i} " + "x" * 200, f"act {i}") for i in range(20)]
    llama = ('{"error":{"message":"request (2100 tokens) exceeds the available context size (2048 tokens)",'
             '"type":"exceed_context_size_error"}}')
    wordings = [(400, llama),
                (400, "This model's maximum context length is 2048 tokens. However, you requested 2100 tokens"),
                (400, "The prompt (2100 tokens) is longer than the model's context length (2048 tokens)."),
                (422, "`inputs` tokens + `max_new_tokens` must be <= 2048. Given: 2000 `inputs` tokens")]

    class Limited:
        def __init__(self, chars: int, status: int, message: str):
            self.chars, self.status, self.message, self.asked = chars, status, message, []

        async def chat(self, messages, **kw):
            size = sum(len(m["content"]) for m in messages)
            self.asked.append(size)
            if size > self.chars:
                e = LLMError("http", self.message, self.status)
                e.latency_s = 0.5
                raise e
            return ChatResult(content="{}", latency_s=1.0)

    def ask(llm, hidden=0):
        messages_for = lambda **kw: agent_messages("alfworld", "heat an egg", "now", skills=SKILLS, history=history,
                                                   admissible=PLACES, first_observation=ROOM, **kw)
        return asyncio.run(ask_fitting(llm, messages_for, past=len(history), history_len=30, hidden=hidden))

    full = sum(len(m["content"]) for m in agent_messages("alfworld", "heat an egg", "now", skills=SKILLS,
                                                          history=history, admissible=PLACES, first_observation=ROOM))
    for status, message in wordings:
        llm = Limited(full * 2 // 3, status, message)
        res, hidden = ask(llm)
        assert hidden in (8, 16) and llm.asked[-1] <= llm.chars < llm.asked[0]
        assert res.latency_s == 1.0 + 0.5 * (len(llm.asked) - 1)     # the refused attempts count
    with pytest.raises(LLMError) as nothing_left:                      # not even the last step fits
        ask(Limited(10, 400, wordings[0][1]))
    assert nothing_left.value.context_exceeded and nothing_left.value.latency_s > 0
    other = Limited(10, 400, "response_format: invalid schema")
    with pytest.raises(LLMError):
        ask(other)
    assert len(other.asked) == 1                                       # not a context error: no second try
