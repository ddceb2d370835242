"""skill_heads without foreign keys: a fork copies its head rows without 2 RI checks per row

A fork is `INSERT INTO skill_heads ... SELECT` of the parent's heads. On PostgreSQL the two foreign
keys of skill_heads (repo_id -> repos, blob_hash -> blobs) fired one trigger per copied row each:
measured on a 1,000-skill fork, 12.6 ms of 20.6 ms were those triggers. The rows they checked are
copies of rows that already satisfied them, in the same transaction as the new repo row, and blobs
are never deleted, so the store keeps the invariant itself. skill_versions keeps its foreign keys
(one row per write, not per fork).

Revision ID: 0002
Revises: 0001
Create Date: 2026-11-22
"""
import sqlalchemy as sa
from alembic import op

revision = "0002"
down_revision = "0001"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)


def _heads(with_keys: bool) -> sa.Table:
    def fk(target: str) -> list:
        return [sa.ForeignKey(target)] if with_keys else []

    return sa.Table(
        "skill_heads", sa.MetaData(),
        sa.Column("repo_id", sa.Integer, *fk("repos.id"), primary_key=True),
        sa.Column("name", sa.String(64), primary_key=True),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("blob_hash", sa.String(64), *fk("blobs.hash"), nullable=True),
        sa.Column("updated_at", _TS, nullable=False),
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("skill_heads_repo_id_fkey", "skill_heads", type_="foreignkey")
        op.drop_constraint("skill_heads_blob_hash_fkey", "skill_heads", type_="foreignkey")
    else:  # SQLite cannot drop a constraint: rebuild the table from the definition without them
        with op.batch_alter_table("skill_heads", recreate="always", copy_from=_heads(with_keys=False)):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_foreign_key("skill_heads_repo_id_fkey", "skill_heads", "repos", ["repo_id"], ["id"])
        op.create_foreign_key("skill_heads_blob_hash_fkey", "skill_heads", "blobs", ["blob_hash"], ["hash"])
    else:
        with op.batch_alter_table("skill_heads", recreate="always", copy_from=_heads(with_keys=True)):
            pass
