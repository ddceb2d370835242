"""Issue 51, the op log: a read token learning gateway trajectory ids from it (a handle on someone's conversation),
and a writer forging where its write came from (``origin`` is whatever the caller sends).

Defences: the op log shows trajectory ids and idempotency keys to the repo's rw tokens only
(`services/skillrepo/api_router.py`); every write records ``writer``, the label of the token the server
authenticated, beside the ``origin`` it claims (`skillos/auth.py` ``current_caller``, migration 0006)."""

from __future__ import annotations

import uuid

import httpx
import pytest
from security_fixtures import TOKENS, bearer, security_stack, skill_md

pytestmark = pytest.mark.slow


def label_of(token: str) -> str:
    """The label the server gives an entry of SKILLOS_AUTH_TOKENS that names none: token#<its position>."""
    return f"token#{[e.split(':')[0] for e in TOKENS.split(',')].index(token) + 1}"


@pytest.fixture(scope="module")
def stack(pg_server_url, redis_url, tmp_path_factory):
    with security_stack(pg_server_url, redis_url, tmp_path_factory.mktemp("oplog")) as s:
        yield s


def test_a_read_token_does_not_learn_trajectory_ids_from_the_op_log(stack):
    """A trajectory curated into the repo names itself in the op batch's origin and idempotency key: its repo's
    readers must not get it (before issue 51 the id was all a token needed to read, extend or close it)."""
    repo, trigger = "acme-log", f"log-trigger-{uuid.uuid4().hex[:6]}"
    stack.put_repo(repo)
    stack.llm.curate_when(trigger, [{"name": "new_skill_insert", "arguments": {
        "skill_name": "water-plants", "content": skill_md("water-plants", "Water the garden plants",
                                                          "1. fill the can\n2. water the plants")}}])
    r = stack.chat("acme-t", f"water the garden plants ({trigger})", repo=repo)
    assert r.status_code == 200, r.text
    tid = r.headers["X-SkillOS-Trajectory"]
    assert stack.outcome("acme-t", tid, True).status_code == 202
    stack.curated(tid)
    log = f"{stack.repo.url}/v1/repos/{repo}/ops"
    writer_view = httpx.get(log, headers=bearer("acme-t"), timeout=30)
    assert writer_view.status_code == 200 and tid in writer_view.text, "no op batch names the trajectory"
    reader_view = httpx.get(log, headers=bearer("acme-reader-t"), timeout=30)
    assert reader_view.status_code == 200 and reader_view.json()["entries"], reader_view.text
    assert tid not in reader_view.text and tid.removeprefix("trj-") not in reader_view.text


def test_the_op_log_names_the_writer_the_server_authenticated_not_the_origin_it_claims(stack):
    """acme-t writes an op batch claiming to be the console, in someone else's run and trajectory: the log keeps
    the claim, and beside it the writer as the server saw it."""
    repo = "acme-prov"
    stack.put_repo(repo)
    claim = {"source": "console", "run": "operator-approved-run", "trajectory": f"trj-{uuid.uuid4().hex}"}
    r = httpx.post(f"{stack.repo.url}/v1/repos/{repo}/ops", headers=bearer("acme-t"), timeout=30, json={
        "ops": [{"name": "new_skill_insert", "arguments": {"skill_name": "sweep-floor", "content": skill_md(
            "sweep-floor", "Sweep the floor", "1. take the broom\n2. sweep")}}], "origin": claim})
    assert r.status_code == 200 and r.json()["applied"], r.text
    entry = httpx.get(f"{stack.repo.url}/v1/repos/{repo}/ops", headers=bearer("acme-t"), timeout=30).json()["entries"][0]
    assert entry["origin"]["source"] == "console"              # the claim, kept as a claim
    assert entry.get("writer") == label_of("acme-t"), f"no server-side writer recorded: {entry}"
