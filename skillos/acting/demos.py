"""Demonstrations per ALFWorld task type, played by the env's handcoded expert on ``valid_train``: the
ceiling arm's (`--method expert-demos`), shown as worked examples in the format of the skills' own.

ReAct (Yao et al.) shows two solved games of the task's own type; the executor used to show one
made-up "put a mug in shelf" for every type (bench/evidence/curation-alfworld-pick). The expert's
games come from `bench.bench_expert` (``data/alfworld_expert_valid_train.jsonl``, committed): only
``valid_train``, which no evaluation here reports on, and never a game of the task's own floorplan
(valid_seen's rooms are valid_train's: a demonstration in the same room can be the task's solution).
"""

from __future__ import annotations

import functools
import json
from pathlib import Path

from skillos.acting.state import NO_PROGRESS
from skillos.worked_examples import WorkedExample, compress

DATA = Path(__file__).resolve().parent / "data" / "alfworld_expert_valid_train.jsonl"


@functools.lru_cache(maxsize=4)
def _games(path: str) -> dict[str, list[dict]]:
    by_type: dict[str, list[dict]] = {}
    p = Path(path)
    if not p.exists():
        return by_type
    for line in p.read_text(encoding="utf-8").splitlines():
        if line.strip():
            g = json.loads(line)
            if g.get("won") and g.get("steps"):
                if str(g.get("task_id", "")).split("/")[0] not in ("valid_train", "train"):
                    continue  # never an evaluation split's game
                by_type.setdefault(g["type"], []).append(g)
    return by_type


def wasted_moves(actions: list[str]) -> int:
    """Visits of a place already visited where nothing was done before leaving again (the handcoded
    expert wanders like this in some pick-two games after its second take)."""
    seen: set[str] = set()
    waste = 0
    for a, nxt in zip(actions, [*actions[1:], ""], strict=True):
        if a.startswith("go to "):
            waste += a in seen and nxt.startswith("go to ")
            seen.add(a)
    return waste


def floorplan(task_id: str | None) -> str | None:
    """ALFWorld's floorplan (scene) of a game: the last field of its folder name
    (``valid_seen/look_at_obj_in_light-Bowl-None-DeskLamp-316/trial_…`` -> ``316``)."""
    parts = (task_id or "").split("/")
    if len(parts) < 2 or "-" not in parts[-2]:
        return None
    return parts[-2].rsplit("-", 1)[-1]


def pick(task_type: str, n: int, path: Path = DATA, task_id: str | None = None) -> list[dict]:
    """``n`` games of ``task_type``, stable across runs: no "help" in them, the fewest wasted moves, then
    those that open a closed place (they show the search), then those closest to the type's 40th
    percentile of length (neither the lucky two-step games nor the expert's wanders)."""
    # valid_seen's games are in the rooms of the training games: 60 of its 76 floorplans are among the
    # 200 of valid_train, and a demonstration in the task's own room can be its solution (the bowl on
    # the same desk under the same lamp). A demonstration is never of the task's floorplan.
    room = floorplan(task_id)
    games = [g for g in _games(str(path)).get(task_type, []) if room is None or floorplan(g["task_id"]) != room]
    if not games or n <= 0:
        return []
    lengths = sorted(len(g["steps"]) for g in games)
    typical = lengths[int(0.4 * (len(lengths) - 1))]

    def rank(g):
        actions = [s["action"] for s in g["steps"] if not s["action"].lower().startswith(NO_PROGRESS)]
        return ("help" in actions, wasted_moves(actions), not any(a.startswith("open ") for a in actions),
                abs(len(actions) - typical), g["task_id"])

    return sorted(games, key=rank)[:n]


def as_example(game: dict) -> WorkedExample | None:
    """An expert game as a worked example: compressed as the system compresses its own successes, so the
    executor reads both in one format (`skillos.worked_examples.prompt`)."""
    return compress("alfworld", game["instruction"], game["steps"], source="env", trajectory=game["task_id"])


def expert_examples(task_type: str | None, n: int, path: Path = DATA, task_id: str | None = None) -> list[WorkedExample]:
    """The demonstrations for a task of ``task_type``, never of the floorplan of ``task_id``."""
    return [e for g in pick(task_type or "", n, path, task_id) if (e := as_example(g)) is not None]
