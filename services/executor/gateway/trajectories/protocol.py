"""Wire schemas of the gateway's trajectories (`POST /v1/trajectories/{id}/outcome`, `GET /v1/trajectories/{id}`)."""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field

TrajectoryStatus = Literal["open", "closed", "curating", "curated", "failed", "expired"]


class OutcomeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    success: bool = Field(..., description="did the agent accomplish its task (the verdict the curator learns from)")
    score: float | None = Field(None, ge=-1e9, le=1e9, description="a task score, when the agent has one")
    feedback: str | None = Field(None, max_length=4000, description="what went well or wrong, in words")


class RecordedOutcome(OutcomeRequest):
    judged: bool = Field(False, description="given by the executor's self-judge once the trajectory was idle for "
                                            "the TTL (SKILLOS_GATEWAY_JUDGE_EXPIRED), not reported by the agent")


class OutcomeResponse(BaseModel):
    id: str
    status: TrajectoryStatus
    curation: Literal["scheduled"] = "scheduled"


class RecordedCall(BaseModel):
    seq: int
    created_at: float
    messages: list[dict[str, Any]] = Field(description="the messages the client added in this call")
    response: dict[str, Any] = Field(description="the answer's message and finish reason")
    usage: dict[str, Any] | None = None


class TrajectoryInfo(BaseModel):
    id: str
    repo: str
    task: str
    model: str
    skills: list[str] = Field(description="the skills injected into the conversation")
    examples: list[str] = Field(default_factory=list, description="ids of the skills' worked examples injected with them")
    withheld: list[str] = Field(default_factory=list, description=(
        "skills the search matched and the gateway withheld at random (their utility's control arm; shown to "
        "operators only: a caller who knew its arm could choose whether to report)"))
    status: TrajectoryStatus
    created_at: float
    updated_at: float
    calls: int = Field(description="calls recorded")
    bytes: int
    truncated: bool = Field(description="calls past the bounds were answered and not recorded")
    outcome: RecordedOutcome | None = None
    curation: dict[str, Any] | None = Field(None, description="the curator's verdicts (curated) or why it failed")
    recorded: list[RecordedCall] | None = None
