"""Concurrent writers lose no update; kill -9 during a write load loses no acknowledged op (SQLite, PostgreSQL)."""
# ruff: noqa: F811 - pytest fixtures imported from skillrepo_fixtures are redefined as parameters

from __future__ import annotations

import threading
import time
from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from conftest import run_service
from skillrepo_fixtures import backend_url, client, repo, repo_service, skill_md  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError

pytestmark = pytest.mark.slow


def test_concurrent_writers_on_one_skill_lose_no_update(repo_service, repo):
    """Read-modify-write with If-Match from 8 threads: every increment lands exactly once."""
    url = repo_service.url
    SkillRepoClient(url).put_skill(repo, skill_md("counter", "a shared counter", "start"))
    writers, rounds = 8, 8

    def writer(w: int) -> int:
        retries = 0
        with SkillRepoClient(url) as c:
            for i in range(rounds):
                while True:
                    cur = c.get_skill(repo, "counter")
                    try:
                        c.put_skill(repo, skill_md("counter", "a shared counter", f"{cur.body}\nw{w}-{i}"),
                                    if_match=cur.version)
                        break
                    except SkillRepoError as e:
                        assert e.status == 412
                        retries += 1
        return retries

    with ThreadPoolExecutor(writers) as pool:
        retries = sum(pool.map(writer, range(writers)))
    final = SkillRepoClient(url).get_skill(repo, "counter")
    lines = final.body.splitlines()[1:]
    assert sorted(lines) == sorted(f"w{w}-{i}" for w in range(writers) for i in range(rounds))
    assert final.version == 1 + writers * rounds
    assert retries > 0  # the writers really did collide


def test_concurrent_blind_writes_and_batches_all_recorded(repo_service, repo):
    url = repo_service.url

    def put(i: int) -> int:
        with SkillRepoClient(url) as c:
            c.apply_ops(repo, [{"name": "new_skill_insert",
                                "arguments": {"skill_name": f"own-{i}", "content": f"own skill {i}"}}])
            return c.put_skill(repo, skill_md("shared", "blind writes", f"writer {i}")).version

    with ThreadPoolExecutor(8) as pool:
        versions = list(pool.map(put, range(24)))
    c = SkillRepoClient(url)
    assert sorted(versions) == list(range(1, 25))  # every write got its own version: none overwrote another's
    assert len(c.skill_versions(repo, "shared")) == 24
    assert {s.name for s in c.list_skills(repo)} == {"shared"} | {f"own-{i}" for i in range(24)}
    assert len(c.search(repo, "own skill", k=100)) == 24


@pytest.mark.parametrize("backend", ["sqlite", "postgres"])
def test_kill_9_during_write_load(backend, request, tmp_path):
    from skillrepo_fixtures import database

    with database(backend, request, tmp_path) as db_url:
        env = {"SKILLOS_DATABASE_URL": db_url}
        acked: list[int] = []
        stop = threading.Event()
        with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc:
            SkillRepoClient(svc.url).create_repo("load")

            def load(w: int) -> None:
                with httpx.Client(base_url=svc.url, timeout=10) as h:
                    i = 0
                    while not stop.is_set():
                        n = w * 100_000 + i
                        ops = [{"name": "new_skill_insert",
                                "arguments": {"skill_name": f"s-{n}-{part}", "content": f"pair {n} part {part}"}}
                               for part in ("a", "b")]
                        try:
                            r = h.post("/v1/repos/load/ops", json={"ops": ops, "idempotency_key": f"k{n}"})
                        except httpx.HTTPError:
                            return  # the server died mid-request: not acknowledged
                        if r.status_code == 200 and r.json()["applied"]:
                            acked.append(n)
                        i += 1

            threads = [threading.Thread(target=load, args=(w,)) for w in range(4)]
            for t in threads:
                t.start()
            time.sleep(3)
            svc.kill(9)
            stop.set()
            for t in threads:
                t.join(timeout=30)
        assert len(acked) > 20

        with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc:
            c = SkillRepoClient(svc.url)
            names = {s.name for s in c.list_skills("load")}
            for n in acked:
                assert {f"s-{n}-a", f"s-{n}-b"} <= names
            # batches are atomic even when cut by the kill: both halves or neither
            pairs = {name.rsplit("-", 1)[0] for name in names}
            assert all({f"{p}-a", f"{p}-b"} <= names for p in pairs)
            # a replayed acknowledged batch changes nothing
            n = acked[-1]
            again = c.apply_ops("load", [{"name": "new_skill_insert", "arguments": {
                "skill_name": f"s-{n}-{part}", "content": f"pair {n} part {part}"}} for part in ("a", "b")],
                idempotency_key=f"k{n}")
            assert again.replayed and again.applied
            # the index rebuilt after the restart equals the database
            assert len(c.search("load", "pair part", k=100)) == min(100, len(names))
            status = httpx.get(f"{svc.url}/v1/repos/load/index").json()
            assert status["index_seq"] == status["db_seq"]
            assert {(d["name"], d["version"]) for d in status["documents"]} == \
                {(s.name, s.version) for s in c.list_skills("load")}


@pytest.mark.parametrize(("setting", "pragma"), [("NORMAL", 1), ("FULL", 2)])
def test_sqlite_synchronous_setting(tmp_path, setting, pragma):
    from sqlalchemy import text

    from skillos.db import make_engine

    engine = make_engine(f"sqlite:///{tmp_path}/s.db", setting)
    with engine.connect() as c:
        assert c.execute(text("PRAGMA synchronous")).scalar() == pragma
    engine.dispose()


def test_work_on_a_whole_repo_has_its_own_bound(tmp_path):
    """Import, export, fork and snapshots grow with the repo: they are bounded by SKILLOS_DATABASE_BULK_TIMEOUT_S,
    not by the per-request bound that keeps a stuck database from holding a search or a write (here far too
    short for anything: those get 503 with Retry-After, the whole-repo work goes through)."""
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/repo.db", "SKILLOS_DATABASE_REQUEST_TIMEOUT_S": "0.000001",
           "SKILLOS_DATABASE_BULK_TIMEOUT_S": "600"}
    with run_service(["skillrepo", "--seed", "default"], env=env, tmp_path=tmp_path) as svc:
        r = httpx.get(f"{svc.url}/v1/repos/default/skills", timeout=30)
        assert r.status_code == 503 and r.headers.get("retry-after"), r.text
        assert "SKILLOS_DATABASE_REQUEST_TIMEOUT_S" in r.json()["error"]["message"]
        archive = httpx.get(f"{svc.url}/v1/repos/default/export", timeout=60)
        assert archive.status_code == 200 and archive.content, archive.text
        r = httpx.post(f"{svc.url}/v1/repos/default/import", params={"replace": "true"}, content=archive.content,
                       headers={"Content-Type": "application/octet-stream"}, timeout=60)
        assert r.status_code == 200, r.text
        r = httpx.post(f"{svc.url}/v1/repos/default/fork", json={"name": "copy"}, timeout=60)
        assert r.status_code in (200, 201), r.text
