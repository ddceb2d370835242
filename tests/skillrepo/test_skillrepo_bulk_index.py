"""Bulk writes (NDJSON over HTTP, COPY into PostgreSQL) and persisted search indexes (index_files.py).

A persisted index is only ever a shortcut: a stale file is caught up, and a file that is corrupt, of another
format or tokenizer, of another database or repo, or of a history the database does not have is refused and
the index rebuilt from the database. Each case is checked against an index built from the database.
"""


from __future__ import annotations

import json
import uuid
import zipfile

import httpx
import numpy as np
import psycopg
import pytest
from conftest import pg_database, run_service

from services.skillrepo import index_files
from services.skillrepo.serving import SkillRepoService
from services.skillrepo.settings import SkillRepoSettings
from skillos.errors import APIError
from skillos.skills import SkillDoc

WORDS = ["apple", "mug", "fridge", "heat", "cool", "clean", "knife", "pan", "drawer", "desk", "lamp", "towel"]


def ndjson(skills: list[dict]) -> bytes:
    return b"\n".join(json.dumps(s).encode() for s in skills) + b"\n"


def skills(n: int, tag: str = "", start: int = 0) -> list[dict]:
    return [{"name": f"s-{i}", "description": f"use when {WORDS[i % 12]} {WORDS[(i * 7) % 12]} {tag}".strip(),
             "body": f"{WORDS[(i * 5) % 12]} then {WORDS[(i * 3) % 12]} w{i}"} for i in range(start, start + n)]


QUERIES = [["heat mug"], ["clean knife drawer"], ["w17"], ["apple apple pan"], ["towel lamp desk cool"]]


@pytest.fixture(params=["sqlite", "postgres"])
def db_url(request, tmp_path):
    if request.param == "sqlite":
        yield f"sqlite:///{tmp_path}/repo.db"
    else:
        with pg_database(request.getfixturevalue("pg_server_url")) as url:
            yield url


def service(url: str, index_dir, **kw) -> SkillRepoService:
    return SkillRepoService(SkillRepoSettings(database_url=url, redis_url=None, sync_interval_s=3600, dense_search=False,
                                              index_dir=str(index_dir or ""), index_persist_min_skills=10,
                                              **{"index_save_quiet_s": 0.0, **kw}))


def answers(svc: SkillRepoService, repo: str) -> list:
    return [[(h.name, h.score, h.version, h.description, h.body) for h in svc.search(repo, q[0], 5)] for q in QUERIES]


def reference(url: str, repo: str) -> tuple[list, dict]:
    """What an index built from the database (no file) answers, and its documents."""
    svc = service(url, None)
    try:
        out = answers(svc, repo)
        rid = svc.store.repo_seq(repo)[0]
        return out, svc.indexes.peek(rid).documents()
    finally:
        svc.stop()


def saved_service(url: str, tmp_path, n: int = 400) -> tuple[SkillRepoService, str, int]:
    svc = service(url, tmp_path)
    repo = f"r-{uuid.uuid4().hex[:8]}"
    svc.create_repo(repo)
    svc.bulk_put(repo, ndjson(skills(n)))
    svc.search(repo, "mug", 5)  # loads the index
    rid = svc.store.repo_seq(repo)[0]
    assert svc.indexes.due() == [rid]
    svc.indexes.save_due()
    assert svc.indexes.files.path(rid).exists() and svc.indexes.due() == []
    return svc, repo, rid


def restarted(url: str, tmp_path, repo: str) -> tuple[SkillRepoService, object]:
    svc = service(url, tmp_path)
    rid, seq = svc.store.repo_seq(repo)
    return svc, svc.indexes.get(rid, seq)


