"""What every part of a stream shares: a task, the stream's configuration, the record of one task,
and the parts a stream plays with (`CuratorLike`, `ExecutorLike`, `RepoLike`): the HTTP clients in
production, in-process players in the trainer and the benchmarks.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import asdict, dataclass, field
from typing import Any, Protocol

from skillos.acting.options import ActingOptions
from skillos.protocol.curator import CurateRequest, CurateResponse
from skillos.protocol.executor import EpisodeRequest, EpisodeResponse, JudgeRequest, JudgeResponse
from skillos.protocol.skillrepo import SearchMode

# The stream position of the task being played, for the backends that keep per-call records (the
# trainer's in-process policy credits each completion to its task; see `skillos.methods.writer.PURPOSE`).
TASK_POSITION: ContextVar[int] = ContextVar("skillos_task_position", default=-1)


class CuratorLike(Protocol):
    async def curate(self, request: CurateRequest) -> CurateResponse: ...


class ExecutorLike(Protocol):
    async def episode(self, request: EpisodeRequest) -> EpisodeResponse: ...

    async def judge(self, request: JudgeRequest) -> JudgeResponse: ...


class RepoLike(Protocol):
    """The skill-repo calls the loop and the methods need (`AsyncSkillRepoClient` has them)."""

    async def get_repo(self, name: str) -> Any: ...

    async def list_skills(self, repo: str) -> list[Any]: ...

    async def search(self, repo: str, query: str, k: int = 5, mode: SearchMode = "bm25") -> list[Any]: ...

    async def put_skill(self, repo: str, skill: Any, if_match: int | None = None,
                        name: str | None = None) -> Any: ...

    async def delete_skill(self, repo: str, name: str, if_match: int | None = None) -> None: ...

    async def create_repo(self, name: str, policy: Any = None) -> Any: ...

    async def record_outcome(self, repo: str, trajectory: str, success: bool, source: str,
                             served: list[str] | None = None, withheld: list[str] | None = None) -> int: ...


@dataclass
class StreamConfig:
    env: str
    method: str = "skillos"  # a name of `skillos.methods.METHODS`
    repo: str | None = None  # the method's repo (every method but "none")
    k: int = 5
    retrieval: SearchMode = "bm25"  # how the executor searches the repo (bm25 is the paper's)
    max_turns: int = 30
    history_len: int = 30
    seed: int | None = None
    curator_temperature: float | None = None
    self_judge: bool = True  # False: give the curator the environment's verdict instead (oracle ablation)
    run_id: str | None = None  # kept with the curator's ops in the repo's op log (their origin)
    attempt: int = 0  # how many times the run was resumed: a task played again is a new write, not a retry
    params: dict[str, Any] = field(default_factory=dict)  # the method's own parameters (validated by it)
    acting: ActingOptions | None = None  # how the executor decides (None: the executor service's settings)


@dataclass
class TaskSpec:
    id: str
    type: str = ""
    instruction: str = ""


@dataclass
class OpRecord:
    name: str | None
    skill_name: str | None
    valid: bool
    applied: bool
    reason: str | None
    version: int | None = None  # the skill's version the op wrote (applied ops)


@dataclass
class TaskRecord:
    position: int
    task_id: str
    task_type: str
    instruction: str
    method: str
    seed: int | None
    success: bool = False
    reward: float = 0.0
    steps: int = 0
    stop_reason: str = ""
    error: str | None = None
    self_judged_success: bool | None = None
    judge_error: str | None = None
    retrieved: list[dict[str, Any]] = field(default_factory=list)
    used: list[str] = field(default_factory=list)
    ops: list[OpRecord] = field(default_factory=list)
    validity_rate: float | None = None
    curator_error: str | None = None
    curator_completion: str = ""
    repo_size: int | None = None
    tokens: int = 0
    episode_s: float = 0.0
    curate_s: float = 0.0
    turns: list[dict[str, Any]] = field(default_factory=list)
    repo: str | None = None
    curator_call_id: str = ""
    rollouts: int = 1  # episodes played for this task (SAPO plays several; the first is the one scored)
    examples: list[dict[str, Any]] = field(default_factory=list)  # worked examples shown: id, skill, kind, actions
    example: dict[str, Any] | None = None  # the worked example the task's success left: id, steps, taken, kept on
    method_info: dict[str, Any] = field(default_factory=dict)  # what the method did (its own measures)

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)
