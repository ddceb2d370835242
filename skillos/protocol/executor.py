"""Wire schemas of the executor service.

    POST /v1/episodes  EpisodeRequest -> EpisodeResponse   one ReAct episode against an env server
    POST /v1/act       ActRequest     -> ActResponse       one decision for an agent in production
    POST /v1/judge     JudgeRequest   -> JudgeResponse     self-judged correctness of a trajectory

An episode whose LLM backend fails (down, 5xx, timeout) is still a 200 answer: ``success`` is false,
``stop_reason`` is ``"llm_error"`` and ``error`` says what happened; likewise an env server lost mid-episode
(killed, restarted, unreachable: the session is gone) ends it with ``"env_lost"``, any other env failure with
``"env_error"``. Only bad requests (4xx) and unreachable env/skill-repo servers at the start (502) are HTTP
errors.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from skillos.acting.options import ActingOptions
from skillos.protocol.skillrepo import SearchMode
from skillos.worked_examples import MAX_PER_SKILL, WorkedExample

EnvName = Literal["alfworld", "webshop", "reasoning"]
ParseKind = Literal["exact", "fuzzy", "free", "unmatched", "empty"]
StopReason = Literal["won", "done", "max_turns", "llm_error", "env_error", "env_lost"]

MAX_TEXT = 20_000
# Sampling seeds are int64 for the OpenAI API and vLLM (which refuses more with a 400 the executor
# could only pass on as a 502); 2**62 leaves room for the executor's seed + turn.
SEED_MAX = 2**62


class Sampling(BaseModel):
    """Per-request overrides of the executor LLM's sampling (unset: the service's configuration)."""

    model_config = ConfigDict(extra="forbid")

    temperature: float | None = Field(None, ge=0.0, le=2.0)
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    max_tokens: int | None = Field(None, ge=8, le=8192, description="per turn")


class SkillText(BaseModel):
    """A skill given inline (instead of retrieved from a repo)."""

    model_config = ConfigDict(extra="forbid")

    name: str = Field(..., min_length=1, max_length=64)
    description: str = Field("", max_length=1024)
    body: str = Field("", max_length=MAX_TEXT)
    version: int | None = None
    examples: list[WorkedExample] = Field(default_factory=list, max_length=MAX_PER_SKILL,
                                          description="the skill's worked examples (from its own successes)")


# A skill retrieved for an episode. `body` is the SKILL.md body (no frontmatter); the curator's
# `skillos.protocol.curator.RetrievedSkill` carries the same text as `content`.
class RetrievedSkill(BaseModel):
    name: str
    description: str = ""
    version: int | None = None
    score: float | None = None
    body: str = ""
    examples: list[WorkedExample] = Field(default_factory=list, description="the skill's worked examples")


class TokenCount(BaseModel):
    prompt: int = 0
    completion: int = 0
    total: int = 0


class Timing(BaseModel):
    total_s: float = 0.0
    llm_s: float = 0.0
    env_s: float = 0.0
    retrieval_s: float = 0.0
    overhead_s: float = Field(0.0, description="total minus LLM, env and retrieval time: our own orchestration")


class EpisodeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: EnvName
    task_id: str | None = Field(None, min_length=1, max_length=1024)
    split: str | None = Field(None, max_length=128, description="with index, instead of task_id")
    index: int | None = Field(None, ge=0)
    repo: str | None = Field(None, min_length=1, max_length=128,
                             description="skill repo to retrieve from; null: no skills (the No Memory baseline)")
    skills: list[SkillText] | None = Field(None, max_length=50, description="inline skills instead of a repo")
    k: int = Field(5, ge=0, le=50, description="top-k skills (paper Table 4: 5)")
    retrieval: SearchMode = Field("bm25", description=(
        "how the repo is searched: bm25 (keywords, the paper's), dense (sentence embeddings) or hybrid"))
    max_turns: int = Field(30, ge=1, le=200, description="paper Table 4: 30 (reasoning: always 1)")
    history_len: int = Field(30, ge=0, le=200, description=(
        "past steps shown in full in the prompt (older ones as a list of actions); the paper's Table 4 "
        "uses 3, the default shows the whole episode, which the server's prompt cache makes cheap "
        "(docs/llm-backends.md)"))
    sampling: Sampling = Field(default_factory=Sampling)
    seed: int | None = Field(None, ge=0, le=SEED_MAX,
                             description="LLM sampling seed (turn i uses seed + i) and env seed")
    acting: ActingOptions | None = Field(None, description=(
        "how the executor decides (state line, held-back actions, demonstrations); null: the service's"))

    @model_validator(mode="after")
    def _one_task(self) -> EpisodeRequest:
        if self.task_id is None and (self.split is None or self.index is None):
            raise ValueError("give either task_id, or both split and index")
        if self.task_id is not None and (self.split is not None or self.index is not None):
            raise ValueError("give task_id or split+index, not both")
        if self.repo is not None and self.skills is not None:
            raise ValueError("give repo or skills, not both")
        return self


class Turn(BaseModel):
    index: int
    observation: str = Field(..., description="what the agent saw before acting")
    thought: str = ""
    action: str = Field(..., description="the action sent to the environment")
    raw_action: str = Field("", description="the action as the model wrote it")
    valid: bool = Field(..., description="the action was admissible (or accepted by the env)")
    parse: ParseKind
    reward: float = 0.0
    done: bool = False
    llm_s: float = 0.0
    env_s: float = 0.0
    completion: str = Field("", description="the raw completion")


class EpisodeResponse(BaseModel):
    episode_id: str
    env: EnvName
    task_id: str
    task_type: str = ""
    instruction: str = ""
    repo: str | None = None
    success: bool = Field(..., description="the environment's verdict (won); never true after a failure")
    reward: float = 0.0
    steps: int
    stop_reason: StopReason
    error: str | None = None
    final_answer: str = Field("", description="reasoning env: the submitted answer")
    turns: list[Turn]
    skills: list[RetrievedSkill]
    examples_shown: list[str] = Field(default_factory=list, description=(
        "ids of the worked examples the executor was shown (of the skills, or the expert's with demos=expert)"))
    tokens: TokenCount
    timing: Timing
    invalid_actions: int = 0


class HistoryStep(BaseModel):
    model_config = ConfigDict(extra="forbid")

    observation: str = Field("", max_length=MAX_TEXT)
    action: str = Field("", max_length=4096)
    thought: str = Field("", max_length=4096, description="the agent's reasoning before the action (optional)")


class ActRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    task: str = Field(..., min_length=1, max_length=MAX_TEXT)
    observation: str = Field(..., max_length=MAX_TEXT)
    history: list[HistoryStep] = Field(default_factory=list, max_length=500)
    admissible_actions: list[str] | None = Field(None, max_length=1000)
    env: EnvName | Literal["generic"] = "generic"
    repo: str | None = Field(None, min_length=1, max_length=128)
    skills: list[SkillText] | None = Field(None, max_length=50)
    k: int = Field(5, ge=0, le=50)
    retrieval: SearchMode = "bm25"
    history_len: int = Field(30, ge=0, le=500)
    sampling: Sampling = Field(default_factory=Sampling)
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="LLM sampling seed")
    acting: ActingOptions | None = Field(None, description="how the executor decides; null: the service's")
    task_type: str | None = Field(None, max_length=64, description="the task's type (ALFWorld demonstrations)")
    task_id: str | None = Field(None, max_length=1024, description=(
        "the env's task id: no demonstration is shown from the task's own ALFWorld floorplan"))
    first_observation: str | None = Field(None, max_length=MAX_TEXT, description=(
        "the episode's opening observation (default: the first history step's); the state line reads from it"))
    first_admissible_actions: list[str] | None = Field(None, max_length=1000)

    @model_validator(mode="after")
    def _skills_source(self) -> ActRequest:
        if self.repo is not None and self.skills is not None:
            raise ValueError("give repo or skills, not both")
        return self


class ActResponse(BaseModel):
    action: str
    thought: str
    raw_action: str
    valid: bool | None = Field(None, description="null when no admissible actions were given")
    parse: ParseKind
    skills: list[RetrievedSkill]
    tokens: TokenCount
    latency_s: float
    completion: str


class JudgeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    env: EnvName | Literal["generic"] = "generic"
    task: str = Field(..., min_length=1, max_length=MAX_TEXT)
    turns: list[HistoryStep] = Field(default_factory=list, max_length=500)
    final_answer: str = Field("", max_length=MAX_TEXT)
    ended_by_env: bool | None = Field(None, description=(
        "the environment closed the episode (true) or the agent ran out of turns (false); what the agent "
        "itself saw, shown to the judge. null: not said"))
    max_turns: int | None = Field(None, ge=1, le=1000, description="the turn budget, when ended_by_env is false")
    sampling: Sampling = Field(default_factory=Sampling)
    seed: int | None = Field(None, ge=0, le=SEED_MAX, description="LLM sampling seed")

    @model_validator(mode="after")
    def _something_to_judge(self) -> JudgeRequest:
        if not self.turns and not self.final_answer:
            raise ValueError("give the trajectory's turns or a final_answer to judge")
        return self


class JudgeResponse(BaseModel):
    success: bool = Field(..., description="the model's verdict; false when it gave none")
    parsed: bool = Field(..., description="a verdict could be read from the completion")
    reason: str = ""
    completion: str
    tokens: TokenCount
    latency_s: float
