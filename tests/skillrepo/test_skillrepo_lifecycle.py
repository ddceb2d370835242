"""A skill's life over HTTP, on SQLite and PostgreSQL, with tokens: under a policy with `candidates`, what an op
batch writes is a candidate (not served by a plain search, served with ?candidates=true), a delete retires it
(restorable), op batches cannot touch a person's skill, a reviewer promotes or retires, and the policy's
measured-utility rule promotes a candidate or retires a harmful skill. Without the policy nothing changes."""

from __future__ import annotations

import subprocess
import sys
import uuid

import httpx
import pytest
from conftest import run_service
from skillrepo_fixtures import backend_url, skill_md  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError

pytestmark = pytest.mark.slow

TOKENS = "admin-t:rw::admin,curator-t:rw:lc:curator,reviewer-t:rw::reviewer,viewer-t:read::viewer,lead-t:rw:lc:lead"


def _insert(name: str, body: str = "1. go to the sink\n2. clean the mug") -> dict:
    return {"name": "new_skill_insert", "arguments": {"skill_name": name, "content": skill_md(name, f"{name} d", body)}}


def _update(name: str, body: str) -> dict:
    return {"name": "skill_update", "arguments": {"skill_name": name, "new_content": skill_md(name, f"{name} d", body)}}


def _delete(name: str) -> dict:
    return {"name": "skill_delete", "arguments": {"skill_name": name}}


@pytest.fixture(scope="module")
def svc(backend_url, tmp_path_factory):  # noqa: F811
    env = {"SKILLOS_DATABASE_URL": backend_url, "SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": TOKENS}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path_factory.mktemp("svc"), ready_timeout=300) as s:
        yield s


@pytest.fixture
def clients(svc):
    cs = {who: SkillRepoClient(svc.url, token=f"{who}-t") for who in ("admin", "curator", "reviewer", "viewer", "lead")}
    yield cs
    for c in cs.values():
        c.close()


def _status(call) -> tuple[int, str]:
    with pytest.raises(SkillRepoError) as e:
        call()
    return e.value.status, e.value.code


def _names(hits) -> list[tuple[str, str]]:
    return [(h.name, h.state) for h in hits]


def test_candidates_are_explored_not_served_and_a_delete_retires(clients):
    admin, curator, viewer = clients["admin"], clients["curator"], clients["viewer"]
    repo = f"lc-{uuid.uuid4().hex[:8]}"
    admin.create_repo(repo, policy={"candidates": True, "reviewers": ["reviewer"]})
    admin.insert_skill(repo, skill_md("wash-mug", "wash a mug at the sink", "1. go to the sink"))   # a person's

    r = curator.apply_ops(repo, [_insert("clean-mug")], atomic=False)
    assert r.applied and r.verdicts[0].message == "inserted as candidate", r
    assert viewer.get_skill(repo, "clean-mug").state == "candidate"
    assert viewer.get_skill(repo, "wash-mug").state == "active"
    # a plain search serves only active skills; an explorer gets the candidates after them
    assert _names(viewer.search(repo, "mug sink", 5)) == [("wash-mug", "active")]
    assert _names(viewer.search(repo, "mug sink", 5, candidates=True)) == [("wash-mug", "active"),
                                                                         ("clean-mug", "candidate")]
    # op batches change only skills written from traffic: the person's skill is theirs
    r = curator.apply_ops(repo, [_update("wash-mug", "1. poisoned"), _delete("wash-mug")], atomic=False)
    assert [v.code for v in r.verdicts] == ["person_written", "person_written"], r
    assert viewer.get_skill(repo, "wash-mug").version == 1

    # a delete retires, restorably: gone from every search, kept with its history
    r = curator.apply_ops(repo, [_delete("clean-mug")], atomic=False)
    assert r.applied and r.verdicts[0].message.startswith("retired"), r
    skill = viewer.get_skill(repo, "clean-mug")
    assert skill.state == "retired" and skill.body
    assert _names(viewer.search(repo, "mug sink", 5, candidates=True)) == [("wash-mug", "active")]
    assert curator.apply_ops(repo, [_insert("clean-mug")], atomic=False).verdicts[0].code == "skill_exists"
    r = curator.apply_ops(repo, [_update("clean-mug", "1. back")], atomic=False)
    assert r.verdicts[0].code == "retired", r
    assert [(s.name, s.state, s.traffic) for s in viewer.states(repo)] == [("clean-mug", "retired", True)]

    # a reviewer (an operator, or a label the policy names) promotes; the writer, a reader, a tenant do not
    assert _status(lambda: curator.set_state(repo, "clean-mug", "active")) == (403, "not_a_reviewer")
    assert _status(lambda: viewer.set_state(repo, "clean-mug", "active"))[0] == 403
    assert _status(lambda: clients["reviewer"].set_state(repo, "nope", "active")) == (404, "skill_not_found")
    back = clients["reviewer"].set_state(repo, "clean-mug", "active", note="checked")
    assert (back.state, back.traffic, back.updated_by, back.reason) == ("active", True, "reviewer", "checked")
    assert _names(viewer.search(repo, "clean mug", 5))[0] == ("clean-mug", "active")
    # promoted but still traffic's: a new version from traffic is a candidate again (new text earns its place)
    r = curator.apply_ops(repo, [_update("clean-mug", "1. go to the sink\n2. rinse the mug")], atomic=False)
    assert r.applied and viewer.get_skill(repo, "clean-mug").state == "candidate"
    # a person's write makes it a person's skill: active, and out of op batches' reach
    admin.put_skill(repo, skill_md("clean-mug", "clean a mug", "1. sink\n2. rinse"))
    assert viewer.get_skill(repo, "clean-mug").state == "active" and viewer.states(repo) == []
    assert curator.apply_ops(repo, [_delete("clean-mug")], atomic=False).verdicts[0].code == "person_written"
    # a person retires any skill; promote restores it
    clients["reviewer"].set_state(repo, "wash-mug", "retired", note="outdated")
    assert _names(viewer.search(repo, "wash mug sink", 5, candidates=True)) == [("clean-mug", "active")]
    clients["reviewer"].set_state(repo, "wash-mug", "active")
    assert viewer.get_skill(repo, "wash-mug").state == "active" and viewer.states(repo) == []

    log = admin.op_log(repo).entries
    states = [e for e in log if e.kind == "state"]
    assert states and states[0].writer == "reviewer" and "retired -> active" in states[0].ops[0].message
    # a fork keeps the states
    curator.apply_ops(repo, [_insert("heat-egg", "1. microwave the egg")], atomic=False)
    admin.fork_repo(repo, f"{repo}-fork")
    assert viewer.get_skill(f"{repo}-fork", "heat-egg").state == "candidate"
    assert _names(viewer.search(f"{repo}-fork", "egg microwave", 5)) == []


