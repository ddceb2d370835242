"""Where the gateway keeps trajectories: PostgreSQL in production, a SQLite file embedded (SQLAlchemy Core).

One row per trajectory (its repo, task, the skills it was given, its state, the outcome, the curation's
result) and one row per recorded chat call. A call keeps only the messages the client added since the
trajectory's previous call (an agent resends its whole conversation every time: storing each request
whole would grow with the square of its length) and the answer. A trajectory keeps at most
``max_calls`` calls and ``max_bytes`` bytes of them; calls past either bound are answered but not
recorded, and the trajectory is marked ``truncated``. Its task and skills count toward ``max_bytes``; a
trajectory whose first call the backend refused is deleted (`discard_unused`); ended ones are deleted after
the retention (`purge`).

States: ``open`` (calls are recorded) → ``closed`` (an outcome came; waiting for the curator) →
``curating`` (one process claimed it) → ``curated`` or ``failed``; ``open`` → ``expired`` (no call and no
outcome for the TTL; never curated), or, with the self-judge on expiry, ``open`` → ``closed`` with the judged
outcome. Every change is one statement or one transaction, so two replicas on
one database agree: only the process whose claim succeeded curates, and a claim left by a process that
died is taken over once it is ``stale_s`` old.

The tables (`tables.py`) are made and kept up to date by Alembic on first use (`migrate`), one process at a
time; a database whose tables an older gateway made without migrations is adopted (stamped) first.
"""

from __future__ import annotations

import fcntl
import json
import os
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from sqlalchemy import insert, inspect, select, text, update
from sqlalchemy.engine import Connection, Engine, make_url

from services.executor.gateway.trajectories.tables import VERSION_TABLE, calls, trajectories
from skillos.db import make_engine

_PG_MIGRATION_LOCK = 724_002  # pg_advisory_lock key of the migration (the skill repo's: 724_001)
_MIGRATIONS = Path(__file__).resolve().parent / "migrations"
_FIRST = "0001"   # the schema create_all made before there were migrations


OPEN, CLOSED, CURATING, CURATED, FAILED, EXPIRED = "open", "closed", "curating", "curated", "failed", "expired"
MAX_TASK_CHARS = 8000   # a trajectory's task as kept (and curated): a first user message may be 256 KiB


@dataclass
class TrajectoryRow:
    id: str
    repo: str
    task: str
    model: str
    skills: list[dict[str, Any]]
    status: str
    created_at: float
    updated_at: float
    calls: int = 0
    bytes: int = 0
    seen_messages: int = 0
    truncated: bool = False
    outcome: dict[str, Any] | None = None
    curation: dict[str, Any] | None = None
    owner: str | None = None   # the caller who opened it (`skillos.auth.Grant.caller_id`)
    withheld: list[str] = field(default_factory=list)   # matching skills not served (measured utility's control)
    recorded: list[dict[str, Any]] = field(default_factory=list)  # the calls, when asked for


def _loads(text: str | None) -> Any:
    return json.loads(text) if text else None


def _row(r) -> TrajectoryRow:
    return TrajectoryRow(id=r.id, repo=r.repo, task=r.task, model=r.model, skills=json.loads(r.skills),
                         status=r.status, created_at=r.created_at, updated_at=r.updated_at, calls=r.calls,
                         bytes=r.bytes, seen_messages=r.seen_messages, truncated=bool(r.truncated),
                         outcome=_loads(r.outcome), curation=_loads(r.curation), owner=r.owner,
                         withheld=_loads(r.withheld) or [])


def _upgrade(conn: Connection) -> None:
    from alembic import command
    from alembic.config import Config

    cfg = Config()
    cfg.set_main_option("script_location", str(_MIGRATIONS))
    cfg.attributes["connection"] = conn
    tables = set(inspect(conn).get_table_names())
    if trajectories.name in tables and VERSION_TABLE not in tables:
        command.stamp(cfg, _FIRST)   # made by create_all before migrations: the same schema as 0001
    command.upgrade(cfg, "head")


def migrate(engine: Engine) -> None:
    """`alembic upgrade head` of the gateway's tables; processes starting together take turns (PostgreSQL: an
    advisory lock; a SQLite file: a lock file beside it)."""
    with engine.connect() as conn:
        if engine.dialect.name == "postgresql":
            conn.execute(text("SET statement_timeout = 0"))   # waiting for another replica's migration
            conn.execute(text("SELECT pg_advisory_lock(:k)"), {"k": _PG_MIGRATION_LOCK})
            conn.commit()
            try:
                _upgrade(conn)
                conn.commit()
            finally:
                conn.execute(text("SELECT pg_advisory_unlock(:k)"), {"k": _PG_MIGRATION_LOCK})
                conn.commit()
        else:
            path = engine.url.database
            lock_path = Path(f"{path}.migrate.lock") if path and path != ":memory:" else None
            with open(lock_path, "a+") if lock_path else open(os.devnull) as lock:
                if lock_path:
                    fcntl.flock(lock, fcntl.LOCK_EX)
                _upgrade(conn)
                conn.commit()


