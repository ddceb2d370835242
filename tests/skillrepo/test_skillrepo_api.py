"""The skill repo over HTTP, on SQLite and on PostgreSQL: repos, skills, versions, search, ops, forks."""
# ruff: noqa: F811 - pytest fixtures imported from skillrepo_fixtures are redefined as parameters

from __future__ import annotations

import io
import json
import tarfile

import httpx
import pytest
from skillrepo_fixtures import backend_url, client, repo, repo_service, skill_md  # noqa: F401

from skillos.clients.skillrepo import SkillRepoError

pytestmark = pytest.mark.slow


def test_repo_lifecycle(client, repo_service):
    r = httpx.post(f"{repo_service.url}/v1/repos", json={"name": "life-1"})
    assert r.status_code == 201 and r.json()["name"] == "life-1"
    with pytest.raises(SkillRepoError) as e:
        client.create_repo("life-1")
    assert e.value.status == 409 and e.value.code == "repo_exists"
    client.put_skill("life-1", skill_md("a-skill", "d"))
    assert "life-1" in [x.name for x in client.list_repos()]
    assert client.get_repo("life-1").skill_count == 1
    client.delete_repo("life-1")
    with pytest.raises(SkillRepoError) as e:
        client.get_repo("life-1")
    assert e.value.status == 404
    client.create_repo("life-1")  # the name is free again, and the repo is empty
    assert client.list_skills("life-1") == []


def test_skill_crud_versions_and_if_match(client, repo, repo_service):
    base = f"{repo_service.url}/v1/repos/{repo}/skills"
    r = httpx.post(base, content=skill_md("clean-apple", "Clean an apple", "go to sinkbasin"),
                   headers={"Content-Type": "text/markdown"})
    assert r.status_code == 201 and r.headers["ETag"] == '"1"' and r.json()["version"] == 1
    r = httpx.post(base, json={"name": "heat-mug", "description": "Heat a mug", "body": "microwave",
                               "metadata": {"domain": "alfworld"}})
    assert r.status_code == 201
    assert httpx.post(base, json={"name": "heat-mug", "description": "x"}).status_code == 409

    md = httpx.get(f"{base}/heat-mug", headers={"Accept": "text/markdown"})
    assert md.headers["content-type"].startswith("text/markdown")
    assert md.text == "---\nname: heat-mug\ndescription: Heat a mug\ndomain: alfworld\n---\n\nmicrowave\n"
    assert client.get_skill(repo, "heat-mug").metadata == {"domain": "alfworld"}

    s2 = client.put_skill(repo, skill_md("heat-mug", "Heat a mug", "microwave 1"), if_match=1)
    assert s2.version == 2
    with pytest.raises(SkillRepoError) as e:
        client.put_skill(repo, skill_md("heat-mug", "Heat a mug", "stale"), if_match=1)
    assert e.value.status == 412 and "version 2" in e.value.message
    r = httpx.put(f"{base}/heat-mug", content=skill_md("other", "d"), headers={"Content-Type": "text/markdown"})
    assert r.status_code == 400 and r.json()["error"]["code"] == "name_mismatch"
    r = httpx.put(f"{base}/new-one", json={"description": "made by PUT"})
    assert r.status_code == 201

    client.delete_skill(repo, "heat-mug", if_match=2)
    with pytest.raises(SkillRepoError) as e:
        client.get_skill(repo, "heat-mug")
    assert e.value.status == 404
    versions = client.skill_versions(repo, "heat-mug", content=True)
    assert [(v.version, v.deleted) for v in versions] == [(3, True), (2, False), (1, False)]
    assert "microwave 1" in versions[1].content
    restored = client.restore_skill(repo, "heat-mug", 1)
    assert restored.version == 4 and restored.body == "microwave"
    assert httpx.get(f"{base}/heat-mug/versions/2").json()["content"].endswith("microwave 1\n")


