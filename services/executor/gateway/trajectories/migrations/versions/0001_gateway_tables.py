"""gateway_trajectories and gateway_calls: the skill gateway's trajectories and their recorded calls

The schema the gateway made with ``create_all`` before it had migrations: a database made that way is
stamped with this revision on its first start with migrations (`store.migrate`), then upgraded.

Revision ID: 0001
Revises:
Create Date: 2026-11-27
"""
import sqlalchemy as sa
from alembic import op

revision = "0001"
down_revision = None
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "gateway_trajectories",
        sa.Column("id", sa.String(64), primary_key=True),
        sa.Column("repo", sa.String(128), nullable=False),
        sa.Column("task", sa.Text, nullable=False),
        sa.Column("model", sa.String(256), nullable=False),
        sa.Column("skills", sa.Text, nullable=False),
        sa.Column("status", sa.String(16), nullable=False),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("updated_at", sa.Float, nullable=False),
        sa.Column("calls", sa.Integer, nullable=False),
        sa.Column("bytes", sa.Integer, nullable=False),
        sa.Column("seen_messages", sa.Integer, nullable=False),
        sa.Column("truncated", sa.Boolean, nullable=False),
        sa.Column("outcome", sa.Text, nullable=True),
        sa.Column("curation", sa.Text, nullable=True),
        sa.Column("claimed_at", sa.Float, nullable=True),
    )
    op.create_index("ix_gateway_trajectories_status_updated", "gateway_trajectories", ["status", "updated_at"])
    op.create_table(
        "gateway_calls",
        sa.Column("trajectory_id", sa.String(64),
                  sa.ForeignKey("gateway_trajectories.id", ondelete="CASCADE"), primary_key=True),
        sa.Column("seq", sa.Integer, primary_key=True),
        sa.Column("created_at", sa.Float, nullable=False),
        sa.Column("messages", sa.Text, nullable=False),
        sa.Column("response", sa.Text, nullable=False),
        sa.Column("usage", sa.Text, nullable=True),
    )


def downgrade() -> None:
    op.drop_table("gateway_calls")
    op.drop_index("ix_gateway_trajectories_status_updated", table_name="gateway_trajectories")
    op.drop_table("gateway_trajectories")
