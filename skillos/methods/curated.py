"""SkillOS (the paper's method): the executor retrieves the top k skills from the repo by the task's
instruction; after the episode it judges its own success; the curator service reads the trajectory and
edits the repo with function calls (insert/update/delete), applied atomically by the repo."""

from __future__ import annotations

from skillos.methods.base import Method, StreamContext
from skillos.protocol.executor import EpisodeResponse
from skillos.stream import TaskRecord, TaskSpec, curate


class SkillOS(Method):
    name = "skillos"
    title = "SkillOS"
    uses_curator = True

    async def learn(self, position: int, spec: TaskSpec, episode: EpisodeResponse, ctx: StreamContext,
                    record: TaskRecord) -> None:
        judged = await self.judged(spec, episode, ctx, record)
        await curate(position, spec, episode, judged, ctx.config, ctx.curator, record)
