"""What a worked example is: the compressed actions of one successful episode, kept with a skill.

The system writes them (never the curator LLM): `compress` turns a won episode into one, the skill
repo keeps at most `MAX_PER_SKILL` per skill (`keep.merge`), the executor shows the best match for its
task (`prompt.select`, `prompt.examples_block`). Every field is bounded: a skill's examples are at most
~90 K characters of JSON at their widest (up to four times that in bytes), next to a body of up to 64 KiB.
"""

from __future__ import annotations

import hashlib
import json
from datetime import UTC, datetime
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

# where the episode's success came from (ARCHITECTURE.md, "outcome source")
OutcomeSource = Literal["env", "caller", "judge"]
OUTCOME_SOURCES: tuple[str, ...] = ("env", "caller", "judge")

MAX_PER_SKILL = 3      # examples one skill keeps
MAX_STEPS = 24         # actions one example keeps (ALFWorld's expert needs at most 21 on valid_train)
MAX_ACTION = 160
MAX_OBSERVATION = 200  # what the game answered, clipped: the expert demonstrations' bound was 220
MAX_THOUGHT = 600      # single-turn tasks: the reasoning that led to the answer
MAX_TASK = 400
MAX_NOTE = 200


class ExampleStep(BaseModel):
    """One kept action and what came back; ``note`` says what was dropped before it (a search)."""

    model_config = ConfigDict(extra="forbid")

    action: str = Field(..., min_length=1, max_length=MAX_ACTION)
    observation: str = Field("", max_length=MAX_OBSERVATION)
    thought: str = Field("", max_length=MAX_THOUGHT)
    note: str = Field("", max_length=MAX_NOTE)


class WorkedExample(BaseModel):
    """One won episode, compressed. ``taken``: the actions the episode took in all (``steps`` keeps the
    ones that mattered). ``kind``: the task's kind read off its text where the env has kinds (ALFWorld's
    six), else empty. ``source``: the outcome's source; ``trajectory``: where it came from (a run's task,
    a gateway trajectory id)."""

    model_config = ConfigDict(extra="forbid")

    id: str = Field("", max_length=16, description="content hash of task and actions (set by `finish`)")
    task: str = Field(..., min_length=1, max_length=MAX_TASK)
    env: str = Field("", max_length=32)
    kind: str = Field("", max_length=32)
    steps: list[ExampleStep] = Field(..., min_length=1, max_length=MAX_STEPS)
    taken: int = Field(0, ge=0, le=10_000)
    source: OutcomeSource = "env"
    trajectory: str = Field("", max_length=200)
    created_at: str = Field("", max_length=40, description="ISO 8601, UTC")

    def actions(self) -> list[str]:
        return [s.action for s in self.steps]

    def finish(self, stamp: bool = True) -> WorkedExample:
        """With its id (a hash of the task and the actions: the same solution twice is one example) and, with
        ``stamp``, its time set (the skill repo stamps what it keeps; a curation leaves it unset, so that a retry
        of the same decision sends the same batch)."""
        digest = hashlib.sha256(json.dumps([self.task, self.actions()]).encode()).hexdigest()[:12]
        update = {"id": self.id or digest}
        if stamp:
            update["created_at"] = self.created_at or datetime.now(UTC).isoformat(timespec="seconds")
        return self.model_copy(update=update)
