"""HTTP routes of the review gate: a repo's policy, and the proposals that wait for a person.

Proposals carry unreviewed text from traffic and who sent it: only the repo's rw tokens read or decide them.
"""

from __future__ import annotations

from typing import Annotated, Literal

from fastapi import APIRouter, Path, Query

from services.skillrepo.api_router import Svc, _db
from services.skillrepo.review.serving import require_operator
from skillos.auth import Auth
from skillos.errors import ErrorResponse
from skillos.protocol.skillrepo import LOG_ID_MAX, Proposal, ProposalDecision, ProposalList, RepoPolicy

router = APIRouter(prefix="/v1", tags=["review"],
                   responses={s: {"model": ErrorResponse} for s in (400, 401, 403, 404, 409, 422)})
ProposalId = Annotated[int, Path(ge=1, le=LOG_ID_MAX)]


@router.get("/repos/{repo}/policy", response_model=RepoPolicy,
            summary="What curator op batches may do on their own in this repo")
async def get_policy(repo: str, svc: Svc, auth: Auth) -> RepoPolicy:
    auth.require(repo)
    return await _db(svc, svc.review.policy, repo)


@router.put("/repos/{repo}/policy", response_model=RepoPolicy, summary="Set the repo's policy (an operator)")
async def put_policy(repo: str, body: RepoPolicy, svc: Svc, auth: Auth) -> RepoPolicy:
    auth.require(repo, write=True)
    require_operator(auth, "setting a repo's policy")
    return await _db(svc, svc.review.set_policy, repo, body)


@router.get("/repos/{repo}/proposals", response_model=ProposalList,
            summary="Op batches that wait for review (or were decided), newest first (rw)")
async def list_proposals(repo: str, svc: Svc, auth: Auth,
                         status: Literal["pending", "approved", "rejected"] | None = "pending",
                         before: Annotated[int | None, Query(ge=1, le=LOG_ID_MAX)] = None,
                         limit: Annotated[int, Query(ge=1, le=200)] = 50) -> ProposalList:
    auth.require(repo, write=True)
    return ProposalList(proposals=await _db(svc, svc.review.list, repo, status, before, limit))


@router.get("/repos/{repo}/proposals/{pid}", response_model=Proposal,
            summary="One proposal with each op's diff against the skill as served (rw)")
async def get_proposal(repo: str, pid: ProposalId, svc: Svc, auth: Auth) -> Proposal:
    auth.require(repo, write=True)
    return await _db(svc, svc.review.get, repo, pid)


@router.post("/repos/{repo}/proposals/{pid}/approve", response_model=Proposal,
             summary="Apply a pending proposal now, as this reviewer's write (an operator or a listed reviewer, "
                     "not the token that proposed it)")
async def approve(repo: str, pid: ProposalId, svc: Svc, auth: Auth, body: ProposalDecision | None = None) -> Proposal:
    auth.require(repo, write=True)
    return await _db(svc, svc.review.decide, repo, pid, True, body.note if body else None, auth)


@router.post("/repos/{repo}/proposals/{pid}/reject", response_model=Proposal, summary="Reject a pending proposal")
async def reject(repo: str, pid: ProposalId, svc: Svc, auth: Auth, body: ProposalDecision | None = None) -> Proposal:
    auth.require(repo, write=True)
    return await _db(svc, svc.review.decide, repo, pid, False, body.note if body else None, auth)
