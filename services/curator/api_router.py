"""HTTP routes of the curator service (thin: the logic is in `serving`)."""

from __future__ import annotations

from fastapi import APIRouter, Request

from skillos.auth import Auth
from skillos.errors import ErrorResponse
from skillos.protocol.curator import ContentJudgeRequest, ContentJudgeResponse, CurateRequest, CurateResponse

router = APIRouter(prefix="/v1", tags=["curator"])
_ERRORS = {code: {"model": ErrorResponse} for code in (401, 403, 404, 422, 502)}


@router.post("/curate", response_model=CurateResponse, responses=_ERRORS,
             summary="Curate the skill repo from one trajectory: function calls with a verdict each")
async def curate(body: CurateRequest, request: Request, auth: Auth) -> CurateResponse:
    """With auth on, the token must reach ``repo`` (``rw`` when ``apply`` is true: the ops are applied with
    the curator's own token, so the caller's must be allowed to write there itself)."""
    if body.repo is not None:
        auth.require(body.repo, write=body.apply)
    return await request.app.state.curator.curate(body)


@router.post("/judge/content", response_model=ContentJudgeResponse, responses=_ERRORS,
             summary="Content-quality score in [0, 1] of a batch of ops (r_cnt)")
async def judge_content(body: ContentJudgeRequest, request: Request, _auth: Auth) -> ContentJudgeResponse:
    return await request.app.state.curator.judge_content(body)
