"""The generic environment server: sessions over any `Environment`, with TTL, limits and metrics.

Game calls block (ALFWorld waits on its worker process, WebShop searches), so they run on a
bounded thread pool; the event loop only does bookkeeping. Steps of one session are serialized
by a per-session lock; different sessions step in parallel.

A session lives in the memory of the replica that created it. Behind a load balancer with several
replicas, each replica advertises its own address (`env_advertise_url`, returned as `session_url`)
and clients send the session's later calls there; a session id starts with its replica's id, so a
call that reaches another replica is answered 421 with what to do, never a confusing 404. On SIGTERM
a replica drains: not ready, new sessions refused with 503, open episodes played to their end.
"""

from __future__ import annotations

import asyncio
import math
import re
import secrets
import socket
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any, TypeVar

from prometheus_client import Counter, Gauge, Histogram

from services.envs.base import Environment, Game, GameFailed, StepResult, TaskInfo
from services.envs.settings import EnvServerSettings
from skillos.auth import OPEN, Grant
from skillos.errors import APIError
from skillos.logging import get_logger

log = get_logger("envs.server")
T = TypeVar("T")

SESSIONS_OPEN = Gauge("skillos_env_sessions_open", "Open environment sessions", ["env"])
SESSION_EVENTS = Counter("skillos_env_sessions_total", "Session lifecycle events",
                         ["env", "event"])  # created|closed|expired|failed|rejected
STEPS = Counter("skillos_env_steps_total", "Environment steps", ["env", "result"])  # ok|invalid|failed
STEP_LATENCY = Histogram("skillos_env_step_seconds", "Time of one game step (without HTTP)", ["env"],
                         buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 5, 30))
RESET_LATENCY = Histogram("skillos_env_reset_seconds", "Time to open and start a game", ["env"],
                          buckets=(0.001, 0.01, 0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 16, 32, 64))


@dataclass
class Session:
    id: str
    task: TaskInfo
    game: Game
    last_used: float
    lock: asyncio.Lock = field(default_factory=asyncio.Lock)
    steps: int = 0
    done: bool = False
    won: bool = False
    total_reward: float = 0.0
    owner: str = "open"   # the opener's `Grant.caller_id`: only it steps, reads or closes the session


REPLICA_ID = re.compile(r"[A-Za-z0-9_-]{1,64}")


def _own_ip() -> str:
    """The address of the interface this host reaches others by (a UDP connect sends no packet)."""
    with socket.socket(socket.AF_INET, socket.SOCK_DGRAM) as s:
        try:
            s.connect(("10.254.254.254", 1))
            return s.getsockname()[0]
        except OSError:
            return socket.gethostbyname(socket.gethostname())


def advertised_url(template: str) -> str | None:
    """`env_advertise_url` with `{hostname}` / `{ip}` filled in (`{port}` is the CLI's, which knows it);
    None when no address is advertised."""
    if not template.strip():
        return None
    url = template.strip().rstrip("/")
    if "{hostname}" in url:
        url = url.replace("{hostname}", socket.gethostname())
    if "{ip}" in url:
        url = url.replace("{ip}", _own_ip())
    if not re.match(r"https?://[^/\s]+", url):
        raise ValueError(f"SKILLOS_ENV_ADVERTISE_URL must be an http(s) URL such as http://{{ip}}:{{port}}, "
                         f"got {template!r}")
    return url


