"""gateway_trajectories.withheld: matching skills withheld at random from the task (issue 51)

The control arm of each skill's measured utility: at the outcome, the skill repo is told which skills were
served and which were withheld.

Revision ID: 0003
Revises: 0002
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = "0003"
down_revision = "0002"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("gateway_trajectories", sa.Column("withheld", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("gateway_trajectories") as batch:   # SQLite drops a column by a table copy
        batch.drop_column("withheld")