class Clock:
    def __init__(self):
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def test_a_save_waits_for_the_writes_to_pause(tmp_path):
    """A save compacts and writes the whole index: not while a bulk import is still growing it (15 % of the
    service's CPU at a million skills), but once the writes pause, or once the file is save_max_age_s old."""
    svc = service(f"sqlite:///{tmp_path}/repo.db", tmp_path / "idx", index_save_quiet_s=5.0,
                  index_save_interval_s=1.0, index_save_max_age_s=60.0, index_save_changes=1)
    svc.indexes.clock = clock = Clock()
    repo = "quiet"
    svc.create_repo(repo)
    svc.bulk_put(repo, ndjson(skills(100)))
    svc.search(repo, "mug", 5)
    rid = svc.store.repo_seq(repo)[0]
    assert svc.indexes.due() == []                    # never saved, but just written: the import may go on
    clock.now += 4
    assert svc.indexes.due() == []
    clock.now += 1
    assert svc.indexes.due() == [rid]                 # 5 s without a write: saved now
    svc.indexes.save_due()
    assert svc.indexes.due() == []
    for _ in range(11):                               # a write every 5 s (seen at each look) for 55 s
        svc.bulk_put(repo, ndjson(skills(10, f"w{clock.now}", start=100)))
        clock.now += 5
        assert svc.indexes.due() == []
    assert svc.indexes.due(final=True) == [rid]       # at shutdown: saved whatever the writes do
    svc.bulk_put(repo, ndjson(skills(10, "last", start=100)))
    clock.now += 5
    assert svc.indexes.due() == [rid]                 # the file is 60 s old: saved though the writes go on
    svc.indexes.save_due()
    svc.stop()

    # read back after a restart, the file counts with its own age (its mtime), not as new
    import os

    path = svc.indexes.files.path(rid)
    os.utime(path, (path.stat().st_atime, path.stat().st_mtime - 3600))
    svc = service(f"sqlite:///{tmp_path}/repo.db", tmp_path / "idx", index_save_quiet_s=5.0,
                  index_save_interval_s=1.0, index_save_max_age_s=60.0, index_save_changes=1)
    svc.indexes.clock = clock = Clock()
    svc.bulk_put(repo, ndjson(skills(10, "after", start=100)))
    svc.search(repo, "mug", 5)                        # reads the file, catches up the write
    assert svc.indexes.saved[rid][1] <= clock.now - 3600
    assert svc.indexes.due() == [rid]                 # behind, and its file an hour old
    svc.stop()


def test_saved_index_is_read_back_and_caught_up(db_url, tmp_path):
    svc, repo, rid = saved_service(db_url, tmp_path)
    before = answers(svc, repo)
    # writes after the save: the file is stale by these
    svc.bulk_put(repo, ndjson(skills(5, "fridge fridge", start=0)))
    svc.delete_skill(repo, "s-17", None)
    svc.stop()  # final save: up to date
    svc, idx = restarted(db_url, tmp_path, repo)
    assert svc.indexes.saved[rid][0] == idx.seq == svc.store.repo_seq(repo)[1]  # read from the file
    want, docs = reference(db_url, repo)
    assert answers(svc, repo) == want and idx.documents() == docs
    assert want != before
    svc.stop()


