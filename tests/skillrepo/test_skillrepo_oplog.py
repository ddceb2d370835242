"""The op log (the repo's timeline with verdicts and origins), paged skill lists, repo change times and
whoami, over HTTP on SQLite and PostgreSQL."""
# ruff: noqa: F811 - pytest fixtures imported from skillrepo_fixtures are redefined as parameters

from __future__ import annotations

import httpx
import pytest
from conftest import run_service
from skillrepo_fixtures import backend_url, client, repo, repo_service, skill_md  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError

pytestmark = pytest.mark.slow


def _insert(name: str, body: str = "steps") -> dict:
    return {"name": "new_skill_insert", "arguments": {"skill_name": name, "content": skill_md(name, f"{name} d", body)}}


def test_ops_batches_are_logged_with_verdicts_and_origin(client, repo):
    origin = {"source": "run", "run": "run-x", "seed": 0, "position": 3, "task_id": "t/3", "curator_call": "c1"}
    ok = client.apply_ops(repo, [_insert("heat-mug")], idempotency_key="k1", origin=origin)
    assert ok.applied
    # atomic batch with a refused op: nothing applied, every verdict logged
    bad = client.apply_ops(repo, [_insert("cool-mug"), {"name": "skill_delete", "arguments": {"skill_name": "nope"}}])
    assert not bad.applied
    # replaying the idempotency key answers from storage and logs nothing new
    assert client.apply_ops(repo, [_insert("heat-mug")], idempotency_key="k1", origin=origin).replayed

    log = client.op_log(repo)
    assert [e.kind for e in log.entries] == ["ops", "ops"] and log.next_before is None
    newest, first = log.entries
    assert first.applied and first.idempotency_key == "k1" and first.seq == ok.seq
    assert first.origin.model_dump(exclude_none=True) == origin
    assert [(v.name, v.status, v.skill_name, v.version) for v in first.ops] == [
        ("new_skill_insert", "applied", "heat-mug", 1)]
    assert not newest.applied and newest.origin is None and newest.id > first.id
    assert [(v.status, v.code) for v in newest.ops] == [("refused", "batch_aborted"), ("refused", "skill_not_found")]


def test_rest_writes_are_logged_one_entry_per_change(client, repo):
    client.put_skill(repo, skill_md("clean-cup", "Clean a cup", "rinse"))
    client.put_skill(repo, skill_md("clean-cup", "Clean a cup", "rinse"))   # same content: no version, no entry
    client.put_skill(repo, skill_md("clean-cup", "Clean a cup", "rinse twice"))
    client.delete_skill(repo, "clean-cup")
    restored = client.restore_skill(repo, "clean-cup", 1, origin={"source": "console"})
    assert restored.version == 4 and restored.cause == "restore"
    entries = client.op_log(repo).entries
    assert [(e.kind, [(v.name, v.skill_name, v.version) for v in e.ops]) for e in entries] == [
        ("restore", [("restore", "clean-cup", 4)]), ("delete", [("delete", "clean-cup", 3)]),
        ("put", [("put", "clean-cup", 2)]), ("put", [("put", "clean-cup", 1)])]
    assert entries[0].origin.source == "console" and entries[1].ops[0].message == "deleted"
    with pytest.raises(SkillRepoError) as e:   # a refused REST write logs nothing
        client.restore_skill(repo, "clean-cup", 9)
    assert e.value.status == 404 and len(client.op_log(repo).entries) == 4


def test_op_log_pages_newest_first(client, repo, repo_service):
    for i in range(7):
        client.apply_ops(repo, [_insert(f"skill-{i}")])
    page1 = client.op_log(repo, limit=3)
    page2 = client.op_log(repo, before=page1.next_before, limit=3)
    page3 = client.op_log(repo, before=page2.next_before, limit=3)
    names = [e.ops[0].skill_name for p in (page1, page2, page3) for e in p.entries]
    assert names == [f"skill-{i}" for i in range(6, -1, -1)] and page3.next_before is None
    for params in ({"limit": 0}, {"limit": 501}, {"before": "x"}, {"before": 0}, {"before": 2**63}):
        r = httpx.get(f"{repo_service.url}/v1/repos/{repo}/ops", params=params)
        assert r.status_code == 422 and r.json()["error"]["code"] == "invalid_request", params
    # the largest bigint is a valid cursor (the fuzzer found a 500 one past it: an overflow in the driver)
    assert len(client.op_log(repo, before=2**63 - 1, limit=3).entries) == 3
    r = httpx.get(f"{repo_service.url}/v1/repos/no-such-repo/ops")
    assert r.status_code == 404 and r.json()["error"]["code"] == "repo_not_found"


