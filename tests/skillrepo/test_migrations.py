"""Alembic migrations on both databases: data survives upgrade and downgrade; head matches tables.py."""

from __future__ import annotations

from datetime import UTC, datetime

import pytest
from alembic import command
from alembic.autogenerate import compare_metadata
from alembic.migration import MigrationContext
from skillrepo_fixtures import database
from sqlalchemy import inspect, text

from services.skillrepo.db import alembic_config
from services.skillrepo.tables import metadata
from skillos.db import make_engine


def _upgrade(engine, target: str, down: bool = False) -> None:
    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    with engine.connect() as conn:
        cfg.attributes["connection"] = conn
        (command.downgrade if down else command.upgrade)(cfg, target)
        conn.commit()


def _foreign_keys(engine, table: str = "skill_heads") -> set[str]:
    return {fk["referred_table"] for fk in inspect(engine).get_foreign_keys(table)}


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_upgrade_downgrade_keep_data_and_head_matches_tables(backend, request, tmp_path):
    with database(backend, request, tmp_path) as url:
        engine = make_engine(url)
        try:
            _upgrade(engine, "0001")
            assert _foreign_keys(engine) == _foreign_keys(engine, "skill_versions") == {"repos", "blobs"}
            now = datetime.now(UTC)
            with engine.begin() as c:
                c.execute(text("INSERT INTO repos (name, seq, created_at) VALUES ('r', 1, :t)"), {"t": now})
                c.execute(text("INSERT INTO blobs VALUES ('h1', 'doc', 'desc', 'body', '{}')"))
                c.execute(text("INSERT INTO skill_heads VALUES (1, 'a-skill', 1, 'h1', :t)"), {"t": now})
                c.execute(text("INSERT INTO skill_versions (repo_id, name, version, blob_hash, seq, cause, created_at) "
                               "VALUES (1, 'a-skill', 1, 'h1', 1, 'insert', :t)"), {"t": now})

            _upgrade(engine, "head")
            assert _foreign_keys(engine) == set()  # 0002: forks copy heads without RI checks
            assert _foreign_keys(engine, "skill_versions") == set()  # 0005: nor bulk imports versions
            with engine.connect() as c:
                assert c.execute(text("SELECT repo_id, name, version, blob_hash FROM skill_heads")).all() == [
                    (1, "a-skill", 1, "h1")]
                assert c.execute(text("SELECT repo_id, name, version, blob_hash, seq FROM skill_versions")).all() == [
                    (1, "a-skill", 1, "h1", 1)]
                # what the code's table definitions say is what the migrations built
                assert compare_metadata(MigrationContext.configure(c), metadata) == []

            _upgrade(engine, "0001", down=True)
            assert _foreign_keys(engine) == _foreign_keys(engine, "skill_versions") == {"repos", "blobs"}
            with engine.connect() as c:
                assert c.execute(text("SELECT name, blob_hash FROM skill_heads")).all() == [("a-skill", "h1")]
                assert c.execute(text("SELECT name, seq FROM skill_versions")).all() == [("a-skill", 1)]
            _upgrade(engine, "head")
        finally:
            engine.dispose()
