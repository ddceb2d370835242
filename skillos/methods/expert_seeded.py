"""SkillOS with an expert cold start (SkillRL's, §3.1): before the first task the curator service reads K
games of ALFWorld's handcoded expert on valid_train, each as a successful episode, and its ops are
applied to the stream's repo; then the stream runs as SkillOS does.

The games are `skillos/acting/data/alfworld_expert_valid_train.jsonl` (written by `bench.bench_expert`),
won ones only, ``trajectories`` of them taken round-robin over ``types`` (6: one game of each type), in
the file's order with those the curator's prompt shows whole first. Each is sent as the stream sends an
episode (`skillos.stream.curate_trajectory`): the expert's actions as the turns (no thoughts), judged
successful, with the repo's top k skills for its instruction as the retrieved ones, so a later game may
update what an earlier one inserted. The ops' origin in the repo's op log is position -1 with the game's
id. The first task's record says what was read and what came of it (``method_info.expert_seed``). A
game of an evaluation split is refused.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from pydantic import Field, field_validator

import skillos
from skillos.curation.prompt import MAX_TURNS_SHOWN
from skillos.methods.base import MethodParams, StreamContext, info_values
from skillos.methods.curated import SkillOS
from skillos.protocol.curator import Trajectory, TrajectoryTurn
from skillos.stream import TaskRecord, TaskSpec, curate_trajectory, new_record

DEMOS = Path(skillos.__file__).resolve().parent / "acting" / "data" / "alfworld_expert_valid_train.jsonl"
TYPES = ("pick", "look", "clean", "heat", "cool", "pick2")
DEMO_SPLITS = ("valid_train", "train")  # never an evaluation split's game


def load_demos(path: Path = DEMOS) -> list[dict]:
    """The won games of the file, in its order; refuses one of another split than ``DEMO_SPLITS``."""
    games = []
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        game = json.loads(line)
        split = game.get("split") or str(game.get("task_id", "")).split("/")[0]
        if split not in DEMO_SPLITS:
            raise ValueError(f"{path}:{n}: game {game.get('task_id')!r} is of split {split!r}; expert seeds come "
                             f"from {' or '.join(DEMO_SPLITS)} only (never the evaluation split)")
        if game.get("won") and game.get("steps"):
            games.append(game)
    return games


def choose(games: list[dict], k: int, types: Sequence[str]) -> list[dict]:
    """``k`` games round-robin over ``types``: the first of each type, then the second, ... Games the
    curator's prompt shows whole (at most `MAX_TURNS_SHOWN` steps) come first, in the file's order: the
    expert's long games are mostly its loops (pick2), which the prompt would cut in the middle."""
    games = sorted(games, key=lambda g: len(g["steps"]) > MAX_TURNS_SHOWN)  # stable: the file's order kept
    by_type = {t: [g for g in games if g["type"] == t] for t in types}
    chosen: list[dict] = []
    for i in range(max((len(v) for v in by_type.values()), default=0)):
        for t in types:
            if len(chosen) < k and i < len(by_type[t]):
                chosen.append(by_type[t][i])
    return chosen


def expert_trajectory(game: dict) -> Trajectory:
    return Trajectory(task=game["instruction"], task_id=game["task_id"], task_type=game["type"], env="alfworld",
                      turns=[TrajectoryTurn(observation=s["observation"], action=s["action"], valid=True)
                             for s in game["steps"]],
                      env_success=bool(game["won"]))


class Params(MethodParams):
    trajectories: int = Field(6, ge=1, le=200, description="expert games the curator reads before the stream "
                                                           "(round-robin over types: 6 = one per type)")
    types: str = Field(",".join(TYPES), description="task types the games are taken from, comma-separated")

    @field_validator("types")
    @classmethod
    def _known_types(cls, v: str) -> str:
        kinds = [t.strip() for t in v.split(",") if t.strip()]
        unknown = [t for t in kinds if t not in TYPES]
        if unknown or not kinds:
            raise ValueError(f"unknown task types {unknown}: use some of {', '.join(TYPES)}")
        return ",".join(kinds)


class ExpertSeededSkillOS(SkillOS):
    name = "skillos-expert"
    title = "SkillOS, expert-seeded"
    Params = Params

    def __init__(self, params=None):
        super().__init__(params)
        self.seed_info: dict | None = None  # said in the first task's record

    def check(self, ctx: StreamContext) -> None:
        super().check(ctx)
        if ctx.config.env != "alfworld":
            raise ValueError(f"method {self.name!r} reads ALFWorld expert games; the env is {ctx.config.env!r}")

    async def setup(self, ctx: StreamContext) -> None:
        await super().setup(ctx)
        games = choose(load_demos(), self.p.trajectories, self.p.types.split(","))
        bank = ctx.bank(self.name)
        calls = []
        for game in games:
            spec = TaskSpec(id=game["task_id"], type=game["type"], instruction=game["instruction"])
            hits = await bank.search(game["instruction"], ctx.config.k, ctx.config.retrieval)
            record = new_record(-1, spec, ctx.config)
            response = await curate_trajectory(-1, spec, expert_trajectory(game), True, [h.skill for h in hits],
                                               ctx.config, ctx.curator, record)
            # what the curator was shown: the user message of its prompt (the task, the expert's turns, skills)
            shown = next((m.get("content", "") for m in reversed(response.messages) if m.get("role") == "user"),
                         "") if response else ""
            calls.append({"task_id": game["task_id"], "type": game["type"], "steps": len(game["steps"]),
                          "retrieved": [h.skill.name for h in hits], "error": record.curator_error,
                          "validity_rate": record.validity_rate, "call_id": record.curator_call_id,
                          "prompt": str(shown)[:4000], "completion": record.curator_completion[:2000],
                          "ops": [asdict(op) for op in record.ops]})
        skills = await bank.skills()
        self.seed_info = {"source": str(DEMOS.relative_to(DEMOS.parents[3])), "trajectories": len(calls),
                          "calls": calls, "applied": sum(op["applied"] for c in calls for op in c["ops"]),
                          "skills": sorted(skills)}

    async def play(self, position: int, spec: TaskSpec, ctx: StreamContext) -> TaskRecord:
        record = await super().play(position, spec, ctx)
        if self.seed_info is not None:
            record.method_info["expert_seed"], self.seed_info = self.seed_info, None
        return record

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        seeds = info_values(records, "expert_seed")
        if not seeds:
            return {}
        return {"expert_games_read": float(seeds[0]["trajectories"]),
                "seed_ops_applied": float(seeds[0]["applied"]),
                "skills_before_task_1": float(len(seeds[0]["skills"]))}
