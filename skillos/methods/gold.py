"""Gold skills: the repo starts with one hand-written procedure per task type, and is never curated: what
a correct skill does for this executor.

ALFWorld: six skills, `skillos/methods/gold_skills/<name>/SKILL.md`, written from the handcoded expert's
plans on valid_train (how they were derived: the README there). Reasoning: one per reasoning-gym family
of the evidence runs, `skillos/methods/gold_skills/reasoning/<name>/SKILL.md`, written by hand from the
family's task statement on the `train` split (the README there). Before the first task they are written to the stream's repo (a new version of each, beside a
``--from-repo`` library's skills); the executor then retrieves the top k for every task as it does for
SkillOS (``--k``, ``--retrieval``; ``--param gold.k=1`` gives it the top one only). No self-judge, no
curator, no writer. Every task's record says whether the first skill retrieved was its type's
(``method_info.right_skill_first``).
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path

from pydantic import Field

from skillos.methods.base import Method, MethodParams, StreamContext, info_values, mean
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.skills import SkillDoc, parse
from skillos.stream import TaskRecord, TaskSpec, play_episode

GOLD_DIR = Path(__file__).resolve().parent / "gold_skills"
# the env's gold skills: ALFWorld's at the top of GOLD_DIR (the first env that had them), others in a folder
GOLD_DIRS = {"alfworld": GOLD_DIR, "reasoning": GOLD_DIR / "reasoning"}


def gold_skills(folder: Path = GOLD_DIR) -> list[SkillDoc]:
    """The gold skills, by name; each names its task type in its metadata (``task_type``)."""
    return [parse(p.read_text(encoding="utf-8")) for p in sorted(folder.glob("*/SKILL.md"))]


class Params(MethodParams):
    k: int | None = Field(None, ge=1, le=20, description="skills the executor retrieves per task (None: the run's --k)")


class Gold(Method):
    name = "gold"
    title = "Gold skills"
    Params = Params

    def __init__(self, params=None):
        super().__init__(params)
        self.seeded: list[str] | None = None  # said in the first task's record

    @property
    def sequential(self) -> bool:
        """The repo does not change after `setup`, so tasks may overlap (``--concurrency``) as No Memory's do."""
        return False

    def check(self, ctx: StreamContext) -> None:
        super().check(ctx)
        if ctx.config.env not in GOLD_DIRS:
            raise ValueError(f"method 'gold' has skills for {' and '.join(sorted(GOLD_DIRS))} only, "
                             f"not {ctx.config.env!r}")

    @classmethod
    def check_tasks(cls, env: str, task_types: set[str]) -> None:
        """A type without its gold skill would be played with another type's procedure and counted as gold."""
        have = {doc.metadata.get("task_type") for doc in gold_skills(GOLD_DIRS[env])} if env in GOLD_DIRS else set()
        missing = sorted(task_types - have)
        if missing:
            raise ValueError(f"method 'gold' has no gold skill for task type(s) {', '.join(missing)} of {env!r}; "
                             f"it has: {', '.join(sorted(t for t in have if t))} (--task-type picks types)")

    async def setup(self, ctx: StreamContext) -> None:
        await super().setup(ctx)
        self.by_type = {}
        for doc in gold_skills(GOLD_DIRS[ctx.config.env]):
            await ctx.repo.put_skill(ctx.config.repo, doc.to_markdown())
            self.by_type[doc.metadata.get("task_type")] = doc.name
        self.seeded = sorted(self.by_type.values())

    async def rollouts(self, position: int, spec: TaskSpec, ctx: StreamContext, record: TaskRecord,
                       skills: list[SkillText] | None) -> EpisodeResponse | None:
        if self.seeded is not None:
            record.method_info["seeded"], self.seeded = self.seeded, None
        episode = await play_episode(ctx.executor, spec, ctx.config, record, repo=ctx.config.repo, k=self.p.k)
        kind = record.task_type or spec.type
        if record.retrieved and kind in self.by_type:
            record.method_info["right_skill_first"] = record.retrieved[0]["name"] == self.by_type[kind]
        return episode

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        return {"right_skill_first": mean([float(x) for x in info_values(records, "right_skill_first")])}
