"""Issue 51, storage fill: the gateway keeps trajectories in the database it shares with the skill repo; a caller
must not grow it beyond the bound an operator set: through a huge first message (the task, kept whole), through
the skills injected into a trajectory (kept outside the bound), through calls the backend refused (their row
kept), or by trajectories never deleted.

Defences: `services/executor/gateway/trajectories/store.py` (``MAX_TASK_CHARS``, the task and skills counted in
``SKILLOS_GATEWAY_MAX_TRAJECTORY_BYTES``, ``discard_unused``, ``purge`` after ``SKILLOS_GATEWAY_RETENTION_S``)."""

from __future__ import annotations

import time
import uuid

import pytest
from scripted_llm import REFUSE
from security_fixtures import security_stack
from sqlalchemy import create_engine, text

pytestmark = pytest.mark.slow

BOUND = 20_000   # SKILLOS_GATEWAY_MAX_TRAJECTORY_BYTES of this stack


@pytest.fixture(scope="module")
def stack(pg_server_url, redis_url, tmp_path_factory):
    env = {"SKILLOS_GATEWAY_MAX_TRAJECTORY_BYTES": str(BOUND), "SKILLOS_GATEWAY_RETENTION_S": "1",
           "SKILLOS_GATEWAY_SWEEP_INTERVAL_S": "0.5"}
    with security_stack(pg_server_url, redis_url, tmp_path_factory.mktemp("storage"), executor_env=env) as s:
        s.put_repo("shared-store")
        s.put_repo("shared-big", {"water-plants": ("Water the garden plants",
                                                   "1. fill the can\n" + "2. water the plants slowly\n" * 500)})
        yield s


@pytest.fixture(scope="module")
def db(stack):
    engine = create_engine(stack.gateway_db)
    yield engine
    engine.dispose()


def stored_bytes(db, tid: str) -> int:
    """What the database holds for a trajectory: its row's task and skills, and its recorded calls."""
    with db.connect() as c:
        row = c.execute(text("SELECT length(task) + length(skills) FROM gateway_trajectories WHERE id = :t"),
                        {"t": tid}).scalar()
        calls = c.execute(text("SELECT coalesce(sum(length(messages) + length(response) + coalesce(length(usage), "
                               "0)), 0) FROM gateway_calls WHERE trajectory_id = :t"), {"t": tid}).scalar()
    assert row is not None, f"no row for {tid}"
    return row + calls


def test_a_huge_first_message_is_not_kept_beyond_the_bound(stack, db):
    """The first user message is the task: kept whole it was a way around the bound (250 KB per call here)."""
    r = stack.chat("mallory-t", "fill " + "x" * 240_000, repo="shared-store")
    assert r.status_code == 200, r.text
    assert stored_bytes(db, r.headers["X-SkillOS-Trajectory"]) <= BOUND


def test_the_skills_a_trajectory_is_given_count_toward_the_bound(stack, db):
    """A trajectory served a 13 KB skill keeps it in its row; its calls may only fill what is left."""
    r = stack.chat("mallory-t", "water the garden plants", repo="shared-big")
    assert r.status_code == 200 and r.headers["X-SkillOS-Skills"] == "water-plants", r.text
    tid = r.headers["X-SkillOS-Trajectory"]
    r = stack.chat("mallory-t", "water the garden plants, and " + "y" * 9_000, repo="shared-big", trajectory=tid)
    assert r.status_code == 200, r.text
    assert stored_bytes(db, tid) <= BOUND


def test_a_first_call_the_backend_refuses_leaves_no_row(stack, db):
    marker = f"refused-{uuid.uuid4().hex}"
    r = stack.chat("mallory-t", f"{marker} {REFUSE} " + "z" * 100_000, repo="shared-store")
    assert r.status_code >= 400, r.text
    with db.connect() as c:
        kept = c.execute(text("SELECT count(*) FROM gateway_trajectories WHERE task LIKE :m"),
                         {"m": f"%{marker}%"}).scalar()
    assert kept == 0, "the refused call's trajectory (its whole first message) was kept"


def test_an_ended_trajectory_is_deleted_after_the_retention(stack, db):
    r = stack.chat("mallory-t", "sweep the floor", repo="shared-store")
    assert r.status_code == 200, r.text
    tid = r.headers["X-SkillOS-Trajectory"]
    assert stack.outcome("mallory-t", tid, True).status_code == 202
    stack.curated(tid)
    deadline = time.monotonic() + 30
    while True:
        with db.connect() as c:
            left = c.execute(text("SELECT count(*) FROM gateway_trajectories WHERE id = :t"), {"t": tid}).scalar()
        if left == 0:
            break
        assert time.monotonic() < deadline, "an ended trajectory was still kept 30 s after a 1 s retention"
        time.sleep(0.5)
