"""embeddings: a sentence embedding per (encoder, blob), for dense and hybrid search

Derived data, written by whichever replica embeds a blob first and read back when an index is rebuilt,
so a restart does not run the encoder over every skill again. No foreign key: a vector of a blob no
head points at any more is harmless, and the write path never touches this table.

Revision ID: 0004
Revises: 0003
Create Date: 2026-11-23
"""
import sqlalchemy as sa
from alembic import op

revision = "0004"
down_revision = "0003"
branch_labels = None
depends_on = None


def upgrade() -> None:
    op.create_table(
        "embeddings",
        sa.Column("model", sa.String(96), primary_key=True),
        sa.Column("blob_hash", sa.String(64), primary_key=True),
        sa.Column("vector", sa.LargeBinary, nullable=False),
    )


def downgrade() -> None:
    op.drop_table("embeddings")
