"""Admission of the executor's single LLM calls: `/v1/act`, `/v1/judge` and the gateway's chat completions.

At most ``limit`` of them are at the LLM backend at once; a call beyond that waits for its turn (first come,
first served) at most ``wait_s``, then is answered 429 ``overloaded`` with a ``Retry-After`` of about the time
the calls ahead of it need. Episodes are bounded on their own (`executor_max_concurrent_episodes`: each has one
call at a time).

Why: a backend queues what it cannot run (vLLM, llama-server), and a call at the end of a long queue waited
out the LLM timeout and was answered 502: an overload looked like a broken backend, and the client's retry made
the queue longer (bench/RESULTS-reliability.md, scenario 5: 103 of 163 answers were 502 with 64 clients on
SmolLM2 and 2 cores). With the calls in flight bounded, the backend's queue stays short, the LLM timeout fires
only for a backend that is stuck, and the callers beyond the bound are told when to come back, as TGI's
``--max-concurrent-requests`` and OpenAI's 429 do.

The bound adapts (additive increase, multiplicative decrease, as TCP and Netflix's concurrency-limits do):
what a backend can hold without making a call wait out its timeout is its throughput times that timeout, a
number no setting knows (hundreds of calls for vLLM on a GPU; SmolLM2 on two cores answered ~0.5 calls/s). The
limit starts at 4; a call that spent more than ``target_s`` at the backend (half the LLM timeout) cuts it by a
fifth; a call that came back sooner while the limit was full raises it by 1/limit, up to ``max_limit``
(SKILLOS_EXECUTOR_MAX_LLM_CALLS). `/metrics` shows where it settled.

A caller's share (`Shares`): one token may hold at most a share of those turns, waiting or admitted, whichever
route it comes through (the gateway's chat calls, SKILLOS_GATEWAY_MAX_CALLS_PER_CALLER; /v1/act and /v1/judge,
SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER: one count per token, each route checking it against its own bound), and
a share of the episode slots (SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER, `services.executor.serving`); one more
is refused at once (429 ``too_many_requests`` with Retry-After), never queued: a caller that fills its share
waits for nobody but itself, and every other caller still gets through.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections import deque
from collections.abc import AsyncIterator
from contextlib import asynccontextmanager

from prometheus_client import Counter, Gauge, Histogram

from skillos.errors import APIError

IN_FLIGHT = Gauge("skillos_executor_llm_calls_in_flight", "single LLM calls at the backend (act, judge, gateway)")
WAITING = Gauge("skillos_executor_llm_calls_waiting", "single LLM calls waiting for admission")
LIMIT = Gauge("skillos_executor_llm_calls_limit", "the adaptive bound on single LLM calls at the backend")
REJECTED = Counter("skillos_executor_llm_calls_rejected_total", "calls answered 429 overloaded", ["route"])
WAIT_SECONDS = Histogram("skillos_executor_llm_admission_wait_seconds", "time a call waited for admission",
                         buckets=(0.001, 0.01, 0.1, 0.5, 1, 2, 5, 10, 30, 60, 120))
DECREASE = 0.8   # a slow call cuts the limit by a fifth
# where the limit starts: low, as TCP's slow start, since every call admitted before the first answer comes back
# is admitted blind (starting at 32, 9 calls of scenario 5 waited out the timeout, by the arithmetic those of
# the first wave; starting at 4, none did); it grows by 1/limit
# per quick answer while full: to 32 in ~500 calls, seconds on a GPU server
START = 4


class Overloaded(Exception):
    """No turn within the wait bound; ``retry_after_s``: when to come back."""

    def __init__(self, message: str, retry_after_s: int):
        super().__init__(message)
        self.retry_after_s = retry_after_s

    def api_error(self) -> APIError:
        """429 ``overloaded`` with Retry-After (the gateway's middleware renders it as OpenAI's error object)."""
        return APIError(429, "overloaded", str(self), headers={"Retry-After": str(self.retry_after_s)})


class CallerBusy(Exception):
    """The caller already has its share of calls waiting or at the backend (`Admission.enter`'s ``share``), or
    of episodes (`Shares.take`'s ``what``); ``retry_after_s``: about when one of them ends (1-60)."""

    def __init__(self, held: int, what: str = "calls waiting or at the backend", retry_after_s: int = 1):
        super().__init__(f"this token has {held} {what}, the most one caller may")
        self.held, self.retry_after_s = held, retry_after_s

    def api_error(self, setting: str) -> APIError:
        """429 ``too_many_requests`` with Retry-After, naming the ``setting`` that sets the share."""
        return APIError(429, "too_many_requests", f"{self} ({setting}): send the next when one has ended",
                        headers={"Retry-After": str(self.retry_after_s)})


class Shares:
    """What each caller holds of a bounded pool (LLM turns, episode slots): ``take`` counts one more for a caller
    or raises `CallerBusy` at once when it already holds ``share``; ``give_back`` returns one. A ``caller`` of
    None or a ``share`` of 0 is not counted (open mode, an operator's token, the service's own work)."""

    def __init__(self, what: str = "calls waiting or at the backend"):
        self.what = what
        self.held: dict[str, int] = {}   # only callers holding something

    def take(self, caller: str | None, share: int, retry_after_s: int = 1) -> str | None:
        """The caller as counted (None: not counted; give that back, it is a no-op)."""
        if caller is None or share <= 0:
            return None
        held = self.held.get(caller, 0)
        if held >= share:
            raise CallerBusy(held, self.what, retry_after_s)
        self.held[caller] = held + 1
        return caller

    def give_back(self, caller: str | None) -> None:
        if caller is None:
            return
        left = self.held.get(caller, 0) - 1
        if left > 0:
            self.held[caller] = left
        else:
            self.held.pop(caller, None)


class Turn:
    """An admitted call's place at the backend (and its caller's share); `leave` gives both back (once,
    however often it is called)."""

    def __init__(self, admission: Admission, caller: str | None = None):
        self._admission, self.started, self.caller = admission, time.perf_counter(), caller

    @property
    def held(self) -> bool:
        return self._admission is not None

    def leave(self) -> None:
        if self._admission is not None:
            admission, self._admission = self._admission, None
            try:
                admission._leave(self.started)
            finally:
                admission._release(self.caller)


class Admission:
    """``max_limit`` calls at most, fewer once calls take over ``target_s``; ``wait_s``: the wait for a turn."""

    def __init__(self, max_limit: int, wait_s: float, target_s: float = 30.0):
        self.max_limit, self.wait_s, self.target_s = max_limit, wait_s, target_s
        self.limit = float(min(max_limit, START))
        self.in_flight = 0
        self._waiters: deque[asyncio.Future] = deque()
        self._call_s = 1.0   # a moving average of how long an admitted call holds its turn
        self._shares = Shares()   # calls waiting or admitted, per caller, whichever route
        LIMIT.set(self.limit)

    @property
    def waiting(self) -> int:
        return sum(1 for f in self._waiters if not f.done())

    def retry_after_s(self) -> int:
        """About the time the calls waiting now need to be served, in whole seconds (1-60)."""
        return max(1, min(60, math.ceil(self._call_s * max(1, self.waiting) / max(1, int(self.limit)))))

    def _room(self) -> bool:
        return self.in_flight < max(1, int(self.limit))

    async def enter(self, route: str, caller: str | None = None, share: int = 0) -> Turn:
        """Wait for a turn and return it (`Turn.leave` when the call is done). Raises `Overloaded` after
        ``wait_s``; a caller cancelled while waiting takes no turn. With a ``caller`` and a ``share`` > 0, that
        caller holds at most ``share`` calls waiting or admitted: one more raises `CallerBusy` at once (so that
        no caller holds every turn). A caller's calls count together whatever their route: each route checks
        that count against its own ``share``."""
        try:
            caller = self._shares.take(caller, share, self._own_call_s())
        except CallerBusy:
            REJECTED.labels(route).inc()
            raise
        try:
            return await self._enter(route, caller)
        except BaseException:
            self._release(caller)
            raise

    def _own_call_s(self) -> int:
        """About when one of a caller's own calls ends (its Retry-After when its share is full), 1-60 s."""
        return max(1, min(60, math.ceil(self._call_s)))

    def _release(self, caller: str | None) -> None:
        self._shares.give_back(caller)

    async def _enter(self, route: str, caller: str | None) -> Turn:
        asked = time.perf_counter()
        if self._room() and not self._waiters:
            self.in_flight += 1
        else:
            granted = asyncio.get_running_loop().create_future()
            self._waiters.append(granted)
            WAITING.inc()
            try:
                async with asyncio.timeout(self.wait_s):
                    await granted
            except (TimeoutError, asyncio.CancelledError) as e:
                if granted.done() and not granted.cancelled():   # granted in the same tick: give it back
                    self.in_flight -= 1
                    self._wake()
                else:
                    granted.cancel()
                    self._waiters.remove(granted)
                if isinstance(e, asyncio.CancelledError):
                    raise
                REJECTED.labels(route).inc()
                raise Overloaded(f"the executor has {self.in_flight} LLM calls in flight (its limit now "
                                 f"{int(self.limit)}, at most {self.max_limit}) and {self.waiting} more waiting; this one "
                                 f"waited {self.wait_s:g} s. Retry after the Retry-After seconds "
                                 "(SKILLOS_EXECUTOR_MAX_LLM_CALLS and SKILLOS_EXECUTOR_LLM_QUEUE_S set these bounds).",
                                 self.retry_after_s()) from None
            finally:
                WAITING.dec()
        WAIT_SECONDS.observe(time.perf_counter() - asked)
        IN_FLIGHT.set(self.in_flight)
        return Turn(self, caller)

    def _leave(self, started: float) -> None:
        took = time.perf_counter() - started
        self._call_s = 0.9 * self._call_s + 0.1 * took
        full = self.in_flight >= int(self.limit)
        if took > self.target_s:
            self.limit = max(1.0, self.limit * DECREASE)
        elif full:
            self.limit = min(float(self.max_limit), self.limit + 1.0 / self.limit)
        LIMIT.set(self.limit)
        self.in_flight -= 1
        self._wake()
        IN_FLIGHT.set(self.in_flight)

    def _wake(self) -> None:
        while self._waiters and self._room():
            granted = self._waiters.popleft()
            if not granted.done():
                granted.set_result(None)
                self.in_flight += 1

    @asynccontextmanager
    async def turn(self, route: str, caller: str | None = None, share: int = 0) -> AsyncIterator[None]:
        """`enter` and `Turn.leave` around a block."""
        held = await self.enter(route, caller, share)
        try:
            yield
        finally:
            held.leave()
