"""The replica's search indexes: one `BM25Index` per repo, kept equal to the database.

Consistency rules:
  * Every search first reads the repo's ``seq`` from the database (one primary-key read) and, when the
    index is behind, applies the versions written since (`Store.changes_since`). So an acknowledged write
    is visible to the next search on *any* replica (read-your-writes), and a replica that missed
    announcements repairs itself on the next search.
  * A writer applies its own changes right after commit; other replicas learn of them from the Redis
    announcement (`Announcer`) and catch up in the background, so searches rarely pay for catching up.
  * Changes are applied strictly in seq order; a gap triggers a catch-up from the database instead.
  * Indexes of many repos are kept in an LRU (the training regime has thousands of small repos); an
    evicted repo is reloaded on its next search (tokenized documents are cached by content).
  * A big repo's index is saved to a file (`index_files.py`, when ``SKILLOS_INDEX_DIR`` is set) and read
    back on a restart instead of re-tokenizing the repo; a file is checked against the database and caught
    up with ``changes_since`` like any index that is behind. Saved by the reconcile loop (once after a
    build from the database, then every ``save_changes`` changes, at most every ``save_interval_s``) and
    at shutdown. A save compacts the index (what the file holds); when the live index is fragmented (a
    bulk import's segments, dead slots) that compaction, caught up, replaces it (`_adopt`).
  * An index holds each skill's (version, blob hash), not its text: a million skills' descriptions and
    bodies are gigabytes, and a search reads the k it answers from the database.
"""

from __future__ import annotations

import json
import threading
import time
from collections import OrderedDict
from collections.abc import Iterable
from functools import lru_cache

from prometheus_client import Counter, Histogram

from services.skillrepo.index_files import IndexFiles, Refused
from services.skillrepo.search import BM25Index, Compacted, compact_state, document_tokens
from services.skillrepo.store import Change, Store
from skillos.logging import get_logger

log = get_logger("skillrepo.index")
INDEX_SAVES = Counter("skillos_skillrepo_index_saves_total", "Index files written; adopted: the save's compaction "
                      "also replaced the live index (`IndexManager._adopt`)", ["adopted"])
INDEX_SAVE_SECONDS = Histogram("skillos_skillrepo_index_save_seconds", "One index save, its adoption included",
                               buckets=(0.1, 0.5, 1, 2.5, 5, 10, 20, 40, 80, 160))


# The token cache is for documents indexed again: a fork's load re-reads its parent's skills, an evicted repo
# is loaded again. Bounded by entries, and each holds its skill's text (the keys) with its tokens, ~1.6 KB for a
# typical skill: 50,000 entries are ~80 MB. A bulk import's texts are not cached (they held 160 MB after
# 100,000 skills, ~325 MB at the old bound of 200,000 entries, for no hit).
CACHED_TOKENS = 20_000  # a load bigger than this tokenizes past the cache (it would only churn it); and an
#                         apply of more changes hands freed heap back (`_trim`)
CACHED_WRITE_MAX = 63   # a committed batch larger than this (a bulk import, a catch-up) has new texts: uncached


@lru_cache(maxsize=50_000)   # room for two loads of CACHED_TOKENS, and the interactive writes
def _tokens(name: str, description: str, body: str) -> tuple[str, ...]:
    return tuple(document_tokens(name, description, body))


WARM_MIN = 50_000  # an index this big gets its frequent terms' columns built after a load (BM25Index.warm)


def _trim() -> None:
    """Hand freed heap back to the system after a big load or catch-up: glibc keeps it otherwise, and a
    bulk import's transient Python objects would stay in the replica's resident memory for good."""
    try:
        import ctypes

        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        pass


