"""The curator's prompt, parser and call checks, on recorded real completions and malformed ones.

recorded/*.json are real completions of the embedded SmolLM2-135M (re-record with
data/record_completions.py); what each must parse to is written by hand in expectations.json.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from skillos.curation import (
    CURATOR_TOOLS,
    OP_NAMES,
    ParsedCall,
    build_curator_messages,
    curator_json_schema,
    parse_curator_output,
    validate,
)
from skillos.curation.parse import MAX_CALLS

DATA = Path(__file__).parent / "data"
MALFORMED = json.loads((DATA / "malformed.json").read_text())
EXPECTATIONS = json.loads((DATA / "expectations.json").read_text())


def _check(got: list[ParsedCall], expect: list[dict]) -> None:
    assert len(got) == len(expect), [(g.name, g.error) for g in got]
    for g, e in zip(got, expect):
        if "name" in e:
            assert g.name == e["name"]
        if "error" in e:
            assert g.error and e["error"] in g.error, g.error
        else:
            assert g.error is None, g.error
        if "arguments" in e:
            assert g.arguments == e["arguments"]
        if "skill_name" in e:
            assert g.arguments.get("skill_name") == e["skill_name"]
        if "valid" in e:
            reason = validate(g).reason
            assert (reason is None) == e["valid"], reason


@pytest.mark.parametrize("case", MALFORMED, ids=[c["id"] for c in MALFORMED])
def test_parser_on_malformed_completions(case):
    _check(parse_curator_output(case.get("content"), case.get("tool_calls")), case["expect"])


@pytest.mark.parametrize("name", sorted(EXPECTATIONS))
def test_parser_on_recorded_real_completions(name):
    record = json.loads((DATA / "recorded" / name).read_text())
    assert record["model"], "recorded from a real backend"
    _check(parse_curator_output(record["content"], record["tool_calls"]), EXPECTATIONS[name])


def _assert_every_call_judged(calls: list[ParsedCall]) -> None:
    """What the curator relies on: a readable call names a known op, an unreadable one says why, calls past
    MAX_CALLS are refused, and `validate` gives each one verdict that agrees with the parser."""
    for i, call in enumerate(calls):
        if call.error is None:
            assert call.name in OP_NAMES, call
            assert i < MAX_CALLS, "a call past MAX_CALLS must be refused"
        else:
            assert isinstance(call.error, str) and call.error.strip(), call
        verdict = validate(call, i)
        assert (verdict.index, verdict.name) == (i, call.name)
        assert verdict.valid == (verdict.reason is None) == (verdict.op is not None)
        if call.error is not None:
            assert not verdict.valid and verdict.reason == call.error


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list('{}[]":,<>/ abc_\n') + ["<tool_call>", "</tool_call>", "skill_delete",
                                                               "new_skill_insert", "(", ")", "'"]),
                max_size=80).map("".join))
def test_parser_never_raises(text):
    _assert_every_call_judged(parse_curator_output(text, None))


_TOOL_KEYS = st.one_of(st.sampled_from(["name", "arguments", "function", "type", "id", "skill_name"]),
                       st.text(max_size=10))
_TOOL_VALUES = st.one_of(st.sampled_from([*OP_NAMES, "insert_skill", "rename_skill", '{"skill_name": "a"}',
                                          '{"skill_name": "a", "content": "1. x"}', "[1]", "{"]),
                         st.text(max_size=10))


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=50), st.dictionaries(_TOOL_KEYS, _TOOL_VALUES)), max_size=4))
def test_parser_never_raises_on_odd_tool_calls(tool_calls):
    calls = parse_curator_output("new_skill_insert(skill_name='ignored', content='x')", tool_calls)
    if tool_calls:   # structured tool calls win: one call each, the text is not read
        assert len(calls) == len(tool_calls) and all(c.source == "tools" for c in calls)
        for tc, call in zip(tool_calls, calls):
            if not isinstance(tc, dict):
                assert call.error == "tool call is not an object"
            elif not isinstance(tc.get("name"), str):
                assert call.error == "call has no function name"
    else:
        assert [(c.name, c.arguments) for c in calls] == [("new_skill_insert", {"skill_name": "ignored",
                                                                                "content": "x"})]
    _assert_every_call_judged(calls)


def test_calls_past_max_calls_are_refused():
    one = {"name": "skill_delete", "arguments": {"skill_name": "a"}}
    calls = parse_curator_output(json.dumps({"calls": [one] * (MAX_CALLS + 2)}), None)
    assert [c.error for c in calls[:MAX_CALLS]] == [None] * MAX_CALLS
    assert all(c.error and f"more than {MAX_CALLS} calls" in c.error for c in calls[MAX_CALLS:])
    assert len(calls) == MAX_CALLS + 2


_PLAIN = st.text(st.characters(blacklist_categories=("Cs",), blacklist_characters="`<>"), max_size=60)
_SLUG = st.from_regex(r"[a-z0-9]{1,8}(-[a-z0-9]{1,8}){0,3}", fullmatch=True)


@settings(max_examples=100, deadline=None)
@given(_SLUG, _PLAIN, _PLAIN, st.sampled_from(["tools", "tag", "json", "fenced"]))
def test_a_well_formed_call_is_read_back_exactly(skill_name, content, prose, surface):
    args = {"skill_name": skill_name, "content": content}
    call = {"name": "new_skill_insert", "arguments": args}
    text, tool_calls = {
        "tools": (prose, [{"type": "function", "function": {"name": "new_skill_insert",
                                                            "arguments": json.dumps(args)}}]),
        "tag": (f"<tool_call>{json.dumps(call)}</tool_call>", None),
        "json": (json.dumps({"calls": [call]}), None),
        "fenced": (f"{prose}\n```json\n{json.dumps(call)}\n```\n", None),
    }[surface]
    calls = parse_curator_output(text, tool_calls)
    assert [(c.name, c.arguments, c.error) for c in calls] == [("new_skill_insert", args, None)]


@pytest.mark.parametrize("name,args,reason", [
    ("new_skill_insert", {"skill_name": "heat-food", "content": "1. microwave"}, None),
    ("new_skill_insert", {"skill_name": "heat-food"}, "needs a non-empty string argument 'content'"),
    ("new_skill_insert", {"skill_name": "!!!", "content": "x"}, "invalid_name"),
    ("new_skill_insert", {"skill_name": "heat-food", "content": "   "}, "needs a non-empty string"),
    ("skill_update", {"skill_name": "heat-food"}, "needs new_content, new_name or both"),
    ("skill_update", {"skill_name": "heat-food", "new_name": "warm-food"}, None),
    ("skill_delete", {"skill_name": 3}, "non-empty string"),
    ("skill_delete", {"skill_name": "a", "force": True}, None),  # unknown argument dropped, noted
])
def test_validate_call(name, args, reason):
    verdict = validate(ParsedCall(name=name, arguments=args))
    if reason is None:
        assert verdict.valid and verdict.reason is None
        assert "force" not in verdict.arguments
        assert verdict.op.name == name and verdict.op.arguments() == verdict.arguments   # the typed op
    else:
        assert not verdict.valid and verdict.op is None
        assert verdict.reason and reason in verdict.reason


def test_validate_call_notes_name_normalization():
    verdict = validate(ParsedCall(name="skill_delete", arguments={"skill_name": "Heat Food"}))
    assert verdict.valid and any("heat-food" in n for n in verdict.normalized)


def test_messages_carry_task_outcome_and_skills():
    traj = json.loads((DATA / "trajectory_clean_apple.json").read_text())
    skills = [{"name": "clean-then-place", "content": "---\nname: clean-then-place\n---\n1. find"}]
    msgs = build_curator_messages(traj, False, skills, output_format="json")
    assert [m["role"] for m in msgs] == ["system", "user"]
    user = msgs[1]["content"]
    assert "put a clean apple in fridge." in user and "FAILED" in user
    assert "clean-then-place" in user and "take apple 1 from countertop 1" in user
    assert '{"calls"' in msgs[0]["content"]
    assert "SUCCEEDED" in build_curator_messages(traj, True, [])[1]["content"]
    assert "(none" in build_curator_messages(traj, True, [])[1]["content"]


def test_long_trajectory_is_clipped_keeping_start_and_end():
    turns = [{"observation": f"obs {i}", "action": f"act {i}", "thought": ""} for i in range(100)]
    user = build_curator_messages({"task": "t", "turns": turns}, True, [])[1]["content"]
    assert "act 0" in user and "act 99" in user and "turns omitted" in user and "act 50" not in user


def test_tool_and_json_schemas_agree_on_names():
    names = [t["function"]["name"] for t in CURATOR_TOOLS]
    assert names == ["new_skill_insert", "skill_update", "skill_delete"]
    schema = curator_json_schema(1, 2)
    items = schema["properties"]["calls"]["items"]["anyOf"]
    assert [i["properties"]["name"]["const"] for i in items] == names
    assert schema["properties"]["calls"]["minItems"] == 1


def test_json_mode_skill_fields_become_the_skill_content():
    from skillos.skills import parse

    text = ('{"calls": [{"name": "new_skill_insert", "arguments": {"skill_name": "heat-then-place", '
            '"description": "Heat an object: then put it somewhere.", "steps": ["1. take OBJECT from PLACE", '
            '"- go to microwave N", "heat OBJECT with microwave N", ""]}}, '
            '{"name": "skill_update", "arguments": {"skill_name": "find-object", "description": "Find things.", '
            '"steps": ["go to PLACE", "open PLACE", "take OBJECT from PLACE"]}}]}')
    insert, update = parse_curator_output(text, None)
    verdict = validate(insert)
    args = verdict.arguments
    assert verdict.reason is None and "steps" not in args and "description" not in args
    doc = parse(args["content"])
    assert doc.description == "Heat an object: then put it somewhere."
    assert doc.body == "1. take OBJECT from PLACE\n2. go to microwave N\n3. heat OBJECT with microwave N"
    verdict = validate(update)
    assert verdict.reason is None
    assert parse(verdict.arguments["new_content"]).body.startswith("1. go to PLACE\n2. open PLACE")


def test_json_mode_schema_asks_for_three_to_six_steps():
    items = curator_json_schema(1, 2)["properties"]["calls"]["items"]["anyOf"]
    insert = items[0]["properties"]["arguments"]
    assert insert["required"] == ["skill_name", "description", "steps"]
    assert (insert["properties"]["steps"]["minItems"], insert["properties"]["steps"]["maxItems"]) == (3, 6)
    # non-empty and bounded text: a model repeating itself inside a string is cut, the call still closes
    step = insert["properties"]["steps"]["items"]
    assert (step["minLength"], step["maxLength"]) == (3, 200)
    assert insert["properties"]["description"]["maxLength"] == 200


def test_json_mode_schema_offers_edits_only_of_the_skills_shown():
    def ops(schema):
        return {o["properties"]["name"]["const"]: o["properties"]["arguments"]["properties"]["skill_name"]
                for o in schema["properties"]["calls"]["items"]["anyOf"]}

    assert list(ops(curator_json_schema(1, 2, existing=[]))) == ["new_skill_insert"]
    shown = ops(curator_json_schema(1, 2, existing=["find-object", "heat-then-place", "find-object"]))
    assert shown["skill_update"] == shown["skill_delete"] == {"enum": ["find-object", "heat-then-place"]}
    assert "pattern" in shown["new_skill_insert"]
    assert all("pattern" in v for v in ops(curator_json_schema(1, 2)).values())   # not told: all names
