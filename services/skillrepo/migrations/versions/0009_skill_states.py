"""skill_states: a skill's life (candidate, active, retired) for skills written from traffic; op_log.provenance:
what the services vouch for about a write (issue 51)

Revision ID: 0009
Revises: 0008
Create Date: 2026-12-06
"""
import sqlalchemy as sa
from alembic import op

revision = "0009"
down_revision = "0008"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "skill_states",
        sa.Column("repo_id", sa.Integer, primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("state", sa.String(16), nullable=False),
        sa.Column("traffic", sa.Boolean, nullable=False),
        sa.Column("updated_at", sa.DateTime(timezone=True), nullable=False),
        sa.Column("updated_by", sa.String(64), nullable=True),
        sa.Column("reason", sa.Text, nullable=True),
        sa.Column("since", sa.DateTime(timezone=True), nullable=True),
    )
    # bumped by every change of a repo's states: a search reads it with the repo's seq and re-reads the
    # states only when it moved (states change no skill version, so the seq cannot tell)
    op.add_column("repos", sa.Column("state_gen", sa.BigInteger, nullable=False, server_default="0"))
    op.add_column("op_log", sa.Column("provenance", sa.Text, nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("op_log") as batch:
        batch.drop_column("provenance")
    with op.batch_alter_table("repos") as batch:
        batch.drop_column("state_gen")
    op.drop_table("skill_states")
