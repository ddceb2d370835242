"""repo_policies and proposals: the review gate of curator op batches (issue 51)

A repo's policy says whether op batches wait for a person; a proposal is one batch that waits.

Revision ID: 0007
Revises: 0006
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = "0007"
down_revision = "0006"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "repo_policies",
        sa.Column("repo_id", sa.Integer, primary_key=True),
        sa.Column("policy", sa.Text, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(64), nullable=True),
    )
    op.create_table(
        "proposals",
        sa.Column("id", sa.BigInteger().with_variant(sa.Integer, "sqlite"), primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("batch", sa.Text, nullable=False),
        sa.Column("verdicts", sa.Text, nullable=False),
        sa.Column("reasons", sa.Text, nullable=False),
        sa.Column("writer", sa.String(64), nullable=True),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("decided_at", sa.DateTime(timezone=True), nullable=True),
        sa.Column("decided_by", sa.String(64), nullable=True),
        sa.Column("note", sa.Text, nullable=True),
        sa.Column("result", sa.Text, nullable=True),
    )
    op.create_index("ix_proposals_repo_status", "proposals", ["repo_id", "status", "id"])


def downgrade() -> None:
    op.drop_index("ix_proposals_repo_status", "proposals")
    op.drop_table("proposals")
    op.drop_table("repo_policies")
