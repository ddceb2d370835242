"""skill_versions without foreign keys: a bulk import writes a version row per skill without 2 RI checks each

A bulk import (`POST /v1/repos/{repo}/bulk`) COPYs one skill_versions row per skill. On PostgreSQL the two
foreign keys (repo_id -> repos, blob_hash -> blobs) fired one trigger per row each, and the blob's check
takes a FOR KEY SHARE lock on the blob row, a write to its page: on one 300,000-skill import (a profiling
run, 2026-12-03) the database spent 55 µs a skill with them and 39 without, and the import went from 7,862
to 8,715 skills/s (the paired million-skill runs are in bench/RESULTS-reliability.md, scenario 6).
As with skill_heads (migration 0002), the store keeps the invariant itself: a version's blob is written
in the same transaction before it (content-addressed, inserted if absent), its repo row is the one the
transaction holds locked, and neither blobs nor repo rows are ever deleted (a deleted repo keeps its row).

Revision ID: 0005
Revises: 0004
Create Date: 2026-12-03
"""
import sqlalchemy as sa
from alembic import op

revision = "0005"
down_revision = "0004"
branch_labels = None
depends_on = None

_TS = sa.DateTime(timezone=True)
_ID64 = sa.BigInteger().with_variant(sa.Integer, "sqlite")


def _versions(with_keys: bool) -> sa.Table:
    def fk(target: str) -> list:
        return [sa.ForeignKey(target)] if with_keys else []

    return sa.Table(
        "skill_versions", sa.MetaData(),
        sa.Column("id", _ID64, primary_key=True, autoincrement=True),
        sa.Column("repo_id", sa.Integer, *fk("repos.id"), nullable=False),
        sa.Column("name", sa.String(64), nullable=False),
        sa.Column("version", sa.Integer, nullable=False),
        sa.Column("blob_hash", sa.String(64), *fk("blobs.hash"), nullable=True),
        sa.Column("seq", sa.BigInteger, nullable=False),
        sa.Column("cause", sa.String(32), nullable=False),
        sa.Column("created_at", _TS, nullable=False),
        sa.UniqueConstraint("repo_id", "name", "version", name="uq_skill_versions_repo_name_version"),
        sa.Index("ix_skill_versions_repo_seq", "repo_id", "seq"),
    )


def upgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.drop_constraint("skill_versions_repo_id_fkey", "skill_versions", type_="foreignkey")
        op.drop_constraint("skill_versions_blob_hash_fkey", "skill_versions", type_="foreignkey")
    else:  # SQLite cannot drop a constraint: rebuild the table from the definition without them
        with op.batch_alter_table("skill_versions", recreate="always", copy_from=_versions(with_keys=False)):
            pass


def downgrade() -> None:
    if op.get_bind().dialect.name == "postgresql":
        op.create_foreign_key("skill_versions_repo_id_fkey", "skill_versions", "repos", ["repo_id"], ["id"])
        op.create_foreign_key("skill_versions_blob_hash_fkey", "skill_versions", "blobs", ["blob_hash"], ["hash"])
    else:
        with op.batch_alter_table("skill_versions", recreate="always", copy_from=_versions(with_keys=True)):
            pass