class IndexManager:
    def __init__(self, store: Store, max_repos: int = 4096, files: IndexFiles | None = None,
                 persist_min: int = 20_000, save_changes: int = 20_000, save_interval_s: float = 60.0,
                 save_quiet_s: float = 5.0, save_max_age_s: float = 600.0, clock=time.monotonic):
        self.store = store
        self.max_repos = max_repos
        self.files, self.persist_min = files, persist_min
        self.save_changes, self.save_interval_s = save_changes, save_interval_s
        self.save_quiet_s, self.save_max_age_s = save_quiet_s, save_max_age_s
        self.clock = clock
        self.saved: dict[int, tuple[int, float]] = {}  # repo id -> (seq of its file, when it was written)
        # repo id -> (the index's seq when `due` last looked, since when it has been that): a save waits for
        # the writes to pause; and when `due` first saw a repo never saved
        self._still: dict[int, tuple[int, float]] = {}
        self._first_seen: dict[int, float] = {}
        self._indexes: OrderedDict[int, BM25Index] = OrderedDict()
        self._lock = threading.Lock()            # guards the LRU dict
        self._repo_locks: dict[int, threading.Lock] = {}  # one catch-up at a time per repo
        self._save_lock = threading.Lock()

    def _repo_lock(self, repo_id: int) -> threading.Lock:
        with self._lock:
            return self._repo_locks.setdefault(repo_id, threading.Lock())

    def loaded(self) -> list[int]:
        with self._lock:
            return list(self._indexes)

    def peek(self, repo_id: int) -> BM25Index | None:
        with self._lock:
            return self._indexes.get(repo_id)

    def drop(self, repo_id: int) -> None:
        with self._lock:
            self._indexes.pop(repo_id, None)
        if self.files is not None:
            self.files.discard(repo_id)
            for kept in (self.saved, self._still, self._first_seen):
                kept.pop(repo_id, None)

    def get(self, repo_id: int, seq: int) -> BM25Index | None:
        """The repo's index reflecting at least ``seq``; None when the repo is gone."""
        with self._lock:
            idx = self._indexes.get(repo_id)
            if idx is not None:
                self._indexes.move_to_end(repo_id)
        if idx is not None and idx.seq >= seq:
            return idx
        with self._repo_lock(repo_id):
            idx = self.peek(repo_id)
            if idx is None:
                idx = self._load(repo_id)
                if idx is None:
                    return None
            if idx.seq < seq:
                self._apply(idx, self.store.changes_since(repo_id, idx.seq))
        return idx

    def _load(self, repo_id: int) -> BM25Index | None:
        idx = self._from_file(repo_id) if self.files is not None else None
        if idx is None:
            with self.store.index_rows(repo_id) as state:
                if state is None:
                    return None
                seq, rows = state
                idx = BM25Index()
                idx.load((name, _doc_tokens(name, description, body, i < CACHED_TOKENS), (version, blob_hash))
                         for i, (name, version, description, body, blob_hash) in enumerate(rows))
                idx.seq = seq
            _trim()
        with self._lock:
            self._indexes[repo_id] = idx
            while len(self._indexes) > self.max_repos:
                self._indexes.popitem(last=False)
        if len(idx) >= WARM_MIN:
            threading.Thread(target=idx.warm, name="skillrepo-warm", daemon=True).start()
        return idx

    def _from_file(self, repo_id: int) -> BM25Index | None:
        found = self.store.repo_identity(repo_id)
        if found is None:
            return None
        db_seq, identity = found
        start = time.monotonic()
        try:
            idx = self.files.load(repo_id, identity, db_seq, lambda s: self.store.version_at(repo_id, s))
        except Refused as e:
            if str(e) != "no file":
                log.warning("index_file_refused", repo_id=repo_id, reason=str(e)[:300])
            return None
        # the file's own age, so that a file read after restarts is not taken for a fresh one
        try:
            age = max(0.0, time.time() - self.files.path(repo_id).stat().st_mtime)
        except OSError:
            age = 0.0
        self.saved[repo_id] = (idx.seq, self.clock() - age)
        log.info("index_file_loaded", repo_id=repo_id, skills=len(idx), seq=idx.seq, behind=db_seq - idx.seq,
                 seconds=round(time.monotonic() - start, 2))
        return idx

    @staticmethod
    def _apply(idx: BM25Index, changes: Iterable[Change]) -> None:
        changes = [ch for ch in changes if ch.seq > idx.seq]
        # a few (interactive writes): tokens through the cache; many (a bulk import, a catch-up): texts,
        # tokenized a chunk at a time (`BM25Index.upsert_texts`)
        cached = len(changes) <= CACHED_WRITE_MAX
        upsert = idx.upsert_many if cached else idx.upsert_texts
        batch: list[tuple] = []
        for ch in changes:
            if ch.blob_hash is None:
                upsert(batch)
                batch = []
                idx.remove(ch.name)
            elif cached:
                batch.append((ch.name, _tokens(ch.name, ch.description, ch.body), (ch.version, ch.blob_hash)))
            else:
                batch.append((ch.name, ch.description, ch.body, (ch.version, ch.blob_hash)))
        upsert(batch)
        if changes:
            idx.seq = changes[-1].seq
        if len(changes) > CACHED_TOKENS:
            _trim()

    def committed(self, repo_id: int, changes: list[Change]) -> None:
        """A write of this replica committed: apply it in order, or catch up when there is a gap."""
        if not changes:
            return
        if self.peek(repo_id) is None:
            return  # loaded on the next search
        with self._repo_lock(repo_id):
            idx = self.peek(repo_id)  # under the lock: a save may have replaced it (`_adopt`)
            if idx is None:
                return
            if changes[0].seq == idx.seq + 1:
                self._apply(idx, changes)
            elif changes[-1].seq > idx.seq:
                self._apply(idx, self.store.changes_since(repo_id, idx.seq))

    def announced(self, repo_id: int, seq: int) -> None:
        """Another replica wrote: catch up now if we hold this repo's index."""
        idx = self.peek(repo_id)
        if idx is not None and idx.seq < seq:
            with self._repo_lock(repo_id):
                idx = self.peek(repo_id)  # under the lock: a save may have replaced it (`_adopt`)
                if idx is not None and idx.seq < seq:
                    self._apply(idx, self.store.changes_since(repo_id, idx.seq))

    def reconcile(self) -> int:
        """Compare every loaded index with the database; catch up or drop. Returns how many were behind."""
        ids = self.loaded()
        seqs = self.store.repo_seqs(ids)
        behind = 0
        for rid in ids:
            if rid not in seqs:
                self.drop(rid)
                continue
            idx = self.peek(rid)
            if idx is not None and idx.seq < seqs[rid]:
                behind += 1
                self.announced(rid, seqs[rid])
        return behind

    # --- persisted indexes ---

    def preload(self) -> int:
        """Read every saved index of a live repo and catch it up (at start: the first searches are fast)."""
        if self.files is None:
            return 0
        ids = self.files.repo_ids()
        seqs = self.store.repo_seqs(ids)
        for rid in ids:
            if rid not in seqs:
                self.files.discard(rid)  # the repo was deleted
            else:
                self.get(rid, seqs[rid])
        return len(seqs)

    def save(self, repo_id: int, adopt: bool = True) -> bool:
        """Write the repo's index to its file; ``adopt``: and, when the live index is fragmented, put the
        save's compaction in its place (`_adopt`; not at shutdown)."""
        if self.files is None:
            return False
        with self._save_lock:  # one save at a time: the loop's and the one at shutdown wait for each other
            idx = self.peek(repo_id)  # under the lock: a save we waited for may have replaced it
            if idx is None:
                return False
            if self.saved.get(repo_id, (-1, 0.0))[0] == idx.seq and self.files.path(repo_id).exists():
                return False  # a save we waited for wrote this very state
            saved = self._save(repo_id, idx, adopt)
        del idx
        _trim()  # the save's copies, and an adopted index's predecessor, handed back
        return saved

    def _save(self, repo_id: int, idx: BM25Index, adopt: bool = True) -> bool:
        start = time.monotonic()
        with self._repo_lock(repo_id):  # no catch-up meanwhile: the copy is the state at its seq
            state = idx.export_state()
        seq = state["seq"]
        found = self.store.repo_identity(repo_id)
        if found is None:
            return False
        compacted = compact_state(state)
        del state
        size = self.files.save(repo_id, found[1], compacted, self.store.version_at(repo_id, seq) if seq else None)
        self.saved[repo_id] = (seq, self.clock())
        saved_s = time.monotonic() - start
        try:
            adopted = adopt and idx.fragmented() and self._adopt(repo_id, idx, compacted)
        except Exception as e:  # noqa: BLE001 - the file is written; the live index stays as it was
            log.warning("index_adopt_failed", repo_id=repo_id, error=f"{type(e).__name__}: {e}"[:300])
            adopted = False
        total_s = time.monotonic() - start
        INDEX_SAVES.labels(adopted=str(adopted).lower()).inc()
        INDEX_SAVE_SECONDS.observe(total_s)
        log.info("index_saved", repo_id=repo_id, skills=len(idx), seq=seq, mb=round(size / 2**20, 1),
                 seconds=round(saved_s, 2), adopted=adopted, adopt_seconds=round(total_s - saved_s, 2))
        return True

    def _adopt(self, repo_id: int, idx: BM25Index, compacted: Compacted) -> bool:
        """The save's compaction in place of the live index, when that one is fragmented: bulk writes leave
        their postings in segments, which a search reads one by one until they outgrow the base and are
        folded into it (`BM25Index._fold_segments`, under the index's lock, a pass over every posting at a
        million skills), and dead slots until a rebuild (a search over HTTP there: p50 13.4-13.9 ms before this,
        8.2-9.9 ms after; RESULTS-reliability.md, scenario 6). The save
        built the compacted postings anyway; made an index, caught up with what was written since the export
        and warmed, it replaces the live one (the LRU's entry, as a reload does: searches in flight finish on
        the old one)."""
        fresh = BM25Index.from_compacted(compacted)
        for key in ("fwd_ptr", "fwd_terms", "fwd_tfs"):  # copied into fresh's growable arrays: not kept twice
            del compacted.built[key]
        self._apply(fresh, self.store.changes_since(repo_id, fresh.seq))  # outside the lock: writers go on
        if len(fresh) >= WARM_MIN:
            fresh.warm()
        with self._repo_lock(repo_id):
            if self.peek(repo_id) is not idx:
                return False  # dropped or reloaded meanwhile
            if idx.seq > fresh.seq:
                self._apply(fresh, self.store.changes_since(repo_id, fresh.seq))
            with self._lock:
                if self._indexes.get(repo_id) is not idx:
                    return False
                self._indexes[repo_id] = fresh
        return True

    def due(self, final: bool = False) -> list[int]:
        """Loaded indexes big enough to keep whose file is missing or behind (``final``: behind at all).

        Besides ``final``, a save waits for the repo's writes to pause for ``save_quiet_s`` (noticed when this
        looks, every sync interval): a save compacts and writes the whole index, and during a bulk import it
        took 15 % of the service's CPU for a file the import made stale at once. A repo written without pause
        is saved all the same once its file is ``save_max_age_s`` old (or, never saved, once it has been
        loaded that long). The price: a replica killed during a long import restarts from an older file, or
        from the database when the repo had none (a million skills: ~90 s instead of seconds)."""
        out, now = [], self.clock()
        for rid in self.loaded():
            idx = self.peek(rid)
            if self.files is None or idx is None or len(idx) < self.persist_min:
                continue
            seq_then, still_since = self._still.get(rid, (None, now))
            if seq_then != idx.seq:
                self._still[rid] = (idx.seq, now)
                still_since = now
            seq, when = self.saved.get(rid, (-1, None))
            if when is None:
                when = self._first_seen.setdefault(rid, now)
            if final:
                if seq < 0 or idx.seq > seq:
                    out.append(rid)
                continue
            behind = seq < 0 or (idx.seq - seq >= self.save_changes and now - when >= self.save_interval_s)
            settled = now - still_since >= self.save_quiet_s or now - when >= self.save_max_age_s
            if behind and settled:
                out.append(rid)
        return out

    def save_due(self, final: bool = False) -> None:
        for rid in self.due(final):
            self.save(rid, adopt=not final)


