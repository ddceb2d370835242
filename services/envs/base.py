"""The interface every environment implements; the HTTP server wraps it (`services.envs.app`:
the routes of `api_router` over the sessions of `server.SessionManager`).

An `Environment` knows its splits and tasks and opens `Game`s. A `Game` is one episode.
Implementations must be safe to call from the server's threads: ALFWorld runs each game in a
worker process; WebShop's games share read-only product data and are cheap to create.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from dataclasses import dataclass, field
from typing import Any

from skillos.protocol.envs import TaskInfo  # the one definition: the wire model of GET /v1/tasks

__all__ = ["Environment", "Game", "GameFailed", "StepResult", "TaskInfo"]


class GameFailed(RuntimeError):
    """The game cannot go on (its worker process crashed or hung). The server fails that session
    only and keeps serving the others."""


@dataclass
class StepResult:
    observation: str
    reward: float = 0.0
    done: bool = False
    won: bool = False
    admissible_actions: list[str] = field(default_factory=list)
    info: dict[str, Any] = field(default_factory=dict)  # e.g. {"invalid": True}, {"expert_action": "..."}


class Game(ABC):
    task: TaskInfo

    @abstractmethod
    def start(self) -> StepResult:
        """The first observation (reward 0, not done)."""

    @abstractmethod
    def step(self, action: str) -> StepResult:
        """Apply one action. An action the environment does not accept is an observation with
        ``info["invalid"] = True``, never an exception."""

    def close(self) -> None:  # optional hook
        pass


class Environment(ABC):
    name: str
    # episode length cap the server applies when its settings give none (None: no cap)
    max_episode_steps: int | None = None

    @abstractmethod
    def splits(self) -> list[str]: ...

    @abstractmethod
    def tasks(self, split: str) -> list[TaskInfo]: ...

    @abstractmethod
    def task(self, task_id: str) -> TaskInfo:
        """Raise KeyError for an unknown id."""

    @abstractmethod
    def open(self, task: TaskInfo, *, expert: bool = False, seed: int | None = None) -> Game: ...

    def warming_up(self) -> str | None:
        """What the process is still loading in the background (steps are slow until then), or None."""
        return None

    def close(self) -> None:  # optional hook: release workers, files
        """Called once when the server shuts down."""
