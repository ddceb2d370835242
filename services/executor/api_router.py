"""HTTP routes of the executor; the work is in `services.executor.serving.Executor`."""

from __future__ import annotations

from fastapi import APIRouter, Request

from skillos.auth import Auth, Grant
from skillos.errors import ErrorResponse
from skillos.protocol.executor import (
    ActRequest,
    ActResponse,
    EpisodeRequest,
    EpisodeResponse,
    JudgeRequest,
    JudgeResponse,
)
from skillos.service import unless_disconnected

router = APIRouter(prefix="/v1", tags=["executor"])
_ERRORS = {code: {"model": ErrorResponse} for code in (400, 401, 403, 404, 409, 422, 429, 502)}


def _executor(request: Request):
    return request.app.state.executor


def _may_read(grant: Grant, repo: str | None) -> None:
    if repo is not None:   # the skills are read with the executor's own token: the caller's must reach them
        grant.require(repo)


@router.post("/episodes", response_model=EpisodeResponse, responses=_ERRORS,
             summary="Run one ReAct episode against an env server with top-k skills")
async def run_episode(body: EpisodeRequest, request: Request, auth: Auth) -> EpisodeResponse:
    """An LLM failure mid-episode is not an HTTP error: the episode comes back with
    ``success=false``, ``stop_reason="llm_error"`` and ``error`` saying why. A client that disconnects
    cancels its episode. With auth on, the token must reach the repo the skills come from, and holds at most
    SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER episodes running or waiting (beyond: 429 ``too_many_requests`` with
    Retry-After; an operator's token has no such share: `services.executor.serving.caller_of`)."""
    _may_read(auth, body.repo)
    return await unless_disconnected(request, _executor(request).run_episode(body, auth))


@router.post("/act", response_model=ActResponse, responses=_ERRORS,
             summary="One decision (thought + action) for an agent in production")
async def act(body: ActRequest, request: Request, auth: Auth) -> ActResponse:
    """With auth on, the token must reach the repo the skills come from; it holds at most
    SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER calls (these, /v1/judge and its gateway calls together) waiting or at
    the LLM (beyond: 429 ``too_many_requests`` with Retry-After; not an operator's token)."""
    _may_read(auth, body.repo)
    return await unless_disconnected(request, _executor(request).act(body, auth))


@router.post("/judge", response_model=JudgeResponse, responses=_ERRORS,
             summary="Self-judged success of a trajectory by the executor's own model")
async def judge(body: JudgeRequest, request: Request, auth: Auth) -> JudgeResponse:
    return await _executor(request).judge(body, auth)
