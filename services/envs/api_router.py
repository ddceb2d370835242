"""Routes of the environment servers: thin, everything happens in `SessionManager`. With tokens on, every
route needs a known token (any scope), and a session is its opener's (`SessionManager.owned`)."""

from __future__ import annotations

import time
from pathlib import Path

from fastapi import APIRouter, Query, Response

from services.envs.base import StepResult
from services.envs.server import Session, SessionManager
from skillos.auth import Auth
from skillos.errors import ErrorResponse
from skillos.protocol.envs import (
    CreateSessionRequest,
    SessionCreated,
    SessionState,
    SplitsResponse,
    StepRequest,
    StepResponse,
    TaskRef,
    TasksResponse,
)

_ERRORS = {c: {"model": ErrorResponse} for c in (401, 403, 404, 409, 410, 421, 422, 429, 502, 503)}


def _task_ref(session: Session) -> TaskRef:
    t = session.task
    return TaskRef(id=t.id, type=t.type, instruction=t.instruction)


def _step_response(r: StepResult) -> StepResponse:
    return StepResponse(observation=r.observation, reward=r.reward, done=r.done, won=r.won,
                        admissible_actions=r.admissible_actions, info=r.info)


def build_router(manager: SessionManager) -> APIRouter:
    router = APIRouter(prefix="/v1", tags=["environment"], responses=_ERRORS)
    env = manager.env.name

    @router.get("/splits", summary="The splits this server serves")
    async def splits(_: Auth) -> SplitsResponse:
        data_dir = getattr(manager.env, "data_dir", None)
        return SplitsResponse(env=env, splits=manager.env.splits(),
                              data_dir=str(Path(data_dir).resolve()) if data_dir else None)

    @router.get("/tasks", summary="Tasks of a split (all splits when none is given)")
    async def tasks(_: Auth, split: str | None = Query(None, max_length=128),
                    type: str | None = Query(None, max_length=512, description=(
                        "only tasks of this type, or of these types (comma-separated); a type the split "
                        "does not have is a 404 that lists the types"))) -> TasksResponse:
        found = manager.tasks(split, type)
        return TasksResponse(env=env, split=split, count=len(found),
                             tasks=found)

    @router.post("/sessions", status_code=201, summary="Start an episode of one task")
    async def create_session(body: CreateSessionRequest, auth: Auth) -> SessionCreated:
        task = manager.resolve_task(body.task_id, body.split, body.index)
        session, first = await manager.create(task, body.expert, body.seed, owner=auth.caller_id)
        return SessionCreated(session_id=session.id, session_url=manager.session_url(session),
                              task=_task_ref(session), observation=first.observation,
                              admissible_actions=first.admissible_actions, info=first.info)

    @router.get("/sessions", summary="Ids of the open sessions (the caller's own; an operator's token: all)")
    async def list_sessions(auth: Auth) -> dict:
        ids = [i for i, s in manager.sessions.items() if auth.operator or s.owner == auth.caller_id]
        return {"replica": manager.replica_id, "draining": manager.draining, "count": len(ids), "session_ids": ids}

    @router.get("/sessions/{session_id}", summary="Where an episode stands")
    async def session_state(session_id: str, auth: Auth) -> SessionState:
        s = manager.owned(session_id, auth)
        return SessionState(session_id=s.id, session_url=manager.session_url(s), task=_task_ref(s), steps=s.steps, done=s.done, won=s.won,
                            total_reward=s.total_reward, idle_seconds=round(time.monotonic() - s.last_used, 3))

    @router.post("/sessions/{session_id}/step", summary="Take one action")
    async def step(session_id: str, body: StepRequest, auth: Auth) -> StepResponse:
        return _step_response(await manager.step(session_id, body.action, auth))

    @router.delete("/sessions/{session_id}", status_code=204, summary="End a session")
    async def close_session(session_id: str, auth: Auth) -> Response:
        await manager.close(session_id, auth)
        return Response(status_code=204)

    return router
