"""The curator's logic: prompt → LLM → parse → validate → apply via the skill repo's ops endpoint.

`Curator.curate` never fails on what the model wrote: each call gets a verdict. Only the caller's
mistakes (4xx) and an unreachable skill repo (502) are errors; a failed LLM backend is reported in
the answer's ``error`` with no calls (validity 0), so a stream or a trainer can count it.
"""

from __future__ import annotations

import time
import uuid
from typing import Any

from prometheus_client import Counter, Histogram

from services.curator.judge import JUDGE_SCHEMA, heuristic_score, judge_messages, read_llm_grade
from services.curator.parsing import parse_curator_output, validate_call
from services.curator.prompts import CURATOR_TOOLS, build_curator_messages, curator_json_schema
from services.curator.settings import CuratorSettings
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoError
from skillos.errors import APIError
from skillos.llm import ChatResult, LLMClient, LLMError, LLMSettings
from skillos.logging import get_logger
from skillos.protocol.curator import (
    ContentJudgeRequest,
    ContentJudgeResponse,
    ContentScore,
    CurateRequest,
    CurateResponse,
    CurateUsage,
    OpVerdict,
    TokenTrace,
)

log = get_logger("curator")

CURATOR_CALLS = Counter("skillos_curator_calls_total", "Curator function calls by verdict",
                        ["name", "verdict"])
CURATOR_DECISIONS = Counter("skillos_curator_decisions_total", "Curate requests by outcome", ["outcome"])
CURATOR_VALIDITY = Histogram("skillos_curator_validity_rate", "r_fc per decision",
                             buckets=(0.0, 0.25, 0.5, 0.75, 0.99, 1.0))


def response_format_for(style: str, schema: dict[str, Any]) -> dict[str, Any]:
    if style == "openai":
        return {"type": "json_schema", "json_schema": {"name": "curator_calls", "schema": schema}}
    return {"type": "json_object", "schema": schema}


def token_trace(result: ChatResult) -> TokenTrace:
    """Token ids and log-probs wherever the backend put them (vLLM's return_token_ids, OpenAI logprobs)."""
    raw = result.raw or {}
    choice = (raw.get("choices") or [{}])[0] or {}
    trace = TokenTrace(prompt_token_ids=raw.get("prompt_token_ids") or choice.get("prompt_token_ids"),
                       completion_token_ids=choice.get("token_ids"))
    if result.logprobs:
        trace.completion_tokens = [str(t.get("token", "")) for t in result.logprobs]
        trace.completion_logprobs = [float(t.get("logprob", 0.0)) for t in result.logprobs]
    return trace


