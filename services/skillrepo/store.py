"""The storage layer: repos, skills, versions, forks, snapshots and idempotency keys in SQL.

Every write runs in `Store.write(repo)`, a transaction that holds the repo's write lock (PostgreSQL:
``SELECT ... FOR UPDATE`` on the repo row; SQLite: ``BEGIN IMMEDIATE`` plus one in-process lock, SQLite
having a single writer anyway). Writers of one repo are therefore serialized, which is what makes
``If-Match`` checks and ``repos.seq`` exact: no update is lost and changes have one order.

It knows nothing of HTTP: what cannot be found or already exists is raised as a `StoreError`
(`RepoNotFound`, `SkillNotFound`, ...), which the serving layer turns into the API's error answers.
"""

from __future__ import annotations

import hashlib
import json
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from datetime import UTC, datetime
from typing import Any

from sqlalchemy import Engine, Integer, and_, bindparam, func, insert, literal, select, update
from sqlalchemy.exc import IntegrityError

from services.skillrepo.hotpath import HotStatements
from services.skillrepo.tables import (
    blobs,
    embeddings,
    idempotency,
    op_log,
    repos,
    skill_heads,
    skill_versions,
    snapshot_heads,
    snapshots,
)
from skillos.auth import current_caller
from skillos.db import is_sqlite
from skillos.skills import EXAMPLES_KEY, SkillDoc, serialize


def _now() -> datetime:
    return datetime.now(UTC)


def _utc(ts: datetime | None) -> datetime | None:
    if ts is not None and ts.tzinfo is None:
        return ts.replace(tzinfo=UTC)
    return ts


class StoreError(Exception):
    """What the storage layer refuses; the serving layer maps each kind to its HTTP answer."""


class RepoNotFound(StoreError):
    def __init__(self, repo: str):
        super().__init__(f"repo {repo!r} does not exist")
        self.repo = repo


class SkillNotFound(StoreError):
    def __init__(self, repo: str, name: str):
        super().__init__(f"skill {name!r} does not exist in repo {repo!r}")
        self.repo, self.name = repo, name


class SnapshotNotFound(StoreError):
    def __init__(self, repo: str, label: str):
        super().__init__(f"repo {repo!r} has no snapshot {label!r}")
        self.repo, self.label = repo, label


class RepoExists(StoreError):
    def __init__(self, repo: str):
        super().__init__(f"repo {repo!r} already exists")
        self.repo = repo


class SnapshotExists(StoreError):
    def __init__(self, repo: str, label: str):
        super().__init__(f"repo {repo!r} already has a snapshot {label!r}")
        self.repo, self.label = repo, label


@dataclass
class RepoRow:
    id: int
    name: str
    seq: int
    created_at: datetime
    forked_from: str | None
    parent_id: int | None
    fork_seq: int | None
    skill_count: int = 0
    updated_at: datetime | None = None


@dataclass
class WriteRepo:
    """What a write transaction knows of its (locked) repo."""
    id: int
    name: str
    seq: int


@dataclass
class StoredSkill:
    name: str
    description: str
    body: str
    metadata: dict[str, Any]
    content: str
    version: int
    blob_hash: str
    updated_at: datetime | None = None
    cause: str | None = None
    examples: list[dict[str, Any]] = field(default_factory=list)


@dataclass
class Change:
    """One new version, as the search index needs it (doc None: the skill was deleted)."""
    seq: int
    name: str
    version: int
    description: str | None
    body: str | None
    blob_hash: str | None
    cause: str = ""


@dataclass
class LogRow:
    id: int
    seq: int
    kind: str
    applied: bool
    created_at: datetime
    origin: dict[str, Any] | None
    idempotency_key: str | None
    entries: list[dict[str, Any]]
    writer: str | None = None
    provenance: dict[str, Any] | None = None


@dataclass
class VersionRow:
    name: str
    version: int
    deleted: bool
    seq: int
    cause: str
    created_at: datetime
    blob_hash: str | None


# json.dumps with any non-default argument builds an encoder per call (a tenth of a bulk import's CPU)
_meta_json = json.JSONEncoder(ensure_ascii=False, sort_keys=False).encode


_canonical_json = json.JSONEncoder(ensure_ascii=False, sort_keys=True, separators=(",", ":")).encode


def blob_of(doc: SkillDoc, content: str | None = None) -> dict[str, Any]:
    """The blob row of ``doc`` (``content``: its `serialize`, when known). Its examples go in ``meta`` under
    `EXAMPLES_KEY` and into the hash, so that a change of examples alone is a new blob (a new version); a
    skill without examples hashes its content alone, as every blob did before examples existed."""
    if content is None:
        content = serialize(doc)
    if not doc.examples:
        return {"hash": hashlib.sha256(content.encode("utf-8")).hexdigest(), "content": content,
                "description": doc.description, "body": doc.body,
                "meta": _meta_json(doc.metadata) if doc.metadata else "{}"}
    keyed = content + "\n\0examples\0" + _canonical_json(doc.examples)  # NUL: never in a document
    return {"hash": hashlib.sha256(keyed.encode("utf-8")).hexdigest(), "content": content,
            "description": doc.description, "body": doc.body,
            "meta": _meta_json({**doc.metadata, EXAMPLES_KEY: doc.examples})}