def test_search_ranks_and_reads_its_writes(client, repo):
    client.put_skill(repo, skill_md("clean-object", "Clean an object in the sinkbasin", "wash it"))
    client.put_skill(repo, skill_md("heat-object", "Heat an object with the microwave", "heat it"))
    client.put_skill(repo, skill_md("cool-object", "Cool an object with the fridge", "cool it"))
    hits = client.search(repo, "heat the apple with the microwave, then put it in the fridge", k=5)
    assert [h.name for h in hits][:2] == ["heat-object", "cool-object"]
    assert hits[0].score > hits[1].score > 0 and hits[0].description and hits[0].body == "heat it"
    for i in range(15):  # every acknowledged write shows in the very next search
        s = client.put_skill(repo, skill_md("clean-object", f"Clean an object variant{i}", "wash"))
        top = client.search(repo, f"variant{i}", k=1)
        assert top and top[0].name == "clean-object" and top[0].version == s.version
    client.delete_skill(repo, "clean-object")
    assert client.search(repo, "variant14") == []
    assert client.search(repo, "zzz unknown words") == []


def test_ops_atomic_non_atomic_and_idempotent(client, repo):
    ok = client.apply_ops(repo, [
        {"name": "new_skill_insert", "arguments": {"skill_name": "Clean Object Workflow",
                                                   "content": "# Clean objects at the sink\n1. take\n2. clean"}},
        {"name": "new_skill_insert", "arguments": json.dumps({"skill_name": "heat", "content": "microwave it"})},
        {"name": "skill_update", "arguments": {"skill_name": "heat", "new_name": "heat-object"}},
    ], idempotency_key="batch-1")
    assert ok.applied and [v.status for v in ok.verdicts] == ["applied"] * 3
    assert ok.verdicts[0].skill_name == "clean-object-workflow"
    assert client.get_skill(repo, "clean-object-workflow").description == "Clean objects at the sink"
    assert {s.name for s in client.list_skills(repo)} == {"clean-object-workflow", "heat-object"}

    again = client.apply_ops(repo, [
        {"name": "new_skill_insert", "arguments": {"skill_name": "Clean Object Workflow",
                                                   "content": "# Clean objects at the sink\n1. take\n2. clean"}},
        {"name": "new_skill_insert", "arguments": json.dumps({"skill_name": "heat", "content": "microwave it"})},
        {"name": "skill_update", "arguments": {"skill_name": "heat", "new_name": "heat-object"}},
    ], idempotency_key="batch-1")
    assert again.replayed and again.verdicts == ok.verdicts and again.seq == ok.seq
    with pytest.raises(SkillRepoError) as e:
        client.apply_ops(repo, [{"name": "skill_delete", "arguments": {"skill_name": "heat-object"}}],
                         idempotency_key="batch-1")
    assert e.value.status == 409

    seq = client.get_repo(repo).seq
    bad = [
        {"name": "skill_update", "arguments": {"skill_name": "heat-object", "new_content": "better heating"}},
        {"name": "skill_delete", "arguments": {"skill_name": "missing-skill"}},
        {"name": "teleport", "arguments": {}},
        {"name": "new_skill_insert", "arguments": {"skill_name": "x-1"}},
        {"name": "new_skill_insert", "arguments": "{not json"},
        {"name": "new_skill_insert", "arguments": {"skill_name": "big", "content": "x" * 5000}},
    ]
    res = client.apply_ops(repo, bad)
    assert not res.applied
    assert [v.code for v in res.verdicts] == ["batch_aborted", "skill_not_found", "unknown_op", "missing_argument",
                                              "invalid_arguments", "body_too_large"]
    assert all(v.status == "refused" and v.message for v in res.verdicts)
    assert client.get_repo(repo).seq == seq  # nothing applied
    assert client.get_skill(repo, "heat-object").body == "microwave it"

    res = client.apply_ops(repo, bad, atomic=False)
    assert not res.applied
    assert [v.status for v in res.verdicts] == ["applied"] + ["refused"] * 5
    assert client.get_skill(repo, "heat-object").body == "better heating"
    assert client.search(repo, "better heating")[0].name == "heat-object"


