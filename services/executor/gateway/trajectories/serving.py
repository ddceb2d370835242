"""Trajectories of the skill gateway: closing one with its outcome, handing it to the curator in the
background, expiring those that never get an outcome.

The hand-over is durable: an outcome is written (state ``closed``) before the answer goes out, and a
closed trajectory is curated by whichever process finds it (right away, at the next sweep, or after a
restart). The curator applies its ops to the trajectory's repo with the idempotency key
``gateway:<id>`` and ``origin.trajectory = <id>``, so the op batch in the repo's op log names the
trajectory, and a second hand-over of the same trajectory applies nothing twice.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable
from typing import Any

from prometheus_client import Counter

from services.executor.gateway.chat.serving import served_examples
from services.executor.gateway.errors import gateway_error
from services.executor.gateway.trajectories.owner import require_owner
from services.executor.gateway.trajectories.protocol import (
    OutcomeRequest,
    OutcomeResponse,
    RecordedCall,
    RecordedOutcome,
    TrajectoryInfo,
)
from services.executor.gateway.trajectories.store import (
    CLOSED,
    CURATED,
    CURATING,
    FAILED,
    TrajectoryRow,
    TrajectoryStore,
)
from skillos.auth import Authenticator, Grant
from skillos.clients.curator import AsyncCuratorClient, CuratorError
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoError
from skillos.errors import APIError
from skillos.logging import get_logger
from skillos.protocol.curator import CurateRequest, Outcome, RetrievedSkill, Trajectory, TrajectoryTurn
from skillos.protocol.executor import HistoryStep, JudgeRequest, JudgeResponse
from skillos.protocol.skillrepo import OpOrigin

log = get_logger("gateway")

TRAJECTORIES = Counter("skillos_gateway_trajectories_total", "Gateway trajectories by what became of them",
                       ["status"])

MAX_TURNS = 500  # what the curator reads of one trajectory
MAX_FIELD_CHARS = 20_000


def _text(content: Any) -> str:
    """A message's content as text (OpenAI content parts: their text parts)."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(str(p.get("text", "")) for p in content if isinstance(p, dict) and p.get("type") == "text")
    return str(content)


def _shown(message: dict[str, Any]) -> str:
    role = message.get("role", "user")
    text = _text(message.get("content"))
    if role == "tool":
        return f"[tool result{' ' + str(message['tool_call_id']) if message.get('tool_call_id') else ''}] {text}"
    return text if role == "user" else f"[{role}] {text}"


def _action(response: dict[str, Any]) -> tuple[str, str]:
    """(thought, action) of an answer: a tool call is the action and the text its thought; a JSON object with a
    string ``action`` (an agent's structured output) gives its ``action`` and ``thought``; else the text."""
    text = _text(response.get("content"))
    tool_calls = response.get("tool_calls") or []
    if tool_calls:
        calls = []
        for tc in tool_calls:
            fn = (tc or {}).get("function") or {}
            calls.append(f"{fn.get('name', '?')}({fn.get('arguments', '')})")
        return text, "; ".join(calls)
    if text.lstrip().startswith("{"):
        try:
            said = json.loads(text)
        except ValueError:
            said = None
        if isinstance(said, dict) and isinstance(said.get("action"), str) and said["action"].strip():
            thought = said.get("thought")
            return (thought if isinstance(thought, str) else ""), said["action"]
    return "", text


