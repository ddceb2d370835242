"""skill_outcomes: measured utility per skill, served against withheld (issue 51)

Revision ID: 0008
Revises: 0007
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = "0008"
down_revision = "0007"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "skill_outcomes",
        sa.Column("repo_id", sa.Integer, primary_key=True),
        sa.Column("skill", sa.String(128), primary_key=True),
        sa.Column("trajectory", sa.String(128), primary_key=True),
        sa.Column("arm", sa.String(8), nullable=False),
        sa.Column("success", sa.Boolean, nullable=False),
        sa.Column("source", sa.String(16), nullable=False),
        sa.Column("created_at", sa.DateTime(timezone=True), nullable=False),
    )
    op.create_index("ix_skill_outcomes_trajectory", "skill_outcomes", ["repo_id", "trajectory"])


def downgrade() -> None:
    op.drop_index("ix_skill_outcomes_trajectory", "skill_outcomes")
    op.drop_table("skill_outcomes")
