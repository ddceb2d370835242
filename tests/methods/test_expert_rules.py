"""Issue 23's expert material without services: the gold skills (format, size, one per type, BM25 finds
its type's skill first for every instruction of the data), the committed expert games (valid_train only),
how `skillos-expert` picks its games, and the expert command's refusal of the evaluation split."""

from __future__ import annotations

import json
import subprocess
import sys
from collections import Counter

import pytest

from services.skillrepo.search import BM25Index, document_tokens, tokenize
from skillos.curation.prompt import MAX_TURNS_SHOWN
from skillos.methods import MethodConfigError, build_method
from skillos.methods.expert_seeded import DEMOS, TYPES, choose, expert_trajectory, load_demos
from skillos.methods.gold import GOLD_DIRS, gold_skills
from tests.conftest import ROOT, SHARED_DATA

ALFWORLD = SHARED_DATA / "alfworld"


def test_six_gold_skills_one_per_type_each_short():
    skills = gold_skills()
    assert sorted(s.metadata["task_type"] for s in skills) == sorted(TYPES)
    # the expert's own action for the step that makes each type what it is, in ALFWorld's words
    key_action = {"pick": "move OBJECT to", "pick2": "move OBJECT to", "look": "use desklamp 1",
                  "clean": "clean OBJECT with sinkbasin 1", "heat": "heat OBJECT with microwave 1",
                  "cool": "cool OBJECT with fridge 1"}
    for s in skills:
        assert len(s.to_markdown()) <= 1000, (s.name, len(s.to_markdown()))
        assert "go to " in s.body and "take OBJECT from PLACE" in s.body, s.name
        assert key_action[s.metadata["task_type"]] in s.body, s.name


@pytest.mark.skipif(not ALFWORLD.exists(), reason="ALFWorld data not present")
def test_bm25_ranks_the_types_gold_skill_first_for_every_instruction():
    from services.envs.alfworld.catalog import Catalog

    index = BM25Index()
    skills = gold_skills()
    for s in skills:
        index.upsert(s.name, document_tokens(s.name, s.description, s.body))
    by_type = {s.metadata["task_type"]: s.name for s in skills}
    catalog = Catalog(ALFWORLD)
    wrong = Counter()
    tasks = [t for split in ("valid_train", "valid_seen") for t in catalog.by_split.get(split, [])]
    for t in tasks:
        top = index.search(tokenize(t.instruction), 1)
        if not top or top[0][0] != by_type[t.type]:
            wrong[(t.type, t.instruction, top[0][0] if top else None)] += 1
    assert tasks and not wrong, wrong.most_common(10)


REASONING_FAMILIES = ("letter_counting", "spell_backward", "number_sorting", "gsm_symbolic")


def test_reasoning_gold_skills_one_per_family_found_first_for_train_and_valid_problems():
    """The reasoning gold skills (one per family of the evidence runs) are short, and BM25 ranks the
    family's own first for the first 50 problems of each family on train and valid."""
    from services.envs.reasoning.gym import ReasoningGym

    skills = gold_skills(GOLD_DIRS["reasoning"])
    assert sorted(s.metadata["task_type"] for s in skills) == sorted(REASONING_FAMILIES)
    assert all(len(s.to_markdown()) <= 1000 for s in skills), [(s.name, len(s.to_markdown())) for s in skills]
    index = BM25Index()
    for s in skills:
        index.upsert(s.name, document_tokens(s.name, s.description, s.body))
    by_type = {s.metadata["task_type"]: s.name for s in skills}
    gym = ReasoningGym(REASONING_FAMILIES, tasks_per_split=50)
    wrong = [(t.id, top[0][0] if top else None) for split in ("train", "valid") for t in gym.tasks(split)
             if not (top := index.search(tokenize(t.instruction), 1)) or top[0][0] != by_type[t.type]]
    assert not wrong, wrong[:10]


def test_committed_expert_games_are_valid_train_and_won():
    lines = [json.loads(x) for x in DEMOS.read_text().splitlines() if x.strip()]
    assert len(lines) == 200 and {g["split"] for g in lines} == {"valid_train"}
    assert all(g["task_id"].startswith("valid_train/") for g in lines)
    assert Counter(g["type"] for g in lines).keys() == set(TYPES)
    assert sum(g["won"] for g in lines) >= 190
    first = lines[0]
    assert first["steps"][0]["observation"] == first["first_observation"]
    assert {"observation", "action"} <= set(first["steps"][0])


def test_expert_seed_picks_games_round_robin_and_refuses_an_evaluation_game(tmp_path):
    games = load_demos()
    chosen = choose(games, 8, TYPES)
    assert [g["type"] for g in chosen] == [*TYPES, "pick", "look"]
    assert chosen[6]["task_id"] != chosen[0]["task_id"]
    assert all(len(g["steps"]) <= MAX_TURNS_SHOWN for g in chosen)  # the curator sees them whole
    assert [g["type"] for g in choose(games, 3, ["heat"])] == ["heat"] * 3
    t = expert_trajectory(chosen[0])
    assert t.env_success and [x.action for x in t.turns] == [s["action"] for s in chosen[0]["steps"]]

    leak = tmp_path / "leak.jsonl"
    leak.write_text(json.dumps({**games[0], "task_id": "valid_seen/x/trial", "split": "valid_seen"}) + "\n")
    with pytest.raises(ValueError, match="never the evaluation split"):
        load_demos(leak)
    with pytest.raises(MethodConfigError, match="unknown task types"):
        build_method("skillos-expert", {"types": "pick,boil"})
    assert build_method("skillos-expert", {"types": "heat, cool"}).p.types == "heat,cool"


def test_expert_command_refuses_the_evaluation_split(tmp_path):
    out = tmp_path / "demos.jsonl"
    proc = subprocess.run([sys.executable, "-m", "bench.bench_expert", "--split", "valid_seen", "--out", str(out)],
                          cwd=ROOT, capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 2 and "evaluation split" in proc.stderr and "--allow-eval-split" in proc.stderr
    assert not out.exists()
