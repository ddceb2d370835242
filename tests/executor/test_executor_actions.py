"""The executor's action parser and judge-verdict reader (pure functions, no services)."""

from __future__ import annotations

import pytest

from services.executor.serving import _close_tags, parse_verdict
from skillos.acting.parse import NO_ACTION, parse_action, split_completion

ADMISSIBLE = ["go to countertop 1", "go to cabinet 2", "open fridge 1", "take apple 1 from countertop 1",
              "put apple 1 in/on fridge 1", "look", "inventory"]


def test_tagged_action_exact_match():
    p = parse_action("<think>The apple is on the counter.</think>\n<action>go to countertop 1</action>", ADMISSIBLE)
    assert (p.action, p.valid, p.parse, p.thought) == ("go to countertop 1", True, "exact",
                                                        "The apple is on the counter.")


def test_case_spaces_quotes_and_trailing_period_are_normalized():
    p = parse_action("<action>  Go To  Cabinet 2. </action>", ADMISSIBLE)
    assert (p.action, p.valid, p.parse) == ("go to cabinet 2", True, "exact")
    assert parse_action('<action>"open fridge 1"</action>', ADMISSIBLE).action == "open fridge 1"


def test_last_action_tag_wins():
    p = parse_action("<action>look</action> wait, better: <action>open fridge 1</action>", ADMISSIBLE)
    assert p.action == "open fridge 1"


def test_fuzzy_match_repairs_small_misspellings():
    p = parse_action("<action>take apple 1 from the countertop 1</action>", ADMISSIBLE)
    assert (p.action, p.valid, p.parse) == ("take apple 1 from countertop 1", True, "fuzzy")
    assert p.raw_action == "take apple 1 from the countertop 1"


def test_unmatched_action_is_sent_as_written_and_invalid():
    p = parse_action("<think>hmm</think><action>fly to the moon</action>", ADMISSIBLE)
    assert (p.action, p.valid, p.parse) == ("fly to the moon", False, "unmatched")


def test_far_but_similar_actions_are_not_fuzzy_matched():
    # "go to cabinet 9" must not silently become "go to cabinet 2": that is a different place
    p = parse_action("<action>go to cabinet 9</action>", ADMISSIBLE)
    assert (p.action, p.valid, p.parse) == ("go to cabinet 9", False, "unmatched")


def test_unclosed_tag_and_action_line_and_last_line_fallbacks():
    assert parse_action("I should look.\n<action>open fridge 1", ADMISSIBLE).action == "open fridge 1"
    assert parse_action("Thought: it is cold\nAction: open fridge 1", ADMISSIBLE).action == "open fridge 1"
    p = parse_action("I will check what I carry.\ninventory", ADMISSIBLE)
    assert (p.action, p.parse) == ("inventory", "exact")


def test_empty_completion_is_invalid_placeholder():
    for text in ("", "   ", "<think>no idea</think>", "<action></action>"):
        p = parse_action(text, ADMISSIBLE)
        assert (p.action, p.valid, p.parse) == (NO_ACTION, False, "empty"), text


def test_without_admissible_list_action_is_free_and_validity_unknown():
    p = parse_action("<action>search[red running shoes size 9]</action>", None)
    assert (p.action, p.valid, p.parse) == ("search[red running shoes size 9]", None, "free")


def test_webshop_search_is_free_form_when_search_is_admissible():
    adm = ["search[<your query>]", "click[item - b01]"]
    p = parse_action("<action>search[blue mug under 20 dollars]</action>", adm)
    assert (p.action, p.valid, p.parse) == ("search[blue mug under 20 dollars]", True, "free")


def test_huge_action_is_truncated():
    _thought, action = split_completion("<action>" + "go " * 1000 + "</action>")
    assert len(action) <= 300


def test_stop_sequence_is_restored_before_parsing():
    assert _close_tags("<think>x</think><action>look") == "<think>x</think><action>look</action>"
    assert _close_tags("<action>look</action>") == "<action>look</action>"


@pytest.mark.parametrize("text,expected", [
    ("The agent put the apple in the fridge.\nVERDICT: SUCCESS", (True, True)),
    ("It never opened the fridge.\nVerdict: failure", (False, True)),
    ("**VERDICT:** SUCCESS", (True, True)),
    ("The task was accomplished.", (True, True)),
    ("The agent failed to find the mug.", (False, True)),
    ("I am not sure.", (False, False)),
    ("", (False, False)),
])
def test_judge_verdicts(text, expected):
    assert parse_verdict(text) == expected
