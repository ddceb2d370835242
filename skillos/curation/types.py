"""What one curation decision is asked (`DecisionRequest`) and what it answers (`Decision`). Plain data.

These are the core's own types: `decision.curate` takes a `DecisionRequest` and returns a `Decision`,
and refuses a request it cannot run with `CurationRequestError` (no HTTP status: the caller decides
what a refusal is on its wire). The curator service's wire schemas (`skillos.protocol.curator`:
``CurateRequest``, ``CurateResponse``) are built from and into these, in that module; the
dependency goes from the protocol to this module, never back.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from skillos.curation.verdict import OpVerdict


class CurationRequestError(ValueError):
    """The caller's mistake: a request that cannot be decided as asked (apply without a repo).

    The curator service answers it with 422 ``invalid_request`` and this message."""


@dataclass(frozen=True)
class DecisionRequest:
    """One decision to make: the trajectory the curator reads and where its calls go.

    ``trajectory`` and ``retrieved_skills`` are read by `prompt.build_curator_messages`: models or
    plain dicts with the fields it names (task, env, turns, final_answer; name, description, content).
    """

    trajectory: Any
    self_judged_success: bool
    retrieved_skills: list[Any] = field(default_factory=list)
    repo: str | None = None          # the repo the valid calls go to (required when apply)
    apply: bool = True
    temperature: float | None = None  # None: the options' temperature
    seed: int | None = None
    logprobs: bool = False
    idempotency_key: str | None = None
    origin: dict[str, Any] | None = None  # where the decision comes from, kept with the ops in the repo's op log
    # the episode's verified outcome, when there is one: {"success": bool, "source": "env" | "caller" | "judge"};
    # a success leaves a worked example on the skills the decision inserts or updates (`decision.curate`)
    outcome: dict[str, Any] | None = None


@dataclass
class TokenTrace:
    """Token ids and log-probs of prompt and completion when the backend returns them (for GRPO)."""

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_tokens: list[str] | None = None
    completion_logprobs: list[float] | None = None


@dataclass
class DecisionUsage:
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_seconds: float = 0.0
    total_seconds: float = 0.0


@dataclass
class Decision:
    """One decision: every call with its verdict, r_fc over them, and what the LLM was asked and said.

    ``error`` is set when the LLM backend gave no answer; ``calls`` is then empty (validity 0).
    """

    calls: list[OpVerdict]
    validity_rate: float              # r_fc of this decision: valid calls / calls
    applied: bool
    raw_completion: str
    raw_tool_calls: list[dict[str, Any]] | None = None
    messages: list[dict[str, Any]] = field(default_factory=list)   # the exact prompt sent
    tokens: TokenTrace = field(default_factory=TokenTrace)
    usage: DecisionUsage = field(default_factory=DecisionUsage)
    model: str = ""
    error: str | None = None
    call_id: str = ""                 # kept as origin.curator_call in the repo's op log
    example: Any = None               # the worked example sent with the ops (`WorkedExample`), None when none