def split_meta(meta_json: str) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """A blob's ``meta`` column -> (the skill's metadata, its examples)."""
    meta = json.loads(meta_json)
    if EXAMPLES_KEY not in meta_json:
        return meta, []
    examples = meta.pop(EXAMPLES_KEY, None)
    return meta, examples if isinstance(examples, list) else []


def _repo_row(r) -> RepoRow:
    return RepoRow(r.id, r.name, r.seq, _utc(r.created_at), r.forked_from, r.parent_id, r.fork_seq)


_SKILL_COLS = (skill_heads.c.name, skill_heads.c.version, skill_heads.c.blob_hash, skill_heads.c.updated_at,
               blobs.c.content, blobs.c.description, blobs.c.body, blobs.c.meta)


_GET = select(*_SKILL_COLS).join(blobs, blobs.c.hash == skill_heads.c.blob_hash).where(
    skill_heads.c.repo_id == bindparam("r"), skill_heads.c.name == bindparam("n"))


def _skill(r, cause: str | None = None) -> StoredSkill:
    meta, examples = split_meta(r.meta)
    return StoredSkill(r.name, r.description, r.body, meta, r.content, r.version, r.blob_hash,
                       _utc(r.updated_at), cause, examples)


def _has_examples(meta_column):
    """SQL: the blob's meta may hold examples (a substring test: `split_meta` tells for sure)."""
    return meta_column.contains(EXAMPLES_KEY, autoescape=True)


def _as_datetime(value) -> datetime | None:
    """max() over a DateTime column: SQLite hands back its stored text, not a datetime."""
    if value is None or isinstance(value, datetime):
        return value
    return datetime.fromisoformat(str(value))


# Column types of the bulk path's COPYs, in binary format: psycopg's C dumpers write a row in a fifth of the
# time the text format's escaping takes (a bulk import's COPYs were a seventh of the skill repo's CPU). The
# binary format must name each column's type exactly (int4 is not int8): a type that does not match the
# column is an error, and the bulk tests on PostgreSQL would catch it. A value past int4 is not (the dumper
# wraps it): `put_many` leaves a batch that would need one to the one-at-a-time path, which refuses it.
_BLOB_COLUMNS = ("text", "text", "text", "text", "text")                            # hash, content, description, body, meta
_VERSION_COLUMNS = ("int4", "text", "int4", "text", "int8", "text", "timestamptz")  # repo_id, name, version, blob_hash, seq, cause, created_at
_HEAD_COLUMNS = ("int4", "text", "int4", "text", "timestamptz")                    # repo_id, name, version, blob_hash, updated_at
_INT4_MAX = 2**31 - 1


def _copy(cur, target: str, rows: list[tuple], types: tuple[str, ...]) -> None:
    if rows:
        with cur.copy(f"COPY {target} FROM STDIN (FORMAT BINARY)") as copy:
            copy.set_types(types)
            for row in rows:
                copy.write_row(row)


def _temp_table(cur, name: str, columns: str) -> None:
    """An empty temporary table of this session's (rows gone at commit; emptied too for a second use in one
    transaction), made in one round trip."""
    cur.execute(f"CREATE TEMP TABLE IF NOT EXISTS {name} ({columns}) ON COMMIT DELETE ROWS; TRUNCATE {name}")


