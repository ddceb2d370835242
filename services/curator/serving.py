"""The curator service: one `skillos.curation` decision per request, over its LLM and the skill repo.

The decision itself (prompt → LLM → parse → validate → apply → verdicts) is `skillos.curation.curate`,
the same code the trainer runs with its in-process policy. What this class adds is service work:
the HTTP LLM clients, the wire (the request and the core's `Decision` mapped to and from
`skillos.protocol.curator`), the core's refusals and the skill repo client's failures mapped to the
service's error shape, the metrics, and the content judge.

`Curator.curate` never fails on what the model wrote: each call gets a verdict. Only the caller's
mistakes (4xx) and an unreachable skill repo (502) are errors; a failed LLM backend is reported in
the answer's ``error`` with no calls (validity 0), so a stream or a trainer can count it.
"""

from __future__ import annotations

from typing import Any

from prometheus_client import Counter, Histogram

from services.curator.judge import JUDGE_SCHEMA, heuristic_score, judge_messages, read_llm_grade
from services.curator.settings import CuratorSettings
from skillos.auth import current_caller
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoError
from skillos.curation import OP_NAMES, CurationRequestError, curate, response_format_for
from skillos.errors import APIError
from skillos.llm import LLMClient, LLMError, LLMSettings
from skillos.protocol.curator import (
    ContentJudgeRequest,
    ContentJudgeResponse,
    ContentScore,
    CurateRequest,
    CurateResponse,
)
from skillos.protocol.skillrepo import OpsResult, Repo

CURATOR_CALLS = Counter("skillos_curator_calls_total", "Curator function calls by verdict",
                        ["name", "verdict"])
CURATOR_DECISIONS = Counter("skillos_curator_decisions_total", "Curate requests by outcome", ["outcome"])
CURATOR_VALIDITY = Histogram("skillos_curator_validity_rate", "r_fc per decision",
                             buckets=(0.0, 0.25, 0.5, 0.75, 0.99, 1.0))


class RepoForCuration:
    """The skill repo client as `skillos.curation.OpsPort`, its failures as this service's errors; each batch
    carries ``provenance``, what this service vouches for (the repo keeps it in its op log)."""

    def __init__(self, client: AsyncSkillRepoClient, provenance: dict[str, Any] | None = None):
        self.client, self.provenance = client, provenance

    async def get_repo(self, name: str) -> Repo:
        try:
            return await self.client.get_repo(name)
        except SkillRepoError as e:
            if e.status == 404:
                raise APIError(404, "repo_not_found", f"skill repo has no repo {name!r}: create it first") from e
            raise APIError(502, "skillrepo_unavailable", f"skill repo failed: {e.message}") from e

    async def apply_ops(self, repo: str, ops: list[dict[str, Any]], idempotency_key: str | None = None,
                        atomic: bool = True, origin: Any = None, example: Any = None) -> OpsResult:
        try:
            try:
                return await self.client.apply_ops(repo, ops, idempotency_key=idempotency_key, atomic=atomic,
                                                   origin=origin, example=example, provenance=self.provenance)
            except SkillRepoError as e:
                # this service's token is no operator's (a tenant's curator): its batches vouch for nothing
                if e.code == "provenance_operator_only":
                    self.provenance = None
                    return await self.apply_ops(repo, ops, idempotency_key, atomic, origin, example)
                # a skill repo older than worked examples refuses the field: the ops still go, without it
                if example is None or e.status != 422 or "example" not in e.message:
                    raise
                return await self.client.apply_ops(repo, ops, idempotency_key=idempotency_key, atomic=atomic,
                                                   origin=origin, provenance=self.provenance)
        except SkillRepoError as e:
            if e.status == 404:
                raise APIError(404, "repo_not_found", f"skill repo has no repo {repo!r}: create it first") from e
            if 400 <= e.status < 500:
                raise APIError(422, "ops_rejected", f"the skill repo refused the batch: {e.message}") from e
            raise APIError(502, "skillrepo_unavailable", f"skill repo failed: {e.message}") from e


