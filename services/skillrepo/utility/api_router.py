"""HTTP routes of measured utility: a task's outcome per skill (rw: it moves every reader's numbers), and the
per-skill report (read). Outcomes come from the services that saw the task, never from a caller directly."""

from __future__ import annotations

from typing import Annotated

from fastapi import APIRouter, Query

from services.skillrepo.api_router import Svc, _db
from services.skillrepo.review.serving import require_operator
from skillos.auth import Auth
from skillos.errors import ErrorResponse
from skillos.protocol.skillrepo import OutcomeRecorded, OutcomeReport, OutcomeSource, UtilityReport

router = APIRouter(prefix="/v1", tags=["utility"],
                   responses={s: {"model": ErrorResponse} for s in (400, 401, 403, 404, 422)})


@router.post("/repos/{repo}/outcomes", response_model=OutcomeRecorded,
             summary="Record a task's outcome for the skills it was served and those withheld from it "
                     "(an operator: the gateway or the harness)")
async def record_outcome(repo: str, body: OutcomeReport, svc: Svc, auth: Auth) -> OutcomeRecorded:
    auth.require(repo, write=True)
    # a caller's own report would move every reader's numbers and could name any source: only the services
    # that saw the task (with the operator's token) report it
    require_operator(auth, "recording outcomes")
    return await _db(svc, svc.utility.record, repo, body)


@router.get("/repos/{repo}/utility", response_model=UtilityReport,
            summary="Per skill: success when served vs when withheld, the difference and its 95 % interval")
async def utility(repo: str, svc: Svc, auth: Auth,
                  source: Annotated[list[OutcomeSource] | None, Query(description="count only these outcome sources "
                                                                      "(repeat; default all)")] = None,
                  skill: Annotated[str | None, Query(max_length=128)] = None) -> UtilityReport:
    auth.require(repo)
    return await _db(svc, svc.utility.report, repo, source, skill)
