"""Expert demonstrations: No Memory, but each episode shows the handcoded expert's won games of the task's
own type (`--acting demos=expert` for this arm alone). Not the paper's setting (its executor sees no
demonstration, and a deployment has no expert): the ceiling a table shows beside the floor (No Memory)
and the method, on the same tasks. ALFWorld only.
"""

from __future__ import annotations

import dataclasses

from skillos.acting.options import ActingOptions
from skillos.methods.base import Method, StreamContext
from skillos.protocol.executor import EpisodeResponse, SkillText
from skillos.stream import TaskRecord, TaskSpec, play_episode


class ExpertDemos(Method):
    name = "expert-demos"
    title = "Expert demos (ceiling)"
    uses_repo = False

    @classmethod
    def check_tasks(cls, env: str, task_types: set[str]) -> None:
        if env != "alfworld":
            raise ValueError(f"method {cls.name!r} shows ALFWorld's expert games: it has none for {env}")

    async def rollouts(self, position: int, spec: TaskSpec, ctx: StreamContext, record: TaskRecord,
                       skills: list[SkillText] | None) -> EpisodeResponse | None:
        # the run's acting options (the executor's defaults when none were given) with the expert's games on
        acting = (ctx.config.acting or ActingOptions()).model_copy(update={"demos": "expert"})
        config = dataclasses.replace(ctx.config, acting=acting)
        return await play_episode(ctx.executor, spec, config, record)
