"""Database tables of the skill repo (SQLAlchemy Core; the schema is owned by the Alembic migrations).

Why this shape: forks and snapshots must be cheap, so content lives once in ``blobs`` (content-addressed
by sha256) and immutable ``skill_versions`` rows point at it. A repo's current state is its
``skill_heads`` rows, one small row per skill name (a deleted skill keeps a head row with a NULL blob, a
tombstone, so version numbers keep growing). Forking copies head rows only (ints and hashes, never a
body); a snapshot is a copy of the head rows too. ``repos.seq`` counts changes; every version carries the
seq it was written at, which is how a search index catches up ("versions with seq > mine").
"""

from __future__ import annotations

from sqlalchemy import (
    BigInteger,
    Boolean,
    Column,
    DateTime,
    ForeignKey,
    Index,
    Integer,
    LargeBinary,
    MetaData,
    String,
    Table,
    Text,
    UniqueConstraint,
)

metadata = MetaData()

repos = Table(
    "repos", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    # NULL once deleted, which frees the name (NULLs never collide in a unique index)
    Column("name", String(128), unique=True, nullable=True),
    Column("seq", BigInteger, nullable=False, default=0),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("deleted_at", DateTime(timezone=True), nullable=True),
    Column("forked_from", String(128), nullable=True),
    Column("parent_id", Integer, nullable=True),
    Column("fork_seq", BigInteger, nullable=True),  # the parent's seq when forked (history goes back through it)
    Column("state_gen", BigInteger, nullable=False, default=0, server_default="0"),  # skill_states' changes
)

blobs = Table(
    "blobs", metadata,
    Column("hash", String(64), primary_key=True),
    Column("content", Text, nullable=False),      # the whole SKILL.md document
    Column("description", Text, nullable=False),
    Column("body", Text, nullable=False),
    Column("meta", Text, nullable=False),         # further frontmatter keys, as JSON
)