def test_trusted_writers_and_approved_batches_are_active_at_once(clients):
    admin, curator, viewer = clients["admin"], clients["curator"], clients["viewer"]
    repo = f"lc-{uuid.uuid4().hex[:8]}"
    admin.create_repo(repo, policy={"candidates": True, "trusted_writers": ["curator"]})
    assert curator.apply_ops(repo, [_insert("clean-mug")]).verdicts[0].message == "inserted as active"
    assert _names(viewer.search(repo, "mug", 5)) == [("clean-mug", "active")]
    assert curator.apply_ops(repo, [_update("clean-mug", "1. rinse")]).applied   # traffic's: it may change it
    # review and candidates together: an approved batch's skills are active (a person read them)
    admin.set_policy(repo, {"candidates": True, "review": True})
    p = curator.apply_ops(repo, [_insert("heat-egg", "1. microwave the egg")]).proposal
    admin.decide(repo, p, True)
    assert viewer.get_skill(repo, "heat-egg").state == "active"


def test_without_candidates_ops_insert_update_and_delete_as_before(clients):
    admin, curator, viewer = clients["admin"], clients["curator"], clients["viewer"]
    repo = f"lc-{uuid.uuid4().hex[:8]}"
    admin.create_repo(repo)
    admin.insert_skill(repo, skill_md("wash-mug", "wash a mug", "1. sink"))
    r = curator.apply_ops(repo, [_insert("clean-mug"), _update("wash-mug", "1. rinse"), _delete("wash-mug")])
    assert r.applied and [v.message for v in r.verdicts] == ["inserted", "updated", "deleted"], r
    assert _names(viewer.search(repo, "mug sink", 5)) == [("clean-mug", "active")]
    assert viewer.states(repo) == []


