"""One curation decision: prompt → LLM → parse → validate → apply → verdicts (`curate`).

The only async code of the package, and it does no I/O of its own: the model is reached through
the `ChatLLM` and the repo through the `OpsPort` it is given. The curator service passes its HTTP
LLM client and a skill repo client that maps repo failures to its error shape; the trainer passes
its in-process policy and its repo client. Both therefore run the same decision, and each maps the
`Decision` to its wire (`skillos.protocol.curator.CurateResponse.from_decision`).

`curate` never fails on what the model wrote: each call gets a verdict. A failed LLM backend is
reported in the decision's ``error`` with no calls (validity 0), so a stream or a trainer can count it.
"""

from __future__ import annotations

import time
import uuid
from typing import TYPE_CHECKING, Any, Protocol

from skillos.curation.llm import ChatLLM
from skillos.curation.options import CurationOptions, llm_arguments
from skillos.curation.parse import parse_curator_output
from skillos.curation.prompt import build_curator_messages
from skillos.curation.types import CurationRequestError, Decision, DecisionRequest, DecisionUsage, TokenTrace
from skillos.curation.validate import validate
from skillos.curation.verdict import settle, validity_rate
from skillos.logging import get_logger
from skillos.worked_examples import WorkedExample, compress

if TYPE_CHECKING:
    from skillos.llm.client import ChatResult

# Atomicity of a decision's op batch: every valid op is applied, every refused one leaves the repo
# as it was, and each call is judged on its own. r_fc is "the fraction of generated calls that are
# valid and successfully executed" (paper, Eq. 1): with an all-or-nothing batch one refused call
# would un-execute its valid siblings and r_fc would only say whether the decision had a bad call.
ATOMIC = False

log = get_logger("curator")


class OpsPort(Protocol):
    """The two skill repo calls a decision makes (`skillos.clients.skillrepo.AsyncSkillRepoClient`)."""

    async def get_repo(self, name: str) -> Any: ...

    async def apply_ops(self, repo: str, ops: list[dict[str, Any]], idempotency_key: str | None = None,
                        atomic: bool = True, origin: Any = None, example: Any = None) -> Any: ...


def worked_example(req: DecisionRequest) -> WorkedExample | None:
    """The worked example of the request's episode when its outcome is a success (None otherwise): the
    system's compression of the trajectory (`skillos.worked_examples.compress`), not the LLM's words."""
    outcome = req.outcome or {}
    if not outcome.get("success"):
        return None
    t = req.trajectory
    field = (lambda k, d="": t.get(k, d)) if isinstance(t, dict) else (lambda k, d="": getattr(t, k, d))
    origin = req.origin or {}
    ref = origin.get("trajectory") or ":".join(str(x) for x in (origin.get("run"), origin.get("position"),
                                                                 field("task_id")) if x not in (None, ""))
    return compress(field("env") or "", field("task") or "", field("turns", []) or [],
                    final_answer=field("final_answer") or "", source=outcome.get("source") or "env",
                    trajectory=str(ref)[:200])


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


async def curate(req: DecisionRequest, *, llm: ChatLLM, repo: OpsPort | None,
                 options: CurationOptions) -> Decision:
    """One decision for ``req``; applies the valid calls to ``req.repo`` when ``req.apply``.

    Raises `CurationRequestError` for the caller's mistakes (apply without a repo) and whatever
    ``repo`` raises; nothing else.
    """
    # imported here: who only reads ops (the skill repo service) does not load the HTTP LLM client
    # (httpx and its Prometheus metrics, which would show in that service's /metrics)
    from skillos.llm.client import LLMError

    if req.apply and not req.repo:
        raise CurationRequestError("apply is true but no repo was given: set repo, or apply=false")
    if req.apply and repo is None:
        raise CurationRequestError("apply is true but this curator has no skill repo")
    start = time.perf_counter()
    call_id = uuid.uuid4().hex[:16]
    if req.apply:
        await repo.get_repo(req.repo)  # fail fast: no LLM time spent for a repo that is not there
    messages = build_curator_messages(req.trajectory, req.self_judged_success, req.retrieved_skills,
                                      output_format=options.output_mode)
    kwargs = llm_arguments(options, shown_skills=[_name(k) for k in req.retrieved_skills],
                           temperature=req.temperature, seed=req.seed, logprobs=req.logprobs)
    try:
        result = await llm.chat(messages, **kwargs)
    except LLMError as e:
        log.warning("curator_llm_failed", error=e.describe())
        return Decision(calls=[], validity_rate=0.0, applied=False, raw_completion="",
                        messages=messages, model=llm.model, error=e.describe(),
                        usage=DecisionUsage(total_seconds=time.perf_counter() - start), call_id=call_id)
    parsed = parse_curator_output(result.content, result.tool_calls)
    if result.finish_reason == "length" and parsed and parsed[-1].error is None and not result.tool_calls:
        # a grammar-constrained object that closed exactly at the limit is fine; note it for debugging
        log.info("curator_completion_hit_max_tokens")
    shown = [_name(k) for k in req.retrieved_skills]
    verdicts = [validate(call, i, shown) for i, call in enumerate(parsed)]
    applied = False
    sent = [v.index for v in verdicts if v.valid]
    example = worked_example(req) if req.apply else None
    if req.apply and sent:
        origin = {"source": "curator", **(req.origin or {}), "curator_call": call_id}
        # the example goes with the batch: the repo keeps it on the skills the applied inserts and updates wrote
        kwargs = {"example": example.model_dump(mode="json")} if example is not None else {}
        result_ops = await repo.apply_ops(req.repo, [verdicts[i].call() for i in sent],
                                          idempotency_key=req.idempotency_key, atomic=ATOMIC, origin=origin, **kwargs)
        applied = settle(verdicts, sent, result_ops.verdicts)
    return Decision(
        calls=verdicts, validity_rate=validity_rate(verdicts), applied=applied, raw_completion=result.content,
        raw_tool_calls=result.tool_calls or None, messages=messages, tokens=token_trace(result),
        model=str(result.raw.get("model") or llm.model), call_id=call_id, example=example,
        usage=DecisionUsage(prompt_tokens=result.usage.prompt_tokens,
                            completion_tokens=result.usage.completion_tokens, llm_seconds=result.latency_s,
                            total_seconds=time.perf_counter() - start))


def _name(skill: Any) -> str:
    return skill.get("name", "") if isinstance(skill, dict) else skill.name
