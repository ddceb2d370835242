"""Wire schemas of the environment servers (ALFWorld, WebShop, reasoning): one protocol for all.

    GET    /v1/splits                     -> SplitsResponse
    GET    /v1/tasks?split=&type=         -> TasksResponse
    POST   /v1/sessions                   CreateSessionRequest -> SessionCreated
    GET    /v1/sessions/{id}              -> SessionState
    POST   /v1/sessions/{id}/step         StepRequest -> StepResponse
    DELETE /v1/sessions/{id}              -> 204

An action the environment does not accept is an observation with ``info["invalid"] = true``, not
an HTTP error. Unknown session: 404; step after done: 409; past the session limit: 429 with
Retry-After; a replica shutting down: 503 ``draining`` on create (retry).

Replicas: a session lives on the replica that created it. When replicas advertise their address,
``session_url`` is where the session's later calls go (step, state, close: ``{session_url}/step``,
``GET``/``DELETE {session_url}``); a call for a session of another replica is answered 421
``wrong_replica``.
"""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator

# Longest action an environment accepts; longer ones get 422 (an agent that emits 1 MB is broken).
MAX_ACTION_CHARS = 4096


# One task of an env server: what GET /v1/tasks lists and what an `Environment` (services/envs/base.py)
# opens games of; the one definition. Frozen: the env servers share one instance between threads and
# sessions. (A comment, not a docstring: the OpenAPI document stays as it was.)
class TaskInfo(BaseModel):
    model_config = ConfigDict(frozen=True)

    id: str            # stable across restarts and machines (e.g. the ALFWorld game path, a WebShop goal index)
    type: str          # ALFWorld: pick|look|clean|heat|cool|pick2; WebShop: product category; reasoning: source
    instruction: str   # the task as the agent reads it
    split: str | None = None  # env servers always set it


class TaskRef(BaseModel):
    """The task of a session, as returned when it is created."""

    id: str
    type: str
    instruction: str


class SplitsResponse(BaseModel):
    env: str
    splits: list[str]
    data_dir: str | None = Field(None, description="the data directory this server reads (resolved path)")


class TasksResponse(BaseModel):
    env: str
    split: str | None  # None: every split
    count: int
    tasks: list[TaskInfo]


class CreateSessionRequest(BaseModel):
    """Either ``task_id``, or ``split`` with ``index`` (position in ``GET /v1/tasks?split=``)."""

    model_config = ConfigDict(extra="forbid")

    task_id: str | None = Field(None, max_length=1024)
    split: str | None = Field(None, max_length=128)
    index: int | None = Field(None, ge=0)
    expert: bool = Field(False, description="add info.expert_action (the handcoded expert's next action)")
    seed: int | None = None

    @model_validator(mode="after")
    def _one_way_to_name_a_task(self) -> CreateSessionRequest:
        if self.task_id is None and (self.split is None or self.index is None):
            raise ValueError("give either task_id, or both split and index")
        if self.task_id is not None and (self.split is not None or self.index is not None):
            raise ValueError("give task_id or split+index, not both")
        return self


SESSION_URL_DOC = ("the session's own address on the replica that holds it (null: use this server's URL); "
                   "send its step, state and close calls there")


class SessionCreated(BaseModel):
    session_id: str
    session_url: str | None = Field(None, description=SESSION_URL_DOC)
    task: TaskRef
    observation: str
    admissible_actions: list[str] = []
    info: dict[str, Any] = {}


class StepRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    action: str = Field(..., max_length=MAX_ACTION_CHARS)


class StepResponse(BaseModel):
    observation: str
    reward: float = 0.0
    done: bool = False
    won: bool = False
    admissible_actions: list[str] = []
    info: dict[str, Any] = {}


class SessionState(BaseModel):
    session_id: str
    session_url: str | None = Field(None, description=SESSION_URL_DOC)
    task: TaskRef
    steps: int
    done: bool
    won: bool
    total_reward: float
    idle_seconds: float