def test_the_policys_utility_rule_promotes_and_retires(clients, svc):
    admin, curator, viewer = clients["admin"], clients["curator"], clients["viewer"]
    repo = f"lc-{uuid.uuid4().hex[:8]}"
    admin.create_repo(repo, policy={"candidates": True, "promote_after": 12, "retire_harmful": True})
    curator.apply_ops(repo, [_insert("clean-mug"), _insert("heat-egg", "1. microwave the egg")])
    admin.insert_skill(repo, skill_md("wash-mug", "wash a mug", "1. sink"))
    # callers' own reports do not count by default (a caller could promote its own candidate)
    for i in range(20):
        admin.record_outcome(repo, f"c-{i}", True, "caller", ["clean-mug"])
        admin.record_outcome(repo, f"cw-{i}", False, "caller", [], ["clean-mug"])
    assert viewer.get_skill(repo, "clean-mug").state == "candidate"
    # environment outcomes: clean-mug lost the 6 tasks it was withheld from and wins the 12 it is served; heat-egg
    # the reverse. At 12 served (the first checkpoint) the first is promoted, the second retired
    for i in range(6):
        admin.report_outcome(repo, f"w-{i}", False, "environment", [], ["clean-mug"])
    for i in range(12):
        admin.report_outcome(repo, f"v-{i}", True, "environment", [], ["heat-egg"])
    changed = []
    for i in range(12):
        changed += admin.report_outcome(repo, f"e-{i}", True, "environment", ["clean-mug"]).changed
        changed += admin.report_outcome(repo, f"f-{i}", False, "environment", ["heat-egg", "wash-mug"]).changed
    assert {(c.name, c.state, c.updated_by) for c in changed} == {("clean-mug", "active", "policy"),
                                                                  ("heat-egg", "retired", "policy")}, changed
    assert viewer.get_skill(repo, "clean-mug").state == "active"
    assert viewer.get_skill(repo, "heat-egg").state == "retired"
    assert viewer.get_skill(repo, "wash-mug").state == "active"   # a person's skill: no rule retires it
    reason = next(s for s in viewer.states(repo) if s.name == "heat-egg").reason
    assert reason.startswith("retired by policy: served in 12 tasks") and "below 0" in reason
    # new text from traffic starts its record again: the old text's numbers do not promote it
    curator.apply_ops(repo, [_update("clean-mug", "1. go to the sink\n2. scrub the mug")])
    assert viewer.get_skill(repo, "clean-mug").state == "candidate"
    # (counted over both texts, 24 served wins against 6 withheld losses would promote it at the 2N checkpoint;
    # since the new text, 12 served and none withheld is no comparison yet)
    for i in range(12):
        assert admin.report_outcome(repo, f"n-{i}", True, "environment", ["clean-mug"], []).changed == []
    assert viewer.get_skill(repo, "clean-mug").state == "candidate"

    shown = subprocess.run([sys.executable, "-m", "skillos.cli", "repo", "states", repo, "--url", svc.url,
                            "--token", "viewer-t"], check=False, capture_output=True, text=True, timeout=60)
    assert shown.returncode == 0 and "heat-egg\tretired\ttraffic\tby policy" in shown.stdout, shown
    out = subprocess.run([sys.executable, "-m", "skillos.cli", "repo", "promote", repo, "heat-egg", "--note", "x",
                          "--url", svc.url, "--token", "admin-t"], check=False, capture_output=True, text=True, timeout=60)
    assert out.returncode == 0 and "heat-egg: active" in out.stdout, out
    # only an operator sets the rules; a bad policy is a 422 that names the field
    assert _status(lambda: clients["lead"].set_policy(repo, {"candidates": False}))[0] == 403
    for bad in ({"candidates": True, "promote_after": 0}, {"utility_sources": []}, {"utility_sources": ["me"]}):
        got = httpx.put(f"{svc.url}/v1/repos/{repo}/policy", json=bad, headers={"Authorization": "Bearer admin-t"})
        assert got.status_code == 422, got.text


def test_states_survive_writes_that_change_nothing_and_searches_look_past_hidden_skills(clients):
    admin, curator, viewer = clients["admin"], clients["curator"], clients["viewer"]
    repo = f"lc-{uuid.uuid4().hex[:8]}"
    admin.create_repo(repo, policy={"candidates": True})
    # 30 candidates that match the query better than the one active skill: a search still finds the active one
    curator.apply_ops(repo, [_insert(f"mug-sink-{i}", "1. mug sink mug sink mug sink") for i in range(30)])
    admin.insert_skill(repo, skill_md("wash-mug", "wash a mug", "1. sink"))
    assert _names(viewer.search(repo, "mug sink", 3)) == [("wash-mug", "active")]
    explored = viewer.search(repo, "mug sink", 3, candidates=True)
    assert [h.state for h in explored] == ["active", "candidate", "candidate", "candidate"], explored
    for mode in ("dense", "hybrid"):
        assert [h.name for h in viewer.search(repo, "wash a mug at the sink", 3, mode=mode)] == ["wash-mug"]

    # a write that changes nothing keeps the state: the same text put back, the repo's archive imported into it
    cand = viewer.get_skill(repo, "mug-sink-0")
    admin.put_skill(repo, cand.content)
    assert viewer.get_skill(repo, "mug-sink-0").state == "candidate"
    admin.import_(repo, admin.export(repo))
    assert len(viewer.states(repo, "candidate")) == 30
    # a worked example added by an update of the same text keeps it as it is (examples are not new text)
    admin.set_state(repo, "mug-sink-1", "active")
    example = {"task": "wash the mug", "steps": [{"action": "go to sinkbasin 1"}, {"action": "clean mug 1"}]}
    r = curator.apply_ops(repo, [_update("mug-sink-1", "1. mug sink mug sink mug sink")], example=example)
    assert r.applied and r.verdicts[0].example == "added" and viewer.get_skill(repo, "mug-sink-1").state == "active", r

    # with candidates turned off, what op batches write is plain active again (no state left behind)
    admin.set_policy(repo, {"candidates": False})
    curator.apply_ops(repo, [_update("mug-sink-2", "1. rinse the mug at the sink")])
    assert viewer.get_skill(repo, "mug-sink-2").state == "active"
    assert "mug-sink-2" not in {s.name for s in viewer.states(repo)}
