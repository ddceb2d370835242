"""What every service that keeps state in PostgreSQL (or SQLite) shares (the skill repo, the executor's
gateway): the engine, with every wait on PostgreSQL bounded so that a database that is down or stuck becomes
an error, not a hang; and which driver errors mean "the database cannot answer now" (answered 503 with
Retry-After, never 500)."""

from __future__ import annotations

import time
from pathlib import Path

from sqlalchemy import Engine, create_engine, event, exc
from sqlalchemy.engine import make_url

from skillos.placeholders import refuse_placeholder

# A connection back in the pool less than this long ago is not pinged on checkout: HikariCP's default
# (aliveBypassWindowMs, 500 ms). A ping is a round trip, ~0.4 ms on loopback, and a search checks out twice
# (the repo's seq, the hits' texts): at a million skills about a tenth of a search's time over HTTP.
PING_IDLE_S = 0.5


def bounded_postgres_args(connect_timeout_s: float = 5.0, statement_timeout_s: float = 30.0) -> dict:
    """libpq's ``connect_timeout``, TCP keepalives and ``tcp_user_timeout`` (a vanished host fails in ~20 s,
    not the kernel's ~15 min) and the server's ``statement_timeout`` (0: none)."""
    args: dict = {
        "connect_timeout": max(1, round(connect_timeout_s)),  # libpq: whole seconds, at least 1 (0: forever)
        "keepalives": 1, "keepalives_idle": 10, "keepalives_interval": 3, "keepalives_count": 3,
        "tcp_user_timeout": 20_000}
    if statement_timeout_s > 0:
        args["options"] = f"-c statement_timeout={int(statement_timeout_s * 1000)}"
    return args


def is_sqlite(engine_or_url) -> bool:
    url = engine_or_url.url if isinstance(engine_or_url, Engine) else make_url(engine_or_url)
    return url.get_backend_name() == "sqlite"


def make_engine(url: str, sqlite_synchronous: str = "NORMAL", *, connect_timeout_s: float = 5.0,
                statement_timeout_s: float = 30.0, pool_timeout_s: float = 10.0, pool_size: int = 16) -> Engine:
    """An engine whose every wait on PostgreSQL is bounded, so that a database that is down or stuck turns
    into an error (answered 503 by the service) instead of a hung request:

    * ``connect_timeout_s``: opening a connection (libpq ``connect_timeout``);
    * ``statement_timeout_s``: one statement, lock waits included (server ``statement_timeout``; 0: none);
    * TCP keepalives and ``tcp_user_timeout``: a connection to a host that vanished fails in ~20 s instead
      of the kernel's ~15 min;
    * ``pool_timeout_s``: waiting for a free connection of the pool;
    * a ping on checkout (SQLAlchemy's ``pool_pre_ping``, skipped for a connection used in the last
      `PING_IDLE_S`): a connection the database dropped (a restart) is replaced, and the pool emptied, so
      the service recovers by itself once the database is back. A connection dropped within that window
      fails its request with an error answered 503, and every connection checked in before that failure is
      pinged on its next checkout.
    """
    if url.startswith("postgresql://"):
        url = "postgresql+psycopg://" + url[len("postgresql://"):]
    refuse_placeholder(make_url(url).password, "the database URL's password")
    if is_sqlite(url):
        db_path = make_url(url).database
        if db_path and db_path != ":memory:":
            Path(db_path).parent.mkdir(parents=True, exist_ok=True)
        engine = create_engine(url, connect_args={"check_same_thread": False, "timeout": 30},
                               pool_size=pool_size, max_overflow=pool_size)

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
    engine = create_engine(url, pool_size=pool_size, max_overflow=pool_size, pool_timeout=pool_timeout_s,
                           connect_args=connect_args)
    _ping_when_idle(engine)
    return engine


def _ping_when_idle(engine: Engine) -> None:
    """SQLAlchemy's pre-ping (a failed ping empties the pool; a new connection is not pinged) for connections
    idle at least `PING_IDLE_S`, and for every one checked in before a connection was last found broken: a
    statement on the driver's own cursor (`hotpath.py`) that loses its connection gets that one invalidated
    (its reset fails), not the pool emptied, and the others of the same restart would each fail a request."""
    dialect = engine.dialect
    broken = [0.0]  # when a connection of this pool was last invalidated

    @event.listens_for(engine.pool, "invalidate")
    def _invalidated(_dbapi_conn, _record, _exception):
        broken[0] = time.monotonic()

    @event.listens_for(engine.pool, "checkin")
    def _checked_in(dbapi_conn, record):
        if dbapi_conn is not None:
            record.info["skillos_idle_since"] = time.monotonic()

    @event.listens_for(engine.pool, "checkout")
    def _checked_out(dbapi_conn, record, _proxy):
        since = record.info.pop("skillos_idle_since", None)
        if since is None or (time.monotonic() - since < PING_IDLE_S and since > broken[0]):
            return  # new (never checked in), or just used and none broken since
        try:
            dialect.do_ping(dbapi_conn)
        except dialect.loaded_dbapi.Error as e:
            if dialect.is_disconnect(e, dbapi_conn, None):
                raise exc.InvalidatePoolError(f"ping on checkout failed: {e}") from e
            raise


def database_errors() -> tuple[type[BaseException], ...]:
    """What the database (or its driver) raises when it cannot be reached or cannot answer now: a refused or
    dropped connection, a server starting up or shutting down, a statement or pool timeout, SQLite busy.
    The service answers these 503 with Retry-After (the same request may succeed later), not 500. Errors of
    the SQL itself (integrity, programming) are not among them. The hot path runs statements on the driver's
    own cursor (`hotpath.py`), so the drivers' exceptions come unwrapped as well as SQLAlchemy's."""
    import sqlite3

    from sqlalchemy import exc

    errors: list[type[BaseException]] = [exc.OperationalError, exc.InterfaceError, exc.TimeoutError,
                                         exc.DisconnectionError, sqlite3.OperationalError]
    try:
        import psycopg
    except ImportError:  # SQLite only
        return tuple(errors)
    # OperationalError: connection failures, admin shutdown, cannot connect now, query cancelled (timeout)
    return (*errors, psycopg.OperationalError, psycopg.InterfaceError)
