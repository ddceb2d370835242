"""The statements every curator op and every search runs, executed on the driver's own cursor.

The training regime is thousands of tiny calls per second (one search plus one op per rollout turn),
about eight statements each. SQLAlchemy Core spends ~60 µs per statement on its compiled-cache lookup,
events and result set-up, more than SQLite or PostgreSQL spend running it. These few statements are
therefore written once in SQLAlchemy (so the SQL stays dialect-correct), compiled once per dialect, and
run on the DBAPI cursor of the connection SQLAlchemy already holds: same transaction, same locks, no
per-call machinery. Values go through the column types' bind processors, so rows are stored exactly
as SQLAlchemy would store them (e.g. SQLite's datetime text).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from sqlalchemy import bindparam, insert, select, update
from sqlalchemy.engine import Connection, Dialect
from sqlalchemy.sql import ClauseElement

from services.skillrepo.tables import blobs, op_log, repos, skill_heads, skill_versions


class DriverStatement:
    def __init__(self, stmt: ClauseElement, dialect: Dialect, column_keys: Sequence[str] | None = None):
        # column_keys: an INSERT's columns, bound under the columns' own names
        compiled = stmt.compile(dialect=dialect, column_keys=column_keys)
        self.sql = compiled.string
        self.order: Sequence[str] | None = list(compiled.positiontup) if dialect.positional else None
        self.processors: dict[str, Callable[[Any], Any]] = {}
        for name, bind in compiled.binds.items():
            proc = bind.type.dialect_impl(dialect).bind_processor(dialect)
            if proc is not None:
                self.processors[name] = proc

    def _params(self, values: dict[str, Any]) -> Any:
        if self.processors:
            values = {k: (self.processors[k](v) if k in self.processors else v) for k, v in values.items()}
        if self.order is not None:
            return tuple(values[k] for k in self.order)
        return values

    def run(self, conn: Connection, values: dict[str, Any]):
        """Execute in ``conn``'s transaction; returns the DBAPI cursor (rows as plain tuples)."""
        cursor = conn.connection.cursor()
        cursor.execute(self.sql, self._params(values))
        return cursor

    def first(self, conn: Connection, values: dict[str, Any]) -> tuple | None:
        cursor = self.run(conn, values)
        try:
            return cursor.fetchone()
        finally:
            cursor.close()

    def exec(self, conn: Connection, values: dict[str, Any]) -> None:
        self.run(conn, values).close()


class HotStatements:
    """The hot statements of one engine's dialect."""

    def __init__(self, dialect: Dialect, insert_blob: ClauseElement, lock_rows: bool):
        def s(stmt: ClauseElement, columns: Sequence[str] | None = None) -> DriverStatement:
            return DriverStatement(stmt, dialect, columns)

        repo_by_name = select(repos.c.id, repos.c.name, repos.c.seq).where(repos.c.name == bindparam("n"))
        self.repo_seq = s(select(repos.c.id, repos.c.seq, repos.c.state_gen).where(repos.c.name == bindparam("n")))
        # the writer's lock: FOR UPDATE on PostgreSQL; SQLite's BEGIN IMMEDIATE already holds the database
        self.lock_repo = s(repo_by_name.with_for_update() if lock_rows else repo_by_name)
        self.head = s(select(skill_heads.c.version, skill_heads.c.blob_hash).where(
            skill_heads.c.repo_id == bindparam("r"), skill_heads.c.name == bindparam("n")))
        # inline(): no RETURNING of the generated id, which nobody reads
        self.insert_blob = s(insert_blob, [c.name for c in blobs.c])
        self.insert_version = s(insert(skill_versions).inline(),
                                ["repo_id", "name", "version", "blob_hash", "seq", "cause", "created_at"])
        self.insert_head = s(insert(skill_heads).inline(), [c.name for c in skill_heads.c])
        self.update_head = s(update(skill_heads).where(
            skill_heads.c.repo_id == bindparam("r"), skill_heads.c.name == bindparam("n")).values(
            version=bindparam("v"), blob_hash=bindparam("h"),
            updated_at=bindparam("t", type_=skill_heads.c.updated_at.type)))
        self.update_seq = s(update(repos).where(repos.c.id == bindparam("r")).values(seq=bindparam("s")))
        self.insert_log = s(insert(op_log).inline(), [c.name for c in op_log.c if c.name != "id"])
