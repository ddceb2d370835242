"""skillos/db.py's engine on a real PostgreSQL: the ping on checkout, skipped for a connection just used.

A connection the server dropped (a restart, an administrator's pg_terminate_backend) must never become a 500 or a
hang: after its idle window it is pinged and replaced; inside it the request fails with an error the services
answer 503 (`database_errors`), and every connection checked in before that is pinged on its next checkout. The
window is set per test (60 s: "just used"; 0: "idle") instead of slept through, so a slow machine cannot move a
step across it.
"""

from __future__ import annotations

import psycopg
import pytest
from conftest import pg_database
from sqlalchemy import text

from skillos import db


def _terminate(admin_url: str, *pids: int) -> None:
    with psycopg.connect(admin_url.replace("+psycopg", ""), autocommit=True) as c:
        for pid in pids:
            c.execute("SELECT pg_terminate_backend(%s)", (pid,))


def _pid(engine) -> int:
    with engine.connect() as c:
        return c.execute(text("SELECT pg_backend_pid()")).scalar()


@pytest.fixture
def engine(pg_server_url, monkeypatch):
    with pg_database(pg_server_url) as url:
        engine = db.make_engine(url, pool_size=2)
        pings = []
        real_ping = engine.dialect.do_ping
        monkeypatch.setattr(engine.dialect, "do_ping", lambda conn: pings.append(1) or real_ping(conn))
        engine.pings = pings
        try:
            yield engine
        finally:
            engine.dispose()


def test_a_connection_just_used_is_not_pinged_and_an_idle_one_is(engine, monkeypatch):
    monkeypatch.setattr(db, "PING_IDLE_S", 60.0)
    first = _pid(engine)  # a new connection: not pinged
    assert _pid(engine) == first and engine.pings == []  # back in the pool a moment ago: not pinged
    monkeypatch.setattr(db, "PING_IDLE_S", 0.0)
    assert _pid(engine) == first and engine.pings == [1]


def test_a_dropped_connection_is_replaced_after_its_idle_window(engine, pg_server_url, monkeypatch):
    first = _pid(engine)
    _terminate(pg_server_url, first)
    monkeypatch.setattr(db, "PING_IDLE_S", 0.0)
    assert _pid(engine) != first  # the ping failed: replaced, the request never saw it


def test_a_connection_dropped_inside_the_window_fails_as_unavailable_and_the_others_are_pinged(
        engine, pg_server_url, monkeypatch):
    """Both pooled connections dropped (a restart); the first request fails, on the driver's own cursor as the
    hot path runs it (SQLAlchemy sees only the failed reset), answered 503; the second connection was checked
    in before that failure, so it is pinged and replaced: one request lost, not one per pooled connection."""
    monkeypatch.setattr(db, "PING_IDLE_S", 60.0)
    with engine.connect() as a, engine.connect() as b:  # two connections in the pool
        pids = [c.execute(text("SELECT pg_backend_pid()")).scalar() for c in (a, b)]
    _terminate(pg_server_url, *pids)
    with pytest.raises(db.database_errors()), engine.connect() as c:
        cursor = c.connection.cursor()
        cursor.execute("SELECT 1")
    assert engine.pings == []
    assert _pid(engine) not in pids and engine.pings == [1]
    assert _pid(engine) not in pids