def test_a_refused_lone_op_writes_nothing(client, repo):
    """A lone op runs without a savepoint: every refusal must come before its first write."""
    client.put_skill(repo, skill_md("heat-object", "Heat things", "microwave it"))
    client.put_skill(repo, skill_md("cool-object", "Cool things", "fridge it"))
    def state():
        return client.get_repo(repo).seq, [(s.name, s.version, s.content) for s in client.list_skills(repo)]

    before, codes = state(), set()
    for op in [
        {"name": "new_skill_insert", "arguments": {"skill_name": "Heat Object", "content": "again"}},
        {"name": "new_skill_insert", "arguments": {"skill_name": "---", "content": "no name"}},
        {"name": "new_skill_insert", "arguments": {"skill_name": "fresh", "content": "---\nname: [\n---\nbody"}},
        {"name": "skill_update", "arguments": {"skill_name": "heat-object", "new_name": "cool-object"}},
        {"name": "skill_update", "arguments": {"skill_name": "heat-object", "new_content": "x" * 5000}},
        {"name": "skill_update", "arguments": {"skill_name": "heat-object"}},
        {"name": "skill_delete", "arguments": {"skill_name": "missing"}},
        {"name": "teleport", "arguments": {"skill_name": "heat-object"}},
        {"name": "skill_delete", "arguments": "{not json"},
        {"name": "new_skill_insert", "arguments": {"skill_name": "fresh", "content": "---\nname: fresh\n---\n"}},
        {"name": "new_skill_insert", "arguments": {"skill_name": "fresh", "content": "---\ndescription: " + "d" * 2000
                                                   + "\n---\nbody"}},
    ]:
        for atomic in (True, False):
            res = client.apply_ops(repo, [op], atomic=atomic)
            assert not res.applied and res.verdicts[0].status == "refused", (op, res)
            codes.add(res.verdicts[0].code)
            assert state() == before, op
    assert codes == {"skill_exists", "invalid_name", "invalid_yaml", "body_too_large", "missing_argument",
                     "skill_not_found", "unknown_op", "invalid_arguments", "empty_content", "invalid_description"}


def test_fork_snapshot_restore_and_history(client, repo):
    for i in range(20):
        client.put_skill(repo, skill_md(f"skill-{i}", f"Skill number {i}", f"body {i}"))
    fork = client.fork_repo(repo, f"{repo}-fork")
    assert fork.skill_count == 20 and fork.forked_from == repo
    client.put_skill(f"{repo}-fork", skill_md("skill-1", "changed in the fork", "new"))
    client.delete_skill(f"{repo}-fork", "skill-2")
    assert client.get_skill(repo, "skill-1").description == "Skill number 1"
    assert client.get_skill(repo, "skill-2").version == 1
    assert [v.version for v in client.skill_versions(f"{repo}-fork", "skill-1")] == [2, 1]
    assert client.search(f"{repo}-fork", "changed fork")[0].name == "skill-1"
    assert client.search(repo, "changed fork") == []

    snap = client.snapshot(repo, "step-1")
    assert snap.skill_count == 20
    client.apply_ops(repo, [{"name": "skill_delete", "arguments": {"skill_name": f"skill-{i}"}} for i in range(5)])
    client.put_skill(repo, skill_md("skill-9", "edited after the snapshot"))
    client.put_skill(repo, skill_md("late-skill", "added after the snapshot"))
    with pytest.raises(SkillRepoError) as e:
        client.snapshot(repo, "step-1")
    assert e.value.status == 409
    from_snap = client.fork_repo(repo, f"{repo}-snap", snapshot="step-1")
    assert from_snap.skill_count == 20
    client.restore(repo, "step-1")
    assert sorted(s.name for s in client.list_skills(repo)) == sorted(f"skill-{i}" for i in range(20))
    assert client.get_skill(repo, "skill-9").description == "Skill number 9"
    assert client.search(repo, "edited snapshot") == []
    assert [s.label for s in client.list_snapshots(repo)] == ["step-1"]


def test_export_import_round_trip(client, repo):
    client.put_skill(repo, {"name": "a-one", "description": "first", "body": "one", "metadata": {"k": [1, 2]}})
    client.put_skill(repo, skill_md("b-two", "second", "two"))
    data = client.export(repo)
    with tarfile.open(fileobj=io.BytesIO(data)) as tar:
        assert sorted(tar.getnames()) == ["a-one/SKILL.md", "b-two/SKILL.md"]
    client.create_repo(f"{repo}-copy")
    res = client.import_(f"{repo}-copy", data)
    assert sorted(res.imported) == ["a-one", "b-two"]
    assert [s.content for s in client.list_skills(f"{repo}-copy")] == [s.content for s in client.list_skills(repo)]
    client.put_skill(f"{repo}-copy", skill_md("c-three", "third"))
    client.import_(f"{repo}-copy", data, replace=True)
    assert [s.name for s in client.list_skills(f"{repo}-copy")] == ["a-one", "b-two"]


