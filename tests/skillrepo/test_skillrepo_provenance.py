"""Provenance over HTTP, on SQLite and PostgreSQL: what a writing service vouches for (curator model, who asked,
trajectory, outcome source) is kept in the op log beside the writer's label, apart from the writer's claim
(`origin`); only an operator's token may send it, a proposal carries it to its approval, and read tokens do not
see its trajectory id."""

from __future__ import annotations

import uuid

import pytest
from conftest import run_service
from skillrepo_fixtures import backend_url, skill_md  # noqa: F401

from skillos.clients.skillrepo import SkillRepoClient, SkillRepoError

pytestmark = pytest.mark.slow

TOKENS = "svc-t:rw::curator-svc,tenant-t:rw:pv:tenant,viewer-t:read::viewer,admin-t:rw::admin"
VOUCHED = {"curator_model": "qwen2.5-coder-1.5b", "requested_by": "gateway", "trajectory": "trj-0123",
           "outcome_source": "caller"}


def _insert(name: str) -> dict:
    return {"name": "new_skill_insert", "arguments": {"skill_name": name, "content": skill_md(name, "d", "1. go")}}


@pytest.fixture(scope="module")
def svc(backend_url, tmp_path_factory):  # noqa: F811
    env = {"SKILLOS_DATABASE_URL": backend_url, "SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": TOKENS}
    with run_service(["skillrepo"], env=env, tmp_path=tmp_path_factory.mktemp("svc"), ready_timeout=300) as s:
        yield s


def test_provenance_is_the_services_and_kept_apart_from_the_claim(svc):
    service, tenant = SkillRepoClient(svc.url, token="svc-t"), SkillRepoClient(svc.url, token="tenant-t")
    viewer, admin = SkillRepoClient(svc.url, token="viewer-t"), SkillRepoClient(svc.url, token="admin-t")
    repo = f"pv-{uuid.uuid4().hex[:8]}"
    service.create_repo(repo)
    claim = {"source": "gateway", "trajectory": "trj-claimed-by-the-writer"}
    assert service.apply_ops(repo, [_insert("clean-mug")], origin=claim, provenance=VOUCHED).applied
    entry = service.op_log(repo).entries[0]
    assert (entry.writer, entry.provenance.model_dump(), entry.origin.trajectory) == \
        ("curator-svc", VOUCHED, "trj-claimed-by-the-writer")
    seen = viewer.op_log(repo).entries[0]   # a reader sees who vouched for what, not the trajectory ids
    assert seen.provenance.curator_model == VOUCHED["curator_model"] and seen.provenance.trajectory.startswith("(hidden")

    # a tenant's token cannot vouch: its claims stay claims
    with pytest.raises(SkillRepoError) as e:
        tenant.apply_ops(repo, [_insert("heat-egg")], provenance=VOUCHED)
    assert (e.value.status, e.value.code) == (403, "provenance_operator_only")
    assert tenant.apply_ops(repo, [_insert("heat-egg")], origin=claim).applied
    entry = service.op_log(repo).entries[0]
    assert (entry.writer, entry.provenance, entry.origin.trajectory) == ("tenant", None, "trj-claimed-by-the-writer")

    # a proposal keeps what was vouched for, and its approval's entry carries it
    admin.set_policy(repo, {"review": True})
    p = service.apply_ops(repo, [_insert("cool-egg")], provenance=VOUCHED).proposal
    assert service.proposal(repo, p).provenance.model_dump() == VOUCHED
    admin.decide(repo, p, True)
    entry = admin.op_log(repo).entries[0]
    assert (entry.kind, entry.writer, entry.provenance.model_dump()) == ("ops", "admin", VOUCHED)
