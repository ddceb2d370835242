"""The gateway's tables (SQLAlchemy Core), shared by the store and its migrations (`migrations/`: Alembic,
its own version table, since the tables may live in the skill repo's database)."""

from __future__ import annotations

from sqlalchemy import Boolean, Column, Float, ForeignKey, Index, Integer, MetaData, String, Table, Text

VERSION_TABLE = "gateway_alembic_version"

metadata = MetaData()

trajectories = Table(
    "gateway_trajectories", metadata,
    Column("id", String(64), primary_key=True),
    Column("repo", String(128), nullable=False),
    Column("task", Text, nullable=False),
    Column("model", String(256), nullable=False),
    Column("skills", Text, nullable=False),           # JSON: [{name, description, body, version}]
    Column("status", String(16), nullable=False),
    Column("created_at", Float, nullable=False),      # unix seconds
    Column("updated_at", Float, nullable=False),
    Column("calls", Integer, nullable=False, default=0),
    Column("bytes", Integer, nullable=False, default=0),
    Column("seen_messages", Integer, nullable=False, default=0),  # the client's messages in its last call
    Column("truncated", Boolean, nullable=False, default=False),
    Column("outcome", Text, nullable=True),           # JSON: {success, score, feedback}
    Column("curation", Text, nullable=True),          # JSON: the curator's verdicts, or why it failed
    Column("claimed_at", Float, nullable=True),       # when a process began curating it
    Column("owner", String(64), nullable=True),       # the opener's `Grant.caller_id` (NULL: before 0002)
    Column("withheld", Text, nullable=True),          # JSON: names of matching skills withheld at random (0003)
)
Index("ix_gateway_trajectories_status_updated", trajectories.c.status, trajectories.c.updated_at)

calls = Table(
    "gateway_calls", metadata,
    Column("trajectory_id", String(64), ForeignKey("gateway_trajectories.id", ondelete="CASCADE"),
           primary_key=True),
    Column("seq", Integer, primary_key=True),
    Column("created_at", Float, nullable=False),
    Column("messages", Text, nullable=False),         # JSON: the messages new in this call
    Column("response", Text, nullable=False),         # JSON: the answer's message and finish reason
    Column("usage", Text, nullable=True),             # JSON: the backend's usage counts
)
