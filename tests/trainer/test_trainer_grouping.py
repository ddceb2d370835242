"""Task grouping: agentic by type, reasoning-gym tasks by family, soft-Jaccard on real MiniLM embeddings,
the Stage 2 gate."""

import json
import subprocess
import sys
from types import SimpleNamespace

import pytest
from conftest import ROOT, run_service

from services.envs.reasoning.gym import ReasoningGym
from services.trainer.grouping.agentic import group_by_type
from services.trainer.grouping.annotate import Annotation, AnnotationCache, cache_key, parse_annotation
from services.trainer.grouping.families import group_by_family
from services.trainer.grouping.io import group_statistics, read_groups, write_groups
from services.trainer.grouping.reasoning import GroupBuilder, GroupingParams, Item
from services.trainer.grouping.similarity import PhraseEncoder, matched_pairs, soft_jaccard


def _tasks(counts: dict[str, int]):
    return [SimpleNamespace(id=f"{t}-{i}", type=t, instruction=f"do {t} {i}")
            for t, n in counts.items() for i in range(n)]


def test_natural_groups_keep_type_frequencies_and_never_mix_types(tmp_path):
    tasks = _tasks({"pick": 35, "look": 13, "heat": 16, "tiny": 4})
    groups, extra = group_by_type(tasks, "alfworld", size=10, distribution="natural", seed=1)
    per_type = {g.meta["type"] for g in groups}
    assert per_type == {"pick", "look", "heat"}                # "tiny" has < 10 tasks
    assert extra["types_skipped_too_few_tasks"] == {"tiny": 4}
    assert [g.meta["type"] for g in groups].count("pick") == 3
    for g in groups:
        assert len(g.tasks) == 10 and {t.type for t in g.tasks} == {g.meta["type"]}
    ids = [t.id for g in groups for t in g.tasks]
    assert len(ids) == len(set(ids))                           # natural: no task used twice
    write_groups(tmp_path / "g.jsonl", groups)
    back = read_groups(tmp_path / "g.jsonl")
    assert [g.id for g in back] == [g.id for g in groups]
    assert group_statistics(back)["tasks_distinct"] == 50


def test_uniform_groups_give_every_type_the_same_count():
    groups, extra = group_by_type(_tasks({"pick": 40, "look": 12}), "alfworld", size=10,
                                  distribution="uniform", num_groups=6, seed=0)
    kinds = [g.meta["type"] for g in groups]
    assert kinds.count("pick") == kinds.count("look") == 3
    for g in groups:
        assert len({t.id for t in g.tasks}) == 10            # reuse across groups, never within one
    assert extra["uniform_refills"] > 0


def test_bad_grouping_input_is_refused_with_a_reason(tmp_path):
    with pytest.raises(ValueError, match="at least 2"):
        group_by_type(_tasks({"pick": 5}), "alfworld", size=1)
    with pytest.raises(ValueError, match="lower the group size"):
        group_by_type(_tasks({"pick": 5}), "alfworld", size=10)
    (tmp_path / "bad.jsonl").write_text(json.dumps({"id": "x", "tasks": [{"id": "only-one"}]}) + "\n")
    with pytest.raises(ValueError, match="at least 2 tasks"):
        read_groups(tmp_path / "bad.jsonl")


def test_reasoning_groups_by_family_have_random_sizes_5_to_12():
    gym = ReasoningGym(["chain_sum", "gsm_symbolic", "letter_counting"], tasks_per_split=60)
    tasks = gym.tasks("train") + _tasks({"tiny": 3})
    groups, extra = group_by_family(tasks, size_min=5, size_max=12, seed=3)
    assert extra["families_skipped_too_few_tasks"] == {"tiny": 3}
    sizes = [len(g.tasks) for g in groups]
    assert all(5 <= n <= 12 for n in sizes) and len(set(sizes)) > 3          # drawn per group, not fixed
    for g in groups:
        assert {t.type for t in g.tasks} == {g.meta["type"]} and g.env == "reasoning"
    ids = [t.id for g in groups for t in g.tasks]
    assert len(ids) == len(set(ids)) and len(ids) + extra["tasks_left_out"] == 180
    assert [g.meta["type"] for g in groups[:3]] == ["chain_sum", "gsm_symbolic", "letter_counting"]   # interleaved
    again, _ = group_by_family(tasks, size_min=5, size_max=12, seed=3)
    assert [[t.id for t in g.tasks] for g in again] == [[t.id for t in g.tasks] for g in groups]
    capped, extra = group_by_family(tasks, num_groups=4, seed=3)
    assert len(capped) == 4 and extra["groups_available"] == len(groups)
    with pytest.raises(ValueError, match="at least 5 tasks"):
        group_by_family(_tasks({"a": 4}))


