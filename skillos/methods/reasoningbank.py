"""ReasoningBank-style memory (Ouyang et al., 2026; a baseline of the SkillOS paper, §4.1): after each
task the executor judges its own outcome, an LLM distils up to ``max_items`` memory items (title,
description, content) from the trajectory — transferable strategies from a success, lessons and
pitfalls from a failure — and they are appended to the bank. Before a task the top ``k`` items most
similar to the instruction (sentence embeddings) are given to the executor. No consolidation and no
forgetting: the bank only grows, which is what the method is (the paper's own ablations add those).
"""

from __future__ import annotations

from collections.abc import Sequence

from pydantic import Field

from skillos.methods.bank import clip_description, unique_name
from skillos.methods.base import Method, MethodParams, StreamContext, info_values, mean
from skillos.methods.writer import parse_items, trajectory_text, write
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.protocol.skillrepo import SearchMode
from skillos.stream import TaskRecord, TaskSpec

SYSTEM = "You distil reusable memory items from an agent's experience. Answer in the format asked, nothing else."

SUCCESS = """The agent below completed this task successfully.

Task: {task}

Trajectory:
{trajectory}

Extract at most {n} memory items: the strategies that made it work and that would help with similar tasks.
Write each as:
Title: <a few words>
Description: <one sentence: when the item applies>
Content: <1-3 sentences of general advice; no object numbers from this game>"""

FAILURE = """The agent below did NOT complete this task.

Task: {task}

Trajectory:
{trajectory}

Reflect on why it failed. Extract at most {n} memory items: lessons and pitfalls that would prevent the
same failure on similar tasks.
Write each as:
Title: <a few words>
Description: <one sentence: when the item applies>
Content: <1-3 sentences: what went wrong and what to do instead; no object numbers from this game>"""


class Params(MethodParams):
    k: int = Field(1, ge=0, le=20, description="items given per task (ReasoningBank's default is 1)")
    retrieval: SearchMode = Field("dense", description="how items are found (the method embeds them)")
    max_items: int = Field(3, ge=1, le=10, description="items distilled per trajectory at most")
    max_tokens: int = Field(512, ge=64, le=4096)


class ReasoningBank(Method):
    name = "reasoningbank"
    title = "ReasoningBank"
    Params = Params
    uses_writer = True

    async def select(self, position: int, spec: TaskSpec, ctx: StreamContext,
                     record: TaskRecord) -> list[SkillText]:
        return await self.nearest(spec, ctx, self.p.k, self.p.retrieval)

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        success = await self.judged(spec, episode, ctx, record)
        template = SUCCESS if success else FAILURE
        text, tokens = await write(ctx.llm, SYSTEM, template.format(
            task=episode.instruction or spec.instruction, trajectory=trajectory_text(episode), n=self.p.max_items),
            max_tokens=self.p.max_tokens, seed=ctx.config.seed)
        items = parse_items(text, self.p.max_items)
        bank = ctx.bank(self.name)
        taken = set(await bank.skills())
        written = []
        for item in items:
            name = unique_name(item.title, taken, fallback="memory-item")
            taken.add(name)
            await bank.write(name, clip_description(item.description, item.title), item.content,
                             {"outcome": "success" if success else "failure", "source_task": spec.id[:200],
                              "position": position})
            written.append(name)
        record.curator_completion = text
        record.method_info.update(judged=success, items=written, writer_tokens=tokens,
                                  unreadable=not items)

    @classmethod
    def measures(cls, records: Sequence[TaskRecord]) -> dict[str, float | None]:
        items = info_values(records, "items")
        judged = info_values(records, "judged")
        return {"items_per_task": mean([len(i) for i in items]),
                "items_from_successes": float(sum(len(i) for i, j in zip(items, judged) if j)),
                "items_from_failures": float(sum(len(i) for i, j in zip(items, judged) if not j)),
                "unreadable_distillations": float(sum(bool(u) for u in info_values(records, "unreadable")))}


__all__ = ["ReasoningBank"]
