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
import heapq
import itertools
from collections.abc import AsyncIterator, Awaitable, Callable, Mapping
from contextlib import asynccontextmanager
from typing import Any, Protocol

from skillos.stream.types import TASK_POSITION, TaskRecord, TaskSpec


class StreamMethod(Protocol):
    """What the loop needs of a method (`skillos.methods.base.Method` is one)."""

    @property
    def sequential(self) -> bool: ...

    def check(self, ctx: Any) -> None: ...

    async def setup(self, ctx: Any) -> None: ...

    async def resume(self, ctx: Any) -> None: ...

    async def play(self, position: int, spec: TaskSpec, ctx: Any) -> TaskRecord: ...


class TaskSlots:
    """At most ``n`` episodes at once over every stream of a run, the earliest task position first (a
    semaphore grants them in arrival order: a stream that queued all its tasks first, e.g. No Memory while
    a method was still setting up, would play all of them before the other began). Streams side by side (a
    method and its baseline) so advance together, and a run stopped early holds whole pairs."""

    def __init__(self, n: int):
        self._free = max(1, n)
        self._waiting: list[tuple[int, int, asyncio.Future]] = []
        self._order = itertools.count()

    @asynccontextmanager
    async def take(self, position: int) -> AsyncIterator[None]:
        if self._free > 0 and not self._waiting:
            self._free -= 1
        else:
            granted = asyncio.get_running_loop().create_future()
            heapq.heappush(self._waiting, (position, next(self._order), granted))
            try:
                await granted
            except asyncio.CancelledError:
                if granted.done() and not granted.cancelled():
                    self._release()   # granted as we were cancelled: pass the slot on
                raise
        try:
            yield
        finally:
            self._release()

    def _release(self) -> None:
        while self._waiting:
            _, _, waiter = heapq.heappop(self._waiting)
            if not waiter.done():   # a waiter cancelled while queued is skipped
                waiter.set_result(None)
                return
        self._free += 1


async def run_stream(tasks: list[TaskSpec], method: StreamMethod, ctx: Any, *,
                     semaphore: asyncio.Semaphore | TaskSlots | None = None,
                     on_task: Callable[[TaskRecord], Awaitable[None] | None] | None = None,
                     finished: Mapping[int, TaskRecord] | None = None) -> list[TaskRecord]:
    """Play ``tasks`` in order with a built ``method`` (`skillos.methods.build_method`) in ``ctx`` (its
    `skillos.methods.StreamContext`: the stream's configuration, the executor, the curator, the repo and
    the method's writer). A method with a memory plays the steps one after another (each task sees the
    repo as the previous one left it); "none" plays them independently, overlapping up to ``semaphore`` (a
    `TaskSlots` shared by the streams of a run: the earliest positions first).
    ``on_task(record)`` (may be a coroutine function) is called as each task ends.

    ``finished``: the records of tasks an earlier run of this stream already played (a resumed run), kept
    as they are and not played again. A sequential stream resumes after its finished prefix, on a repo the
    caller restored to what the last of them left, so the method's ``resume`` hook runs instead of its
    ``setup`` (which may have written to that repo already)."""
    method.check(ctx)
    finished = dict(finished or {})
    if method.sequential and finished:
        missing = [p for p in range(max(finished) + 1) if p not in finished]
        if missing:
            raise ValueError(f"a sequential stream resumes after a finished prefix; positions {missing[:5]} "
                             "were not played")
        await method.resume(ctx)
    else:
        await method.setup(ctx)
    semaphore = semaphore or asyncio.Semaphore(1)

    async def one(position: int, spec: TaskSpec) -> TaskRecord:
        if position in finished:
            return finished[position]
        async with (semaphore.take(position) if isinstance(semaphore, TaskSlots) else semaphore):
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
