"""The methods' bank rules on hand-computed cases (no services): Skill1's trend, variation, admission
and retirement; SAPO's utility, promotion and pruning; MemP's counters and forgetting; SkillRL's
evolution trigger and round-robin; the writer's parsers; and bad configuration refused up front."""

from __future__ import annotations

import math

import pytest

from skillos.methods import METHODS, MethodConfigError, build_method, method_params
from skillos.methods.memp import after_use, procedure_body, script_of, should_forget, task_key
from skillos.methods.sapo import marginal_utility, promotable, to_prune
from skillos.methods.skill1 import ema, parse_rank, retirement_score, variation
from skillos.methods.skillrl import categories_to_evolve, failure_severity, round_robin
from skillos.methods.writer import parse_items, parse_json_list, parse_json_object, tagged
from skillos.protocol.executor import EpisodeResponse, Timing, TokenCount, Turn


def test_all_methods_are_registered():
    assert list(METHODS) == ["none", "skillos", "skillrl", "sapo", "skill1", "reasoningbank", "memp", "gold",
                             "skillos-expert", "expert-demos"]
    assert [m for m, c in METHODS.items() if not c.uses_repo] == ["none", "expert-demos"]
    assert [m for m, c in METHODS.items() if c.uses_curator] == ["skillos", "skillos-expert"]


# --- Skill1 ---

def test_skill1_trend_is_an_ema_of_outcomes():
    assert ema(0.5, 1.0, 0.05) == pytest.approx(0.525)
    assert ema(0.525, 0.0, 0.05) == pytest.approx(0.49875)
    assert ema(0.2, 1.0, 1.0) == 1.0  # α = 1: the last outcome alone


def test_skill1_variation_is_outcome_minus_best_candidate_trend():
    assert variation(1.0, [0.5, 0.7, 0.1]) == pytest.approx(0.3)  # admitted: beat the library
    assert variation(0.0, [0.5]) == pytest.approx(-0.5)           # not admitted
    assert variation(1.0, [1.0]) == 0.0                           # equal is not better: not admitted
    assert variation(1.0, []) == 1.0                              # empty library: u* = 0


def test_skill1_retirement_prefers_low_utility_and_little_use():
    assert retirement_score(0.5, 0) == pytest.approx(0.5 * math.log(2))
    assert retirement_score(0.5, 10) > retirement_score(0.5, 0) > retirement_score(0.2, 0)
    assert retirement_score(0.2, 50) > retirement_score(0.5, 0)  # well tested beats new and unused


def test_skill1_rank_parsing():
    assert parse_rank("<rank>3, 1</rank>", 3) == [2, 0, 1]
    assert parse_rank("<rank>9, 2, 2</rank>", 3) == [1, 0, 2]  # unknown and repeated IDs dropped
    assert parse_rank("I cannot rank these", 3) is None


# --- SAPO ---

def test_sapo_marginal_utility_is_the_reward_gap():
    assert marginal_utility([0.0, 1.0], [1.0, 1.0]) == pytest.approx(0.5)
    assert marginal_utility([1.0], [0.0]) == -1.0
    assert marginal_utility([0.25, 0.75], [0.5, 0.5]) == 0.0


def test_sapo_promotes_positive_candidates_in_the_top_fraction():
    u = {"a": 0.5, "b": 0.2, "c": -0.1, "d": 0.0, "e": 0.3}
    assert promotable(u, 0.2) == ["a"]             # ⌈0.2·5⌉ = 1
    assert promotable(u, 0.5) == ["a", "e", "b"]   # ⌈2.5⌉ = 3
    assert promotable(u, 1.0) == ["a", "e", "b"]   # zero and negative never
    assert promotable({"x": 0.0, "y": -1.0}, 1.0) == []
    assert promotable({}, 0.2) == []


def test_sapo_prunes_the_lowest_utility_beyond_capacity():
    assert to_prune({"a": 0.5, "b": 0.1, "c": 0.3}, 2) == ["b"]
    assert to_prune({"a": 0.5, "b": 0.1}, 45) == []


# --- MemP ---

def test_memp_counts_uses_and_forgets_what_keeps_failing():
    meta = after_use({}, True)
    assert meta == {"uses": 1, "successes": 1, "failures": 0}
    meta = after_use(after_use(meta, False), False)
    assert meta == {"uses": 3, "successes": 1, "failures": 2}
    assert should_forget(meta, 3, 0.34)            # 1/3 < 0.34
    assert not should_forget(meta, 4, 0.34)        # not used enough yet
    assert not should_forget({"uses": 3, "successes": 2}, 3, 0.34)


def test_memp_keys_and_scripts():
    assert task_key("Put a clean apple 2 in fridge 1.") == "put a clean apple in fridge"
    turns = [Turn(index=i, observation="o", action=a, valid=v, parse="exact")
             for i, (a, v) in enumerate([("go to sinkbasin 1", True), ("fly", False), ("clean apple 1 with sinkbasin 1", True)])]
    ep = EpisodeResponse(episode_id="e", env="alfworld", task_id="t", success=True, steps=3, stop_reason="won",
                         turns=turns, skills=[], tokens=TokenCount(), timing=Timing())
    assert script_of(ep, 40) == ["go to sinkbasin 1", "clean apple 1 with sinkbasin 1"]
    assert script_of(ep, 1) == ["go to sinkbasin 1"]
    assert "1. go to sinkbasin 1\n2. clean apple 1 with sinkbasin 1" in procedure_body("clean it", script_of(ep, 40))