def curator_trajectory(row: TrajectoryRow) -> Trajectory:
    """The recorded calls as the curator reads a trajectory: one turn per call, the messages the agent added
    (the environment's observations, tool results) as the observation and the model's answer as the action;
    the reported outcome and feedback as a last observation."""
    turns = []
    for call in row.recorded[:MAX_TURNS - 1]:
        observation = "\n".join(_shown(m) for m in call["messages"] if m.get("role") != "assistant")
        thought, action = _action(call["response"])
        turns.append(TrajectoryTurn(observation=observation[:MAX_FIELD_CHARS], thought=thought[:MAX_FIELD_CHARS],
                                    action=action[:MAX_FIELD_CHARS]))
    outcome = row.outcome or {}
    said = "succeeded" if outcome.get("success") else "failed"
    if outcome.get("score") is not None:
        said += f", score {outcome['score']}"
    if outcome.get("feedback"):
        said += f": {outcome['feedback']}"
    turns.append(TrajectoryTurn(observation=f"The agent reported the outcome: the task {said}."))
    return Trajectory(task=row.task[:20_000] or row.id, task_id=row.id, env="gateway", turns=turns,
                      env_success=bool(outcome.get("success")))


def info(row: TrajectoryRow, with_calls: bool = False, examples: list[str] | None = None) -> TrajectoryInfo:
    return TrajectoryInfo(
        id=row.id, repo=row.repo, task=row.task, model=row.model, skills=[s["name"] for s in row.skills],
        examples=examples or [], withheld=row.withheld,
        status=row.status, created_at=row.created_at, updated_at=row.updated_at, calls=row.calls, bytes=row.bytes,
        truncated=row.truncated, outcome=RecordedOutcome(**row.outcome) if row.outcome else None,
        curation=row.curation,
        recorded=[RecordedCall(**c) for c in row.recorded] if with_calls else None)


MAX_JUDGED = 8   # idle trajectories judged per sweep (one LLM call each); the rest wait for the next sweep
MAX_QUEUED = 64  # curations one process queues at once (a sweep after a long curator outage)