class Curator:
    """One curator: its LLM, the judge's LLM and a skill repo client, reused across requests."""

    def __init__(self, settings: CuratorSettings, *, llm: LLMClient | None = None,
                 judge_llm: LLMClient | None = None, repo: AsyncSkillRepoClient | None = None):
        self.settings = settings
        self.llm = llm or LLMClient(LLMSettings.for_role("curator"))
        self.judge_llm = judge_llm or LLMClient(LLMSettings.for_role("judge"))
        self.repo = repo or AsyncSkillRepoClient(settings.skillrepo_url, token=settings.api_token or None)

    async def aclose(self) -> None:
        await self.llm.aclose()
        await self.judge_llm.aclose()
        await self.repo.aclose()

    # --- curate ---------------------------------------------------------------------------------

    def _llm_kwargs(self, req: CurateRequest) -> dict[str, Any]:
        s = self.settings
        kwargs: dict[str, Any] = {"max_tokens": s.curator_max_tokens, "seed": req.seed, "logprobs": req.logprobs}
        temperature = req.temperature if req.temperature is not None else s.curator_temperature
        if temperature is not None:
            kwargs["temperature"] = temperature
        if s.curator_output_mode == "tools":
            kwargs.update(tools=CURATOR_TOOLS, tool_choice="auto")
        elif s.curator_output_mode == "json":
            schema = curator_json_schema(s.curator_min_calls, s.curator_max_calls,
                                         existing=[k.name for k in req.retrieved_skills])
            kwargs["response_format"] = response_format_for(s.curator_json_style, schema)
        if s.curator_ask_token_ids:
            kwargs["extra_body"] = {"return_token_ids": True}
        return kwargs

    async def curate(self, req: CurateRequest) -> CurateResponse:
        if req.apply and not req.repo:
            raise APIError(422, "invalid_request", "apply is true but no repo was given: set repo, or apply=false")
        start = time.perf_counter()
        call_id = uuid.uuid4().hex[:16]
        if req.apply:
            await self._check_repo(req.repo)  # fail fast: no LLM time spent for a repo that is not there
        messages = build_curator_messages(req.trajectory, req.self_judged_success, req.retrieved_skills,
                                          output_format=self.settings.curator_output_mode)
        try:
            result = await self.llm.chat(messages, **self._llm_kwargs(req))
        except LLMError as e:
            CURATOR_DECISIONS.labels("llm_error").inc()
            log.warning("curator_llm_failed", error=e.describe())
            return CurateResponse(calls=[], validity_rate=0.0, applied=False, raw_completion="",
                                  messages=messages, model=self.llm.settings.model, error=e.describe(),
                                  usage=CurateUsage(total_seconds=time.perf_counter() - start), call_id=call_id)
        parsed = parse_curator_output(result.content, result.tool_calls)
        if result.finish_reason == "length" and parsed and parsed[-1].error is None and not result.tool_calls:
            # a grammar-constrained object that closed exactly at the limit is fine; note it for debugging
            log.info("curator_completion_hit_max_tokens")
        verdicts: list[OpVerdict] = []
        to_apply: list[tuple[int, dict[str, Any]]] = []
        for i, call in enumerate(parsed):
            args, reason, notes = validate_call(call)
            verdicts.append(OpVerdict(index=i, name=call.name, arguments=args or call.arguments,
                                      valid=reason is None, reason=reason, normalized=notes))
            if reason is None:
                to_apply.append((i, {"name": call.name, "arguments": args}))
        applied = False
        if req.apply and to_apply:
            applied = await self._apply(req, to_apply, verdicts, call_id)
        valid = sum(v.valid for v in verdicts)
        rate = valid / len(verdicts) if verdicts else 1.0
        for v in verdicts:
            CURATOR_CALLS.labels(v.name if v.name in ("new_skill_insert", "skill_update", "skill_delete")
                                 else "unreadable", "valid" if v.valid else "refused").inc()
        CURATOR_DECISIONS.labels("ok").inc()
        CURATOR_VALIDITY.observe(rate)
        return CurateResponse(
            calls=verdicts, validity_rate=rate, applied=applied, raw_completion=result.content,
            raw_tool_calls=result.tool_calls or None, messages=messages, tokens=token_trace(result),
            model=str(result.raw.get("model") or self.llm.settings.model), call_id=call_id,
            usage=CurateUsage(prompt_tokens=result.usage.prompt_tokens,
                              completion_tokens=result.usage.completion_tokens, llm_seconds=result.latency_s,
                              total_seconds=time.perf_counter() - start))

    async def _check_repo(self, repo: str) -> None:
        try:
            await self.repo.get_repo(repo)
        except SkillRepoError as e:
            if e.status == 404:
                raise APIError(404, "repo_not_found", f"skill repo has no repo {repo!r}: create it first") from e
            raise APIError(502, "skillrepo_unavailable", f"skill repo failed: {e.message}") from e

    async def _apply(self, req: CurateRequest, to_apply: list[tuple[int, dict[str, Any]]],
                     verdicts: list[OpVerdict], call_id: str) -> bool:
        """Send the locally valid calls as one non-atomic batch; copy the repo's verdict onto each."""
        origin = {"source": "curator", **(req.origin.model_dump(exclude_none=True) if req.origin else {}),
                  "curator_call": call_id}
        try:
            result = await self.repo.apply_ops(req.repo, [op for _, op in to_apply],
                                               idempotency_key=req.idempotency_key, atomic=False, origin=origin)
        except SkillRepoError as e:
            if e.status == 404:
                raise APIError(404, "repo_not_found", f"skill repo has no repo {req.repo!r}: create it first") from e
            if 400 <= e.status < 500:
                raise APIError(422, "ops_rejected", f"the skill repo refused the batch: {e.message}") from e
            raise APIError(502, "skillrepo_unavailable", f"skill repo failed: {e.message}") from e
        for verdict in result.verdicts:
            if verdict.index >= len(to_apply):
                continue
            target = verdicts[to_apply[verdict.index][0]]
            if verdict.status == "applied":
                target.applied = True
                target.skill_version = verdict.version
                target.skill_name = verdict.skill_name
            else:
                target.valid = False
                target.reason = f"{verdict.code or 'refused'}: {verdict.message}"
        return any(v.applied for v in verdicts)

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
