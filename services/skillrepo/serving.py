"""The skill repo's operations: what the HTTP routes (and the benchmarks, in-process) call.

`SkillRepoService` ties the storage layer, the replica's search indexes and the change announcements
together: every write commits in `Store.write`, then updates this replica's index and announces the new
seq; every search checks the repo's seq first (see `indexes.py` for why that gives read-your-writes).

Its methods answer wire models (`skillos.protocol.skillrepo`), never storage rows, and raise only the one
error shape (`APIError`): a storage refusal (`store.StoreError`) becomes its HTTP answer in `http_error`.
"""

from __future__ import annotations

import hashlib
import io
import json
import lzma
import posixpath
import tarfile
import threading
import time
import zlib
from collections import OrderedDict

from prometheus_client import Counter, Histogram
from pydantic import TypeAdapter
from pydantic_core import PydanticSerializationError, from_json

from services.skillrepo import examples as worked
from services.skillrepo.db import migrate
from services.skillrepo.dense import POOL, DenseIndexes, DenseUnavailable, Encoder, fuse
from services.skillrepo.errors import answers_api_errors as _answers_api_errors
from services.skillrepo.errors import http_error
from services.skillrepo.index_files import IndexFiles
from services.skillrepo.indexes import Announcer, IndexManager
from services.skillrepo.lifecycle import store as states
from services.skillrepo.lifecycle.life import clear_rewritten, ops_life
from services.skillrepo.lifecycle.serving import Lifecycle
from services.skillrepo.ops import apply_ops
from services.skillrepo.review import store as review
from services.skillrepo.review.serving import Review, default_policy, gate, writer_label
from services.skillrepo.search import tokenize
from services.skillrepo.settings import SkillRepoSettings
from services.skillrepo.store import (
    LogRow,
    RepoNotFound,
    RepoRow,
    SkillNotFound,
    Store,
    StoredSkill,
    VersionRow,
    blob_of,
)
from services.skillrepo.utility.serving import Utility
from skillos.auth import current_caller, prefix_reaches
from skillos.db import database_errors, make_engine
from skillos.errors import APIError
from skillos.logging import get_logger
from skillos.protocol.skillrepo import (
    VERSION_MAX,
    BulkResult,
    ExampleResult,
    ImportResult,
    IndexStatus,
    OpLog,
    OpLogEntry,
    OpOutcome,
    OpsRequest,
    OpsResult,
    Repo,
    RepoPolicy,
    SearchHit,
    Skill,
    SkillList,
    SkillVersion,
    SkillVersionList,
    Snapshot,
)
from skillos.skills import SkillDoc, SkillFormatError, from_fields, parse
from skillos.textguard import decimal
from skillos.worked_examples import MAX_PER_SKILL, WorkedExample

_VERDICTS = TypeAdapter(list[OpOutcome])   # the op log's entries, serialized in one call
OPS_TOTAL = Counter("skillos_skillrepo_ops_total", "Curator ops by verdict", ["op", "status"])
SEARCH_LATENCY = Histogram("skillos_skillrepo_search_seconds", "In-process search latency", ["mode"],
                           buckets=(0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.05, 0.25, 1))
log = get_logger("skillrepo")
WRITES_TOTAL = Counter("skillos_skillrepo_versions_written_total", "Skill versions written", ["cause"])


def parse_if_match(value: str | None) -> int | str | None:
    """``If-Match: 3`` / ``"3"`` / ``W/"3"`` -> 3; ``*`` -> "*"; absent -> None."""
    if value is None:
        return None
    v = value.strip()
    if v == "*":
        return "*"
    version = decimal(v.removeprefix("W/").strip('"'), VERSION_MAX)
    if version is None:
        raise APIError(400, "invalid_if_match",
                       f"If-Match must be a skill version number (an integer up to {VERSION_MAX}), got {value[:40]!r}")
    return version


# extended headers (GNU long names and link names, pax records): tarfile reads each one whole into memory
_META_HEADERS = (tarfile.GNUTYPE_LONGNAME, tarfile.GNUTYPE_LONGLINK, tarfile.XHDTYPE, tarfile.XGLTYPE,
                 tarfile.SOLARIS_XHDTYPE)
MAX_ARCHIVE_HEADER_BYTES = 64 * 1024