def test_a_save_puts_its_compaction_in_place_of_a_fragmented_index(db_url, tmp_path):
    """Bulk writes into a loaded index leave their postings in segments; the save compacts them anyway, and that
    compaction, caught up with what was written during the save (after the export, and after its first
    catch-up), becomes the live index. It answers as an index built from the database, and finds both writes;
    a save at shutdown adopts nothing."""
    svc, repo, rid = saved_service(db_url, tmp_path)
    svc.bulk_put(repo, ndjson(skills(200, "fridge", start=400)))   # a segment of its own
    svc.delete_skill(repo, "s-3", None)                             # a dead slot
    old = svc.indexes.peek(rid)
    assert old.segments and old.fragmented()
    real_save, real_changes = svc.indexes.files.save, svc.indexes.store.changes_since
    catch_ups = []

    def save_then_write(*args):  # after the export
        out = real_save(*args)
        svc.put_skill(repo, "late", SkillDoc("late", "use when lamp", "zebra"), None)
        return out

    def changes_then_write(repo_id, seq):  # after the adoption's first catch-up: the second, under the lock
        out = real_changes(repo_id, seq)
        catch_ups.append(seq)
        if len(catch_ups) == 1:
            svc.put_skill(repo, "later", SkillDoc("later", "use when desk", "yak"), None)
        return out

    svc.indexes.files.save, svc.indexes.store.changes_since = save_then_write, changes_then_write
    try:
        assert svc.indexes.save(rid)
    finally:
        svc.indexes.files.save, svc.indexes.store.changes_since = real_save, real_changes
    fresh = svc.indexes.peek(rid)
    assert len(catch_ups) == 2 and catch_ups[1] > catch_ups[0]
    assert fresh is not old and not fresh.segments and not fresh.dead
    assert fresh.seq == old.seq == svc.store.repo_seq(repo)[1]
    want, docs = reference(db_url, repo)
    assert answers(svc, repo) == want and fresh.documents() == docs
    assert [h.name for h in svc.search(repo, "zebra", 1)] == ["late"]
    assert [h.name for h in svc.search(repo, "yak", 1)] == ["later"]
    svc.bulk_put(repo, ndjson(skills(100, "desk", start=600)))
    assert svc.indexes.peek(rid).fragmented()
    kept = svc.indexes.peek(rid)
    svc.stop()  # the final save writes the file and leaves the index as it is
    assert svc.indexes.peek(rid) is kept


def test_an_index_is_freed_without_the_garbage_collector():
    """No reference cycle through an index: an adopted or evicted one (a million skills: gigabytes) is freed
    when its last reference goes, not at the next full collection."""
    import gc
    import weakref

    from services.skillrepo.search import BM25Index

    idx = BM25Index()
    idx.upsert_texts([(f"s-{i}", f"use when {WORDS[i % 12]}", f"{WORDS[(i * 5) % 12]} w{i}", (1, "h"))
                      for i in range(500)])
    assert idx.search(["mug"], 5)
    ref = weakref.ref(idx)
    gc.disable()
    try:
        del idx
        assert ref() is None
    finally:
        gc.enable()


def test_stale_file_is_caught_up(db_url, tmp_path):
    svc, repo, rid = saved_service(db_url, tmp_path)
    file_seq = svc.indexes.saved[rid][0]
    svc.indexes.files = None  # writes the saver never sees (a replica killed before its next save)
    svc.bulk_put(repo, ndjson(skills(300, "fridge", start=200)))
    svc.delete_skill(repo, "s-3", None)
    svc.stop()
    svc, idx = restarted(db_url, tmp_path, repo)
    assert svc.indexes.saved[rid][0] == file_seq < idx.seq  # the file's state, then changes_since
    want, docs = reference(db_url, repo)
    assert answers(svc, repo) == want and idx.documents() == docs
    svc.stop()


def _rewrite_meta(path, **changes) -> None:
    with np.load(path) as z:
        arrays = {k: z[k] for k in z.files}
    meta = json.loads(arrays["meta"].tobytes())
    meta.update(changes)
    arrays["meta"] = np.frombuffer(json.dumps(meta).encode(), np.uint8)
    with open(path, "wb") as f:
        np.savez(f, **arrays)


def _corrupt(path) -> None:
    data = bytearray(path.read_bytes())
    with zipfile.ZipFile(path) as z:  # flip a byte inside the postings' data: the zip's CRC-32 catches it
        info = z.getinfo("base_slots.npy")
    at = info.header_offset + 30 + len(info.filename) + 200
    data[at] ^= 0xFF
    path.write_bytes(bytes(data))


@pytest.mark.parametrize("damage", ["corrupt", "truncated", "format", "tokenizer", "other_repo", "ahead",
                                    "other_history", "not_a_zip"])
