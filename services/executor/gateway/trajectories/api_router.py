"""`POST /v1/trajectories/{id}/outcome` (close a trajectory, curate it in the background) and
`GET /v1/trajectories/{id}` (its state, calls and curation)."""

from __future__ import annotations

from fastapi import APIRouter, Query, Request

from services.executor.gateway.errors import OpenAIErrorResponse
from services.executor.gateway.trajectories.protocol import OutcomeRequest, OutcomeResponse, TrajectoryInfo
from skillos.auth import Auth

router = APIRouter(prefix="/v1/trajectories", tags=["gateway"])
_ERRORS = {code: {"model": OpenAIErrorResponse} for code in (400, 401, 403, 404, 409)}


@router.post("/{trajectory_id}/outcome", status_code=202, response_model=OutcomeResponse, responses=_ERRORS,
             summary="Report how a trajectory ended; the curator learns from it in the background")
async def report_outcome(trajectory_id: str, body: OutcomeRequest, request: Request, auth: Auth) -> OutcomeResponse:
    """With auth on, the token must be allowed to write the trajectory's repo (``rw``): the outcome
    makes the curator edit it."""
    return await request.app.state.trajectories.outcome(trajectory_id, body, auth)


@router.get("/{trajectory_id}", response_model=TrajectoryInfo, response_model_exclude_none=True, responses=_ERRORS,
            summary="A trajectory: state, skills, outcome, curation (and its recorded calls with calls=true)")
async def get_trajectory(trajectory_id: str, request: Request, auth: Auth,
                         calls: bool = Query(False, description="include the recorded calls")) -> TrajectoryInfo:
    return await request.app.state.trajectories.get(trajectory_id, calls, auth)