# --- SkillRL ---

def test_skillrl_evolves_categories_under_the_threshold_that_have_failures():
    outcomes = {"clean": [False, False, True], "heat": [True, True], "cool": [False], "look": [],
                "pick": [True, False]}
    assert categories_to_evolve(outcomes, 0.4) == ["clean", "cool"]  # 1/3 and 0 < 0.4; pick is 0.5
    assert categories_to_evolve(outcomes, 0.6) == ["clean", "cool", "pick"]
    assert categories_to_evolve({"x": [True]}, 1.0) == []  # nothing failed: nothing to learn from


def test_skillrl_samples_failures_round_robin_worst_first():
    assert round_robin({"a": [1, 2, 3], "b": [4]}, 3) == [1, 4, 2]
    assert round_robin({"a": [1, 2], "b": [3, 4]}, 10) == [1, 3, 2, 4]
    ranked = sorted([{"invalid": 1, "steps": 5}, {"invalid": 4, "steps": 2}, {"invalid": 1, "steps": 9}],
                    key=failure_severity)
    assert ranked == [{"invalid": 4, "steps": 2}, {"invalid": 1, "steps": 9}, {"invalid": 1, "steps": 5}]


# --- the writer's parsers ---

def test_parse_items_reads_labelled_blocks_and_keeps_unlabelled_text():
    text = ("# Memory Item 1\n## Title: Check the sink first\n## Description: cleaning tasks\n"
            "## Content: Go to the sinkbasin\nthen clean.\n\n**Title**: Count objects\n**Description**: pick two\n"
            "**Content**: Keep a tally.")
    items = parse_items(text, 3)
    assert [(i.title, i.description) for i in items] == [("Check the sink first", "cleaning tasks"),
                                                         ("Count objects", "pick two")]
    assert items[0].content == "Go to the sinkbasin\nthen clean."
    assert len(parse_items(text, 1)) == 1
    loose = parse_items("Always look around before acting.\nThen act.", 3)
    assert len(loose) == 1 and loose[0].description == "" and "Then act." in loose[0].content
    assert parse_items("   ", 3) == []


def test_json_and_tag_parsers():
    assert parse_json_object('Sure! ```json\n{"a": {"b": 1}}\n``` done') == {"a": {"b": 1}}
    assert parse_json_object("no json {here") is None
    assert parse_json_list('[{"title": "x"}, 3, {"title": "y"}]') == [{"title": "x"}, {"title": "y"}]
    assert parse_json_list('{"title": "only"}') == [{"title": "only"}]
    assert tagged("<query>heat the mug</query>", "query") == "heat the mug"
    assert tagged("<rank>1, 2", "rank") == "1, 2"
    assert tagged("nothing", "rank") is None


# --- configuration ---

def test_parameters_are_checked_before_anything_runs():
    assert method_params(["memp", "reasoningbank"], ["k=3"]) == {"memp": {"k": 3}, "reasoningbank": {"k": 3}}
    assert method_params(["sapo", "memp"], ["sapo.k=2", "memp.forget_below=0.5"]) == {
        "sapo": {"k": 2}, "memp": {"forget_below": 0.5}}
    with pytest.raises(MethodConfigError, match="top_fraction"):
        method_params(["sapo"], ["top_fraction=1.5"])
    with pytest.raises(MethodConfigError, match="unknown method 'memq'"):
        method_params(["memq"], [])
    with pytest.raises(MethodConfigError, match="no method played .* has a parameter 'nonsense'"):
        method_params(["skill1"], ["nonsense=1"])
    with pytest.raises(MethodConfigError, match="'memp' is not among those played"):
        method_params(["skill1"], ["memp.k=2"])
    with pytest.raises(MethodConfigError, match="KEY=VALUE"):
        method_params(["skill1"], ["alpha"])
    with pytest.raises(MethodConfigError, match="alpha"):
        build_method("skill1", {"alpha": 0})
    with pytest.raises(MethodConfigError, match="retrieval"):
        build_method("memp", {"retrieval": "fuzzy"})
    assert build_method("skill1").p.alpha == 0.05 and build_method("sapo").p.capacity == 45


def test_gold_refuses_a_task_type_without_its_gold_skill():
    gold = METHODS["gold"]
    gold.check_tasks("alfworld", {"pick", "clean", "look"})          # every ALFWorld type has one
    gold.check_tasks("reasoning", {"gsm_symbolic", "letter_counting"})
    with pytest.raises(ValueError, match="no gold skill for task type.*chain_sum.*letter_counting"):
        gold.check_tasks("reasoning", {"chain_sum", "letter_counting"})
    with pytest.raises(ValueError, match="webshop"):
        gold.check_tasks("webshop", {"webshop"})
    METHODS["none"].check_tasks("reasoning", {"chain_sum"})          # the other methods serve any type
