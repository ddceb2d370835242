"""What every method of `skillos run` is: a strategy around one executor episode per task.

    select skills (from its bank, or let the executor search the repo)
    → episode(s) on the executor → learn (edit its bank, by its own rules or an LLM) → next task

A method is a class with a pydantic ``Params`` model (its hyperparameters, each with its range, so a
bad value is refused before anything runs) and up to three hooks: `select`, `rollouts` and `learn`.
`play` strings them together and fills the task record the report reads. State lives in the skill repo
(`skillos.methods.bank`), so a run can be inspected, resumed or forked like any other repo.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from pydantic import BaseModel, ConfigDict

from skillos.methods.bank import Bank, skill_text
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.protocol.skillrepo import SearchMode
from skillos.stream import (
    CuratorLike,
    ExecutorLike,
    RepoLike,
    StreamConfig,
    TaskRecord,
    TaskSpec,
    new_record,
    play_episode,
    verdict,
)


class NoParams(BaseModel):
    model_config = ConfigDict(extra="forbid")


class MethodParams(BaseModel):
    """Base of every method's parameters: unknown names are errors, values are checked when built."""
    model_config = ConfigDict(extra="forbid", frozen=True)


@dataclass
class StreamContext:
    """The parts a method plays with: the stream's configuration and the services' clients.

    ``llm`` is the method's own writer (`skillos.llm.LLMClient`, the curator role's backend): the methods
    that distil skills or memory items with an LLM call it directly, as the curator service does."""
    config: StreamConfig
    executor: ExecutorLike
    curator: CuratorLike | None = None
    repo: RepoLike | None = None
    llm: Any = None

    def bank(self, method: str) -> Bank:
        assert self.repo is not None and self.config.repo, "a method with a memory needs a repo"
        return Bank(self.repo, self.config.repo, method)