class WriteTx:
    """The inside of one write transaction on one repo."""

    def __init__(self, store: Store, conn, repo: RepoRow):
        self.store, self.conn, self.repo = store, conn, repo
        self.now = _now()
        self.changes: list[Change] = []
        self._heads: dict[str, tuple[int, str | None]] = {}
        self._known_blobs: set[str] = set()
        self._log: dict[str, Any] | None = None

    def log_as(self, kind: str, *, origin: str | None = None, entries: str | None = None,
               applied: bool = True, idempotency_key: str | None = None, provenance: str | None = None) -> None:
        """Write one op-log row for this transaction when it commits (``origin``, ``entries``: JSON text).
        ``entries`` None: one entry per change (REST writes), and no row when nothing changed; given (a
        batch of ops): always a row."""
        self._log = {"kind": kind, "origin": origin, "entries": entries, "applied": applied,
                     "idempotency_key": idempotency_key, "provenance": provenance}

    def _log_values(self) -> dict[str, Any] | None:
        log = self._log
        if log is None or (log["entries"] is None and not self.changes):
            return None
        entries = log["entries"]
        if entries is None:
            entries = json.dumps([{"index": i, "name": ch.cause, "status": "applied", "skill_name": ch.name,
                                   "version": ch.version, "message": "deleted" if ch.blob_hash is None else ch.cause}
                                  for i, ch in enumerate(self.changes)], ensure_ascii=False)
        caller = current_caller()   # the request's token, as the server authenticated it
        return {"repo_id": self.repo.id, "seq": self.repo.seq, "kind": log["kind"], "applied": log["applied"],
                "origin": log["origin"], "idempotency_key": log["idempotency_key"], "entries": entries,
                "created_at": self.now, "writer": caller.token_label if caller is not None else None,
                "provenance": log["provenance"]}

    def head(self, name: str) -> tuple[int, str | None] | None:
        """(version, blob hash or None when deleted) of the skill's head, or None when it never existed."""
        if name not in self._heads:
            r = self.store.hot.head.first(self.conn, {"r": self.repo.id, "n": name})
            if r is None:
                return None
            self._heads[name] = (r[0], r[1])
        return self._heads[name]

    def exists(self, name: str) -> bool:
        h = self.head(name)
        return h is not None and h[1] is not None

    def get(self, name: str) -> StoredSkill | None:
        if not self.exists(name):
            return None
        r = self.conn.execute(_GET, {"r": self.repo.id, "n": name}).first()
        # the cause of a version written in this transaction (None when the head is older)
        return _skill(r, next((c.cause for c in reversed(self.changes) if c.name == name), None)) if r else None

    def all_heads(self) -> dict[str, tuple[int, str | None]]:
        rows = self.conn.execute(select(skill_heads.c.name, skill_heads.c.version, skill_heads.c.blob_hash)
                                 .where(skill_heads.c.repo_id == self.repo.id)).all()
        self._heads.update({r.name: (r.version, r.blob_hash) for r in rows})
        return dict(self._heads)

    def examples(self, name: str) -> list[dict[str, Any]]:
        """The examples of the skill's head ([] when it has none, is deleted or never existed)."""
        head = self.head(name)
        if head is None or head[1] is None:
            return []
        meta = self.conn.execute(select(blobs.c.meta).where(blobs.c.hash == head[1])).scalar_one()
        return split_meta(meta)[1]

    def _examples_of(self, names: list[str]) -> dict[str, list[dict[str, Any]]]:
        """name -> examples, for those of the live ``names`` whose head has any (one query per 500)."""
        found: dict[str, list[dict[str, Any]]] = {}
        for i in range(0, len(names), 500):
            rows = self.conn.execute(
                select(skill_heads.c.name, blobs.c.meta).join(blobs, blobs.c.hash == skill_heads.c.blob_hash)
                .where(skill_heads.c.repo_id == self.repo.id, skill_heads.c.name.in_(names[i:i + 500]),
                       _has_examples(blobs.c.meta))).all()
            for r in rows:
                if examples := split_meta(r.meta)[1]:
                    found[r.name] = examples
        return found

    def put(self, doc: SkillDoc, cause: str, keep_examples: bool = False) -> int:
        """Write ``doc`` as the skill's new head; no new version when the content is identical.
        ``keep_examples``: a ``doc`` without examples gets those the skill has now (a write that says nothing
        of them, as a SKILL.md document cannot, keeps them)."""
        if keep_examples and not doc.examples:
            doc = replace(doc, examples=self.examples(doc.name))
        return self._put_blob(doc.name, blob_of(doc), cause)

    def put_examples(self, skill: StoredSkill, examples: list[dict[str, Any]], cause: str) -> int:
        """``skill`` (a head read in this transaction) with ``examples`` instead of its own; its document
        stays byte for byte what it is."""
        doc = SkillDoc(skill.name, skill.description, skill.body, skill.metadata, examples)
        return self._put_blob(skill.name, blob_of(doc, skill.content), cause)

    def _put_blob(self, name: str, blob: dict[str, Any], cause: str) -> int:
        head = self.head(name)
        if head is not None and head[1] == blob["hash"]:
            return head[0]
        self._ensure_blob(blob)
        return self._write(name, blob["hash"], cause, blob["description"], blob["body"])

    BULK_MIN = 256  # below this many, `put_many` writes one at a time (the COPY set-up costs more)

    def put_many(self, docs: list[SkillDoc], cause: str, blobs: list[dict[str, Any]] | None = None,
                 keep_examples: bool = False) -> None:
        """`put` of each document (distinct names), as a few statements: on PostgreSQL, COPY of the blobs,
        versions and new heads, changed heads through a temporary table. Same rows, same seq order, same
        changes as one `put` each. ``blobs``: `blob_of` of each document, made by the caller before the
        transaction began (the repo's row is locked from the start: what can be done before is done before).
        ``keep_examples``: as `put`'s."""
        if self.store.sqlite or len(docs) < self.BULK_MIN:
            for doc in docs:
                self.put(doc, cause, keep_examples)
            return
        if blobs is None:
            blobs = [blob_of(doc) for doc in docs]
        cur = self.conn.connection.cursor()
        rid = self.repo.id
        names = [d.name for d in docs if d.name not in self._heads]
        cur.execute("SELECT name, version, blob_hash FROM skill_heads WHERE repo_id = %s AND name = ANY(%s)",
                    (rid, names))
        self._heads.update({r[0]: (r[1], r[2]) for r in cur.fetchall()})
        if any(self._heads.get(d.name, (0,))[0] >= _INT4_MAX for d in docs):
            cur.close()
            for doc in docs:  # a next version past int4 (2**31 writes of one skill): refused there as before
                self.put(doc, cause, keep_examples)
            return
        if keep_examples:
            # only skills that exist can have examples to keep: a new repo's import asks nothing more
            live = [d.name for d in docs if not d.examples and self._heads.get(d.name, (0, None))[1] is not None]
            kept = self._examples_of(live) if live else {}
            if kept:
                blobs = list(blobs)
                for i, doc in enumerate(docs):
                    if doc.name in kept:
                        blobs[i] = blob_of(replace(doc, examples=kept[doc.name]), blobs[i]["content"])
        new_blobs, versions, created, changed = [], [], [], []
        for doc, blob in zip(docs, blobs, strict=True):
            head = self._heads.get(doc.name)
            if head is not None and head[1] == blob["hash"]:
                continue
            if blob["hash"] not in self._known_blobs:
                self._known_blobs.add(blob["hash"])
                new_blobs.append((blob["hash"], blob["content"], blob["description"], blob["body"], blob["meta"]))
            version = (head[0] if head else 0) + 1
            self.repo.seq += 1
            versions.append((rid, doc.name, version, blob["hash"], self.repo.seq, cause, self.now))
            (created if head is None else changed).append((rid, doc.name, version, blob["hash"], self.now))
            self._heads[doc.name] = (version, blob["hash"])
            self.changes.append(Change(self.repo.seq, doc.name, version, blob["description"], blob["body"],
                                       blob["hash"], cause))
        self._copy_blobs(cur, new_blobs)
        _copy(cur, "skill_versions (repo_id, name, version, blob_hash, seq, cause, created_at)", versions,
              _VERSION_COLUMNS)
        _copy(cur, "skill_heads (repo_id, name, version, blob_hash, updated_at)", created, _HEAD_COLUMNS)
        if changed:
            _temp_table(cur, "skillos_bulk_heads", "repo_id int, name text, version int, blob_hash text, "
                                                   "updated_at timestamptz")
            _copy(cur, "skillos_bulk_heads (repo_id, name, version, blob_hash, updated_at)", changed, _HEAD_COLUMNS)
            cur.execute("UPDATE skill_heads h SET version = t.version, blob_hash = t.blob_hash, "
                        "updated_at = t.updated_at FROM skillos_bulk_heads t "
                        "WHERE h.repo_id = t.repo_id AND h.name = t.name")
        cur.close()

    @staticmethod
    def _copy_blobs(cur, rows: list[tuple]) -> None:
        """Blobs (content-addressed: some may exist already) COPYed straight into the table, the usual case of
        an import's new texts; when one exists (the same text in another skill or repo, a text written back)
        the COPY fails on the key, a savepoint undoes it, and they go through a temporary table and
        ``ON CONFLICT DO NOTHING`` instead. Going that way always cost a second write and read of every text."""
        if not rows:
            return
        import psycopg

        cur.execute("SAVEPOINT skillos_bulk_blobs")
        try:
            _copy(cur, "blobs (hash, content, description, body, meta)", rows, _BLOB_COLUMNS)
        except psycopg.errors.UniqueViolation:
            cur.execute("ROLLBACK TO SAVEPOINT skillos_bulk_blobs")
            _temp_table(cur, "skillos_bulk_blobs", "hash text, content text, description text, body text, meta text")
            _copy(cur, "skillos_bulk_blobs (hash, content, description, body, meta)", rows, _BLOB_COLUMNS)
            cur.execute("INSERT INTO blobs SELECT * FROM skillos_bulk_blobs ON CONFLICT DO NOTHING")
        cur.execute("RELEASE SAVEPOINT skillos_bulk_blobs")

    def put_hash(self, name: str, blob_hash: str, cause: str) -> int:
        head = self.head(name)
        if head is not None and head[1] == blob_hash:
            return head[0]
        r = self.conn.execute(select(blobs.c.description, blobs.c.body).where(blobs.c.hash == blob_hash)).first()
        return self._write(name, blob_hash, cause, r.description, r.body)

    def delete(self, name: str, cause: str) -> int:
        return self._write(name, None, cause, None, None)

    def _ensure_blob(self, blob: dict[str, Any]) -> None:
        if blob["hash"] in self._known_blobs:
            return
        self.store.hot.insert_blob.exec(self.conn, blob)  # content-addressed: present already is fine
        self._known_blobs.add(blob["hash"])

    def _write(self, name: str, blob_hash: str | None, cause: str, description, body) -> int:
        head = self.head(name)
        version = (head[0] if head else 0) + 1
        self.repo.seq += 1
        hot = self.store.hot
        hot.insert_version.exec(self.conn, {
            "repo_id": self.repo.id, "name": name, "version": version, "blob_hash": blob_hash,
            "seq": self.repo.seq, "cause": cause, "created_at": self.now})
        if head is None:
            hot.insert_head.exec(self.conn, {"repo_id": self.repo.id, "name": name, "version": version,
                                             "blob_hash": blob_hash, "updated_at": self.now})
        else:
            hot.update_head.exec(self.conn, {"r": self.repo.id, "n": name, "v": version, "h": blob_hash,
                                             "t": self.now})
        self._heads[name] = (version, blob_hash)
        self.changes.append(Change(self.repo.seq, name, version, description, body, blob_hash, cause))
        return version

    @contextmanager
    def savepoint(self) -> Iterator[Callable[[], None]]:
        """Yields a function that undoes everything written inside the block (an atomic batch refused)."""
        state = (self.repo.seq, len(self.changes), dict(self._heads), set(self._known_blobs))
        sp = self.conn.begin_nested()
        undone = False

        def rollback() -> None:
            nonlocal undone
            sp.rollback()
            undone = True
            self.repo.seq, n, self._heads, self._known_blobs = state[0], state[1], state[2], state[3]
            del self.changes[n:]

        try:
            yield rollback
        except BaseException:
            if not undone:
                rollback()
            raise
        if not undone:
            sp.commit()

    # idempotency keys live in the same transaction as the ops they answer
    def idempotent_answer(self, key: str) -> tuple[str, str] | None:
        r = self.conn.execute(select(idempotency.c.request_hash, idempotency.c.response).where(
            idempotency.c.repo_id == self.repo.id, idempotency.c.key == key)).first()
        return (r.request_hash, r.response) if r else None

    def remember_answer(self, key: str, request_hash: str, response: str) -> None:
        self.conn.execute(insert(idempotency).values(repo_id=self.repo.id, key=key, request_hash=request_hash,
                                                     response=response, created_at=self.now))


