"""op_log.writer: who made a write, as the server saw it (issue 51)

The label of the token the request came with (``open`` in open mode; NULL for a write made with no request,
and for those before this revision). ``origin`` stays what the writer claimed about itself.

Revision ID: 0006
Revises: 0005
Create Date: 2026-12-05
"""
import sqlalchemy as sa
from alembic import op

revision = "0006"
down_revision = "0005"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.add_column("op_log", sa.Column("writer", sa.String(64), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table("op_log") as batch:   # SQLite drops a column by a table copy
        batch.drop_column("writer")