skill_versions = Table(
    "skill_versions", metadata,
    # no foreign keys (migration 0005): a bulk import writes a row per skill, each with two per-row checks
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("repo_id", Integer, nullable=False),
    Column("name", String(64), nullable=False),
    Column("version", Integer, nullable=False),
    Column("blob_hash", String(64), nullable=True),  # NULL: deleted
    Column("seq", BigInteger, nullable=False),
    Column("cause", String(32), nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("repo_id", "name", "version", name="uq_skill_versions_repo_name_version"),
    Index("ix_skill_versions_repo_seq", "repo_id", "seq"),
)

skill_heads = Table(
    "skill_heads", metadata,
    # no foreign keys (migration 0002): a fork copies these rows and the checks were most of its cost
    Column("repo_id", Integer, primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("blob_hash", String(64), nullable=True),
    Column("updated_at", DateTime(timezone=True), nullable=False),
)

snapshots = Table(
    "snapshots", metadata,
    Column("id", Integer, primary_key=True, autoincrement=True),
    Column("repo_id", Integer, ForeignKey("repos.id"), nullable=False),
    Column("label", String(128), nullable=False),
    Column("seq", BigInteger, nullable=False),
    Column("skill_count", Integer, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
    UniqueConstraint("repo_id", "label", name="uq_snapshots_repo_label"),
)

snapshot_heads = Table(
    "snapshot_heads", metadata,
    Column("snapshot_id", Integer, ForeignKey("snapshots.id"), primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("version", Integer, nullable=False),
    Column("blob_hash", String(64), ForeignKey("blobs.hash"), nullable=False),
)

idempotency = Table(
    "idempotency", metadata,
    Column("repo_id", Integer, ForeignKey("repos.id"), primary_key=True),
    Column("key", String(200), primary_key=True),
    Column("request_hash", String(64), nullable=False),
    Column("response", Text, nullable=False),
    Column("created_at", DateTime(timezone=True), nullable=False),
)

# one row per write of a repo: a batch of curator ops (every op's verdict, refused ones too) or a REST
# write, with where it came from (migration 0003); the repo's op timeline
op_log = Table(
    "op_log", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("repo_id", Integer, ForeignKey("repos.id"), nullable=False),
    Column("seq", BigInteger, nullable=False),       # the repo's seq after the write
    Column("kind", String(32), nullable=False),      # ops, insert, put, delete, restore, import, snapshot_restore
    Column("applied", Boolean, nullable=False),
    Column("origin", Text, nullable=True),           # JSON: run, task, curator call, ... (as the writer claims)
    Column("idempotency_key", String(200), nullable=True),
    Column("entries", Text, nullable=False),         # JSON list of verdicts
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("writer", String(64), nullable=True),     # the request's token label (migration 0006)
    # JSON: what the services vouch for (an operator's token sent it): curator model, trajectory, outcome source
    Column("provenance", Text, nullable=True),       # migration 0009
    Index("ix_op_log_repo_id", "repo_id", "id"),
)

# dense retrieval (migration 0004): one sentence embedding per (encoder, content), float32 little-endian.
# Keyed by the blob, not the skill: forks and restores share their vectors, and an index reload (a restart,
# an evicted repo, another replica) reads them instead of running the encoder over the repo again.
embeddings = Table(
    "embeddings", metadata,
    Column("model", String(96), primary_key=True),      # the encoder's identity (`dense.Encoder.key`)
    Column("blob_hash", String(64), primary_key=True),
    Column("vector", LargeBinary, nullable=False),
)

# review (migration 0007): what a repo lets curator op batches do on their own, and the batches that wait
# for a person. A proposal keeps the batch as sent (ops, example, the writer's claim) and, from the server's
# side, who sent it and why it waits; approving it applies the batch then, as that reviewer's write.
repo_policies = Table(
    "repo_policies", metadata,
    Column("repo_id", Integer, primary_key=True),
    Column("policy", Text, nullable=False),           # JSON: `skillos.protocol.skillrepo.RepoPolicy`
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("updated_by", String(64), nullable=True),
)

proposals = Table(
    "proposals", metadata,
    Column("id", BigInteger().with_variant(Integer, "sqlite"), primary_key=True, autoincrement=True),
    Column("repo_id", Integer, nullable=False),
    Column("status", String(16), nullable=False),     # pending, approved, rejected
    Column("seq", BigInteger, nullable=False),        # the repo's seq when proposed
    Column("batch", Text, nullable=False),            # JSON: ops, atomic, example, origin
    Column("verdicts", Text, nullable=False),         # JSON: the checks when proposed
    Column("reasons", Text, nullable=False),          # JSON list: review, flagged: ...
    Column("writer", String(64), nullable=True),
    Column("created_at", DateTime(timezone=True), nullable=False),
    Column("decided_at", DateTime(timezone=True), nullable=True),
    Column("decided_by", String(64), nullable=True),
    Column("note", Text, nullable=True),
    Column("result", Text, nullable=True),            # JSON OpsResult of the approval
    Index("ix_proposals_repo_status", "repo_id", "status", "id"),
)

# measured utility (migration 0008): a task's outcome per skill it was served or had withheld; a trajectory
# counts once per skill (the key), so a retried report adds nothing
skill_outcomes = Table(
    "skill_outcomes", metadata,
    Column("repo_id", Integer, primary_key=True),
    Column("skill", String(128), primary_key=True),
    Column("trajectory", String(128), primary_key=True),
    Column("arm", String(8), nullable=False),         # served, withheld
    Column("success", Boolean, nullable=False),
    Column("source", String(16), nullable=False),     # caller, environment, judge
    Column("created_at", DateTime(timezone=True), nullable=False),
    Index("ix_skill_outcomes_trajectory", "repo_id", "trajectory"),
)

# a skill's life (migration 0009): a row per skill written from traffic under a repo policy with
# `candidates` on (traffic true), or retired by a person (traffic false). No row: active, and no op batch
# may change it where candidates are on (a person's skill, or one written before). Not versioned: a state
# is the repo's judgement of a version, kept beside it (the op log records each change).
skill_states = Table(
    "skill_states", metadata,
    Column("repo_id", Integer, primary_key=True),
    Column("name", String(64), primary_key=True),
    Column("state", String(16), nullable=False),      # candidate, active, retired
    Column("traffic", Boolean, nullable=False),       # its content came from an op batch
    Column("updated_at", DateTime(timezone=True), nullable=False),
    Column("updated_by", String(64), nullable=True),  # a token's label, or "policy"
    Column("reason", Text, nullable=True),
    # when an op batch last wrote its text: the policy's rule counts only outcomes since (earlier ones were
    # another text's under the same name)
    Column("since", DateTime(timezone=True), nullable=True),
)
