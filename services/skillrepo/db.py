"""Engine set-up for PostgreSQL and SQLite, and the automatic Alembic upgrade at start."""

from __future__ import annotations

import fcntl
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, text
from sqlalchemy.engine import make_url

from skillos.db import bounded_postgres_args

_PACKAGE = Path(__file__).resolve().parent
_PG_MIGRATION_LOCK = 724_001  # pg_advisory_lock key: replicas starting together migrate one at a time


def is_sqlite(engine_or_url) -> bool:
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else make_url(engine_or_url)
    return url.get_backend_name() == "sqlite"


def make_engine(url: str, sqlite_synchronous: str = "NORMAL", *, connect_timeout_s: float = 5.0,
                statement_timeout_s: float = 30.0, pool_timeout_s: float = 10.0) -> Engine:
    """An engine whose every wait on PostgreSQL is bounded, so that a database that is down or stuck turns
    into an error (answered 503 by the service) instead of a hung request:

    * ``connect_timeout_s``: opening a connection (libpq ``connect_timeout``);
    * ``statement_timeout_s``: one statement, lock waits included (server ``statement_timeout``; 0: none);
    * TCP keepalives and ``tcp_user_timeout``: a connection to a host that vanished fails in ~20 s instead
      of the kernel's ~15 min;
    * ``pool_timeout_s``: waiting for a free connection of the pool;
    * ``pool_pre_ping``: a connection the database dropped (a restart) is replaced on checkout, so the
      service recovers by itself once the database is back.
    """
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    if is_sqlite(url):
        db_path = make_url(url).database
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               pool_size=16, max_overflow=16)

        @event.listens_for(engine, "connect")
        def _sqlite_connect(dbapi_conn, _record):
            # take over transaction control from pysqlite so that writes can BEGIN IMMEDIATE
            dbapi_conn.isolation_level = None
            cur = dbapi_conn.cursor()
            cur.execute("PRAGMA journal_mode=WAL")  # readers never block the writer
            # WAL + NORMAL: durable across a crash of the process; FULL: across a power loss too
            cur.execute(f"PRAGMA synchronous={'FULL' if sqlite_synchronous == 'FULL' else 'NORMAL'}")
            cur.execute("PRAGMA busy_timeout=30000")
            cur.execute("PRAGMA foreign_keys=ON")
            cur.close()

        @event.listens_for(engine, "begin")
        def _sqlite_begin(conn):
            # a write takes the database's write lock up front: no deadlocked read-then-write upgrades
            conn.exec_driver_sql("BEGIN IMMEDIATE" if conn.get_execution_options().get("write") else "BEGIN")

        return engine
    connect_args = bounded_postgres_args(connect_timeout_s, statement_timeout_s)
    return create_engine(url, pool_size=16, max_overflow=16, pool_pre_ping=True, pool_timeout=pool_timeout_s,
                         connect_args=connect_args)


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