class TrajectoryStore:
    """Blocking calls (run them in a thread from async code)."""

    def __init__(self, url: str, max_calls: int, max_bytes: int):
        self.url, self.max_calls, self.max_bytes = url, max_calls, max_bytes
        self._engine: Engine | None = None
        self._lock = threading.Lock()

    @property
    def exists(self) -> bool:
        """Whether there may be trajectories already (an embedded SQLite file is made on first use)."""
        parsed = make_url(self.url)
        if parsed.get_backend_name() != "sqlite":
            return True
        return bool(parsed.database) and parsed.database != ":memory:" and Path(parsed.database).exists()

    @property
    def engine(self) -> Engine:
        if self._engine is None:
            with self._lock:
                if self._engine is None:
                    engine = make_engine(self.url, pool_size=8)
                    migrate(engine)
                    self._engine = engine
        return self._engine

    def close(self) -> None:
        if self._engine is not None:
            self._engine.dispose()

    def create(self, tid: str, repo: str, task: str, model: str, skills: list[dict[str, Any]],
               owner: str | None = None, withheld: list[str] | None = None) -> None:
        """A new open trajectory. Its task (cut at `MAX_TASK_CHARS`) and skills count toward ``max_bytes``: a
        caller's first message is the task, and must not be a way around the bound."""
        now = time.time()
        task, dumped = task[:MAX_TASK_CHARS], json.dumps(skills)
        with self.engine.begin() as c:
            c.execute(insert(trajectories).values(
                id=tid, repo=repo, task=task, model=model, skills=dumped, status=OPEN, created_at=now,
                updated_at=now, calls=0, bytes=len(task.encode()) + len(dumped), seen_messages=0, truncated=False,
                owner=owner, withheld=json.dumps(withheld) if withheld else None))

    def discard_unused(self, tid: str) -> bool:
        """Delete an open trajectory no call was recorded in: its first call was refused by the backend (a
        caller must not fill the database with the task texts of calls that were never answered)."""
        t = trajectories.c
        with self.engine.begin() as c:
            return c.execute(trajectories.delete().where(t.id == tid, t.status == OPEN, t.calls == 0)
                             .returning(t.id)).first() is not None

    def purge(self, older_than_s: float, limit: int = 1000) -> int:
        """Delete up to ``limit`` ended trajectories (curated, failed, expired) unchanged for ``older_than_s``,
        with their calls; how many. Transcripts are kept for a while to be read back, not forever."""
        t = trajectories.c
        with self.engine.begin() as c:
            ids = [r.id for r in c.execute(select(t.id).where(t.status.in_((CURATED, FAILED, EXPIRED)),
                                                              t.updated_at < time.time() - older_than_s)
                                           .order_by(t.updated_at).limit(limit))]
            if ids:   # the calls first, by hand: not every database the store is pointed at cascades
                c.execute(calls.delete().where(calls.c.trajectory_id.in_(ids)))
                c.execute(trajectories.delete().where(t.id.in_(ids)))
        return len(ids)

    def get(self, tid: str, with_calls: bool = False) -> TrajectoryRow | None:
        with self.engine.connect() as c:
            r = c.execute(select(trajectories).where(trajectories.c.id == tid)).first()
            if r is None:
                return None
            row = _row(r)
            if with_calls:
                row.recorded = [
                    {"seq": x.seq, "created_at": x.created_at, "messages": json.loads(x.messages),
                     "response": json.loads(x.response), "usage": _loads(x.usage)}
                    for x in c.execute(select(calls).where(calls.c.trajectory_id == tid).order_by(calls.c.seq))]
            return row

    def record(self, tid: str, messages: list[dict[str, Any]], seen: int, response: dict[str, Any],
               usage: dict[str, Any] | None) -> bool:
        """Record one call of an open trajectory; False when it was past a bound (or no longer open)."""
        now = time.time()
        m, r, u = json.dumps(messages), json.dumps(response), json.dumps(usage) if usage is not None else None
        size = len(m) + len(r) + len(u or "")
        t = trajectories.c
        with self.engine.begin() as c:
            got = c.execute(
                update(trajectories)
                .where(t.id == tid, t.status == OPEN, t.calls < self.max_calls, t.bytes + size <= self.max_bytes)
                .values(calls=t.calls + 1, bytes=t.bytes + size, updated_at=now, seen_messages=seen)
                .returning(t.calls)).first()
            if got is None:
                c.execute(update(trajectories).where(t.id == tid, t.status == OPEN)
                          .values(truncated=True, updated_at=now, seen_messages=seen))
                return False
            c.execute(insert(calls).values(trajectory_id=tid, seq=got.calls, created_at=now, messages=m,
                                           response=r, usage=u))
            return True

    def close_with(self, tid: str, outcome: dict[str, Any]) -> bool:
        """open → closed with the outcome; False when the trajectory is not open."""
        t = trajectories.c
        with self.engine.begin() as c:
            got = c.execute(update(trajectories).where(t.id == tid, t.status == OPEN)
                            .values(status=CLOSED, outcome=json.dumps(outcome), updated_at=time.time())
                            .returning(t.id)).first()
            return got is not None

    def _claimable(self, now: float, stale_s: float):
        t = trajectories.c
        return (t.status == CLOSED) | ((t.status == CURATING) & (t.claimed_at < now - stale_s))

    def claim(self, tid: str, stale_s: float) -> float | None:
        """closed (or curating, claimed more than ``stale_s`` ago) → curating by this process. Returns the
        claim's time, which `release` and `finish` must show: a process only ever ends its own claim (one
        shutting down must not hand back a curation another replica took over)."""
        t, now = trajectories.c, time.time()
        with self.engine.begin() as c:
            got = c.execute(update(trajectories).where(t.id == tid, self._claimable(now, stale_s))
                            .values(status=CURATING, claimed_at=now).returning(t.id)).first()
            return now if got is not None else None

    def release(self, tid: str, claimed_at: float) -> bool:
        """curating → closed: the curator could not be reached; another try later."""
        t = trajectories.c
        with self.engine.begin() as c:
            return c.execute(update(trajectories).where(t.id == tid, t.status == CURATING, t.claimed_at == claimed_at)
                             .values(status=CLOSED, claimed_at=None).returning(t.id)).first() is not None

    def finish(self, tid: str, status: str, curation: dict[str, Any], claimed_at: float) -> bool:
        t = trajectories.c
        with self.engine.begin() as c:
            return c.execute(update(trajectories).where(t.id == tid, t.status == CURATING, t.claimed_at == claimed_at)
                             .values(status=status, curation=json.dumps(curation), updated_at=time.time())
                             .returning(t.id)).first() is not None

    def pending(self, stale_s: float, limit: int = 64) -> list[str]:
        """Closed trajectories not curated yet, and stale claims (a restart picks them up again): the oldest
        ``limit``, so a backlog left by a long curator outage is worked off a batch per sweep, not all at once."""
        with self.engine.connect() as c:
            return [r.id for r in c.execute(select(trajectories.c.id)
                                            .where(self._claimable(time.time(), stale_s))
                                            .order_by(trajectories.c.updated_at).limit(limit))]

    def idle(self, ttl_s: float, limit: int) -> list[TrajectoryRow]:
        """Open trajectories idle for ``ttl_s``, oldest first, with their calls (for the self-judge)."""
        t, now = trajectories.c, time.time()
        with self.engine.connect() as c:
            ids = [r.id for r in c.execute(select(t.id).where(t.status == OPEN, t.updated_at < now - ttl_s)
                                           .order_by(t.updated_at).limit(limit))]
        return [row for row in (self.get(tid, with_calls=True) for tid in ids) if row is not None]

    def close_idle(self, tid: str, outcome: dict[str, Any], idle_since: float) -> bool:
        """open → closed with a judged outcome, unless a call came after ``idle_since`` (it is not idle then)."""
        t = trajectories.c
        with self.engine.begin() as c:
            return c.execute(update(trajectories).where(t.id == tid, t.status == OPEN, t.updated_at == idle_since)
                             .values(status=CLOSED, outcome=json.dumps(outcome), updated_at=time.time())
                             .returning(t.id)).first() is not None

    def expire_one(self, tid: str, idle_since: float) -> bool:
        t = trajectories.c
        with self.engine.begin() as c:
            return c.execute(update(trajectories).where(t.id == tid, t.status == OPEN, t.updated_at == idle_since)
                             .values(status=EXPIRED, updated_at=time.time()).returning(t.id)).first() is not None

    def expire(self, ttl_s: float) -> list[str]:
        """Open trajectories idle for ``ttl_s`` → expired; their ids."""
        t, now = trajectories.c, time.time()
        with self.engine.begin() as c:
            return [r.id for r in c.execute(
                update(trajectories).where(t.status == OPEN, t.updated_at < now - ttl_s)
                .values(status=EXPIRED, updated_at=now).returning(t.id))]