class Trajectories:
    """The outcome route's work, the background curation and the expiry sweep of one process."""

    def __init__(self, store: TrajectoryStore, curator_url: str, token: str | None, *, ttl_s: float,
                 sweep_interval_s: float, curator_timeout_s: float, curator_retries: int,
                 judge: Callable[[JudgeRequest], Awaitable[JudgeResponse]] | None = None,
                 auth: Authenticator | None = None, examples: int = 1, examples_chars: int = 1600,
                 retention_s: float = 0.0, skillrepo_url: str | None = None, learn_ungated: bool = False):
        """``retention_s``: ended trajectories (curated, failed, expired) are deleted this long after they
        ended (0: kept). ``skillrepo_url``: where each outcome is counted for the skills served and withheld
        (measured utility; None: not counted). ``learn_ungated``: curate into repos whose policy has neither
        review nor candidates (what a caller teaches is then served to every caller at once)."""
        self.store = store
        self.learn_ungated = learn_ungated
        self.retention_s = retention_s
        self.examples, self.examples_chars = examples, examples_chars   # what the chat calls were shown
        # with a judge, an idle trajectory is judged by the executor's own model and curated, not dropped
        self.judge = judge
        self.auth = auth or Authenticator()   # who may have a judged trajectory curated (`_may_curate`)
        self.ttl_s, self.sweep_interval_s = ttl_s, sweep_interval_s
        self.retries = curator_retries
        # a claim older than the longest a curation can take belongs to a process that died
        self.stale_s = curator_timeout_s * (curator_retries + 1) + 60
        self._curator = AsyncCuratorClient(curator_url, token=token, timeout=curator_timeout_s)
        self._repo = AsyncSkillRepoClient(skillrepo_url, token=token, timeout=30.0) if skillrepo_url else None
        self._running: dict[str, asyncio.Task] = {}
        self._claims: dict[str, float] = {}  # the trajectories this process has claimed, and when
        self._sweeper: asyncio.Task | None = None
        self._slots = asyncio.Semaphore(4)  # curations at once (the curator's LLM is the bottleneck)

    async def _db(self, fn, *args):
        return await asyncio.to_thread(fn, *args)

    # ------------------------------------------------------------------ lifecycle
    def start(self) -> None:
        self._sweeper = asyncio.create_task(self._sweep_forever())

    async def aclose(self) -> None:
        claims = dict(self._claims)  # only this process's own claims go back (not those it merely queued)
        tasks = [t for t in (self._sweeper, *self._running.values()) if t is not None]
        for t in tasks:
            t.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for tid, claimed_at in claims.items():  # cancelled curations go back to closed for the next process
            try:
                await self._db(self.store.release, tid, claimed_at)
            except Exception:  # else the claim goes stale and is taken over later
                log.exception("gateway_release_failed", trajectory=tid)
        await self._curator.aclose()
        if self._repo is not None:
            await self._repo.aclose()

    async def sweep(self) -> None:
        """Expire idle open trajectories; delete ended ones past the retention; hand closed ones nobody is
        curating to the curator."""
        if not self.store.exists:
            return
        if self.judge is not None:
            await self._judge_idle()
        else:
            expired = await self._db(self.store.expire, self.ttl_s)
            for tid in expired:
                TRAJECTORIES.labels("expired").inc()
                log.info("trajectory_expired", trajectory=tid)
        if self.retention_s > 0:
            purged = await self._db(self.store.purge, self.retention_s)
            if purged:
                log.info("trajectories_purged", count=purged, retention_s=self.retention_s)
        if len(self._running) >= MAX_QUEUED:   # the last batch is still being worked off
            return
        for tid in await self._db(self.store.pending, self.stale_s, MAX_QUEUED):
            self.schedule(tid)

    async def _judge_idle(self) -> None:
        """Idle trajectories (a batch per sweep; the rest wait for the next) judged by the executor's own
        model, as the paper's stream judges an episode, and handed to the curator with that outcome; one the
        judge cannot answer expires uncurated."""
        for row in await self._db(self.store.idle, self.ttl_s, MAX_JUDGED):
            if not self._may_curate(row):
                if await self._db(self.store.expire_one, row.id, row.updated_at):
                    TRAJECTORIES.labels("expired").inc()
                    log.info("trajectory_expired", trajectory=row.id, reason="its caller may not write the repo")
                continue
            turns = [HistoryStep(observation=t.observation[:MAX_FIELD_CHARS], thought=t.thought[:4096],
                                 action=t.action[:4096]) for t in curator_trajectory(row).turns[:-1]]
            try:
                verdict = await self.judge(JudgeRequest(task=row.task[:20_000] or row.id, turns=turns,
                                                        final_answer="" if turns else "(no call recorded)"))
            except APIError as e:   # the LLM backend down or unreadable (502): nothing to curate from
                if e.status == 429:   # the executor is busy with calls that wait for answers: the next sweep
                    log.info("trajectory_judge_deferred", trajectory=row.id, reason="overloaded")
                    break
                log.warning("trajectory_judge_failed", trajectory=row.id, error=str(e)[:300])
                if await self._db(self.store.expire_one, row.id, row.updated_at):
                    TRAJECTORIES.labels("expired").inc()
                continue
            outcome = {"success": verdict.success, "score": None, "judged": True,
                       "feedback": "no outcome was reported within the TTL; the executor's self-judge said "
                                   f"{'success' if verdict.success else 'failure'}: {verdict.reason}"[:4000]}
            if await self._db(self.store.close_idle, row.id, outcome, row.updated_at):
                TRAJECTORIES.labels("judged").inc()
                log.info("trajectory_judged", trajectory=row.id, success=verdict.success)
                self.schedule(row.id)

    def _may_curate(self, row: TrajectoryRow) -> bool:
        """A judged trajectory is curated (the curator writes with the executor's own token) only where its
        caller could have had it curated by reporting an outcome: rw on its repo, with a token still
        configured. A read token's conversation must not become skills by waiting out the TTL."""
        if row.owner is None:   # opened before owners were kept: as before
            return True
        grant = self.auth.grant_of(row.owner)
        return grant is not None and grant.scope == "rw" and grant.allows_repo(row.repo)

    async def _sweep_forever(self) -> None:
        while True:
            try:
                await self.sweep()
            except Exception:  # the database may be down a while; try again next time
                log.exception("gateway_sweep_failed")
            await asyncio.sleep(self.sweep_interval_s)

    # ------------------------------------------------------------------ routes
    async def _row(self, tid: str, grant: Grant, *, write: bool, with_calls: bool = False) -> TrajectoryRow:
        """The trajectory, if the caller's token reaches its repo (rw to write: an outcome curates it) and
        is the one that opened it (`owner.require_owner`)."""
        row = await self._db(self.store.get, tid, with_calls)
        if row is None:
            raise gateway_error(404, "trajectory_not_found", f"no trajectory {tid!r}", param="trajectory_id")
        grant.require(row.repo, write=write)
        require_owner(row, grant, read=not write, param="trajectory_id")
        return row

    async def get(self, tid: str, with_calls: bool, grant: Grant) -> TrajectoryInfo:
        row = await self._row(tid, grant, write=False, with_calls=with_calls)
        shown = served_examples(row.skills, row.task, self.examples, self.examples_chars)
        got = info(row, with_calls, [e.id for e in shown])
        if not grant.operator:   # a caller who saw its arm could choose whether to report: the control arm is blind
            got.withheld = []
        return got

    async def outcome(self, tid: str, body: OutcomeRequest, grant: Grant) -> OutcomeResponse:
        await self._row(tid, grant, write=True)
        if not await self._db(self.store.close_with, tid, body.model_dump()):
            row = await self._db(self.store.get, tid)
            if row is None:
                raise gateway_error(404, "trajectory_not_found", f"no trajectory {tid!r}", param="trajectory_id")
            raise gateway_error(409, "trajectory_not_open",
                                f"trajectory {tid!r} is {row.status}: its outcome can be reported once, while open")
        TRAJECTORIES.labels("closed").inc()
        self.schedule(tid)
        return OutcomeResponse(id=tid, status=CLOSED)

    # ------------------------------------------------------------------ curation
    def schedule(self, tid: str) -> None:
        if tid not in self._running:
            task = asyncio.create_task(self._curate(tid))
            self._running[tid] = task
            task.add_done_callback(lambda _t: self._running.pop(tid, None))

    async def wait_idle(self) -> None:
        """Until no curation of this process is running (tests, shutdown)."""
        while self._running:
            await asyncio.gather(*list(self._running.values()), return_exceptions=True)

    async def _curate(self, tid: str) -> None:
        async with self._slots:
            claimed_at = await self._db(self.store.claim, tid, self.stale_s)
            if claimed_at is None:
                return  # another process has it, or it is done
            self._claims[tid] = claimed_at
            try:
                await self._curate_claimed(tid, claimed_at)
            except asyncio.CancelledError:
                raise   # shutdown: aclose hands the claim back
            except Exception:  # a database or request error: back to closed, the next sweep tries again
                log.exception("curation_failed_will_retry", trajectory=tid)
                try:
                    await self._db(self.store.release, tid, claimed_at)
                except Exception:
                    log.exception("gateway_release_failed", trajectory=tid)  # the claim goes stale instead
            finally:
                self._claims.pop(tid, None)

    async def _curate_claimed(self, tid: str, claimed_at: float) -> None:
        row = await self._db(self.store.get, tid, True)
        if row is None or row.status != CURATING:
            return
        outcome = row.outcome or {}
        await self._count_outcome(row, outcome)
        if not self.learn_ungated and self._repo is not None and not await self._gated(row.repo):
            await self._finish(tid, FAILED, {"error": f"not curated: repo {row.repo!r} has neither review nor "
                                             "candidates, so what this trajectory teaches would be served to every "
                                             "caller at once (an operator: skillos repo policy "
                                             f"{row.repo} --candidates; or SKILLOS_GATEWAY_LEARN_UNGATED=true)",
                                             "applied": False}, claimed_at)
            return
        request = CurateRequest(
            trajectory=curator_trajectory(row), self_judged_success=bool(outcome.get("success")),
            retrieved_skills=[RetrievedSkill(name=s["name"], description=s.get("description", ""),
                                             content=s.get("body", ""), version=s.get("version"),
                                             examples=s.get("examples") or [])
                              for s in row.skills][:50],
            repo=row.repo, apply=True, idempotency_key=f"gateway:{tid}",
            origin=OpOrigin(source="gateway", trajectory=tid),
            # a success keeps the trajectory as a worked example: reported by the caller, or self-judged at expiry
            outcome=Outcome(success=bool(outcome.get("success")), source="judge" if outcome.get("judged") else "caller"))
        for attempt in range(self.retries + 1):
            try:
                resp = await self._curator.curate(request)
                break
            except CuratorError as e:
                if e.code == "idempotency_key_reused":
                    # an earlier attempt's batch was applied (its answer was lost): the ops are in the log
                    await self._finish(tid, CURATED, {"note": "applied by an earlier attempt", "error": None},
                                       claimed_at)
                    return
                if (e.status == 0 or e.status >= 500 or e.status == 429) and attempt < self.retries:
                    await asyncio.sleep(min(2 ** attempt, 30))
                    continue
                if e.status == 0 or e.status >= 500 or e.status == 429:
                    # back to closed: the next sweep (or a restart) hands it over again
                    log.warning("curation_deferred", trajectory=tid, error=str(e))
                    await self._db(self.store.release, tid, claimed_at)
                    return
                await self._finish(tid, FAILED, {"error": f"curator refused: {e}"}, claimed_at)
                return
        result: dict[str, Any] = {
            "call_id": resp.call_id, "applied": resp.applied, "validity_rate": resp.validity_rate,
            "error": resp.error, "calls": [json.loads(c.model_dump_json()) for c in resp.calls]}
        await self._finish(tid, FAILED if resp.error else CURATED, result, claimed_at)

    async def _gated(self, repo: str) -> bool:
        """Whether ``repo``'s policy holds what traffic teaches back (review or candidates). A repo that does
        not exist is left to the curator (its answer says so); an unreachable one is asked again later."""
        try:
            policy = await self._repo.get_policy(repo)
        except SkillRepoError as e:
            if e.status == 404:
                return True
            raise   # the sweep hands the trajectory over again
        return policy.review or policy.candidates

    async def _count_outcome(self, row: TrajectoryRow, outcome: dict[str, Any]) -> None:
        """The outcome counted for each skill served and withheld (once per trajectory: the repo keys it by
        the id, so a retry counts nothing twice). A repo that is unavailable is asked again three times over
        ~4 s; one that still cannot be told loses this task's count, not its curation."""
        served = [s["name"] for s in row.skills]
        if self._repo is None or not (served or row.withheld):
            return
        for attempt in range(4):
            try:
                await self._repo.record_outcome(row.repo, row.id, bool(outcome.get("success")),
                                                "judge" if outcome.get("judged") else "caller", served, row.withheld)
                return
            except SkillRepoError as e:
                if 400 <= e.status < 500 or attempt == 3:   # refused (or gone for good): asking again changes nothing
                    log.warning("utility_not_counted", trajectory=row.id, repo=row.repo, error=str(e))
                    return
                await asyncio.sleep(0.5 * 2 ** attempt)

    async def _finish(self, tid: str, status: str, result: dict[str, Any], claimed_at: float) -> None:
        if not await self._db(self.store.finish, tid, status, result, claimed_at):
            log.warning("curation_claim_lost", trajectory=tid, status=status)  # taken over as stale meanwhile
            return
        TRAJECTORIES.labels(status).inc()
        log.info("trajectory_curated", trajectory=tid, status=status, applied=result.get("applied"),
                 error=result.get("error"))
