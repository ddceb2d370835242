"""Engine set-up for PostgreSQL and SQLite, and the automatic Alembic upgrade at start."""

from __future__ import annotations

import fcntl
from pathlib import Path

from sqlalchemy import Engine, text

from skillos.db import is_sqlite

_PACKAGE = Path(__file__).resolve().parent
_PG_MIGRATION_LOCK = 724_001  # pg_advisory_lock key: replicas starting together migrate one at a time


def alembic_config(url: str):
    from alembic.config import Config

    cfg = Config(str(_PACKAGE / "alembic.ini"))
    cfg.set_main_option("script_location", str(_PACKAGE / "migrations"))
    cfg.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return cfg


def migrate(engine: Engine) -> None:
    """`alembic upgrade head`, serialized between processes that start at the same time."""
    from alembic import command

    cfg = alembic_config(engine.url.render_as_string(hide_password=False))
    if is_sqlite(engine):
        db_path = engine.url.database
        lock_path = Path(f"{db_path}.migrate.lock") if db_path and db_path != ":memory:" else None
        with open(lock_path, "a+") if lock_path else open("/dev/null") as lock:
            if lock_path:
                fcntl.flock(lock, fcntl.LOCK_EX)
            with engine.connect() as conn:
                cfg.attributes["connection"] = conn
                command.upgrade(cfg, "head")
                conn.commit()
        return
    with engine.connect() as conn:
        # a migration (and the wait for another replica's) may take longer than one request's statement bound
        conn.execute(text("SET statement_timeout = 0"))
        conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
        conn.commit()
        try:
            cfg.attributes["connection"] = conn
            command.upgrade(cfg, "head")
            conn.commit()
        finally:
            conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
            conn.commit()