def test_bad_file_is_refused_and_the_index_rebuilt(db_url, tmp_path, damage):
    svc, repo, rid = saved_service(db_url, tmp_path)
    seq = svc.store.repo_seq(repo)[1]
    svc.stop()
    path = index_files.IndexFiles(tmp_path).path(rid)
    match damage:
        case "corrupt":
            _corrupt(path)
        case "truncated":
            path.write_bytes(path.read_bytes()[: path.stat().st_size // 2])
        case "format":
            _rewrite_meta(path, format=index_files.FORMAT + 1)
        case "tokenizer":
            _rewrite_meta(path, scoring="0" * 16)
        case "other_repo":  # the same id in another database (or a repo deleted and made again)
            _rewrite_meta(path, created_at="2001-01-01T00:00:00+00:00")
        case "ahead":  # a file of a database restored from an older backup
            _rewrite_meta(path, seq=seq + 5)
        case "other_history":
            _rewrite_meta(path, last=["s-0", 99, "0" * 64])
        case "not_a_zip":
            path.write_bytes(b"hello")
    svc, idx = restarted(db_url, tmp_path, repo)
    assert rid not in svc.indexes.saved  # not read from the file
    want, docs = reference(db_url, repo)
    assert answers(svc, repo) == want and idx.documents() == docs
    assert svc.indexes.due() == [rid]  # and a good file is written again
    svc.stop()
    svc, _ = restarted(db_url, tmp_path, repo)
    assert svc.indexes.saved[rid][0] == seq
    svc.stop()


def test_two_saves_at_once_leave_one_whole_file(db_url, tmp_path):
    """The periodic save and the one at shutdown (or two replicas sharing a folder) never write one file."""
    import threading

    svc, repo, rid = saved_service(db_url, tmp_path)
    svc.bulk_put(repo, ndjson(skills(50, "fridge", start=0)))
    svc.search(repo, "mug", 5)
    idx = svc.indexes.peek(rid)
    state, identity = idx.export_state(), svc.store.repo_identity(rid)[1]
    last = svc.store.version_at(rid, state["seq"])
    errors = []

    def save():
        try:
            for _ in range(3):
                svc.indexes.files.save(rid, identity, state, last)
        except Exception as e:  # noqa: BLE001 - collected for the assertion
            errors.append(e)

    threads = [threading.Thread(target=save) for _ in range(3)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert not errors and not list(tmp_path.glob("repo-*.part"))
    svc.stop()
    svc, idx = restarted(db_url, tmp_path, repo)
    assert svc.indexes.saved[rid][0] == idx.seq  # read from the file, not refused
    want, _docs = reference(db_url, repo)
    assert answers(svc, repo) == want
    svc.stop()


def test_deleted_repo_file_is_discarded(db_url, tmp_path):
    svc, repo, rid = saved_service(db_url, tmp_path)
    svc.delete_repo(repo)
    assert not svc.indexes.files.path(rid).exists()
    svc.stop()


def test_preload_reads_saved_indexes_at_start(db_url, tmp_path):
    svc, _repo, rid = saved_service(db_url, tmp_path)
    svc.stop()
    svc = service(db_url, tmp_path)
    assert svc.indexes.preload() == 1 and svc.indexes.peek(rid) is not None
    svc.stop()


def test_bulk_put_writes_versions_like_puts(db_url, tmp_path):
    """The COPY path (PostgreSQL, >= BULK_MIN skills) and the one-at-a-time path write the same rows."""
    svc = service(db_url, None)
    repo = "bulk"
    svc.create_repo(repo)
    r = svc.bulk_put(repo, ndjson(skills(300)))
    assert (r.received, r.written, r.seq) == (300, 300, 300)
    r = svc.bulk_put(repo, ndjson(skills(300)))  # the same again: nothing new
    assert (r.written, r.seq) == (0, 300)
    changed = skills(150, "fridge") + skills(150, start=150) + skills(10, start=300)  # 150 changed, 10 new
    r = svc.bulk_put(repo, ndjson(changed))
    assert (r.written, r.seq) == (160, 460)
    assert svc.get_skill(repo, "s-5").version == 2 and svc.get_skill(repo, "s-200").version == 1
    assert svc.get_skill(repo, "s-305").version == 1 and "fridge" in svc.get_skill(repo, "s-5").description
    assert [v.version for v in svc.versions(repo, "s-5").versions] == [2, 1]
    assert svc.op_log(repo).entries[0].kind == "import" and len(svc.op_log(repo).entries[0].ops) == 160
    rid, _seq = svc.store.repo_seq(repo)
    assert [c.seq for c in svc.store.changes_since(rid, 0)] == list(range(1, 461))
    hits = svc.search(repo, "fridge", 200)
    assert {h.name for h in hits} >= {f"s-{i}" for i in range(150)}
    svc.stop()


def test_bulk_blobs_that_exist_already_take_the_conflict_path(pg_server_url):
    """Blobs are COPYed straight into their table; a batch with a text the database has already (the same
    skills in a second repo, some texts shared with new ones, a skill written back to an earlier text) fails
    that COPY on the key and is written through ON CONFLICT DO NOTHING instead, in the same transaction:
    every version and head is written, each blob once."""
    with pg_database(pg_server_url) as url:
        svc = service(url, None)
        for repo in ("first", "second"):
            svc.create_repo(repo)
        svc.bulk_put("first", ndjson(skills(300)))
        mixed = skills(200) + skills(100, "fridge", start=200)  # 200 texts known, 100 new
        r = svc.bulk_put("second", ndjson(mixed))
        assert (r.written, r.seq) == (300, 300)
        svc.bulk_put("first", ndjson(skills(300, "lamp")))  # every text new: the straight COPY
        r = svc.bulk_put("first", ndjson(skills(300)))     # written back to the first texts: all known
        assert (r.written, r.seq) == (300, 900)
        with psycopg.connect(url.replace("+psycopg", "")) as c:
            assert c.execute("SELECT count(*) FROM blobs").fetchone()[0] == 300 + 100 + 300
            assert c.execute("SELECT count(*) FROM skill_versions v LEFT JOIN blobs b ON b.hash = v.blob_hash "
                             "WHERE b.hash IS NULL").fetchone()[0] == 0  # no version without its blob
        assert svc.get_skill("second", "s-250").description.endswith("fridge")
        assert [v.version for v in svc.versions("first", "s-3").versions] == [3, 2, 1]
        assert svc.get_skill("first", "s-3").body == skills(300)[3]["body"]
        assert {h.name for h in svc.search("second", "fridge", 300)} >= {f"s-{i}" for i in range(200, 300)}
        svc.stop()


def test_a_bulk_version_past_int4_is_refused_not_wrapped(pg_server_url):
    """The COPY path writes int4 columns in binary, whose dumper wraps a value past 2**31 - 1 instead of
    refusing it: a batch whose next version would be one goes the one-at-a-time way, which refuses it."""
    with pg_database(pg_server_url) as url:
        svc = service(url, None)
        svc.create_repo("big")
        svc.bulk_put("big", ndjson(skills(300)))
        rid, _ = svc.store.repo_seq("big")
        with svc.store.engine.begin() as conn:
            conn.exec_driver_sql(f"UPDATE skill_heads SET version = {2**31 - 1} WHERE repo_id = {rid} AND name = 's-7'")
        with pytest.raises(psycopg.errors.NumericValueOutOfRange):  # as the text format and one put refuse it
            svc.bulk_put("big", ndjson(skills(300, "fridge")))
        assert svc.get_skill("big", "s-7").version == 2**31 - 1 and svc.get_repo("big").seq == 300
        svc.stop()


def test_a_bulk_import_does_not_fill_the_token_cache(tmp_path):
    """The token cache is for texts indexed again (a fork's load, a reloaded repo): a bulk import's new texts
    would only pin their bodies in memory (160 MB after 100,000 skills when they were cached)."""
    from services.skillrepo import indexes

    svc = service(f"sqlite:///{tmp_path}/repo.db", None)
    svc.create_repo("bulk")
    svc.search("bulk", "warm")                                 # the index is loaded: writes are applied to it
    indexes._tokens.cache_clear()                               # (earlier tests may have filled it)
    before = indexes._tokens.cache_info().currsize
    svc.bulk_put("bulk", ndjson(skills(300, "cachetest")))
    assert indexes._tokens.cache_info().currsize == before
    assert {h.name for h in svc.search("bulk", "cachetest", 300)} == {f"s-{i}" for i in range(300)}
    svc.bulk_put("bulk", ndjson(skills(1, "one")))            # an interactive write's text is cached
    assert indexes._tokens.cache_info().currsize == before + 1
    svc.stop()


def test_bulk_bad_input_is_refused_in_process(tmp_path):
    svc = service(f"sqlite:///{tmp_path}/r.db", None, max_bulk_skills=5)
    svc.create_repo("r")
    cases = {
        b'{"name": "a", "description": "x"}\n{"name": "b", "descr': (400, "invalid_json", "line 2"),
        b'["a"]': (400, "invalid_skill", "line 1"),
        b'{"name": "a", "description": "x", "extra": 1}': (400, "invalid_skill", "line 1"),
        b'{"name": "Bad Name", "description": "x"}': (400, "invalid_name", "line 1"),
        b'{"name": "a"}': (400, None, "line 1"),
        b'{"name": "a", "description": "x", "metadata": 3}': (400, "invalid_metadata", "line 1"),
        b'{"name": "a", "description": "x"}\n{"name": "a", "description": "y"}': (400, "duplicate_skill", "line 2"),
        b"\n\n": (400, "empty_bulk", "no skills"),
        ndjson(skills(6)): (413, "bulk_too_large", "more than 5"),
        b'{"name": "a", "description": "x", "body": "' + b"z" * 70_000 + b'"}': (413, "body_too_large", "line 1"),
        # what PostgreSQL's text or UTF-8 cannot hold, and what is not JSON though Python's json reads it
        b'{"name": "a", "description": "x\\u0000"}': (400, "invalid_character", "NUL"),
        b'{"name": "a", "description": "x\\ud800"}': (400, "invalid_character", "surrogate"),
        b'{"name": "a", "description": "x", "metadata": {"n": NaN}}': (400, "invalid_json", "line 1"),
        b'{"name": "a", "description": "x", "metadata": {"n": 1e999}}': (400, "invalid_metadata", "not a JSON"),
        b'{"name": "a", "description": "x", "metadata": {"n": ' + b"9" * 5000 + b'}}': (400, "invalid_json", "line 1"),
    }
    for body, (status, code, words) in cases.items():
        with pytest.raises(APIError) as e:
            svc.bulk_put("r", body)
        assert e.value.status == status and words in e.value.message, (body[:60], e.value.message)
        if code:
            assert e.value.code == code
    assert svc.get_repo("r").seq == 0  # nothing written by any of them
    with pytest.raises(APIError) as e:
        svc.bulk_put("nope", ndjson(skills(1)))
    assert e.value.status == 404
    svc.stop()


def test_bulk_over_http(pg_server_url, tmp_path):
    with pg_database(pg_server_url) as url, run_service(["skillrepo"], env={
            "SKILLOS_DATABASE_URL": url, "SKILLOS_DENSE_SEARCH": "false", "SKILLOS_MAX_REQUEST_BYTES": "200000"},
            tmp_path=tmp_path, ready_timeout=300) as svc, httpx.Client(base_url=svc.url, timeout=60) as h:
        assert h.post("/v1/repos", json={"name": "b"}).status_code == 201
        r = h.post("/v1/repos/b/bulk", content=ndjson(skills(500)), headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 200 and r.json() == {"received": 500, "written": 500, "seq": 500}
        hit = h.get("/v1/repos/b/search", params={"q": "w417", "k": 1}).json()["hits"][0]
        assert hit["name"] == "s-417" and hit["body"].endswith("w417") and hit["version"] == 1
        r = h.post("/v1/repos/b/bulk", content=b"x" * 300_000, headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 413
        r = h.post("/v1/repos/b/bulk", content=b"{}", headers={"content-type": "text/csv"})
        assert r.status_code == 415
        r = h.post("/v1/repos/b/bulk", content=b"{oops\n", headers={"content-type": "application/x-ndjson"})
        assert r.status_code == 400 and r.json()["error"]["code"] == "invalid_json"
        assert h.get("/v1/repos/b").json()["seq"] == 500
