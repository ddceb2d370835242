"""Wire schemas of the skill repo service (``/v1/repos/...``).

Shared by the service, the Python clients (`skillos.clients.skillrepo`) and every part that talks to
the repo. Versions: every change of a skill makes a new immutable version; ``version`` is the skill's
own counter (1, 2, 3, ...; a delete is a version too), used in ``ETag`` / ``If-Match``.
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Any, Literal, get_args

from pydantic import BaseModel, ConfigDict, Field

from skillos.worked_examples import WorkedExample

# Names of repos: like skill names but may contain '.', '_' and '/'-free segments; keep them URL-safe.
REPO_NAME_PATTERN = r"^[a-zA-Z0-9][a-zA-Z0-9._-]{0,127}$"

# The columns' ranges (PostgreSQL ``integer`` versions, ``bigint`` log ids): a number past them is a
# 422 at the door, not an overflow in the driver.
VERSION_MAX = 2**31 - 1
LOG_ID_MAX = 2**63 - 1


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid")


# --- repos -------------------------------------------------------------------------------------

class RepoPolicy(_Model):
    """What the repo lets curator op batches (``POST /ops``: skills written from traffic) do on their own.
    REST writes (a person's) are never gated; a person reviews what waits (`Proposal`)."""
    review: bool = Field(False, description=(
        "true: an op batch waits as a proposal until an rw token other than its writer approves it, unless "
        "its writer is trusted; a batch whose content the scan flags waits even then"))
    trusted_writers: list[str] = Field(default_factory=list, max_length=64, description=(
        "token labels whose op batches apply at once (SKILLOS_AUTH_TOKENS labels, e.g. the curator of "
        "`skillos run` streams)"))
    pinned: list[str] = Field(default_factory=list, max_length=1000, description=(
        "skills no op batch may update or delete (refused: pinned), whoever writes it"))
    reviewers: list[str] = Field(default_factory=list, max_length=64, description=(
        "token labels that may approve or reject proposals besides operators (rw tokens without a prefix); "
        "only an operator sets the policy"))
    candidates: bool = Field(False, description=(
        "true: a skill an op batch writes starts as a `candidate`, served only to an exploration share of "
        "callers until promoted (by a reviewer or `promote_after`); op batches change only skills written "
        "from traffic (a person's are theirs), and a skill_delete retires, restorably"))
    promote_after: int | None = Field(None, ge=1, le=1_000_000, description=(
        "promote a candidate whose measured utility's 99 % interval starts at or above 0 when it has been "
        "served in N, 2N, 4N, ... tasks since its text was written (None: a reviewer promotes)"))
    utility_sources: list[Literal["caller", "environment", "judge"]] = Field(
        default_factory=lambda: ["environment"], min_length=1, description=(
            "outcome sources `promote_after` and `retire_harmful` count; add `caller` or `judge` only where "
            "callers are trusted: a caller reports its own outcomes, and the self-judge reads the conversation "
            "the caller wrote, so either lets a caller promote its own candidate"))
    retire_harmful: bool = Field(False, description=(
        "retire a skill written from traffic whose utility's 99 % interval lies wholly below 0 when it has "
        "been served in N, 2N, 4N, ... tasks since its text was written (N: `promote_after`, or 10)"))


class RepoCreate(_Model):
    name: str = Field(..., min_length=1, max_length=128, pattern=REPO_NAME_PATTERN,
                      description="repo name: letters, digits, '.', '_', '-'; starts with a letter or digit")
    policy: RepoPolicy | None = Field(None, description="None: the service's default (SKILLOS_REVIEW_DEFAULT)")


class ForkRequest(_Model):
    name: str = Field(..., min_length=1, max_length=128, pattern=REPO_NAME_PATTERN,
                      description="the fork's name: letters, digits, '.', '_', '-'; starts with a letter or digit")
    snapshot: str | None = Field(None, description="fork the repo as it was at this snapshot label")
    policy: RepoPolicy | None = Field(None, description="None: the source repo's policy goes with the fork")


class Repo(BaseModel):
    name: str
    skill_count: int
    seq: int = Field(..., description="change counter of the repo: grows by one per applied change")
    created_at: datetime
    forked_from: str | None = None
    updated_at: datetime | None = Field(None, description="when a skill of the repo last changed (None: never)")


class RepoList(BaseModel):
    repos: list[Repo]


# --- skills ------------------------------------------------------------------------------------

class SkillFields(_Model):
    """A skill given as fields (JSON); the service builds the Markdown document from them."""
    name: str = Field(..., min_length=1, max_length=64)
    description: str = Field(..., min_length=1, max_length=1024)
    body: str = ""
    metadata: dict[str, Any] = Field(default_factory=dict,
                                     description="further frontmatter keys, kept as they are")


SkillState = Literal["active", "candidate", "retired"]
SKILL_STATES: tuple[str, ...] = get_args(SkillState)


class Skill(BaseModel):
    name: str
    description: str
    body: str
    metadata: dict[str, Any] = Field(default_factory=dict)
    version: int
    content: str = Field(..., description="the whole SKILL.md document (frontmatter + body)")
    updated_at: datetime | None = None
    cause: str | None = Field(None, description="what wrote the current version (insert, update, put, restore, "
                                                "...); None when it was inherited from the repo forked from")
    examples: list[WorkedExample] = Field(default_factory=list, description=(
        "worked examples kept with the skill (system-written, at most 3; not part of `content`)"))
    state: SkillState = Field("active", description=(
        "active: served; candidate: written from traffic, served to an exploration share only; retired: "
        "not served, restorable (POST .../skills/{name}/state)"))


class SkillList(BaseModel):
    skills: list[Skill]
    next_after: str | None = Field(None, description="with ?limit: the name to pass as ?after= for the next "
                                                     "page (None: this was the last page)")


class SkillVersion(BaseModel):
    name: str
    version: int
    deleted: bool
    seq: int = Field(..., description="repo change counter at which this version was written")
    created_at: datetime
    cause: str = Field("", description="what made it: put, insert, update, delete, op, restore, import")
    description: str | None = None
    content: str | None = None
    examples: list[WorkedExample] | None = Field(None, description="the version's worked examples (with its "
                                                                   "content; None when content was not asked for)")


class SkillVersionList(BaseModel):
    versions: list[SkillVersion]


class OpOrigin(_Model):
    """Where a write came from, kept in the repo's op log (every field optional)."""
    source: str | None = Field(None, max_length=64, description="run, train, console, cli, ...")
    run: str | None = Field(None, max_length=200, description="the run's id (`skillos run`: config.run_id)")
    seed: int | None = None
    position: int | None = Field(None, description="the task's position in the stream")
    task_id: str | None = Field(None, max_length=500)
    curator_call: str | None = Field(None, max_length=200, description="the curator call's id")
    trajectory: str | None = Field(None, max_length=64,
                                   description="the skill gateway's trajectory the ops were curated from")
    step: int | None = Field(None, description="training step")
    rollout: int | None = None


class Provenance(_Model):
    """What the services that wrote a batch vouch for (only an operator's token sends it): the skill repo keeps
    it beside the writer's label, apart from ``origin`` (what a writer claims)."""
    curator_model: str | None = Field(None, max_length=200, description="the model that curated the ops")
    requested_by: str | None = Field(None, max_length=64, description=(
        "the label of the token that asked for the curation (the gateway's, the harness's, or a caller's)"))
    trajectory: str | None = Field(None, max_length=128, description="the trajectory or episode curated")
    outcome_source: Literal["caller", "environment", "judge"] | None = Field(None, description=(
        "who said how the task went: the caller (through the gateway), the environment, the self-judge"))


class RestoreSkillRequest(_Model):
    version: int = Field(..., ge=1, le=VERSION_MAX)
    origin: OpOrigin | None = None


# --- search ------------------------------------------------------------------------------------

class SearchHit(BaseModel):
    name: str
    score: float
    description: str
    version: int
    body: str = ""
    examples: list[WorkedExample] = Field(default_factory=list)
    state: SkillState = Field("active", description="candidate: only with ?candidates=true")


SearchMode = Literal["bm25", "dense", "hybrid"]
SEARCH_MODES: tuple[str, ...] = get_args(SearchMode)


class SearchResponse(BaseModel):
    hits: list[SearchHit]
    mode: SearchMode = "bm25"


# --- curator ops -------------------------------------------------------------------------------

class Op(BaseModel):
    """One curator function call in the OpenAI tool-call shape; ``arguments`` may be a JSON string."""
    model_config = ConfigDict(extra="ignore")
    name: str = Field(..., max_length=128)
    arguments: dict[str, Any] | str = Field(default_factory=dict)


class OpsRequest(_Model):
    ops: list[Op]
    idempotency_key: str | None = Field(None, min_length=1, max_length=200)
    atomic: bool = Field(True, description="true: all ops or none; false: apply the valid ones, refuse the rest")
    origin: OpOrigin | None = Field(None, description="where the batch came from, kept in the op log")
    example: WorkedExample | None = Field(None, description=(
        "a worked example of the episode the ops were curated from: kept (by the repo's rule) with every "
        "skill an applied new_skill_insert or skill_update of the batch wrote"))
    provenance: Provenance | None = Field(None, description=(
        "what the writing service vouches for, kept in the op log: an operator's token only (403 otherwise)"))


class OpOutcome(BaseModel):
    """The repo's answer for one op of a batch. The curator folds it into its call's verdict
    (`skillos.curation.OpVerdict`, via `skillos.curation.settle`)."""
    index: int
    name: str
    status: Literal["applied", "refused", "pending"] = Field(..., description=(
        "pending: valid, waiting in a proposal for review (the repo's policy); nothing was written"))
    code: str | None = None
    message: str = ""
    skill_name: str | None = None
    version: int | None = None
    example: str | None = Field(None, description=(
        "what became of the batch's example on this op's skill: added, replaced <id>, unchanged, not kept: "
        "<why> (None: no example, or the op wrote no skill)"))


class OpsResult(BaseModel):
    applied: bool = Field(..., description="true when the repo changed as requested (every op applied "
                                          "when atomic, at least the valid ones otherwise)")
    verdicts: list[OpOutcome]
    seq: int = Field(0, description="repo change counter after the batch")
    replayed: bool = Field(False, description="true when this answer was stored for the idempotency key")
    proposal: int | None = Field(None, description="the proposal the batch waits in for review (None: not gated)")


class OpLogEntry(BaseModel):
    """One write of a repo: a batch of curator ops (kind "ops", every op's verdict, refused ones too) or
    a REST write (kind insert, put, delete, restore, import, snapshot_restore: one entry per changed
    skill, ``name`` being the change's cause)."""
    id: int = Field(..., description="the log's own counter: pass it as ?before= for older entries")
    seq: int = Field(..., description="the repo's seq after the write")
    kind: str
    applied: bool
    created_at: datetime
    origin: OpOrigin | None = Field(None, description="where the writer says the write came from (its claim)")
    writer: str | None = Field(None, description=(
        "who made the write, as the server authenticated it: the label of the request's token (SKILLOS_AUTH_"
        "TOKENS entries `token:scope:prefix:label`, else token#<n>; 'open' in open mode; None: a write made "
        "without a request, or before writers were kept)"))
    idempotency_key: str | None = None
    ops: list[OpOutcome]
    provenance: Provenance | None = Field(None, description=(
        "what the writing service vouched for (an operator's token wrote it): the curator's model, who asked "
        "for the curation, the trajectory and where its outcome came from"))


class OpLog(BaseModel):
    entries: list[OpLogEntry] = Field(..., description="newest first")
    next_before: int | None = Field(None, description="pass as ?before= for the next (older) page; None: no more")


class TokenInfo(BaseModel):
    """What the caller's token may do."""
    mode: Literal["open", "tokens"]
    scope: Literal["read", "rw"]
    prefix: str | None = Field(None, description="the token only reaches repos whose name starts with this")
    label: str | None = Field(None, description=(
        "the token's label (SKILLOS_AUTH_TOKENS; `token#<n>` without one, `open` in open mode): the op log's "
        "writer, and what a repo policy's `reviewers` and `trusted_writers` name"))


# --- review ------------------------------------------------------------------------------------

ProposalStatus = Literal["pending", "approved", "rejected"]


class ProposedChange(BaseModel):
    """What one op of a proposal would do to one skill, as a reviewer reads it."""
    index: int
    op: str
    skill_name: str | None = None
    new_name: str | None = None
    current: str | None = Field(None, description="the skill's document as served now (None: a new skill)")
    proposed: str | None = Field(None, description="the document the op writes (None: a delete)")
    diff: str = Field("", description="unified diff from current to proposed")


class Proposal(BaseModel):
    id: int
    status: ProposalStatus
    created_at: datetime
    writer: str | None = Field(None, description="the token label that sent the batch, as the server saw it")
    origin: OpOrigin | None = Field(None, description="where the writer says the batch came from (its claim)")
    provenance: Provenance | None = Field(None, description="what the writing service vouched for")
    reasons: list[str] = Field(default_factory=list, description="why it waits: review, flagged: <what>")
    seq: int = Field(..., description="the repo's seq when it was proposed")
    ops: list[Op]
    atomic: bool = True
    example: WorkedExample | None = None
    verdicts: list[OpOutcome] = Field(default_factory=list, description="the repo's checks when proposed")
    changes: list[ProposedChange] = Field(default_factory=list, description="filled when one proposal is read")
    decided_at: datetime | None = None
    decided_by: str | None = None
    note: str | None = None
    result: OpsResult | None = Field(None, description="what approving it applied")


class ProposalList(BaseModel):
    proposals: list[Proposal] = Field(..., description="newest first")


class ProposalDecision(_Model):
    note: str | None = Field(None, max_length=2000, description="why, kept with the decision")


# --- measured utility ---------------------------------------------------------------------------

OutcomeSource = Literal["caller", "environment", "judge"]


OutcomeSkill = Annotated[str, Field(min_length=1, max_length=128)]


class OutcomeReport(_Model):
    """One task's outcome and which matching skills it was served or had withheld (`skillos.utility`)."""
    trajectory: str = Field(..., min_length=1, max_length=128, description=(
        "the task's trajectory or episode id: a report per id counts once (a retry is no second task)"))
    success: bool
    source: OutcomeSource = Field(..., description="who said it succeeded: the caller, the environment, a judge")
    served: list[OutcomeSkill] = Field(default_factory=list, max_length=64,
                                       description="skills shown to the executor")
    withheld: list[OutcomeSkill] = Field(default_factory=list, max_length=64, description=(
        "skills the search matched and the server withheld at random (the control arm)"))


class OutcomeRecorded(BaseModel):
    recorded: int = Field(..., description="skills counted; 0 when this trajectory was reported before")
    changed: list[SkillStateEntry] = Field(default_factory=list, description=(
        "skills the repo's policy promoted or retired on these numbers (`promote_after`, `retire_harmful`)"))


class SkillUtility(BaseModel):
    name: str
    served: int = Field(..., description="tasks it was served in")
    served_success: int
    withheld: int = Field(..., description="tasks it matched and was withheld in")
    withheld_success: int
    difference: float | None = Field(None, description="success rate served minus withheld")
    interval: tuple[float, float] | None = Field(None, description=(
        "95 % interval of the difference (Newcombe's hybrid score); None while an arm has no task"))


class UtilityReport(BaseModel):
    repo: str
    sources: list[OutcomeSource]
    skills: list[SkillUtility]


# --- a skill's life ------------------------------------------------------------------------------

class SkillStateChange(_Model):
    state: SkillState = Field(..., description="active (promote, restore), candidate, retired")
    note: str | None = Field(None, max_length=500, description="why, kept with the state and in the op log")


class SkillStateEntry(BaseModel):
    name: str
    state: SkillState
    traffic: bool = Field(..., description="its content came from an op batch (skills written from traffic)")
    updated_at: datetime | None = None
    updated_by: str | None = Field(None, description="a token's label, or `policy`")
    reason: str | None = None


class SkillStateList(BaseModel):
    skills: list[SkillStateEntry]


# --- snapshots, import ---------------------------------------------------------------------------

class ExampleList(BaseModel):
    examples: list[WorkedExample]


class ExampleResult(BaseModel):
    """What adding a worked example did: the skill as it is now and the repo's verdict on the example."""
    skill: Skill
    result: str = Field(..., description="added, replaced <id>, unchanged, or not kept: <why>")


class SnapshotCreate(_Model):
    label: str = Field(..., min_length=1, max_length=128, pattern=REPO_NAME_PATTERN)


class Snapshot(BaseModel):
    repo: str
    label: str
    seq: int
    skill_count: int
    created_at: datetime


class SnapshotList(BaseModel):
    snapshots: list[Snapshot]


class ImportResult(BaseModel):
    imported: list[str]
    seq: int


class BulkResult(BaseModel):
    """What a bulk write did: ``written`` new versions (a skill sent unchanged gets none), the repo's seq after."""
    received: int
    written: int
    seq: int


class IndexedSkill(BaseModel):
    name: str
    version: int


class IndexStatus(BaseModel):
    """One replica's search index of a repo next to the database (diagnostics, tests)."""
    repo: str
    db_seq: int
    index_seq: int | None = Field(None, description="None: this replica has not loaded the repo's index")
    documents: list[IndexedSkill] | None = None
