"""The streaming loop of the paper (§3.1, Fig. 1): for each task of a stream

    executor episode (top-k skills retrieved from the repo, query = the instruction)
    → the executor judges its own success → the curator edits the repo → next task.

What happens around the episode is the method's (`skillos.methods`): SkillOS curates with the
curator service, the No Memory baseline does nothing, SkillRL, SAPO, Skill1, ReasoningBank and MemP
keep their own banks in the repo. The loop takes a built method and the context it plays in, and plays
the tasks in order (or overlapping, for a method without memory).
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from typing import Any, Protocol

from skillos.stream.types import TASK_POSITION, TaskRecord, TaskSpec


class StreamMethod(Protocol):
    """What the loop needs of a method (`skillos.methods.base.Method` is one)."""

    @property
    def sequential(self) -> bool: ...

    def check(self, ctx: Any) -> None: ...

    async def setup(self, ctx: Any) -> None: ...

    async def play(self, position: int, spec: TaskSpec, ctx: Any) -> TaskRecord: ...


async def run_stream(tasks: list[TaskSpec], method: StreamMethod, ctx: Any, *,
                     semaphore: asyncio.Semaphore | None = None,
                     on_task: Callable[[TaskRecord], Awaitable[None] | None] | None = None) -> list[TaskRecord]:
    """Play ``tasks`` in order with a built ``method`` (`skillos.methods.build_method`) in ``ctx`` (its
    `skillos.methods.StreamContext`: the stream's configuration, the executor, the curator, the repo and
    the method's writer). A method with a memory plays the steps one after another (each task sees the
    repo as the previous one left it); "none" plays them independently, overlapping up to ``semaphore``.
    ``on_task(record)`` (may be a coroutine function) is called as each task ends."""
    method.check(ctx)
    await method.setup(ctx)
    semaphore = semaphore or asyncio.Semaphore(1)

    async def one(position: int, spec: TaskSpec) -> TaskRecord:
        async with semaphore:
            token = TASK_POSITION.set(position)
            try:
                record = await method.play(position, spec, ctx)
            finally:
                TASK_POSITION.reset(token)
        if on_task is not None:
            maybe = on_task(record)
            if asyncio.iscoroutine(maybe):
                await maybe
        return record

    if not method.sequential:
        return list(await asyncio.gather(*(one(i, t) for i, t in enumerate(tasks))))
    return [await one(i, t) for i, t in enumerate(tasks)]
