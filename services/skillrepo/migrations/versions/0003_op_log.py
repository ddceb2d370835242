"""op_log: one row per write of a repo (a batch of curator ops or a REST write), with every op's
verdict and where the write came from (run, task, curator call), for the repo's op timeline

Refused ops write no skill version, so skill_versions alone cannot say what the curator tried; the
log keeps the verdicts of every batch. One row per write transaction (not per op), inserted in the
same transaction as the write.

Revision ID: 0003
Revises: 0002
Create Date: 2026-11-24
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_ID64 = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def upgrade() -> None:
    op.create_table(
        "op_log",
        sa.Column("id", _ID64, primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, sa.ForeignKey("repos.id"), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("kind", sa.String(32), nullable=False),
        sa.Column("applied", sa.Boolean, nullable=False),
        sa.Column("origin", sa.Text, nullable=True),
        sa.Column("idempotency_key", sa.String(200), nullable=True),
        sa.Column("entries", sa.Text, nullable=False),
        sa.Column("created_at", _TS, nullable=False),
    )
    op.create_index("ix_op_log_repo_id", "op_log", ["repo_id", "id"])


def downgrade() -> None:
    op.drop_index("ix_op_log_repo_id", table_name="op_log")
    op.drop_table("op_log")