class Store:
    def __init__(self, engine: Engine):
        self.engine = engine
        self.sqlite = is_sqlite(engine)
        self._sqlite_write_lock = threading.Lock()

        self.insert_blob = self.insert_ignore(blobs)
        self.hot = HotStatements(engine.dialect, self.insert_blob, lock_rows=not self.sqlite)

    def insert_ignore(self, table):
        if self.sqlite:
            from sqlalchemy.dialects.sqlite import insert as dialect_insert
        else:
            from sqlalchemy.dialects.postgresql import insert as dialect_insert
        return dialect_insert(table).on_conflict_do_nothing()

    @contextmanager
    def _write_conn(self) -> Iterator:
        if self.sqlite:
            with self._sqlite_write_lock, self.engine.connect() as conn:
                conn = conn.execution_options(write=True)
                with conn.begin():
                    yield conn
        else:
            with self.engine.begin() as conn:
                yield conn

    @contextmanager
    def _read_conn(self, consistent: bool = False) -> Iterator:
        with self.engine.connect() as conn:
            if consistent and not self.sqlite:
                conn = conn.execution_options(isolation_level="REPEATABLE READ")
            with conn.begin():
                yield conn

    def _lock_repo(self, conn, name: str) -> RepoRow:
        q = select(repos).where(repos.c.name == name)
        r = conn.execute(q if self.sqlite else q.with_for_update()).first()
        if r is None:
            raise RepoNotFound(name)
        return _repo_row(r)

    @contextmanager
    def write(self, repo: str) -> Iterator[WriteTx]:
        with self._write_conn() as conn:
            r = self.hot.lock_repo.first(conn, {"n": repo})
            if r is None:
                raise RepoNotFound(repo)
            tx = WriteTx(self, conn, WriteRepo(*r))
            yield tx
            if tx.changes:
                self.hot.update_seq.exec(conn, {"r": tx.repo.id, "s": tx.repo.seq})
            log = tx._log_values()
            if log is not None:
                self.hot.insert_log.exec(conn, log)

    # --- repos ---

    def create_repo(self, name: str) -> RepoRow:
        try:
            with self._write_conn() as conn:
                conn.execute(insert(repos).values(name=name, seq=0, created_at=_now()))
                return _repo_row(conn.execute(select(repos).where(repos.c.name == name)).one())
        except IntegrityError:
            raise RepoExists(name) from None

    @contextmanager
    def creating_repo(self, name: str) -> Iterator[tuple[Any, RepoRow, datetime]]:
        """Create a repo and yield (connection, its row, now) to write more in the same transaction."""
        try:
            with self._write_conn() as conn:
                now = _now()
                conn.execute(insert(repos).values(name=name, seq=0, created_at=now))
                yield conn, _repo_row(conn.execute(select(repos).where(repos.c.name == name)).one()), now
        except IntegrityError:
            raise RepoExists(name) from None

    def get_repo(self, name: str, count: bool = True) -> RepoRow:
        with self._read_conn() as conn:
            r = conn.execute(select(repos).where(repos.c.name == name)).first()
            if r is None:
                raise RepoNotFound(name)
            row = _repo_row(r)
            if count:
                row.skill_count, row.updated_at = self._count_and_time(conn, row.id)
            return row

    def repo_seq(self, name: str) -> tuple[int, int] | None:
        """(repo id, seq) of a live repo: one indexed read, done before every search."""
        with self.engine.connect() as conn:
            r = self.hot.repo_seq.first(conn, {"n": name})
            conn.rollback()
        return (r[0], r[1]) if r else None

    def repo_seq_gen(self, name: str) -> tuple[int, int, int] | None:
        """(repo id, seq, state generation) of a live repo: the same one read, for searches that filter by
        the skills' states (`services.skillrepo.lifecycle`)."""
        with self.engine.connect() as conn:
            r = self.hot.repo_seq.first(conn, {"n": name})
            conn.rollback()
        return (r[0], r[1], r[2]) if r else None

    def repo_seqs(self, ids: list[int]) -> dict[int, int]:
        if not ids:
            return {}
        with self.engine.connect() as conn:
            rows = conn.execute(select(repos.c.id, repos.c.seq).where(
                repos.c.id.in_(ids), repos.c.name.is_not(None))).all()
            conn.rollback()
        return {r.id: r.seq for r in rows}

    def _count(self, conn, repo_id: int) -> int:
        return conn.execute(select(func.count()).select_from(skill_heads).where(
            skill_heads.c.repo_id == repo_id, skill_heads.c.blob_hash.is_not(None))).scalar_one()

    def _count_and_time(self, conn, repo_id: int) -> tuple[int, datetime | None]:
        """(live skills, when a skill last changed) in one pass over the repo's heads."""
        r = conn.execute(select(func.count(skill_heads.c.blob_hash), func.max(skill_heads.c.updated_at))
                         .where(skill_heads.c.repo_id == repo_id)).one()
        return r[0], _utc(_as_datetime(r[1]))

    def list_repos(self, prefix: str | None = None) -> list[RepoRow]:
        with self._read_conn() as conn:
            # count(blob_hash) counts live skills; max(updated_at) includes deletions (tombstones)
            stats = {r[0]: (r[1], r[2]) for r in conn.execute(
                select(skill_heads.c.repo_id, func.count(skill_heads.c.blob_hash), func.max(skill_heads.c.updated_at))
                .group_by(skill_heads.c.repo_id)).all()}
            q = select(repos).where(repos.c.name.is_not(None)).order_by(repos.c.name)
            if prefix:
                q = q.where(repos.c.name.startswith(prefix, autoescape=True))
            rows = [_repo_row(r) for r in conn.execute(q)]
        for row in rows:
            count, updated = stats.get(row.id, (0, None))
            row.skill_count, row.updated_at = count, _utc(_as_datetime(updated))
        return rows

    def delete_repo(self, name: str) -> int:
        with self._write_conn() as conn:
            repo = self._lock_repo(conn, name)
            # versions stay (forks' history may point at them); the heads are this repo's own rows
            conn.execute(skill_heads.delete().where(skill_heads.c.repo_id == repo.id))
            conn.execute(update(repos).where(repos.c.id == repo.id).values(name=None, deleted_at=_now()))
            return repo.id

    def fork_repo(self, source: str, name: str, snapshot: str | None = None,
                  then: Callable[[Any, int, int, datetime], None] | None = None) -> RepoRow:
        """Copy the head rows (names, versions, blob hashes) only: no body is copied. ``then(conn, source's
        id, the fork's id, now)`` writes more in the same transaction (the fork's review policy)."""
        try:
            with self._write_conn() as conn:
                src = self._lock_repo(conn, source)
                fork_seq = src.seq
                snap_id = None
                if snapshot is not None:
                    s = conn.execute(select(snapshots.c.id, snapshots.c.seq).where(
                        snapshots.c.repo_id == src.id, snapshots.c.label == snapshot)).first()
                    if s is None:
                        raise SnapshotNotFound(source, snapshot)
                    snap_id, fork_seq = s.id, s.seq
                now = _now()
                new_id = conn.execute(insert(repos).values(
                    name=name, seq=0, created_at=now, forked_from=source, parent_id=src.id,
                    fork_seq=fork_seq).returning(repos.c.id)).scalar_one()
                if snap_id is None:
                    sel = select(skill_heads.c.name, skill_heads.c.version, skill_heads.c.blob_hash).where(
                        skill_heads.c.repo_id == src.id)
                else:
                    sel = select(snapshot_heads.c.name, snapshot_heads.c.version, snapshot_heads.c.blob_hash).where(
                        snapshot_heads.c.snapshot_id == snap_id)
                sel = sel.add_columns(literal(new_id, Integer).label("repo_id"),
                                      literal(now, skill_heads.c.updated_at.type).label("updated_at"))
                conn.execute(insert(skill_heads).from_select(
                    ["name", "version", "blob_hash", "repo_id", "updated_at"], sel))
                if then is not None:
                    then(conn, src.id, new_id, now)
                row = _repo_row(conn.execute(select(repos).where(repos.c.id == new_id)).one())
                row.skill_count = self._count(conn, new_id)
                return row
        except IntegrityError:
            raise RepoExists(name) from None

    # --- skills ---

    def list_skills(self, repo: str, limit: int | None = None, after: str | None = None) -> list[StoredSkill]:
        """The repo's skills by name; with ``limit``, one page of them (names after ``after``) with each
        head version's cause (None when the version was written in the repo this one was forked from)."""
        with self._read_conn() as conn:
            repo_id = self._repo_id(conn, repo)
            if limit is None and after is None:
                rows = conn.execute(select(*_SKILL_COLS).join(blobs, blobs.c.hash == skill_heads.c.blob_hash)
                                    .where(skill_heads.c.repo_id == repo_id).order_by(skill_heads.c.name)).all()
                return [_skill(r) for r in rows]
            q = self._with_cause(select(*_SKILL_COLS)).where(skill_heads.c.repo_id == repo_id)
            if after is not None:
                q = q.where(skill_heads.c.name > after)
            q = q.order_by(skill_heads.c.name)
            if limit is not None:
                q = q.limit(limit)
            rows = conn.execute(q).all()
        return [_skill(r, r.cause) for r in rows]

    @staticmethod
    def _with_cause(q):
        return q.add_columns(skill_versions.c.cause).join(blobs, blobs.c.hash == skill_heads.c.blob_hash).outerjoin(
            skill_versions, and_(skill_versions.c.repo_id == skill_heads.c.repo_id,
                                 skill_versions.c.name == skill_heads.c.name,
                                 skill_versions.c.version == skill_heads.c.version))

    def get_skill(self, repo: str, name: str) -> StoredSkill:
        with self._read_conn() as conn:
            repo_id = self._repo_id(conn, repo)
            r = conn.execute(self._with_cause(select(*_SKILL_COLS)).where(
                skill_heads.c.repo_id == repo_id, skill_heads.c.name == name)).first()
        if r is None:
            raise SkillNotFound(repo, name)
        return _skill(r, r.cause)

    def op_log(self, repo: str, before: int | None = None, limit: int = 50) -> list[LogRow]:
        """The repo's op log, newest first (entries with id < ``before``)."""
        with self._read_conn() as conn:
            repo_id = self._repo_id(conn, repo)
            q = select(op_log).where(op_log.c.repo_id == repo_id)
            if before is not None:
                q = q.where(op_log.c.id < before)
            rows = conn.execute(q.order_by(op_log.c.id.desc()).limit(limit)).all()
        return [LogRow(r.id, r.seq, r.kind, bool(r.applied), _utc(r.created_at),
                       json.loads(r.origin) if r.origin else None, r.idempotency_key, json.loads(r.entries),
                       r.writer, json.loads(r.provenance) if r.provenance else None)
                for r in rows]

    def _repo_id(self, conn, name: str) -> int:
        r = conn.execute(select(repos.c.id).where(repos.c.name == name)).first()
        if r is None:
            raise RepoNotFound(name)
        return r.id

    def _lineage(self, conn, repo_id: int) -> list[tuple[int, int | None]]:
        """[(repo id, newest seq of it that counts)]: the repo, then the repos it was forked from."""
        chain: list[tuple[int, int | None]] = []
        limit: int | None = None
        current: int | None = repo_id
        while current is not None and len(chain) < 10_000:
            chain.append((current, limit))
            r = conn.execute(select(repos.c.parent_id, repos.c.fork_seq).where(repos.c.id == current)).first()
            current, limit = (r.parent_id, r.fork_seq) if r else (None, None)
        return chain

    def versions(self, repo: str, name: str) -> list[VersionRow]:
        """The skill's history, newest first, through the repos this one was forked from."""
        with self._read_conn() as conn:
            repo_id = self._repo_id(conn, repo)
            out: list[VersionRow] = []
            seen: set[int] = set()
            for rid, max_seq in self._lineage(conn, repo_id):
                q = select(skill_versions).where(skill_versions.c.repo_id == rid, skill_versions.c.name == name)
                if max_seq is not None:
                    q = q.where(skill_versions.c.seq <= max_seq)
                for r in conn.execute(q.order_by(skill_versions.c.version.desc())):
                    if r.version not in seen:
                        seen.add(r.version)
                        out.append(VersionRow(r.name, r.version, r.blob_hash is None, r.seq, r.cause,
                                              _utc(r.created_at), r.blob_hash))
        if not out:
            raise SkillNotFound(repo, name)
        out.sort(key=lambda v: -v.version)
        return out

    def blob(self, blob_hash: str) -> dict[str, Any]:
        with self._read_conn() as conn:
            r = conn.execute(select(blobs).where(blobs.c.hash == blob_hash)).one()
        meta, examples = split_meta(r.meta)
        return {"content": r.content, "description": r.description, "body": r.body, "meta": meta,
                "examples": examples}

    # --- snapshots ---

    def create_snapshot(self, repo: str, label: str) -> dict[str, Any]:
        try:
            with self._write_conn() as conn:
                row = self._lock_repo(conn, repo)
                count = self._count(conn, row.id)
                now = _now()
                sid = conn.execute(insert(snapshots).values(repo_id=row.id, label=label, seq=row.seq,
                                                            skill_count=count, created_at=now)
                                   .returning(snapshots.c.id)).scalar_one()
                sel = select(skill_heads.c.name, skill_heads.c.version, skill_heads.c.blob_hash,
                             literal(sid, Integer).label("snapshot_id")).where(
                    skill_heads.c.repo_id == row.id, skill_heads.c.blob_hash.is_not(None))
                conn.execute(insert(snapshot_heads).from_select(["name", "version", "blob_hash", "snapshot_id"], sel))
                return {"repo": repo, "label": label, "seq": row.seq, "skill_count": count, "created_at": now}
        except IntegrityError:
            raise SnapshotExists(repo, label) from None

    def list_snapshots(self, repo: str) -> list[dict[str, Any]]:
        with self._read_conn() as conn:
            repo_id = self._repo_id(conn, repo)
            rows = conn.execute(select(snapshots).where(snapshots.c.repo_id == repo_id)
                                .order_by(snapshots.c.seq, snapshots.c.id)).all()
        return [{"repo": repo, "label": r.label, "seq": r.seq, "skill_count": r.skill_count,
                 "created_at": _utc(r.created_at)} for r in rows]

    def snapshot_heads(self, tx: WriteTx, label: str) -> dict[str, str]:
        s = tx.conn.execute(select(snapshots.c.id).where(
            and_(snapshots.c.repo_id == tx.repo.id, snapshots.c.label == label))).first()
        if s is None:
            raise SnapshotNotFound(tx.repo.name, label)
        rows = tx.conn.execute(select(snapshot_heads.c.name, snapshot_heads.c.blob_hash).where(
            snapshot_heads.c.snapshot_id == s.id)).all()
        return {r.name: r.blob_hash for r in rows}

    # --- the search index's view ---

    def index_state(self, repo_id: int) -> tuple[int, list[tuple[str, int, str, str, str]]] | None:
        """(seq, [(name, version, description, body, blob_hash)]) read in one consistent transaction."""
        with self.index_rows(repo_id) as state:
            return None if state is None else (state[0], list(state[1]))

    @contextmanager
    def index_rows(self, repo_id: int) -> Iterator[tuple[int, Iterator[tuple[str, int, str, str, str]]] | None]:
        """`index_state` with the rows streamed (a million skills are gigabytes as Python rows)."""
        with self._read_conn(consistent=True) as conn:
            r = conn.execute(select(repos.c.seq).where(repos.c.id == repo_id, repos.c.name.is_not(None))).first()
            if r is None:
                yield None
                return
            rows = conn.execute(
                select(skill_heads.c.name, skill_heads.c.version, blobs.c.description, blobs.c.body,
                       skill_heads.c.blob_hash)
                .join(blobs, blobs.c.hash == skill_heads.c.blob_hash)
                .where(skill_heads.c.repo_id == repo_id).execution_options(yield_per=5000))
            yield r.seq, ((x[0], x[1], x[2], x[3], x[4]) for x in rows)

    def repo_identity(self, repo_id: int) -> tuple[int, dict[str, str]] | None:
        """(seq, what tells this repo from any other: its name and creation time) of a live repo."""
        with self._read_conn() as conn:
            r = conn.execute(select(repos.c.name, repos.c.seq, repos.c.created_at).where(
                repos.c.id == repo_id, repos.c.name.is_not(None))).first()
        if r is None:
            return None
        return r.seq, {"repo_name": r.name, "created_at": _utc(_as_datetime(r.created_at)).isoformat()}

    def version_at(self, repo_id: int, seq: int) -> list | None:
        """[name, version, blob hash] of the version the repo wrote at ``seq`` (None: none)."""
        with self._read_conn() as conn:
            r = conn.execute(select(skill_versions.c.name, skill_versions.c.version, skill_versions.c.blob_hash)
                             .where(skill_versions.c.repo_id == repo_id, skill_versions.c.seq == seq)).first()
        return None if r is None else [r.name, r.version, r.blob_hash]

    def blob_texts(self, hashes: list[str]) -> dict[str, tuple[str, str, list[dict[str, Any]]]]:
        """blob hash -> (description, body, examples): what a search hit shows (the index keeps none of it).
        On the driver's cursor, as the hot statements are: it is on every search of a big repo. The meta
        column comes back only where it holds examples (a skill's other metadata is no hit's business)."""
        found: dict[str, tuple[str, str, list[dict[str, Any]]]] = {}
        with self.engine.connect() as conn:
            cursor = conn.connection.cursor()
            try:
                for i in range(0, len(hashes), 500):
                    chunk = hashes[i:i + 500]
                    if self.sqlite:
                        cursor.execute("SELECT hash, description, body, CASE WHEN instr(meta, ?) > 0 THEN meta END "
                                       f"FROM blobs WHERE hash IN ({', '.join('?' * len(chunk))})",
                                       [EXAMPLES_KEY, *chunk])
                    else:
                        cursor.execute("SELECT hash, description, body, CASE WHEN strpos(meta, %s) > 0 THEN meta END "
                                       "FROM blobs WHERE hash = ANY(%s)", (EXAMPLES_KEY, chunk))
                    found.update({r[0]: (r[1], r[2], split_meta(r[3])[1] if r[3] else []) for r in cursor.fetchall()})
            finally:
                cursor.close()
            conn.rollback()
        return found

    # --- embeddings (derived data for dense search; see tables.embeddings) ---

    def embeddings(self, model: str, hashes: list[str]) -> dict[str, bytes]:
        """blob hash -> stored vector bytes, for those of ``hashes`` that ``model`` has embedded."""
        found: dict[str, bytes] = {}
        with self._read_conn() as conn:
            for i in range(0, len(hashes), 500):  # bounded IN lists
                chunk = hashes[i:i + 500]
                rows = conn.execute(select(embeddings.c.blob_hash, embeddings.c.vector).where(
                    embeddings.c.model == model, embeddings.c.blob_hash.in_(chunk))).all()
                found.update({r.blob_hash: bytes(r.vector) for r in rows})
        return found

    def save_embeddings(self, model: str, vectors: dict[str, bytes]) -> None:
        """Keep vectors for reuse; a vector another replica saved first is left as it is."""
        if not vectors:
            return
        stmt = self.insert_ignore(embeddings)
        with self._write_conn() as conn:
            # in hash order: two replicas saving overlapping sets take row locks in one order (no deadlock)
            conn.execute(stmt, [{"model": model, "blob_hash": h, "vector": vectors[h]} for h in sorted(vectors)])

    def changes_since(self, repo_id: int, seq: int) -> list[Change]:
        with self._read_conn() as conn:
            rows = conn.execute(
                select(skill_versions.c.seq, skill_versions.c.name, skill_versions.c.version,
                       skill_versions.c.blob_hash, blobs.c.description, blobs.c.body)
                .outerjoin(blobs, blobs.c.hash == skill_versions.c.blob_hash)
                .where(skill_versions.c.repo_id == repo_id, skill_versions.c.seq > seq)
                .order_by(skill_versions.c.seq)).all()
        return [Change(r.seq, r.name, r.version, r.description, r.body, r.blob_hash) for r in rows]
