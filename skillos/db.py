"""What every service that keeps state in PostgreSQL (or SQLite) shares: which driver errors mean "the
database cannot answer now" (answered 503 with Retry-After, never 500), and the connection arguments that
bound every wait on PostgreSQL so that a database that is down or stuck becomes such an error, not a hang."""

from __future__ import annotations


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
