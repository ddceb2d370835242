"""`services.executor.admission`: at most ``limit`` single LLM calls at the backend, first come first served,
a call past its wait bound refused with a Retry-After, a turn given back exactly once whatever happens."""

from __future__ import annotations

import asyncio

import pytest

from services.executor.admission import Admission, CallerBusy, Overloaded, Shares


def test_calls_beyond_the_limit_wait_their_turn_in_order():
    async def go():
        adm, order, inside, most = Admission(2, wait_s=5), [], 0, 0

        async def call(i: int, hold: float):
            nonlocal inside, most
            async with adm.turn("act"):
                inside += 1
                most = max(most, inside)
                order.append(i)
                await asyncio.sleep(hold)
                inside -= 1

        await asyncio.gather(*(call(i, 0.05) for i in range(6)))
        return adm, order, most

    adm, order, most = asyncio.run(go())
    assert most == 2 and order == list(range(6)) and adm.in_flight == 0


def test_a_call_past_its_wait_is_refused_with_when_to_come_back():
    async def go():
        adm = Admission(1, wait_s=0.1)
        held = await adm.enter("act")
        with pytest.raises(Overloaded) as refused:
            await adm.enter("chat")
        busy = adm.in_flight
        held.leave()
        held.leave()                       # once, however often
        again = await adm.enter("chat")    # the turn is free again
        again.leave()
        return refused.value, busy, adm.in_flight

    e, busy, after = asyncio.run(go())
    assert busy == 1 and after == 0
    assert 1 <= e.retry_after_s <= 60 and "SKILLOS_EXECUTOR_MAX_LLM_CALLS" in str(e)


def test_a_waiter_cancelled_in_line_takes_no_turn():
    async def go():
        adm = Admission(1, wait_s=5)
        held = await adm.enter("act")
        waiter = asyncio.create_task(adm.enter("act"))
        await asyncio.sleep(0.05)
        waiter.cancel()                    # the client went away while waiting
        with pytest.raises(asyncio.CancelledError):
            await waiter
        held.leave()
        nxt = await asyncio.wait_for(adm.enter("act"), 1)
        nxt.leave()
        return adm.in_flight

    assert asyncio.run(go()) == 0


def test_zero_wait_admits_while_there_is_room():
    async def go():
        adm = Admission(2, wait_s=0)
        a, b = await adm.enter("act"), await adm.enter("act")
        with pytest.raises(Overloaded):
            await adm.enter("act")
        a.leave()
        b.leave()

    asyncio.run(go())


def test_a_waiter_woken_and_cancelled_in_the_same_tick_gives_its_turn_back():
    """The turn handed to a waiter that is cancelled before it runs goes to the next one (asyncio's Semaphore)."""
    async def go():
        adm = Admission(1, wait_s=5)
        held = await adm.enter("act")
        first = asyncio.create_task(adm.enter("act"))
        second = asyncio.create_task(adm.enter("act"))
        await asyncio.sleep(0.01)
        held.leave()
        first.cancel()                     # woken and cancelled before it could run
        with pytest.raises(asyncio.CancelledError):
            await first
        turn = await asyncio.wait_for(second, 1)
        busy = adm.in_flight
        turn.leave()
        return busy, adm.in_flight

    assert asyncio.run(go()) == (1, 0)


def test_the_limit_shrinks_while_calls_are_slow_and_grows_back_while_they_are_quick_and_full():
    """Additive increase, multiplicative decrease: calls over ``target_s`` cut the limit (never below 1), calls
    under it with the limit full raise it, never above the configured maximum."""
    async def go():
        adm = Admission(8, wait_s=5, target_s=0.02)

        async def call(hold: float):
            async with adm.turn("act"):
                await asyncio.sleep(hold)

        await asyncio.gather(*(call(0.04) for _ in range(16)))      # slow: over the target
        low = adm.limit
        adm.target_s = 10.0
        await asyncio.gather(*(call(0.001) for _ in range(200)))    # quick, and always more waiting than room
        return low, adm.limit, adm.in_flight

    low, high, busy = asyncio.run(go())
    assert 1 <= low < 4 and low < high <= 8 and busy == 0


def test_a_callers_share_bounds_its_calls_waiting_or_admitted_and_comes_back_with_the_turn():
    """The gateway's per-token bound (SKILLOS_GATEWAY_MAX_CALLS_PER_CALLER) lives here: a caller past its share
    is refused at once, another caller is not, and the share comes back when a turn is left or a wait fails."""
    async def go():
        adm = Admission(1, wait_s=0.1)
        first = await adm.enter("chat", "tok-a", 2)
        with pytest.raises(Overloaded):                      # waits past wait_s: its share comes back
            await adm.enter("chat", "tok-a", 2)
        with pytest.raises(Overloaded):                      # another caller has its own share (and waits)
            await adm.enter("chat", "tok-b", 2)
        waiting = asyncio.ensure_future(adm.enter("chat", "tok-a", 2))
        await asyncio.sleep(0)
        with pytest.raises(CallerBusy) as busy:              # one admitted, one waiting: the share of 2 is held
            await adm.enter("chat", "tok-a", 2)
        assert busy.value.held == 2
        first.leave()
        second = await waiting
        assert second.caller == "tok-a"
        second.leave()
        second.leave()                                       # once only
        return adm

    adm = asyncio.run(go())
    assert adm.in_flight == 0 and adm._shares.held == {}


def test_a_callers_calls_count_together_whatever_their_route_each_route_with_its_own_share():
    """The gateway's chat calls (SKILLOS_GATEWAY_MAX_CALLS_PER_CALLER) and /v1/act, /v1/judge
    (SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER) are one count per token: a token cannot hold a share on each route.
    No caller (an operator's token, the service's own work) is never counted."""
    async def go():
        adm = Admission(8, wait_s=1)
        chat = await adm.enter("chat", "tok-a", 8)
        with pytest.raises(CallerBusy) as busy:
            await adm.enter("act", "tok-a", 1)              # its chat call fills an act share of 1
        refusal = busy.value.api_error("SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER")
        act = await adm.enter("act", "tok-b", 1)            # another token's share is its own
        ours = [await adm.enter("act", None, 1) for _ in range(2)]   # not counted
        held = dict(adm._shares.held)
        for turn in (chat, act, *ours):
            turn.leave()
        again = await adm.enter("act", "tok-a", 1)          # its share is back
        again.leave()
        return refusal, held, adm

    refusal, held, adm = asyncio.run(go())
    assert held == {"tok-a": 1, "tok-b": 1} and adm._shares.held == {} and adm.in_flight == 0
    assert refusal.status == 429 and refusal.code == "too_many_requests"
    assert "SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER" in refusal.message and 1 <= int(refusal.headers["Retry-After"]) <= 60


def test_shares_refuse_at_once_and_count_nobody_without_a_caller_or_a_share():
    shares = Shares("episodes running or waiting for a slot")
    assert shares.take("tok-a", 2) == "tok-a" and shares.take("tok-a", 2) == "tok-a"
    with pytest.raises(CallerBusy, match="this token has 2 episodes running or waiting") as busy:
        shares.take("tok-a", 2, retry_after_s=7)
    assert busy.value.retry_after_s == 7
    assert shares.take(None, 2) is None and shares.take("tok-b", 0) is None   # not counted
    shares.give_back(None)
    shares.give_back("tok-a")
    assert shares.held == {"tok-a": 1}
    shares.give_back("tok-a")
    assert shares.held == {}
