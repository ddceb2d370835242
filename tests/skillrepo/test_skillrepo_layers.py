"""The layers of the skill repo: the store raises storage errors (no HTTP), the service answers wire models
and maps each storage error to the API's one error shape with the status, code and message of the API."""

from __future__ import annotations

import pytest

from services.skillrepo.serving import SkillRepoService
from services.skillrepo.settings import SkillRepoSettings
from services.skillrepo.store import RepoExists, RepoNotFound, SkillNotFound, SnapshotExists, SnapshotNotFound
from skillos.errors import APIError
from skillos.protocol.skillrepo import ImportResult, IndexStatus, OpLog, Repo, Skill, SkillList, Snapshot
from skillos.skills import from_fields


@pytest.fixture
def svc(tmp_path):
    service = SkillRepoService(SkillRepoSettings(database_url=f"sqlite:///{tmp_path}/repo.db"))
    yield service
    service.stop()


def test_the_store_raises_storage_errors_not_http_ones(svc):
    store = svc.store
    with pytest.raises(RepoNotFound) as e:
        store.get_repo("nope")
    assert not isinstance(e.value, APIError) and e.value.repo == "nope"
    store.create_repo("a")
    with pytest.raises(RepoExists):
        store.create_repo("a")
    with pytest.raises(SkillNotFound):
        store.get_skill("a", "missing")
    with pytest.raises(SnapshotNotFound):
        store.fork_repo("a", "b", snapshot="none")
    store.create_snapshot("a", "s1")
    with pytest.raises(SnapshotExists):
        store.create_snapshot("a", "s1")


@pytest.mark.parametrize(("call", "status", "code", "message"), [
    (lambda s: s.get_repo("nope"), 404, "repo_not_found",
     "repo 'nope' does not exist: create it with POST /v1/repos"),
    (lambda s: s.create_repo("a"), 409, "repo_exists", "repo 'a' already exists: pick another name"),
    (lambda s: s.fork_repo("nope", "c"), 404, "repo_not_found",
     "repo 'nope' does not exist: create it with POST /v1/repos"),
    (lambda s: s.fork_repo("a", "c", "none"), 404, "snapshot_not_found", "repo 'a' has no snapshot 'none'"),
    (lambda s: s.get_skill("a", "missing"), 404, "skill_not_found", "skill 'missing' does not exist in repo 'a'"),
    (lambda s: s.delete_skill("a", "missing", None), 404, "skill_not_found",
     "skill 'missing' does not exist in repo 'a'"),
    (lambda s: s.versions("a", "missing"), 404, "skill_not_found", "skill 'missing' does not exist in repo 'a'"),
    (lambda s: s.version("a", "heat", 9), 404, "version_not_found", "skill 'heat' has no version 9"),
    (lambda s: s.snapshot("a", "s1"), 409, "snapshot_exists",
     "repo 'a' already has a snapshot 's1': pick another label"),
    (lambda s: s.restore_snapshot("a", "none"), 404, "snapshot_not_found", "repo 'a' has no snapshot 'none'"),
    (lambda s: s.list_snapshots("nope"), 404, "repo_not_found",
     "repo 'nope' does not exist: create it with POST /v1/repos"),
    (lambda s: s.search("nope", "x"), 404, "repo_not_found",
     "repo 'nope' does not exist: create it with POST /v1/repos"),
])
def test_the_service_maps_storage_errors_to_the_api_error_shape(svc, call, status, code, message):
    svc.create_repo("a")
    svc.insert_skill("a", from_fields("heat", "Heat things.", "1. heat it"))
    svc.snapshot("a", "s1")
    with pytest.raises(APIError) as e:
        call(svc)
    assert (e.value.status, e.value.code, e.value.message) == (status, code, message)


def test_the_service_answers_wire_models(svc):
    assert isinstance(svc.create_repo("a"), Repo)
    skill = svc.insert_skill("a", from_fields("heat", "Heat things.", "1. heat it"))
    assert isinstance(skill, Skill) and skill.version == 1 and skill.cause == "insert"
    put, created = svc.put_skill("a", "heat", from_fields("heat", "Heat things.", "1. heat it well"), 1)
    assert isinstance(put, Skill) and put.version == 2 and not created
    page = svc.list_skills("a", limit=1)
    assert isinstance(page, SkillList) and [s.name for s in page.skills] == ["heat"] and page.next_after is None
    log = svc.op_log("a", limit=1)
    assert isinstance(log, OpLog) and len(log.entries) == 1 and log.next_before == log.entries[0].id
    versions = svc.versions("a", "heat", content=True).versions
    assert [v.version for v in versions] == [2, 1] and "heat it well" in versions[0].content
    assert svc.version("a", "heat", 1).content.endswith("1. heat it\n")
    assert isinstance(svc.snapshot("a", "s1"), Snapshot) and [s.label for s in svc.list_snapshots("a")] == ["s1"]
    assert isinstance(svc.restore_snapshot("a", "s1"), Repo)
    imported = svc.import_("a", svc.export("a"))
    assert isinstance(imported, ImportResult) and imported.imported == ["heat"]
    assert isinstance(svc.index_status("a"), IndexStatus)