def test_skill_pages_causes_and_repo_change_time(client, repo, repo_service):
    before = client.get_repo(repo)
    assert before.updated_at is None
    for name in ("b-skill", "a-skill", "d-skill", "c-skill", "e-skill"):
        client.put_skill(repo, skill_md(name, "d"))
    client.apply_ops(repo, [{"name": "skill_update", "arguments": {"skill_name": "c-skill",
                                                                  "new_content": skill_md("c-skill", "new d")}}])
    client.delete_skill(repo, "e-skill")
    p1 = client.list_skills_page(repo, limit=2)
    assert [s.name for s in p1.skills] == ["a-skill", "b-skill"] and p1.next_after == "b-skill"
    p2 = client.list_skills_page(repo, limit=2, after=p1.next_after)
    assert [(s.name, s.version, s.cause) for s in p2.skills] == [("c-skill", 2, "update"), ("d-skill", 1, "put")]
    assert p2.next_after is None   # the deleted e-skill is not listed: no further page
    assert client.list_skills_page(repo, limit=2, after="d-skill").skills == []
    assert client.get_skill(repo, "c-skill").cause == "update"
    assert [s.name for s in client.list_skills(repo)] == ["a-skill", "b-skill", "c-skill", "d-skill"]

    info = client.get_repo(repo)
    assert info.updated_at is not None and info.updated_at >= info.created_at
    listed = next(r for r in client.list_repos() if r.name == repo)
    assert listed.updated_at == info.updated_at and listed.skill_count == 4
    client.fork_repo(repo, f"{repo}-fork")
    forked = client.list_skills_page(f"{repo}-fork", limit=10)
    assert [s.cause for s in forked.skills] == [None] * 4   # written in the parent: no cause of its own
    assert client.op_log(f"{repo}-fork").entries == []
    for params in ({"limit": 0}, {"limit": 1001}):
        r = httpx.get(f"{repo_service.url}/v1/repos/{repo}/skills", params=params)
        assert r.status_code == 422, params


def test_whoami_open_mode(client):
    me = client.whoami()
    assert (me.mode, me.scope, me.prefix, me.label) == ("open", "rw", None, "open")


def test_whoami_and_op_log_with_tokens(tmp_path):
    env = {"SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/r.db", "SKILLOS_AUTH_MODE": "tokens",
           "SKILLOS_AUTH_TOKENS": "admin:rw,viewer:read:team-,curator-t:rw:team-:curator-1"}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path) as svc:
        with SkillRepoClient(svc.url, token="admin") as admin, SkillRepoClient(svc.url, token="viewer") as viewer, \
                SkillRepoClient(svc.url, token="curator-t") as curator:
            assert (admin.whoami().scope, admin.whoami().label) == ("rw", "token#1")
            me = viewer.whoami()
            assert (me.mode, me.scope, me.prefix, me.label) == ("tokens", "read", "team-", "token#2")
            assert curator.whoami().label == "curator-1"   # what a policy's reviewers name
            admin.create_repo("team-a")
            admin.create_repo("other")
            admin.apply_ops("team-a", [_insert("x-skill")])
            assert len(viewer.op_log("team-a").entries) == 1
            # the writer as the server saw it (the token's label), beside what the writer claims (origin)
            curator.apply_ops("team-a", [_insert("y-skill")], origin={"source": "console", "run": "forged",
                                                                       "trajectory": "trj-1234"},
                              idempotency_key="gateway:trj-1234")
            newest, first = viewer.op_log("team-a").entries
            assert (newest.writer, newest.origin.source, first.writer) == ("curator-1", "console", "token#1")
            # a trajectory id is a handle on someone's conversation: rw tokens of the repo see it, readers do not
            assert "trj-1234" not in newest.origin.trajectory and "trj-1234" not in newest.idempotency_key
            mine = curator.op_log("team-a").entries[0]
            assert (mine.origin.trajectory, mine.idempotency_key) == ("trj-1234", "gateway:trj-1234")
            with pytest.raises(SkillRepoError) as e:
                viewer.op_log("other")
            assert e.value.status == 403
            with pytest.raises(SkillRepoError) as e:
                viewer.restore_skill("team-a", "x-skill", 1)
            assert e.value.status == 403
        r = httpx.get(f"{svc.url}/v1/whoami")
        assert r.status_code == 401 and r.json()["error"]["code"] == "unauthorized"
