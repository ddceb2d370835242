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

from services.curator.parsing import parse_curator_output, validate_call
from services.curator.prompts import CURATOR_TOOLS, build_curator_messages, curator_json_schema
from skillos.protocol.curator import ParsedCall

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
            _, reason, _ = validate_call(g)
            assert (reason is None) == e["valid"], reason


@pytest.mark.parametrize("case", MALFORMED, ids=[c["id"] for c in MALFORMED])
def test_parser_on_malformed_completions(case):
    _check(parse_curator_output(case.get("content"), case.get("tool_calls")), case["expect"])


@pytest.mark.parametrize("name", sorted(EXPECTATIONS))
def test_parser_on_recorded_real_completions(name):
    record = json.loads((DATA / "recorded" / name).read_text())
    assert record["model"], "recorded from a real backend"
    _check(parse_curator_output(record["content"], record["tool_calls"]), EXPECTATIONS[name])


@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(list('{}[]":,<>/ abc_\n') + ["<tool_call>", "</tool_call>", "skill_delete",
                                                               "new_skill_insert", "(", ")", "'"]),
                max_size=80).map("".join))
def test_parser_never_raises(text):
    for call in parse_curator_output(text, None):
        assert call.ok or call.error  # every call is either readable or carries its reason


@settings(max_examples=100, deadline=None)
@given(st.lists(st.one_of(st.text(max_size=50), st.dictionaries(st.text(max_size=10), st.text(max_size=10))),
                max_size=4))
def test_parser_never_raises_on_odd_tool_calls(tool_calls):
    parse_curator_output(None, tool_calls)


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
    cleaned, why, _ = validate_call(ParsedCall(name=name, arguments=args))
    if reason is None:
        assert why is None and cleaned is not None
        assert "force" not in cleaned
    else:
        assert why and reason in why


def test_validate_call_notes_name_normalization():
    _, why, notes = validate_call(ParsedCall(name="skill_delete", arguments={"skill_name": "Heat Food"}))
    assert why is None and any("heat-food" in n for n in notes)


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
    from services.curator.parsing import parse_curator_output, validate_call
    from skillos.skills import parse

    text = ('{"calls": [{"name": "new_skill_insert", "arguments": {"skill_name": "heat-then-place", '
            '"description": "Heat an object: then put it somewhere.", "steps": ["1. take OBJECT from PLACE", '
            '"- go to microwave N", "heat OBJECT with microwave N", ""]}}, '
            '{"name": "skill_update", "arguments": {"skill_name": "find-object", "description": "Find things.", '
            '"steps": ["go to PLACE", "open PLACE", "take OBJECT from PLACE"]}}]}')
    insert, update = parse_curator_output(text, None)
    args, reason, _ = validate_call(insert)
    assert reason is None and "steps" not in args and "description" not in args
    doc = parse(args["content"])
    assert doc.description == "Heat an object: then put it somewhere."
    assert doc.body == "1. take OBJECT from PLACE\n2. go to microwave N\n3. heat OBJECT with microwave N"
    args, reason, _ = validate_call(update)
    assert reason is None and parse(args["new_content"]).body.startswith("1. go to PLACE\n2. open PLACE")


def test_json_mode_schema_asks_for_three_to_six_steps():
    from services.curator.prompts import curator_json_schema

    items = curator_json_schema(1, 2)["properties"]["calls"]["items"]["anyOf"]
    insert = items[0]["properties"]["arguments"]
    assert insert["required"] == ["skill_name", "description", "steps"]
    assert (insert["properties"]["steps"]["minItems"], insert["properties"]["steps"]["maxItems"]) == (3, 6)
    # non-empty and bounded text: a model repeating itself inside a string is cut, the call still closes
    step = insert["properties"]["steps"]["items"]
    assert (step["minLength"], step["maxLength"]) == (3, 200)
    assert insert["properties"]["description"]["maxLength"] == 200


def test_json_mode_schema_offers_edits_only_of_the_skills_shown():
    from services.curator.prompts import curator_json_schema

    def ops(schema):
        return {o["properties"]["name"]["const"]: o["properties"]["arguments"]["properties"]["skill_name"]
                for o in schema["properties"]["calls"]["items"]["anyOf"]}

    assert list(ops(curator_json_schema(1, 2, existing=[]))) == ["new_skill_insert"]
    shown = ops(curator_json_schema(1, 2, existing=["find-object", "heat-then-place", "find-object"]))
    assert shown["skill_update"] == shown["skill_delete"] == {"enum": ["find-object", "heat-then-place"]}
    assert "pattern" in shown["new_skill_insert"]
    assert all("pattern" in v for v in ops(curator_json_schema(1, 2)).values())   # not told: all names