def _bad_archive() -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        data = b"---\nname: Bad Name\ndescription: d\n---\n"
        info = tarfile.TarInfo("bad/SKILL.md")
        info.size = len(data)
        tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def test_bad_input_is_4xx_with_a_reason(client, repo, repo_service):
    u = f"{repo_service.url}/v1/repos"
    md = {"Content-Type": "text/markdown"}
    cases = [
        ("POST", u, {"json": {"name": "bad name!"}}, 422),
        ("POST", u, {"json": {}}, 422),
        ("POST", u, {"content": b"{nope", "headers": {"Content-Type": "application/json"}}, 422),
        ("POST", f"{u}/{repo}/skills", {"content": "---\nname: [x\n---\n", "headers": md}, 400),
        ("POST", f"{u}/{repo}/skills", {"content": "---\nname: Bad Name\ndescription: d\n---\n", "headers": md}, 400),
        ("POST", f"{u}/{repo}/skills", {"content": "no frontmatter", "headers": md}, 400),
        ("POST", f"{u}/{repo}/skills", {"content": b"---\nname: a\ndescription: \xff\n---\n", "headers": md}, 400),
        ("POST", f"{u}/{repo}/skills", {"content": skill_md("big", "d", "x" * 5000), "headers": md}, 413),
        ("POST", f"{u}/{repo}/skills", {"content": b"hello", "headers": {"Content-Type": "image/png"}}, 415),
        ("POST", f"{u}/{repo}/skills", {"json": {"name": "ok", "description": ""}}, 422),
        ("POST", f"{u}/{repo}/skills", {"json": ["not", "an", "object"]}, 400),
        ("POST", f"{u}/{repo}/skills", {"json": {"name": "ok", "description": "d", "metadata": {"name": "x"}}}, 400),
        ("PUT", f"{u}/{repo}/skills/ok", {"json": {"description": "d"}, "headers": {"If-Match": "abc"}}, 400),
        # a Latin-1 digit that str.isdigit() accepts and int() does not; a number no version can reach
        ("PUT", f"{u}/{repo}/skills/ok", {"json": {"description": "d"}, "headers": {"If-Match": b"\xb2"}}, 400),
        ("DELETE", f"{u}/{repo}/skills/ok", {"headers": {"If-Match": "9" * 5000}}, 400),
        ("POST", f"{u}/{repo}/ops", {"json": {"ops": "nope"}}, 422),
        ("POST", f"{u}/{repo}/ops", {"json": {"ops": [{"name": "skill_delete", "arguments": {"skill_name": "a"}}] * 9}},
         413),
        ("POST", f"{u}/{repo}/ops", {"json": {"ops": [{"arguments": {}}]}}, 422),
        ("POST", f"{u}/missing-repo/ops", {"json": {"ops": []}}, 404),
        ("GET", f"{u}/missing-repo/search?q=x", {}, 404),
        ("GET", f"{u}/{repo}/search?q=x&k=0", {}, 422),
        ("GET", f"{u}/{repo}/search", {}, 422),
        ("GET", f"{u}/{repo}/skills/missing", {}, 404),
        ("DELETE", f"{u}/{repo}/skills/missing", {}, 404),
        ("POST", f"{u}/{repo}/import", {"content": b"not a tarball"}, 400),
        ("POST", f"{u}/{repo}/import", {"content": _bad_archive()}, 400),
        ("POST", f"{u}/{repo}/fork", {"json": {"name": repo}}, 409),
        ("POST", f"{u}/{repo}/fork", {"json": {"name": "x", "snapshot": "missing"}}, 404),
        ("POST", f"{u}/{repo}/snapshots/missing/restore", {}, 404),
        ("POST", f"{u}/{repo}/skills/missing/restore", {"json": {"version": 1}}, 404),
        # versions are PostgreSQL integers: one past the largest is a 422 that says so (not a 404 for a
        # version that could never exist); the largest is a plain 404
        ("POST", f"{u}/{repo}/skills/missing/restore", {"json": {"version": 2**31}}, 422),
        ("GET", f"{u}/{repo}/skills/missing/versions/{2**31}", {}, 422),
        ("GET", f"{u}/{repo}/skills/missing/versions/{2**31 - 1}", {}, 404),
    ]
    for method, url, kw, status in cases:
        r = httpx.request(method, url, **kw)
        assert r.status_code == status, (method, url, kw, r.status_code, r.text)
        err = r.json()["error"]
        assert err["code"] and len(err["message"]) > 5, r.text
    assert client.list_skills(repo) == []
