"""gateway_trajectories.owner: the caller who opened a trajectory (issue 51)

Only that caller continues it, reports its outcome or reads it (besides an operator's token); a trajectory
opened before this revision has none and keeps the old rule (any token that reaches its repo).

Revision ID: 0002
Revises: 0001
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gateway_trajectories", sa.Column("owner", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gateway_trajectories") as batch:   # SQLite drops a column by a table copy
        batch.drop_column("owner")
