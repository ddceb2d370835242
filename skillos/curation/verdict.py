"""`OpVerdict`: the fate of one call of a curation decision, and r_fc over a decision's verdicts.

A verdict is made in two steps. `validate` decides what can be decided without the repo (the call
is readable, names an op, has its arguments, the text is a well-formed skill). The calls that pass
are sent to the skill repo as one batch and `settle` copies the repo's answer onto them: applied
(with the skill's name and version), or refused for the repo's state (the skill exists / does not
exist), which makes the call invalid after all. So ``valid`` is final only after `settle`, and
``valid`` counts towards r_fc exactly when the call was valid *and* executed (when applied at all).

This is the wire shape of ``CurateResponse.calls`` (`skillos.protocol.curator` re-exports it).
The skill repo answers each op of a batch with its own record, `skillos.protocol.skillrepo.OpOutcome`
(status, code, message, version): that is the repo's answer, not a verdict on the curator's call.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Protocol

from pydantic import BaseModel, Field, PrivateAttr


class OpVerdict(BaseModel):
    """The fate of one call: valid (and applied when apply was true) or refused with a reason."""

    index: int
    name: str | None
    arguments: dict[str, Any] = Field(default_factory=dict)
    valid: bool
    applied: bool = False
    reason: str | None = None
    skill_name: str | None = Field(None, description="the skill's name in the repo (normalized by it)")
    skill_version: int | None = None
    normalized: list[str] = Field(default_factory=list, description="what the service repaired (e.g. name slug)")
    example: str | None = Field(None, description=(
        "what became of the decision's worked example on this call's skill (added, replaced <id>, unchanged, "
        "not kept: why); None: the call carried none (a failure, a delete, a refused call)"))

    _op: Any = PrivateAttr(None)   # the typed op (`ops.CuratorOp`) of a call that passed `validate`

    @property
    def op(self) -> Any:
        """The op as one of `NewSkillInsert`, `SkillUpdate`, `SkillDelete`; None when refused by `validate`."""
        return self._op

    def call(self) -> dict[str, Any]:
        """The call in the skill repo's op shape ({"name", "arguments"}), with the cleaned arguments."""
        return {"name": self.name, "arguments": self.arguments}


class RepoOutcome(Protocol):
    """What `settle` reads of the repo's answer for one op (`skillos.protocol.skillrepo.OpOutcome`)."""

    index: int
    status: str
    code: str | None
    message: str
    skill_name: str | None
    version: int | None
    example: str | None


def settle(verdicts: list[OpVerdict], sent: Sequence[int], outcomes: Sequence[RepoOutcome]) -> bool:
    """Copy the repo's answers onto the verdicts. ``sent[j]`` is the verdict index of the batch's op j.

    Returns whether any call was applied.
    """
    for outcome in outcomes:
        if outcome.index >= len(sent):
            continue
        target = verdicts[sent[outcome.index]]
        if outcome.status == "applied":
            target.applied = True
            target.skill_version = outcome.version
            target.skill_name = outcome.skill_name
            target.example = getattr(outcome, "example", None)
        elif outcome.status == "pending":
            # valid, kept by the repo for a person's review (its policy): nothing is served yet
            target.skill_name = outcome.skill_name
            target.reason = f"{outcome.code or 'pending'}: {outcome.message}"
        else:
            # refused for the repo's state: the call was not executed, so it is not valid (r_fc)
            target.valid = False
            target.reason = f"{outcome.code or 'refused'}: {outcome.message}"
    return any(v.applied for v in verdicts)


def validity_rate(verdicts: Sequence[OpVerdict]) -> float:
    """r_fc of one decision: valid calls / calls. No call at all is a valid decision (1.0)."""
    return sum(v.valid for v in verdicts) / len(verdicts) if verdicts else 1.0
