"""Wire schemas of the curator service (`POST /v1/curate`, `POST /v1/judge/content`).

The op names are the paper's canonical curator tools: ``new_skill_insert``, ``skill_update``,
``skill_delete``. A call the service could not read still appears in ``calls`` with ``error`` set,
so that every generated call has a verdict and the validity rate (r_fc) counts it.

The op, the parsed call and the verdict are curation's own types (`skillos.curation`), re-exported
here: this module only adds the request and response around them, and the mapping between them and
the core's decision (`CurateRequest.to_decision_request`, `CurateResponse.from_decision`). It imports
curation's leaf modules; curation imports no wire schema.
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

# curation defines these and the wire uses them as they are; re-exported for the service and clients
from skillos.curation.ops import OP_NAMES, OpName  # noqa: F401
from skillos.curation.parse import ParsedCall  # noqa: F401
from skillos.curation.types import Decision, DecisionRequest
from skillos.curation.verdict import OpVerdict
from skillos.protocol.executor import SEED_MAX
from skillos.protocol.skillrepo import OpOrigin
from skillos.worked_examples import MAX_PER_SKILL, OutcomeSource, WorkedExample


class TrajectoryTurn(BaseModel):
    """One turn of an episode as the curator reads it (the executor's turn, fields it may omit)."""

    model_config = ConfigDict(extra="allow")

    observation: str = ""
    thought: str = ""
    action: str = ""
    valid: bool | None = None


class Trajectory(BaseModel):
    """What the executor did on one task."""

    model_config = ConfigDict(extra="allow")

    task: str = Field(..., min_length=1, max_length=20_000, description="the task instruction")
    task_id: str = ""
    task_type: str = ""
    env: str = ""
    turns: list[TrajectoryTurn] = Field(default_factory=list, max_length=500)
    final_answer: str = Field("", description="single-turn tasks: the executor's answer")
    env_success: bool | None = Field(None, description="the environment's verdict; never shown to the curator")


# A skill the executor retrieved for the episode, as the curator is shown it: the executor's
# `skillos.protocol.executor.RetrievedSkill` with `body` sent as `content` (the wire name stays).
class RetrievedSkill(BaseModel):
    model_config = ConfigDict(extra="allow")

    name: str
    description: str = ""
    content: str = Field("", description="the skill's SKILL.md body (the instructions, without the frontmatter: "
                                         "name and description are fields of their own); empty: the description "
                                         "is shown instead")
    version: int | None = None
    examples: list[WorkedExample] = Field(default_factory=list, max_length=MAX_PER_SKILL,
                                          description="its worked examples: the curator is shown them")


class Outcome(BaseModel):
    """The episode's outcome as the system knows it, apart from what the curator is told (``self_judged_success``:
    the paper's self-judge). A success leaves a worked example on the skills the decision inserts or updates."""

    model_config = ConfigDict(extra="forbid")

    success: bool
    source: OutcomeSource = Field(..., description="env: the environment's reward; caller: an agent's report through "
                                                   "the gateway; judge: self-judged, where no outcome was reported")


class CurateRequest(BaseModel):
    trajectory: Trajectory
    self_judged_success: bool
    retrieved_skills: list[RetrievedSkill] = Field(default_factory=list, max_length=50)
    repo: str | None = Field(None, min_length=1, max_length=128,
                             description="repo to apply the ops to (required when apply is true)")
    apply: bool = True
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="None: the curator's default")
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="LLM sampling seed")
    logprobs: bool = False
    idempotency_key: str | None = Field(None, max_length=200)
    origin: OpOrigin | None = Field(None, description="where the decision comes from (run, task), kept with the "
                                                      "ops in the repo's op log together with the call's id")
    outcome: Outcome | None = Field(None, description=(
        "the verified outcome; a success keeps the episode as a worked example of the skills the ops write"))

    def to_decision_request(self) -> DecisionRequest:
        """The core's request for this wire request (`skillos.curation.curate` takes it)."""
        return DecisionRequest(
            trajectory=self.trajectory, self_judged_success=self.self_judged_success,
            retrieved_skills=list(self.retrieved_skills), repo=self.repo, apply=self.apply,
            temperature=self.temperature, seed=self.seed, logprobs=self.logprobs,
            idempotency_key=self.idempotency_key,
            origin=self.origin.model_dump(exclude_none=True) if self.origin else None,
            outcome=self.outcome.model_dump() if self.outcome else None)


class TokenTrace(BaseModel):
    """Token ids and log-probs of prompt and completion when the backend returns them (for GRPO)."""

    prompt_token_ids: list[int] | None = None
    completion_token_ids: list[int] | None = None
    completion_tokens: list[str] | None = None
    completion_logprobs: list[float] | None = None


class CurateUsage(BaseModel):
    prompt_tokens: int = 0
    completion_tokens: int = 0
    llm_seconds: float = 0.0
    total_seconds: float = 0.0


class CurateResponse(BaseModel):
    calls: list[OpVerdict]
    validity_rate: float = Field(..., ge=0.0, le=1.0, description="r_fc of this decision: valid calls / calls")
    applied: bool
    raw_completion: str
    raw_tool_calls: list[dict[str, Any]] | None = None
    messages: list[dict[str, Any]] = Field(default_factory=list, description="the exact prompt sent")
    tokens: TokenTrace = Field(default_factory=TokenTrace)
    usage: CurateUsage = Field(default_factory=CurateUsage)
    model: str = ""
    error: str | None = Field(None, description="set when the LLM backend failed; calls is then empty")
    call_id: str = Field("", description="this decision's id, kept as origin.curator_call in the repo's op log")
    example: WorkedExample | None = Field(None, description=(
        "the worked example sent with the ops (a success's); each call's `example` says what became of it"))

    @classmethod
    def from_decision(cls, decision: Decision) -> CurateResponse:
        """The wire answer of a core decision (`skillos.curation.curate`), field for field."""
        return cls(calls=decision.calls, validity_rate=decision.validity_rate, applied=decision.applied,
                   raw_completion=decision.raw_completion, raw_tool_calls=decision.raw_tool_calls,
                   messages=decision.messages, tokens=TokenTrace(**asdict(decision.tokens)),
                   usage=CurateUsage(**asdict(decision.usage)), model=decision.model, error=decision.error,
                   call_id=decision.call_id, example=decision.example)


class ContentOp(BaseModel):
    name: OpName
    skill_name: str = Field("", max_length=200)
    content: str = Field("", max_length=100_000)


class ContentJudgeRequest(BaseModel):
    ops: list[ContentOp] = Field(..., min_length=1, max_length=100)
    task: str = Field("", max_length=20_000, description="the task the ops were curated from (context)")
    backend: Literal["llm", "heuristic"] | None = Field(None, description="None: the configured default")


class ContentScore(BaseModel):
    index: int
    score: float = Field(..., ge=0.0, le=1.0)
    reason: str = ""


class ContentJudgeResponse(BaseModel):
    score: float = Field(..., ge=0.0, le=1.0, description="mean over ops (r_cnt of this decision)")
    scores: list[ContentScore]
    backend: str
