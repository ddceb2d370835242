"""`TaskSlots`: the episodes of a run's streams share its concurrency, the earliest task position first, so a
method and its baseline advance together (a semaphore let the stream that queued first play all its tasks
before the other began: a run stopped early then held no pairs)."""

from __future__ import annotations

import asyncio

from skillos.stream import TaskSlots


async def _play(slots: TaskSlots, plans: dict[str, int], delay: float = 0.01) -> list[tuple[str, int]]:
    order: list[tuple[str, int]] = []

    async def one(stream: str, position: int) -> None:
        async with slots.take(position):
            order.append((stream, position))
            await asyncio.sleep(delay)

    tasks = [one(s, p) for s, n in plans.items() for p in range(n)]   # stream "a" queues all of its tasks first
    await asyncio.gather(*tasks)
    return order


def test_two_streams_advance_together_not_one_after_the_other():
    order = asyncio.run(_play(TaskSlots(2), {"a": 6, "b": 6}))
    positions = [p for _, p in order][2:]   # the 2 free slots go to the first comers (a0, a1), then by position
    assert positions == sorted(positions), order          # b0, then a2 and b1 (either), ...
    first_half = order[:6]
    assert {s for s, _ in first_half} == {"a", "b"} and sum(s == "b" for s, _ in first_half) == 3


def test_at_most_n_at_once_and_every_slot_comes_back():
    slots, running, peak = TaskSlots(3), 0, 0

    async def one(position: int) -> None:
        nonlocal running, peak
        async with slots.take(position):
            running += 1
            peak = max(peak, running)
            await asyncio.sleep(0.005)
            running -= 1

    async def go() -> None:
        await asyncio.gather(*(one(p % 5) for p in range(20)))
        async with slots.take(0):   # all 3 free again: no wait
            pass

    asyncio.run(go())
    assert peak == 3 and slots._free == 3 and not slots._waiting


def test_a_waiter_cancelled_in_the_queue_does_not_lose_the_slot():
    async def go() -> int:
        slots = TaskSlots(1)
        release = asyncio.Event()

        async def holder() -> None:
            async with slots.take(0):
                await release.wait()

        async def waiter(position: int) -> None:
            async with slots.take(position):
                pass

        h = asyncio.create_task(holder())
        await asyncio.sleep(0)
        cancelled, served = asyncio.create_task(waiter(1)), asyncio.create_task(waiter(2))
        await asyncio.sleep(0)
        cancelled.cancel()
        release.set()
        await asyncio.wait_for(asyncio.gather(h, served), timeout=2)   # the slot went on to the next waiter
        return slots._free

    assert asyncio.run(go()) == 1