def _bounded_tarinfo(max_total: int) -> type[tarfile.TarInfo]:
    """A TarInfo that refuses, from a member's header and before tarfile reads on: an extended header over
    `MAX_ARCHIVE_HEADER_BYTES` (a 300 MB long name in a small .tar.gz would be read whole), and a member
    ending past ``max_total`` uncompressed bytes (a decompression bomb would be inflated to skip it)."""

    class BoundedTarInfo(tarfile.TarInfo):
        def _proc_member(self, tar):
            if self.type in _META_HEADERS and self.size > MAX_ARCHIVE_HEADER_BYTES:
                raise APIError(413, "archive_header_too_large",
                               f"the archive has an extended header (long name or pax record) of {self.size} bytes; "
                               f"the limit is {MAX_ARCHIVE_HEADER_BYTES}")
            if self.offset + tarfile.BLOCKSIZE + self.size > max_total:
                raise APIError(413, "archive_too_large", f"the archive is over {max_total} bytes uncompressed")
            return super()._proc_member(tar)

    return BoundedTarInfo


def format_error(e: SkillFormatError, where: str = "") -> APIError:
    status = 413 if e.code in ("body_too_large", "frontmatter_too_large") else 400
    return APIError(status, e.code, f"{where}{e.message}")


_BULK_KEYS = frozenset({"name", "description", "body", "metadata"})


def _not_json(word: str):
    raise ValueError(f"{word} is not a JSON number")


def _bulk_line(line: bytes):
    """One NDJSON line as the standard library reads it (NaN and Infinity refused), parsed by pydantic-core's
    parser first (2x faster: a bulk import's lines were a tenth of the skill repo's CPU); whatever that
    one refuses (a lone surrogate escape, nesting past its depth, an error) is read by `json` again, so
    what is accepted and each error's message are the standard library's."""
    try:
        return from_json(line, allow_inf_nan=False)
    except ValueError:
        return json.loads(line, parse_constant=_not_json)


HitTexts = tuple[str, str, list[WorkedExample], int]   # description, body, examples, size (bytes, about)


class BlobTexts:
    """blob hash -> (description, body, examples, size) of search hits, read from the database and kept (least
    recently used go). Content-addressed, so a kept entry is never stale; a small repo's hits are all kept."""

    def __init__(self, store: Store, max_bytes: int = 64 << 20):
        self.store, self.max_bytes = store, max_bytes  # bodies reach 64 KiB: a count bound is no memory bound
        self._kept: OrderedDict[str, HitTexts] = OrderedDict()
        self._bytes = 0
        self._lock = threading.Lock()

    @staticmethod
    def _entry(description: str, body: str, examples: list[dict]) -> HitTexts:
        if not examples:
            return description, body, [], len(description) + len(body)
        # validated once here, not per search; an example is about its JSON's size in memory, twice over
        return (description, body, worked.loaded(examples),
                len(description) + len(body) + 2 * len(json.dumps(examples)))

    def get(self, hashes: list[str]) -> dict[str, HitTexts]:
        with self._lock:
            out = {h: self._kept[h] for h in hashes if h in self._kept}
            for h in out:
                self._kept.move_to_end(h)
        missing = [h for h in hashes if h not in out]
        if missing:
            found = {h: self._entry(*row) for h, row in self.store.blob_texts(missing).items()}
            out.update(found)
            with self._lock:
                for h, texts in found.items():
                    if h not in self._kept:
                        self._kept[h] = texts
                        self._bytes += texts[3]
                while self._bytes > self.max_bytes and self._kept:
                    _, texts = self._kept.popitem(last=False)
                    self._bytes -= texts[3]
        return out


def repo_out(r: RepoRow) -> Repo:
    return Repo(name=r.name, skill_count=r.skill_count, seq=r.seq, created_at=r.created_at, forked_from=r.forked_from,
                updated_at=r.updated_at)


def skill_out(s: StoredSkill, state: str = "active") -> Skill:
    return Skill(name=s.name, description=s.description, body=s.body, metadata=s.metadata, version=s.version,
                 content=s.content, updated_at=s.updated_at, cause=s.cause, examples=worked.loaded(s.examples),
                 state=state)


def log_entry_out(r: LogRow) -> OpLogEntry:
    return OpLogEntry(id=r.id, seq=r.seq, kind=r.kind, applied=r.applied, created_at=r.created_at,
                      origin=r.origin, idempotency_key=r.idempotency_key, ops=r.entries, writer=r.writer,
                      provenance=r.provenance)