def test_group_reasoning_cli_groups_reasoning_gym_tasks_by_family(tmp_path):
    args = ["reasoning", "--source", "reasoning-gym", "--families", "chain_sum,base_conversion", "--tasks-per-split",
            "30"]
    with run_service(args, tmp_path=tmp_path) as svc:
        out = subprocess.run([sys.executable, "-m", "skillos.cli", "group", "reasoning", "--env-url", svc.url,
                              "--num-groups", "6", "--out", str(tmp_path / "g.jsonl")],
                             check=False, cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    groups = read_groups(tmp_path / "g.jsonl")
    assert len(groups) == 6 and {g.meta["type"] for g in groups} == {"chain_sum", "base_conversion"}
    assert all(5 <= len(g.tasks) <= 12 and t.id.split("/")[2] == "train" for g in groups for t in g.tasks)
    assert json.loads(out.stdout)["grouping"] == "family"
    # the trainer's groups on the fly (no groups_file) follow the same rule for the reasoning env
    from services.trainer.config import TrainConfig
    from services.trainer.trainer import load_groups

    cfg = TrainConfig.model_validate({"data": {"env": "reasoning", "split": "train", "num_groups": 5}})
    with run_service(args, tmp_path=tmp_path) as svc:
        fly = load_groups(cfg, SimpleNamespace(env_url=lambda env: svc.url, api_token=""))
    assert len(fly) == 5 and all(5 <= len(g.tasks) <= 12 and len({t.type for t in g.tasks}) == 1 for g in fly)


@pytest.fixture(scope="module")
def encoder():
    return PhraseEncoder()


def test_soft_jaccard_matches_paraphrases_with_minilm(encoder):
    a = ["quadratic equations", "factoring polynomials", "unit conversion"]
    b = ["quadratic equations", "polynomial factorization", "prime numbers"]
    assert matched_pairs(a, b, None) == 1                      # exact only
    m = matched_pairs(a, b, encoder, tau=0.6)
    assert m == 2                                              # + factoring ~ factorization
    assert soft_jaccard(a, b, encoder, 0.6) == pytest.approx(2 / (3 + 3 - 2))
    assert soft_jaccard([], [], encoder) == 0.0
    # one-to-one: two copies of a paraphrase cannot both match one phrase
    assert matched_pairs(["polynomial factorization"], ["factoring polynomials", "factorizing polynomials"],
                         encoder) == 1


def _item(i, concepts, skills, heur, pit, topics, d):
    return Item(f"q{i}", f"question {i}", Annotation(concepts=concepts, skills=skills, heuristics=heur,
                                                       pitfalls=pit, topics=topics), d)


def test_dependency_gate_and_groups(encoder):
    base = {"heur": ["work backwards"], "pit": ["sign errors"]}
    items = [
        _item(0, ["linear equations"], ["solving equations"], topics=["algebra"], d=1.0, **base),
        # related with a new concept and harder: admissible successor of 0
        _item(1, ["linear equations", "systems of equations"], ["solving equations", "substitution"],
              topics=["algebra", "systems"], d=2.0, **base),
        # exact duplicate attributes: near-duplicate, refused
        _item(2, ["linear equations"], ["solving equations"], topics=["algebra"], d=2.0, **base),
        # unrelated: no shared foundation
        _item(3, ["triangle congruence"], ["geometric proof"], ["draw a diagram"], ["misreading figures"],
              ["geometry"], 2.0),
        # related but easier: refused by the forward curriculum in "up" mode
        _item(4, ["linear equations", "slope"], ["solving equations", "graphing"], topics=["algebra", "graphs"],
              d=0.0, **base),
    ]
    b = GroupBuilder(items, encoder, GroupingParams(size_min=2, size_max=3), seed=0)
    assert b.score_pair(items[0], items[1], "up").passed
    assert b.score_pair(items[0], items[2], "up").reason == "near_duplicate"
    assert b.score_pair(items[0], items[3], "up").reason == "shared_foundation"
    assert b.score_pair(items[0], items[4], "up").reason == "curriculum"
    nxt, fallback, _mode = b.successor(0, {0})
    if _mode == "up":
        assert nxt == 1 and not fallback
    groups, extra = b.build(num_groups=3)
    assert groups, extra
    for g in groups:
        assert len({t.id for t in g.tasks}) == len(g.tasks) >= 2
    assert extra["curriculum"] is True and "params" in extra


def test_annotation_parsing_and_cache(tmp_path):
    ann = parse_annotation('```json\n{"topics": ["Algebra", "algebra", ""], "skills": ["a b c d e f g"],'
                           ' "concepts": ["ratio"], "heuristics": ["guess"], "pitfalls": ["sign"]}\n```')
    assert ann.topics == ["algebra"] and ann.skills == ["a b c d e"]
    with pytest.raises(ValueError, match="concepts, heuristics"):     # the schema's minItems 1
        parse_annotation('{"topics": ["x"], "skills": ["y"], "concepts": [], "heuristics": [], "pitfalls": ["z"]}')
    cache = AnnotationCache(tmp_path / "c.jsonl")
    key = cache_key("m", "what is 1+1")
    cache.put(key, "t1", ann, ok=True)
    cache.put(cache_key("m", "other"), "t2", Annotation(), ok=False, reason="bad json")
    again = AnnotationCache(tmp_path / "c.jsonl")
    assert again.get(key) == ann and again.get(cache_key("m", "other")) is None