class Method:
    name: ClassVar[str]
    title: ClassVar[str]          # how reports name it
    Params: ClassVar[type[BaseModel]] = NoParams
    uses_repo: ClassVar[bool] = True
    uses_curator: ClassVar[bool] = False   # the curator service (SkillOS)
    uses_writer: ClassVar[bool] = False    # an LLM of its own (distillation, queries)
    companions: ClassVar[tuple[str, ...]] = ()  # repos beside the stream's, named <repo>-<suffix>

    def __init__(self, params: BaseModel | None = None):
        self.p = params if params is not None else self.Params()

    @property
    def sequential(self) -> bool:
        """Tasks one after another (each sees the bank the previous one left); only No Memory overlaps."""
        return self.uses_repo

    def check(self, ctx: StreamContext) -> None:
        """Refuse to start without what the method needs (a clear error before any task runs)."""
        missing = []
        if self.uses_repo and (ctx.repo is None or not ctx.config.repo):
            missing.append("a skill repo and a repo name")
        if self.uses_curator and ctx.curator is None:
            missing.append("a curator")
        if self.uses_writer and ctx.llm is None:
            missing.append("an LLM for its writer (the curator role's backend)")
        if missing:
            raise ValueError(f"method {self.name!r} needs {' and '.join(missing)}")

    @classmethod
    def check_tasks(cls, env: str, task_types: set[str]) -> None:
        """Refuse a stream whose tasks the method cannot serve (a clear error before any task runs)."""

    # --- the hooks ---

    async def setup(self, ctx: StreamContext) -> None:
        """Once per stream, before the first task: the companion repos exist."""
        for suffix in self.companions:
            await self.companion(ctx, suffix).ensure()

    async def resume(self, ctx: StreamContext) -> None:
        """Once per resumed stream (`skillos run --resume`), instead of `setup`: the repo and its companions
        hold what the last finished task left, so a setup that writes to them (expert seeding) must not run
        again; a method that keeps state outside its repos rebuilds it here."""
        await Method.setup(self, ctx)

    def companion(self, ctx: StreamContext, suffix: str) -> Bank:
        return ctx.bank(self.name).companion(suffix)

    async def nearest(self, spec: TaskSpec, ctx: StreamContext, k: int, mode: SearchMode) -> list[SkillText]:
        """The ``k`` skills of the bank nearest the task's instruction, given inline."""
        hits = await ctx.bank(self.name).search(spec.instruction or spec.id, k, mode)
        return [skill_text(h.skill) for h in hits]

    async def select(self, position: int, spec: TaskSpec, ctx: StreamContext,
                     record: TaskRecord) -> list[SkillText] | None:
        """The skills for this task, given inline; None: the executor searches the repo itself (top k)."""
        return None

    async def rollouts(self, position: int, spec: TaskSpec, ctx: StreamContext, record: TaskRecord,
                       skills: list[SkillText] | None) -> EpisodeResponse | None:
        """The task's episode(s); the first is the one the record scores (the stream's outcome)."""
        if skills is None and self.uses_repo:
            return await play_episode(ctx.executor, spec, ctx.config, record, repo=ctx.config.repo)
        return await play_episode(ctx.executor, spec, ctx.config, record, skills=skills or None)

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        """Edit the bank after the episode (nothing for No Memory)."""

    async def boundary(self, position: int, ctx: StreamContext, record: TaskRecord) -> None:
        """After every task, whatever its episode or learning step did: where periodic rounds run
        (SAPO's promotion, SkillRL's evolution), so a failed task never skips one."""

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        """The method's own numbers for one stream (promotions, utilities, ...), for the report."""
        return {}

    # --- the template ---

    async def play(self, position: int, spec: TaskSpec, ctx: StreamContext) -> TaskRecord:
        record = new_record(position, spec, ctx.config)
        if not self.uses_repo:
            record.repo = None
        try:
            skills = await self.select(position, spec, ctx, record)
        except Exception as e:  # noqa: BLE001 - a bank that cannot be read: play without skills, say why
            record.curator_error = f"selection failed, played without skills: {type(e).__name__}: {e}"
            skills = []
        episode = await self.rollouts(position, spec, ctx, record, skills)
        if not self.uses_repo:
            return record
        if episode is not None and not episode.error:
            await self.count_outcome(position, ctx, record)
        if episode is not None and episode.error:
            # nothing is learned from a broken episode (LLM or env down): leave the bank as it is
            record.curator_error = "skipped: the episode failed with an error"
        elif episode is not None:
            try:
                await self.learn(position, spec, episode, ctx, record)
            except Exception as e:  # noqa: BLE001 - the stream goes on with the bank as it is
                record.curator_error = f"{type(e).__name__}: {e}"
        try:
            await self.boundary(position, ctx, record)
        except Exception as e:  # noqa: BLE001 - said in the record; the next round reads the repo afresh
            record.method_info["round_error"] = f"{type(e).__name__}: {e}"
        try:
            record.repo_size = (await ctx.repo.get_repo(ctx.config.repo)).skill_count
        except Exception:  # noqa: BLE001 - size is a report detail, not worth failing the task
            record.repo_size = None
        return record

    async def count_outcome(self, position: int, ctx: StreamContext, record: TaskRecord) -> None:
        """The environment's outcome counted for each skill the task was shown (the repo's measured utility,
        `skillos repo stats`): served only, as the paper's method shows every skill it retrieves, so a stream
        gives success when served, not the difference (that needs tasks the skill was withheld from)."""
        served = sorted({r["name"] for r in record.retrieved if r.get("name")})
        if not served:
            return
        key = f"run:{ctx.config.run_id or 'local'}:{position}:{record.task_id}"[:128]
        try:
            await ctx.repo.record_outcome(ctx.config.repo, key, record.success, "environment", served)
        except Exception as e:  # noqa: BLE001 - a number for the report, not worth failing the task
            record.method_info["utility_error"] = f"{type(e).__name__}: {e}"[:300]

    async def judged(self, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                     record: TaskRecord) -> bool:
        """The outcome the method may learn from: the self-judge, or the env with ``--oracle-judge``."""
        return await verdict(ctx.executor, episode, spec, ctx.config, record)


def mean(xs: Sequence[float | None]) -> float | None:
    xs = [x for x in xs if x is not None]
    return sum(xs) / len(xs) if xs else None


def info_values(records: Sequence[TaskRecord], key: str) -> list[Any]:
    return [r.method_info[key] for r in records if key in r.method_info]