def _doc_tokens(name: str, description: str, body: str, cached: bool) -> tuple[str, ...] | list[str]:
    return _tokens(name, description, body) if cached else document_tokens(name, description, body)


class Announcer:
    """Redis pub/sub of change announcements, plus a periodic reconcile as the safety net.

    A write never waits on Redis: `publish` only records the repo's newest seq, and one thread sends what
    is recorded (the newest seq per repo; an announcement says "catch up to at least this seq", so newer
    ones make older ones of the same repo redundant). Redis dead, restarting or frozen therefore costs
    writers nothing; announcements that cannot be sent are dropped, and the other replicas learn of those
    writes from their reconcile loop (every ``interval_s``) and from the reconcile after they re-subscribe.
    """

    def __init__(self, indexes: IndexManager, redis_url: str | None, channel: str, interval_s: float):
        self.indexes, self.channel, self.interval_s = indexes, channel, interval_s
        self.redis = None
        if redis_url:
            import redis

            # health checks: a frozen Redis (no answers, connection still open) is noticed by the listener too
            self.redis = redis.Redis.from_url(redis_url, socket_timeout=5, socket_connect_timeout=3,
                                              health_check_interval=5)
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._pending: dict[int, int] = {}
        self._wake = threading.Condition()
        self.failed_publishes = 0

    def publish(self, repo_id: int, seq: int) -> None:
        if self.redis is None:
            return
        with self._wake:
            if seq > self._pending.get(repo_id, -1):
                self._pending[repo_id] = seq
            self._wake.notify()

    def _publish_loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            with self._wake:
                if not self._pending:
                    self._wake.wait(timeout=1.0)
                batch, self._pending = self._pending, {}
            for repo_id, seq in batch.items():
                try:
                    self.redis.publish(self.channel, json.dumps({"repo_id": repo_id, "seq": seq}))
                    if failing:
                        failing = False
                        log.info("announce_resumed")
                except Exception as e:  # noqa: BLE001 - the others recover by reconcile; the write is committed
                    self.failed_publishes += 1
                    if not failing:  # once per outage, not once per write
                        failing = True
                        log.warning("announce_failed", error=str(e))
                    break  # the rest of this batch would wait on the same dead Redis: dropped too

    def start(self) -> None:
        self._threads = [threading.Thread(target=self._reconcile_loop, name="skillrepo-reconcile", daemon=True)]
        if self.redis is not None:
            self._threads.append(threading.Thread(target=self._listen_loop, name="skillrepo-listen", daemon=True))
            self._threads.append(threading.Thread(target=self._publish_loop, name="skillrepo-announce", daemon=True))
        for t in self._threads:
            t.start()

    def stop(self) -> None:
        self._stop.set()
        with self._wake:
            self._wake.notify_all()
        for t in self._threads:
            t.join(timeout=5)

    def _reconcile_loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            try:
                behind = self.indexes.reconcile()
                if behind:
                    log.info("reconciled", behind=behind)
            except Exception as e:  # noqa: BLE001 - keep the loop alive through database hiccups
                log.warning("reconcile_failed", error=str(e))
            try:
                self.indexes.save_due()
            except Exception as e:  # noqa: BLE001 - a file not written is rebuilt or written later
                log.warning("index_save_failed", error=f"{type(e).__name__}: {e}"[:300])

    def _listen_loop(self) -> None:
        failing = False
        while not self._stop.is_set():
            pubsub = None
            try:
                pubsub = self.redis.pubsub(ignore_subscribe_messages=True)
                pubsub.subscribe(self.channel)
                if failing:
                    failing = False
                    log.info("listen_resumed")
                # after (re)subscribing, anything missed while away is repaired at once
                self.indexes.reconcile()
                while not self._stop.is_set():
                    msg = pubsub.get_message(timeout=1.0)
                    if msg and msg.get("type") == "message":
                        data = json.loads(msg["data"])
                        self.indexes.announced(int(data["repo_id"]), int(data["seq"]))
            except Exception as e:  # noqa: BLE001
                if not failing:  # once per outage; retried every second
                    failing = True
                    log.warning("listen_failed", error=str(e))
                self._stop.wait(1.0)
            finally:
                if pubsub is not None:
                    try:
                        pubsub.close()
                    except Exception:  # noqa: BLE001, S110 - a dead connection closes as well as it can
                        pass