class SessionManager:
    def __init__(self, env: Environment, settings: EnvServerSettings):
        self.env = env
        self.settings = settings
        self.replica_id = settings.env_replica_id or secrets.token_hex(4)
        if not REPLICA_ID.fullmatch(self.replica_id):
            raise ValueError(f"SKILLOS_ENV_REPLICA_ID must be 1-64 letters, digits, '-' or '_', "
                             f"got {self.replica_id!r}")
        self.session_url_base = advertised_url(settings.env_advertise_url)
        self.draining = False
        self.sessions: dict[str, Session] = {}
        self.failed: dict[str, tuple[str, float]] = {}  # session id -> (reason, when): answers 410
        self._pending = 0  # creations in flight count against the limit
        self._pool = ThreadPoolExecutor(max_workers=settings.env_threads, thread_name_prefix=f"env-{env.name}")
        self._sweeper: asyncio.Task | None = None
        cap = settings.env_max_episode_steps or env.max_episode_steps
        self.max_steps: int | None = cap or None

    # ---- lifecycle -------------------------------------------------------------------------
    async def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def drain(self) -> None:
        """Refuse new sessions and wait (at most `env_drain_timeout_s`) until the open ones are closed."""
        self.draining = True
        deadline = time.monotonic() + self.settings.env_drain_timeout_s
        log.info("draining", open_sessions=len(self.sessions), timeout_s=self.settings.env_drain_timeout_s)
        while (self.sessions or self._pending) and time.monotonic() < deadline:
            await asyncio.sleep(0.2)
        log.info("drained" if not self.sessions else "drain_timeout", open_sessions=len(self.sessions))

    async def stop(self) -> None:
        if self._sweeper:
            self._sweeper.cancel()
        for sid in list(self.sessions):
            await self._drop(sid, "closed")
        await self._run(self.env.close)
        self._pool.shutdown(wait=True, cancel_futures=True)

    async def _run(self, fn: Callable[..., T], *args: Any) -> T:
        return await asyncio.get_running_loop().run_in_executor(self._pool, fn, *args)

    # ---- tasks -----------------------------------------------------------------------------
    def tasks(self, split: str | None, type_: str | None = None) -> list[TaskInfo]:
        """The tasks of a split (every split when None), of one type or of several (comma-separated); a
        type no task of those splits has is a 404 that lists the types there are."""
        splits = self.env.splits()
        if split is not None and split not in splits:
            raise APIError(404, "unknown_split", f"unknown split {split!r}; this server has {splits}")
        out = [t for s in ([split] if split else splits) for t in self.env.tasks(s)]
        if type_ is None:
            return out
        types = list(dict.fromkeys(t.type for t in out))
        wanted = [type_] if type_ in types else [w.strip() for w in type_.split(",") if w.strip()]
        if unknown := [w for w in wanted if w not in types] or (not wanted and [type_]):
            where = f"split {split!r}" if split else "any split"
            raise APIError(404, "unknown_type", f"no task of type {', '.join(map(repr, unknown))} in {where}; "
                                                f"the types are: {', '.join(sorted(types))}",
                           details={"unknown": unknown, "types": sorted(types)})
        return [t for t in out if t.type in wanted]

    def resolve_task(self, task_id: str | None, split: str | None, index: int | None) -> TaskInfo:
        if task_id is not None:
            try:
                return self.env.task(task_id)
            except KeyError as e:
                # an environment may say why (a family it does not serve); a bare KeyError(id) says nothing more
                reason = e.args[0] if e.args and isinstance(e.args[0], str) and e.args[0] != task_id else None
                raise APIError(404, "unknown_task", f"unknown task_id {task_id!r}{': ' + reason if reason else ''}; "
                                                    "list the ids with GET /v1/tasks?split=<split>") from None
        tasks = self.tasks(split)
        if index >= len(tasks):
            raise APIError(404, "unknown_task", f"index {index} is out of range: split {split!r} has "
                                                f"{len(tasks)} tasks (0..{len(tasks) - 1})")
        return tasks[index]

    # ---- sessions --------------------------------------------------------------------------
    def _retry_after(self) -> int:
        """Seconds until the next idle session would expire, at least 1 and at most 10 (clients close
        sessions all the time, so a slot usually frees up sooner than any expiry)."""
        now = time.monotonic()
        soonest = min((s.last_used + self.settings.env_session_ttl_s - now for s in self.sessions.values()),
                      default=1.0)
        return int(min(10, max(1, math.ceil(soonest))))

    def session_url(self, session: Session) -> str | None:
        return f"{self.session_url_base}/v1/sessions/{session.id}" if self.session_url_base else None

    async def create(self, task: TaskInfo, expert: bool, seed: int | None,
                     owner: str = "open") -> tuple[Session, StepResult]:
        if self.draining:
            SESSION_EVENTS.labels(self.env.name, "rejected").inc()
            raise APIError(503, "draining", "this replica is shutting down and takes no new sessions; retry "
                                            "(a load balancer sends the retry to another replica)",
                           headers={"Retry-After": "1"})
        if len(self.sessions) + self._pending >= self.settings.env_max_sessions:
            SESSION_EVENTS.labels(self.env.name, "rejected").inc()
            raise APIError(429, "too_many_sessions",
                           f"this server holds its limit of {self.settings.env_max_sessions} open sessions; "
                           "close finished sessions (DELETE /v1/sessions/{id}) or retry later",
                           headers={"Retry-After": str(self._retry_after())})
        self._pending += 1
        started = time.perf_counter()
        opening = asyncio.get_running_loop().run_in_executor(self._pool, self._open_and_start, task, expert, seed)
        try:
            # shielded: a client that hangs up mid-reset must not leave an unowned game (and worker)
            game, first = await asyncio.shield(opening)
        except asyncio.CancelledError:
            opening.add_done_callback(self._close_orphan)
            raise
        except GameFailed as e:
            SESSION_EVENTS.labels(self.env.name, "failed").inc()
            raise APIError(502, "game_failed", f"the game could not be started: {e}") from e
        finally:
            self._pending -= 1
        RESET_LATENCY.labels(self.env.name).observe(time.perf_counter() - started)
        session = Session(id=f"{self.replica_id}.{uuid.uuid4().hex}", task=task, game=game,
                          last_used=time.monotonic(), owner=owner)
        self.sessions[session.id] = session
        SESSIONS_OPEN.labels(self.env.name).set(len(self.sessions))
        SESSION_EVENTS.labels(self.env.name, "created").inc()
        log.info("session_created", session=session.id, task=task.id)
        return session, first

    def _close_orphan(self, opening: asyncio.Future) -> None:
        if not opening.cancelled() and opening.exception() is None:
            game, _ = opening.result()
            self._pool.submit(game.close)

    def _open_and_start(self, task: TaskInfo, expert: bool, seed: int | None) -> tuple[Game, StepResult]:
        game = self.env.open(task, expert=expert, seed=seed)
        try:
            return game, game.start()
        except BaseException:
            game.close()
            raise

    def owned(self, session_id: str, grant: Grant, *, step: bool = False) -> Session:
        """The open session, if ``grant`` opened it, or (to read or close it, not to ``step`` it) is an
        operator's (rw, no prefix); 403 otherwise. A session's steps are an episode's rewards (a trainer's, or
        an evaluation's): no one else's to take."""
        session = self.get(session_id)
        if session.owner != grant.caller_id and (step or not grant.operator):
            raise APIError(403, "forbidden", f"session {session_id} was opened with another token: only that "
                                             "token steps, reads or closes it")
        return session

    def get(self, session_id: str) -> Session:
        session = self.sessions.get(session_id)
        if session is not None:
            return session
        if session_id in self.failed:
            reason, _ = self.failed[session_id]
            raise APIError(410, "session_failed", f"session {session_id} failed and was closed: {reason}")
        owner, dot, _ = session_id.rpartition(".")
        if dot and owner != self.replica_id:
            raise APIError(421, "wrong_replica",
                           f"session {session_id} lives on replica {owner!r}, and this is replica "
                           f"{self.replica_id!r}: send a session's calls to the session_url returned when it "
                           "was created (each replica needs SKILLOS_ENV_ADVERTISE_URL set to its own address)",
                           details={"session_replica": owner, "this_replica": self.replica_id})
        raise APIError(404, "unknown_session", f"no open session {session_id!r} (closed, expired after "
                                               f"{self.settings.env_session_ttl_s:g}s idle, or never created)")

    async def step(self, session_id: str, action: str, grant: Grant = OPEN) -> StepResult:
        session = self.owned(session_id, grant, step=True)
        async with session.lock:
            if session.id not in self.sessions:  # closed or failed while this request waited
                self.get(session_id)
            if session.done:
                raise APIError(409, "episode_done", f"the episode of session {session_id} is over "
                                                    f"(after {session.steps} steps); create a new session")
            session.last_used = time.monotonic()
            started = time.perf_counter()
            try:
                result = await self._run(session.game.step, action)
            except GameFailed as e:
                STEPS.labels(self.env.name, "failed").inc()
                self.failed[session_id] = (str(e), time.monotonic())
                await self._drop(session_id, "failed")
                raise APIError(502, "game_failed", f"the game of session {session_id} failed and the "
                                                   f"session was closed: {e}") from e
            STEP_LATENCY.labels(self.env.name).observe(time.perf_counter() - started)
            STEPS.labels(self.env.name, "invalid" if result.info.get("invalid") else "ok").inc()
            session.steps += 1
            session.total_reward += result.reward
            if self.max_steps and session.steps >= self.max_steps and not result.done:
                result.done = True
                result.info["truncated"] = True
            session.done, session.won = result.done, result.won
            session.last_used = time.monotonic()
            return result

    async def close(self, session_id: str, grant: Grant = OPEN) -> None:
        self.owned(session_id, grant)
        await self._drop(session_id, "closed")

    async def _drop(self, session_id: str, event: str) -> None:
        session = self.sessions.pop(session_id, None)
        if session is None:
            return
        SESSIONS_OPEN.labels(self.env.name).set(len(self.sessions))
        SESSION_EVENTS.labels(self.env.name, event).inc()
        log.info("session_" + event, session=session_id, steps=session.steps)
        try:
            await self._run(session.game.close)
        except Exception:
            log.exception("game_close_failed", session=session_id)

    # ---- expiry ----------------------------------------------------------------------------
    async def sweep(self) -> int:
        now = time.monotonic()
        ttl = self.settings.env_session_ttl_s
        expired = [s.id for s in self.sessions.values() if now - s.last_used > ttl and not s.lock.locked()]
        for sid in expired:
            await self._drop(sid, "expired")
        for sid, (_, when) in list(self.failed.items()):
            if now - when > max(ttl, 60):
                del self.failed[sid]
        return len(expired)

    async def _sweep_forever(self) -> None:
        period = min(5.0, max(0.2, self.settings.env_session_ttl_s / 4))
        while True:
            await asyncio.sleep(period)
            try:
                await self.sweep()
            except Exception:
                log.exception("sweep_failed")