class Curator:
    """One curator: its LLM, the judge's LLM and a skill repo client, reused across requests."""

    def __init__(self, settings: CuratorSettings, *, llm: LLMClient | None = None,
                 judge_llm: LLMClient | None = None, repo: AsyncSkillRepoClient | None = None):
        self.settings = settings
        self.options = settings.curation_options()
        self.llm = llm or LLMClient(LLMSettings.for_role("curator"))
        self.judge_llm = judge_llm or LLMClient(LLMSettings.for_role("judge"))
        self.repo = repo or AsyncSkillRepoClient(settings.skillrepo_url, token=settings.api_token or None)
        self._ops: RepoForCuration | None = RepoForCuration(self.repo)   # None: no repo (ops cannot apply)

    async def aclose(self) -> None:
        await self.llm.aclose()
        await self.judge_llm.aclose()
        await self.repo.aclose()

    # --- curate ---------------------------------------------------------------------------------

    async def curate(self, req: CurateRequest) -> CurateResponse:
        try:
            decision = await curate(req.to_decision_request(), llm=self.llm, repo=self._for(req), options=self.options)
        except CurationRequestError as e:
            raise APIError(422, "invalid_request", str(e)) from e
        response = CurateResponse.from_decision(decision)
        if response.error:
            CURATOR_DECISIONS.labels("llm_error").inc()
            return response
        for v in response.calls:
            CURATOR_CALLS.labels(v.name if v.name in OP_NAMES else "unreadable",
                                 "valid" if v.valid else "refused").inc()
        CURATOR_DECISIONS.labels("ok").inc()
        CURATOR_VALIDITY.observe(response.validity_rate)
        return response

    def _for(self, req: CurateRequest) -> RepoForCuration | None:
        """The repo port of one curation: its batch says, from this service's side, which model curated it,
        whose token asked, and the trajectory and outcome source that asker gave."""
        if self._ops is None:
            return None
        caller = current_caller()
        vouched = caller is None or caller.operator   # a tenant's own claims are not this service's to vouch for
        return RepoForCuration(self._ops.client, {
            "curator_model": self.llm.model, "requested_by": caller.token_label if caller is not None else None,
            "trajectory": req.origin.trajectory if req.origin and vouched else None,
            # the curation wire says "env" where the skill repo's outcome sources say "environment"
            "outcome_source": {"env": "environment"}.get(req.outcome.source, req.outcome.source)
                              if req.outcome and vouched else None})

    # --- content judge --------------------------------------------------------------------------

    async def judge_content(self, req: ContentJudgeRequest) -> ContentJudgeResponse:
        backend = req.backend or self.settings.curator_judge_backend
        scores: list[ContentScore] = []
        for i, op in enumerate(req.ops):
            if backend == "heuristic" or op.name == "skill_delete" or not op.content.strip():
                score = heuristic_score(op, req.task)
                if not op.content.strip() and op.name != "skill_delete":
                    score = ContentScore(index=i, score=0.0, reason="empty content")
            else:
                score = await self._llm_grade(op, req.task)
            score.index = i
            scores.append(score)
        mean = sum(s.score for s in scores) / len(scores)
        return ContentJudgeResponse(score=round(mean, 4), scores=scores, backend=backend)

    async def _llm_grade(self, op, task: str) -> ContentScore:
        try:
            result = await self.judge_llm.chat(
                judge_messages(op, task), temperature=0.0, max_tokens=self.settings.curator_judge_max_tokens,
                response_format=response_format_for(self.settings.curator_json_style, JUDGE_SCHEMA))
        except LLMError as e:
            raise APIError(502, "judge_unavailable", f"the content judge's LLM failed: {e.describe()}") from e
        grade = read_llm_grade(result.content)
        if grade is None:
            return ContentScore(index=0, score=0.0, reason=f"judge gave no grade: {result.content[:200]!r}")
        return ContentScore(index=0, score=grade[0], reason=grade[1])
