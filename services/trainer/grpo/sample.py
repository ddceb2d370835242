"""The unit the GRPO update is computed over: one completion of the policy with its advantage."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any


@dataclass
class PolicySample:
    """One completion of the policy, the unit the loss is computed over: a curation decision, or in the
    agent mode one agent decision or one of a method's own calls (`segment`)."""

    prompt_ids: list[int]
    completion_ids: list[int]
    advantage: float = 0.0
    group_id: str = ""
    rollout: int = 0
    constraint: Any = None       # the SchemaConstraint it was sampled under (the loss replays it)
    segment: str = "curate"      # agent mode: act, query, rerank, distill, induce (`skillos.methods.writer.PURPOSE`)
    position: int = -1           # agent mode: the task of the group it belongs to
    episode: str | None = None   # agent mode, act: the episode it is a decision of
