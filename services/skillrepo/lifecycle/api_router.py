"""HTTP routes of skill states: which skills are candidates or retired (read), and a reviewer's promote,
retire or restore (an operator or a reviewer the repo's policy names)."""

from __future__ import annotations

from typing import Literal

from fastapi import APIRouter

from services.skillrepo.api_router import Svc, _db
from skillos.auth import Auth
from skillos.errors import ErrorResponse
from skillos.protocol.skillrepo import SkillStateChange, SkillStateEntry, SkillStateList

router = APIRouter(prefix="/v1", tags=["lifecycle"],
                   responses={s: {"model": ErrorResponse} for s in (400, 401, 403, 404, 422)})


@router.get("/repos/{repo}/states", response_model=SkillStateList,
            summary="Skills with a state of their own: candidates, retired ones, and skills written from traffic")
async def list_states(repo: str, svc: Svc, auth: Auth,
                      state: Literal["active", "candidate", "retired"] | None = None) -> SkillStateList:
    auth.require(repo)
    return await _db(svc, svc.lifecycle.listed, repo, state)


@router.post("/repos/{repo}/skills/{name}/state", response_model=SkillStateEntry,
             summary="Promote (active), retire or restore a skill (an operator or a listed reviewer)")
async def set_state(repo: str, name: str, body: SkillStateChange, svc: Svc, auth: Auth) -> SkillStateEntry:
    auth.require(repo, write=True)
    return await _db(svc, svc.lifecycle.set_state, repo, name, body, auth)