class SkillRepoService:
    def __init__(self, settings: SkillRepoSettings | None = None, *, run_migrations: bool = True):
        self.settings = settings or SkillRepoSettings()
        self.engine = make_engine(self.settings.database_url, self.settings.sqlite_synchronous,
                                  connect_timeout_s=self.settings.database_connect_timeout_s,
                                  statement_timeout_s=self.settings.database_statement_timeout_s,
                                  pool_timeout_s=self.settings.database_pool_timeout_s)
        if run_migrations:
            migrate(self.engine)
        self.store = Store(self.engine)
        self._database_errors = database_errors()
        s = self.settings
        self.indexes = IndexManager(self.store, s.index_cache_repos, IndexFiles(s.index_dir) if s.index_dir else None,
                                    s.index_persist_min_skills, s.index_save_changes, s.index_save_interval_s,
                                    s.index_save_quiet_s, s.index_save_max_age_s)
        self.texts = BlobTexts(self.store)
        self.dense = DenseIndexes(
            lambda: Encoder(self.settings.embedding_model or None, int8=self.settings.embedding_int8),
            self.store, self.settings.index_cache_repos)
        self.announcer = Announcer(self.indexes, self.settings.redis_url, self.settings.redis_channel,
                                   self.settings.sync_interval_s)
        self.review = Review(self)
        self.lifecycle = Lifecycle(self)
        self.utility = Utility(self.store, self.lifecycle.judge)

    def start(self) -> None:
        self.announcer.start()
        # saved indexes are read in the background: the service answers meanwhile, and a search of a repo
        # being read waits for it (the repo's lock) instead of reading it a second time
        self._preload = threading.Thread(target=self._preload_indexes, name="skillrepo-preload", daemon=True)
        self._preload.start()

    def _preload_indexes(self) -> None:
        try:
            self.indexes.preload()
        except Exception as e:  # noqa: BLE001 - each repo is loaded on its first search instead
            log.warning("index_preload_failed", error=f"{type(e).__name__}: {e}"[:300])

    def stop(self) -> None:
        self.announcer.stop()
        try:
            self.indexes.save_due(final=True)  # a restart then reads files that are up to date
        except Exception as e:  # noqa: BLE001 - the next start catches up from the database instead
            log.warning("index_save_failed", error=f"{type(e).__name__}: {e}"[:300])
        self.engine.dispose()

    def check_database(self) -> None:
        self.store.repo_seq("readiness-probe")

    def _committed(self, repo: RepoRow, changes) -> None:
        deleted = sum(1 for ch in changes if ch.blob_hash is None)
        if deleted:
            WRITES_TOTAL.labels("delete").inc(deleted)
        if len(changes) > deleted:
            WRITES_TOTAL.labels("write").inc(len(changes) - deleted)
        if changes:
            try:
                self.indexes.committed(repo.id, changes)
            except self._database_errors as e:
                # the write is committed and is answered as such; this replica's index catches up on the next
                # search (which reads the seq first) or reconcile, once the database answers again
                log.warning("index_update_deferred", repo_id=repo.id, error=f"{type(e).__name__}: {e}"[:300])
            self.announcer.publish(repo.id, repo.seq)

    # --- repos ---

    @_answers_api_errors
    def create_repo(self, name: str, policy: RepoPolicy | None = None) -> Repo:
        if policy is None:
            return repo_out(self.store.create_repo(name))
        with self.store.creating_repo(name) as (conn, row, now):   # the repo and its policy in one transaction
            review.set_policy(conn, row.id, policy, writer_label(), now)
        return repo_out(row)

    @_answers_api_errors
    def list_repos(self, prefix: str | None = None) -> list[Repo]:
        # the store narrows by the bare prefix (an index range); a grant reaches only whole words of it
        return [repo_out(r) for r in self.store.list_repos(prefix) if prefix_reaches(prefix, r.name)]

    @_answers_api_errors
    def get_repo(self, name: str) -> Repo:
        return repo_out(self.store.get_repo(name))

    @_answers_api_errors
    def delete_repo(self, name: str) -> None:
        repo_id = self.store.delete_repo(name)
        self.indexes.drop(repo_id)
        self.dense.drop(repo_id)
        self.announcer.publish(repo_id, 1 << 62)

    @_answers_api_errors
    def fork_repo(self, source: str, name: str, snapshot: str | None = None,
                  policy: RepoPolicy | None = None) -> Repo:
        """``policy`` None: the source's own policy goes with the fork (a reviewed repo's fork stays reviewed)."""
        def keep_policy(conn, source_id: int, fork_id: int, now) -> None:
            chosen = policy or review.policy_of(conn, source_id, None)
            if chosen is not None:
                review.set_policy(conn, fork_id, chosen, writer_label(), now)
            states.copy(conn, source_id, fork_id)
        return repo_out(self.store.fork_repo(source, name, snapshot, keep_policy))

    # --- skills ---

    @_answers_api_errors
    def list_skills(self, repo: str, limit: int | None = None, after: str | None = None) -> SkillList:
        """The repo's skills by name: all of them, or with ``limit`` one page (names after ``after``)."""
        # one more than asked: tells whether another page follows
        rows = self.store.list_skills(repo, limit + 1 if limit else None, after)
        more = limit is not None and len(rows) > limit
        rows = rows[:limit] if limit else rows
        known = self.lifecycle.states_of(repo)
        return SkillList(skills=[skill_out(s, known.get(s.name, "active")) for s in rows],
                         next_after=rows[-1].name if more else None)

    @_answers_api_errors
    def op_log(self, repo: str, before: int | None = None, limit: int = 50) -> OpLog:
        """The repo's op log, newest first: ``limit`` entries older than ``before``."""
        rows = self.store.op_log(repo, before, limit + 1)
        more = len(rows) > limit
        rows = rows[:limit]
        return OpLog(entries=[log_entry_out(r) for r in rows], next_before=rows[-1].id if more else None)

    @_answers_api_errors
    def get_skill(self, repo: str, name: str) -> Skill:
        return skill_out(self.store.get_skill(repo, name), self.lifecycle.state_of(repo, name))

    @_answers_api_errors
    def insert_skill(self, repo: str, doc: SkillDoc) -> Skill:
        with self.store.write(repo) as tx:
            tx.log_as("insert")
            if tx.exists(doc.name):
                raise APIError(409, "skill_exists", f"skill {doc.name!r} already exists in repo {repo!r}: "
                                                    f"change it with PUT /v1/repos/{repo}/skills/{doc.name}")
            tx.put(doc, "insert")
            clear_rewritten(tx)   # a person's skill now
            skill = tx.get(doc.name)
        self._committed(tx.repo, tx.changes)
        return skill_out(skill)

    @_answers_api_errors
    def put_skill(self, repo: str, name: str, doc: SkillDoc, if_match: int | str | None) -> tuple[Skill, bool]:
        """(the skill, whether it was created: the HTTP answer is 201 then, else 200)."""
        if doc.name != name:
            raise APIError(400, "name_mismatch", f"the document's name {doc.name!r} differs from the URL's "
                                                 f"{name!r}: make them equal (renames go through ops)")
        with self.store.write(repo) as tx:
            tx.log_as("put")
            self._check_precondition(tx, repo, name, if_match)
            created = not tx.exists(name)
            tx.put(doc, "put", keep_examples=True)  # a document says nothing of the examples: they stay
            clear_rewritten(tx)   # a person's skill now (if its text changed)
            skill = tx.get(name)
        self._committed(tx.repo, tx.changes)
        return skill_out(skill), created

    @staticmethod
    def _check_precondition(tx, repo: str, name: str, if_match: int | str | None) -> None:
        if if_match is None:
            return
        head = tx.head(name)
        current = head[0] if head and head[1] is not None else None
        if if_match == "*":
            if current is None:
                raise APIError(412, "precondition_failed", f"If-Match: * but skill {name!r} does not exist")
        elif current != if_match:
            raise APIError(412, "precondition_failed",
                           f"skill {name!r} is at version {current if current is not None else 'none (absent)'}, "
                           f"not {if_match}: fetch it again, re-apply your change and retry",
                           details={"current_version": current})

    @_answers_api_errors
    def delete_skill(self, repo: str, name: str, if_match: int | str | None) -> None:
        with self.store.write(repo) as tx:
            tx.log_as("delete")
            if not tx.exists(name):
                raise SkillNotFound(repo, name)
            self._check_precondition(tx, repo, name, if_match)
            tx.delete(name, "delete")
            clear_rewritten(tx)
        self._committed(tx.repo, tx.changes)

    def _version_out(self, v: VersionRow, content: bool) -> SkillVersion:
        out = SkillVersion(name=v.name, version=v.version, deleted=v.deleted, seq=v.seq, created_at=v.created_at,
                           cause=v.cause)
        if content and v.blob_hash:
            blob = self.store.blob(v.blob_hash)
            out.content, out.description = blob["content"], blob["description"]
            out.examples = worked.loaded(blob["examples"])
        return out

    @_answers_api_errors
    def versions(self, repo: str, name: str, content: bool = False) -> SkillVersionList:
        """The skill's history, newest first (through the repos it was forked from); with ``content``,
        each version's document."""
        return SkillVersionList(versions=[self._version_out(v, content) for v in self.store.versions(repo, name)])

    @_answers_api_errors
    def version(self, repo: str, name: str, version: int) -> SkillVersion:
        """One version of a skill, with its document."""
        for v in self.store.versions(repo, name):
            if v.version == version:
                return self._version_out(v, True)
        raise APIError(404, "version_not_found", f"skill {name!r} has no version {version}")

    @_answers_api_errors
    def restore_skill(self, repo: str, name: str, version: int, origin: dict | None = None) -> Skill:
        target = next((v for v in self.store.versions(repo, name) if v.version == version), None)
        if target is None:
            raise APIError(404, "version_not_found", f"skill {name!r} has no version {version}")
        if target.blob_hash is None:
            raise APIError(400, "version_deleted", f"version {version} of {name!r} is a deletion; "
                                                   "restore an earlier version or delete the skill")
        with self.store.write(repo) as tx:
            tx.log_as("restore", origin=json.dumps(origin) if origin else None)
            tx.put_hash(name, target.blob_hash, "restore")
            clear_rewritten(tx)
            skill = tx.get(name)
        self._committed(tx.repo, tx.changes)
        return skill_out(skill)

    # --- worked examples ---

    @_answers_api_errors
    def list_examples(self, repo: str, name: str) -> list[WorkedExample]:
        return worked.loaded(self.store.get_skill(repo, name).examples)

    @_answers_api_errors
    def add_example(self, repo: str, name: str, example: WorkedExample) -> ExampleResult:
        """Merge ``example`` into the skill's examples (`skillos.worked_examples.merge`): a new version (cause
        ``example``) when that changes them."""
        example = worked.accept(example)
        with self.store.write(repo) as tx:
            tx.log_as("example")
            skill = tx.get(name)
            if skill is None:
                raise SkillNotFound(repo, name)
            examples, verdict = worked.merged(skill.examples, example)
            if verdict == "added" or verdict.startswith("replaced"):
                tx.put_examples(skill, examples, "example")
                skill = tx.get(name)
        self._committed(tx.repo, tx.changes)
        return ExampleResult(skill=skill_out(skill, self.lifecycle.state_of(repo, name)), result=verdict)

    @_answers_api_errors
    def delete_example(self, repo: str, name: str, example_id: str) -> None:
        with self.store.write(repo) as tx:
            tx.log_as("example_delete")
            skill = tx.get(name)
            if skill is None:
                raise SkillNotFound(repo, name)
            left = [e for e in skill.examples if e.get("id") != example_id]
            if len(left) == len(skill.examples):
                raise APIError(404, "example_not_found", f"skill {name!r} has no example {example_id[:40]!r}: "
                               f"GET /v1/repos/{repo}/skills/{name}/examples lists them")
            tx.put_examples(skill, left, "example")
        self._committed(tx.repo, tx.changes)

    # --- search ---

    def search(self, repo: str, query: str, k: int = 5, mode: str = "bm25",
               candidates: bool = False) -> list[SearchHit]:
        """Top k skills for ``query``: ``bm25`` (keywords), ``dense`` (cosine of sentence embeddings) or
        ``hybrid`` (both, fused by reciprocal rank; see `dense.py`). Only active skills; with ``candidates``,
        up to k candidates (`state` candidate) among the top 2k follow them, for a caller that explores (the
        gateway)."""
        start = time.perf_counter()
        if mode != "bm25" and not self.settings.dense_search:
            raise APIError(400, "dense_search_off", f"search mode {mode!r} needs dense search, which this "
                           "server runs without (SKILLOS_DENSE_SEARCH=false): use mode=bm25")
        found = self.store.repo_seq_gen(repo)
        if found is None:
            raise http_error(RepoNotFound(repo))
        hidden = self.lifecycle.hidden(found[0], found[2])
        found = found[:2]
        idx = self.indexes.get(*found)
        if idx is None:
            raise APIError(404, "repo_not_found", f"repo {repo!r} does not exist")
        if mode == "bm25":
            rank = lambda n: idx.search(tokenize(query), n)
        else:
            try:
                qvec = self.dense.encoder.encode_query(query)
            except DenseUnavailable as e:
                raise APIError(503, "dense_unavailable", f"dense search cannot run on this server: {e}") from e

            def rank(n: int) -> list:
                pool = n if mode == "dense" else max(POOL, 4 * n)
                try:
                    by_meaning = self.dense.search(found[0], idx, qvec, pool)
                except DenseUnavailable as e:
                    raise APIError(503, "dense_unavailable", f"dense search cannot run on this server: {e}") from e
                return by_meaning if mode == "dense" else fuse(idx.search(tokenize(query), pool), by_meaning, n)
        ranked = self._served(rank, k, hidden, candidates) if hidden else rank(k)
        texts = self.texts.get([payload[1] for _, _, payload in ranked])
        hits = [SearchHit(name=name, score=round(score, 6), description=texts[payload[1]][0], version=payload[0],
                          body=texts[payload[1]][1], examples=texts[payload[1]][2],
                          state=hidden.get(name, "active")) for name, score, payload in ranked]
        SEARCH_LATENCY.labels(mode).observe(time.perf_counter() - start)
        return hits

    @staticmethod
    def _served(rank, k: int, hidden: dict[str, str], candidates: bool) -> list:
        """The top k active hits of ``rank(n)`` (the top n of every skill), then with ``candidates`` up to k
        candidates that rank among the top n: n starts at 2k and doubles while hidden skills crowd the top (one
        ranking where few do; the index's fast path holds only while n stays small against the repo, so never
        all of the hidden ones at once). A candidate ranked below that is no match worth exploring."""
        n, total = 2 * k, len(hidden)
        while True:
            ranked = rank(n)
            served = [r for r in ranked if r[0] not in hidden][:k]
            # done: k active ones, or the ranking ran out (fewer than n matched), or no hidden skill is left out
            if len(served) >= k or len(ranked) < n or n >= k + total:
                explored = [r for r in ranked if hidden.get(r[0]) == "candidate"][:k] if candidates else []
                return served + explored
            n = min(2 * n, k + total)

    def index_status(self, repo: str) -> IndexStatus:
        """This replica's index of ``repo`` as it is now (not caught up first) and the database's seq."""
        found = self.store.repo_seq(repo)
        if found is None:
            raise APIError(404, "repo_not_found", f"repo {repo!r} does not exist")
        idx = self.indexes.peek(found[0])
        if idx is None:
            return IndexStatus(repo=repo, db_seq=found[1], index_seq=None, documents=None)
        return IndexStatus(repo=repo, db_seq=found[1], index_seq=idx.seq,
                           documents=[{"name": n, "version": p[0]} for n, p in sorted(idx.documents().items())])

    # --- curator ops ---

    @_answers_api_errors
    def apply_ops(self, repo: str, req: OpsRequest) -> OpsResult:
        if len(req.ops) > self.settings.max_ops_per_batch:
            raise APIError(413, "batch_too_large", f"{len(req.ops)} ops in one batch; the limit is "
                                                   f"{self.settings.max_ops_per_batch}: split the batch")
        caller = current_caller()
        if req.provenance is not None and caller is not None and not caller.operator:
            raise APIError(403, "provenance_operator_only", "provenance is what the services vouch for (an "
                           "operator's token): say where a batch came from in `origin`", details={"param": "provenance"})
        example = worked.accept(req.example) if req.example is not None else None
        # the example only when there is one: a batch without one hashes as it did before examples existed
        covered = {"ops", "atomic", "example"} if example is not None else {"ops", "atomic"}
        try:
            request_hash = hashlib.sha256(req.model_dump_json(include=covered).encode()).hexdigest()
        except PydanticSerializationError as e:  # a lone surrogate: the HTTP door refuses it, in-process calls may not
            raise APIError(400, "invalid_character", f"the batch cannot be serialized: {e}") from None
        with self.store.write(repo) as tx:
            policy = review.policy_of(tx.conn, tx.repo.id, default_policy(self))
            if req.idempotency_key:
                stored = tx.idempotent_answer(req.idempotency_key)
                if stored is not None:
                    if stored[0] != request_hash:
                        raise APIError(409, "idempotency_key_reused",
                                       "this idempotency_key was used for a different batch: use a new key")
                    result = OpsResult.model_validate_json(stored[1])
                    result.replayed = True
                    return result
            pinned = frozenset(policy.pinned)
            life = ops_life(tx, policy, writer_label())
            if (waits := gate(self, tx, req, example, policy, life)) is not None:
                ok, verdicts, result = False, waits.verdicts, waits
            elif len(req.ops) == 1:
                # a refused op writes nothing (ops.py), so a lone op needs no savepoint to undo
                ok, verdicts = apply_ops(tx, req.ops, req.atomic, self.settings.max_body_bytes, example,
                                         self.settings.ops_content_scan, pinned, life)
            else:
                with tx.savepoint() as undo:
                    ok, verdicts = apply_ops(tx, req.ops, req.atomic, self.settings.max_body_bytes, example,
                                             self.settings.ops_content_scan, pinned, life)
                    if not ok and req.atomic:
                        undo()
            if waits is None:
                result = OpsResult(applied=ok, verdicts=verdicts, seq=tx.repo.seq)
                if life is None:   # candidates off: what the batch wrote is plain active, whatever it was before
                    clear_rewritten(tx)
            if req.idempotency_key:
                tx.remember_answer(req.idempotency_key, request_hash, result.model_dump_json())
            tx.log_as("ops" if result.proposal is None else "proposal",
                      origin=req.origin.model_dump_json(exclude_none=True) if req.origin else None,
                      entries=_VERDICTS.dump_json(verdicts, exclude_none=True).decode(), applied=ok,
                      idempotency_key=req.idempotency_key,
                      provenance=req.provenance.model_dump_json(exclude_none=True) if req.provenance else None)
        for v in verdicts:
            OPS_TOTAL.labels(v.name if v.name in ("new_skill_insert", "skill_update", "skill_delete") else "unknown",
                             v.status).inc()
        self._committed(tx.repo, tx.changes)
        return result

    # --- export / import ---

    @_answers_api_errors
    def export(self, repo: str) -> bytes:
        """A tar.gz of ``<name>/SKILL.md`` and the skill's ``<name>/examples/NN-<id>.md`` (`examples.to_file`)."""
        buf = io.BytesIO()
        with tarfile.open(fileobj=buf, mode="w:gz") as tar:
            for s in self.store.list_skills(repo):
                mtime = int(s.updated_at.timestamp()) if s.updated_at else 0
                files = [(f"{s.name}/SKILL.md", s.content)]
                files += [(f"{s.name}/examples/{worked.file_name(i, e)}", worked.to_file(e))
                          for i, e in enumerate(worked.loaded(s.examples))]
                for path, text in files:
                    data = text.encode("utf-8")
                    info = tarfile.TarInfo(path)
                    info.size = len(data)
                    info.mtime = mtime
                    info.mode = 0o644
                    tar.addfile(info, io.BytesIO(data))
        return buf.getvalue()

    def read_archive(self, data: bytes) -> list[SkillDoc]:
        """The skills of a tar(.gz) of ``<name>/SKILL.md`` folders, each with the worked examples of its
        ``<name>/examples/*.md`` files (in file name order)."""
        limit = self.settings.max_body_bytes * 4
        docs: dict[str, SkillDoc] = {}
        folders: dict[str, SkillDoc] = {}                             # a SKILL.md's folder -> its skill
        examples: dict[str, list[tuple[str, WorkedExample]]] = {}     # a skill folder -> its examples files
        try:
            # streamed ("r|*": read once, front to back) with bounded headers and a bounded uncompressed size
            with tarfile.open(fileobj=io.BytesIO(data), mode="r|*",
                              tarinfo=_bounded_tarinfo(self.settings.max_request_bytes * 32)) as tar:
                for n, member in enumerate(tar):
                    if n > 20_000:
                        raise APIError(413, "archive_too_large", "the archive has more than 20000 entries")
                    if not member.isfile():
                        continue  # folders and links of a skill folder are not stored
                    path = posixpath.normpath(member.name)
                    if member.name.endswith("SKILL.md"):
                        doc = self._archive_skill(tar, member, limit)
                        if doc.name in docs:
                            raise APIError(400, "duplicate_skill", f"the archive holds skill {doc.name!r} twice")
                        docs[doc.name] = doc
                        if posixpath.basename(path) == "SKILL.md":
                            folders[posixpath.dirname(path)] = doc
                    elif path.endswith(".md") and posixpath.basename(posixpath.dirname(path)) == "examples":
                        folder = posixpath.dirname(posixpath.dirname(path))
                        examples.setdefault(folder, []).append((path, self._archive_example(tar, member)))
                    # other files of a skill folder are not stored
        except (tarfile.TarError, EOFError, OSError, RecursionError, zlib.error, lzma.LZMAError) as e:
            raise APIError(400, "invalid_archive", f"not a readable tar(.gz) archive of <name>/SKILL.md "
                                                   f"folders: {type(e).__name__}: {e}") from None
        for folder, files in examples.items():
            files.sort(key=lambda f: f[0])
            doc = folders.get(folder)
            if doc is None:
                raise APIError(400, "example_without_skill", f"{files[0][0]}: worked examples go in a skill "
                               f"folder's examples/, next to its SKILL.md, and the archive has no "
                               f"{posixpath.join(folder, 'SKILL.md')!r}")
            if len(files) > MAX_PER_SKILL:
                raise APIError(400, "too_many_examples", f"{folder or '.'}/examples/ holds {len(files)} worked "
                               f"examples; a skill keeps at most {MAX_PER_SKILL}")
            ids = [e.id for _, e in files]
            if len(set(ids)) < len(ids):
                raise APIError(400, "duplicate_example", f"{folder or '.'}/examples/ holds one example (id) twice: "
                                                         f"{', '.join(ids)}")
            doc.examples = worked.stored([e for _, e in files])
        return list(docs.values())

    def _archive_text(self, tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int, code: str) -> str:
        if member.size > limit:
            raise APIError(413, code, f"{member.name} is {member.size} bytes; the limit is {limit}")
        try:
            return tar.extractfile(member).read().decode("utf-8")
        except UnicodeDecodeError:
            raise APIError(400, "invalid_utf8", f"{member.name} is not valid UTF-8") from None

    def _archive_skill(self, tar: tarfile.TarFile, member: tarfile.TarInfo, limit: int) -> SkillDoc:
        text = self._archive_text(tar, member, limit, "body_too_large")
        try:
            return parse(text, max_body_bytes=self.settings.max_body_bytes)
        except SkillFormatError as e:
            raise format_error(e, f"{member.name}: ") from None

    def _archive_example(self, tar: tarfile.TarFile, member: tarfile.TarInfo) -> WorkedExample:
        return worked.from_file(self._archive_text(tar, member, worked.FILE_MAX_BYTES, "example_too_large"),
                                member.name)

    @_answers_api_errors
    def import_(self, repo: str, data: bytes, replace: bool = False) -> ImportResult:
        docs = self.read_archive(data)
        blobs = [blob_of(doc) for doc in docs]  # before the repo's lock, as in `bulk_put`
        with self.store.write(repo) as tx:
            tx.log_as("import")
            # replace: the repo becomes the archive, examples included; else a folder without examples/ says
            # nothing of them, and the skill keeps its own
            tx.put_many(docs, "import", blobs, keep_examples=not replace)
            if replace:
                keep = {d.name for d in docs}
                for name, (_, blob_hash) in tx.all_heads().items():
                    if blob_hash is not None and name not in keep:
                        tx.delete(name, "import")
            clear_rewritten(tx)
        self._committed(tx.repo, tx.changes)
        return ImportResult(imported=[d.name for d in docs], seq=tx.repo.seq)

    def read_ndjson(self, data: bytes) -> list[SkillDoc]:
        """Skills as NDJSON lines {name, description, body, metadata}; a bad line is refused with its number."""
        limit = self.settings.max_bulk_skills
        docs: dict[str, SkillDoc] = {}
        for n, line in enumerate(data.split(b"\n"), start=1):
            if not line.strip():
                continue
            if len(docs) >= limit:
                raise APIError(413, "bulk_too_large", f"more than {limit} skills in one request: split it "
                                                      "(SKILLOS_MAX_BULK_SKILLS)")
            try:
                obj = _bulk_line(line)
            except (ValueError, RecursionError) as e:  # JSONDecodeError, UnicodeDecodeError, >4300 digits
                raise APIError(400, "invalid_json", f"line {n} is not JSON: {type(e).__name__}: {e}") from None
            if not isinstance(obj, dict) or not obj.keys() <= _BULK_KEYS or "name" not in obj:
                raise APIError(400, "invalid_skill", f"line {n} must be a JSON object with name, description and "
                                                     f"optionally body and metadata (keys {sorted(_BULK_KEYS)})")
            meta = obj.get("metadata")
            if meta is not None and not isinstance(meta, dict):
                raise APIError(400, "invalid_metadata", f"line {n}: metadata must be a JSON object")
            try:
                doc = from_fields(obj["name"], obj.get("description"), obj.get("body", ""), meta,
                                  max_body_bytes=self.settings.max_body_bytes)
            except SkillFormatError as e:
                raise format_error(e, f"line {n}: ") from None
            if doc.name in docs:
                raise APIError(400, "duplicate_skill", f"line {n}: skill {doc.name!r} is already in this request")
            docs[doc.name] = doc
        if not docs:
            raise APIError(400, "empty_bulk", "no skills in the request: send one JSON object per line")
        return list(docs.values())

    @_answers_api_errors
    def bulk_put(self, repo: str, data: bytes) -> BulkResult:
        """Write many skills in one transaction (all or nothing), each as a `put` would: a new version
        where the content differs, none where it is the same."""
        docs = self.read_ndjson(data)
        blobs = [blob_of(doc) for doc in docs]  # before the repo's lock: writers of the repo wait for it
        with self.store.write(repo) as tx:
            tx.log_as("import")
            tx.put_many(docs, "import", blobs, keep_examples=True)  # a line cannot give examples: they stay
            clear_rewritten(tx)
        self._committed(tx.repo, tx.changes)
        return BulkResult(received=len(docs), written=len(tx.changes), seq=tx.repo.seq)

    # --- snapshots ---

    @_answers_api_errors
    def snapshot(self, repo: str, label: str) -> Snapshot:
        return Snapshot(**self.store.create_snapshot(repo, label))

    @_answers_api_errors
    def list_snapshots(self, repo: str) -> list[Snapshot]:
        return [Snapshot(**s) for s in self.store.list_snapshots(repo)]

    @_answers_api_errors
    def restore_snapshot(self, repo: str, label: str) -> Repo:
        """Make the repo's skills what they were at the snapshot; each differing skill gets a new version."""
        with self.store.write(repo) as tx:
            tx.log_as("snapshot_restore", origin=json.dumps({"source": f"snapshot {label}"[:64]}))
            target = self.store.snapshot_heads(tx, label)
            for name, (_, blob_hash) in tx.all_heads().items():
                if blob_hash is not None and name not in target:
                    tx.delete(name, "restore")
            for name, blob_hash in target.items():
                tx.put_hash(name, blob_hash, "restore")
            clear_rewritten(tx)   # what it rewrote is a person's
        self._committed(tx.repo, tx.changes)
        return repo_out(self.store.get_repo(repo))
