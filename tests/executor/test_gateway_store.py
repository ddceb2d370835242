"""The skill gateway's trajectory store on a real PostgreSQL database (and the embedded SQLite file):
bounds, states, claims between processes, expiry."""

from __future__ import annotations

import time
from concurrent.futures import ThreadPoolExecutor

import pytest

from services.executor.gateway.trajectories.serving import curator_trajectory
from services.executor.gateway.trajectories.store import TrajectoryStore

SKILLS = [{"name": "heat-object", "description": "Heat it.", "body": "1. go to microwave", "version": 1}]


@pytest.fixture(params=["postgresql", "sqlite"])
def store_url(request, tmp_path):
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path}/gateway.db"
    return request.getfixturevalue("pg_url")


def test_calls_are_recorded_within_bounds(store_url):
    store = TrajectoryStore(store_url, max_calls=3, max_bytes=2000)
    store.create("t1", "default", "heat a mug", "m", SKILLS)
    msgs = [{"role": "user", "content": "go"}]
    assert store.record("t1", msgs, 1, {"role": "assistant", "content": "ok"}, {"total_tokens": 5})
    assert store.record("t1", [{"role": "user", "content": "x" * 3000}], 3, {"content": "big"}, None) is False
    assert store.record("t1", msgs, 5, {"content": "two"}, None)
    assert store.record("t1", msgs, 7, {"content": "three"}, None)
    assert store.record("t1", msgs, 9, {"content": "four"}, None) is False  # past max_calls
    row = store.get("t1", with_calls=True)
    assert (row.calls, row.truncated, row.seen_messages) == (3, True, 9)
    assert [c["seq"] for c in row.recorded] == [1, 2, 3]
    assert row.recorded[0]["usage"] == {"total_tokens": 5} and row.skills == SKILLS
    assert row.bytes < 2000
    store.close()


def test_states_claims_and_expiry(store_url):
    store = TrajectoryStore(store_url, max_calls=10, max_bytes=100_000)
    store.create("a", "r", "task a", "m", [])
    store.create("b", "r", "task b", "m", [])
    assert store.close_with("a", {"success": True, "score": None, "feedback": "fine"})
    assert not store.close_with("a", {"success": False})  # once only
    assert not store.record("a", [{"role": "user", "content": "late"}], 1, {}, None)  # closed: no more calls
    assert store.pending(stale_s=60) == ["a"]

    # two processes race for the curation: one wins
    other = TrajectoryStore(store_url, max_calls=10, max_bytes=100_000)
    with ThreadPoolExecutor(8) as pool:
        wins = list(pool.map(lambda s: s.claim("a", 60), [store, other] * 4))
    claims = [w for w in wins if w is not None]
    assert len(claims) == 1
    assert store.pending(stale_s=60) == []
    assert store.pending(stale_s=-1) == ["a"]  # a claim older than stale_s is taken over
    assert not store.release("a", claims[0] + 1)   # only the claim's own holder hands it back
    assert store.release("a", claims[0])
    assert store.get("a").status == "closed"
    first = store.claim("a", 60)
    time.sleep(0.01)
    second = other.claim("a", stale_s=-1)           # taken over as stale by another replica
    assert first and second and second != first
    assert not store.finish("a", "failed", {"error": "late"}, first)   # the old holder cannot end it
    assert store.get("a").status == "curating"
    assert other.finish("a", "curated", {"calls": []}, second)
    assert store.get("a").status == "curated" and store.get("a").curation == {"calls": []}

    time.sleep(0.05)
    assert store.expire(ttl_s=3600) == []
    assert store.expire(ttl_s=0.01) == ["b"]
    assert store.get("b").status == "expired" and not store.close_with("b", {"success": True})
    assert store.get("nope") is None
    store.close()
    other.close()


def test_the_curator_reads_one_turn_per_call_and_the_outcome(tmp_path):
    store = TrajectoryStore(f"sqlite:///{tmp_path}/g.db", max_calls=10, max_bytes=100_000)
    store.create("t", "r", "put a mug in the cabinet", "m", SKILLS)
    store.record("t", [{"role": "system", "content": "be brief"}, {"role": "user", "content": "You see a mug 1."}], 2,
                 {"role": "assistant", "content": "take mug 1"}, None)
    store.record("t", [{"role": "assistant", "content": "take mug 1"},
                       {"role": "tool", "tool_call_id": "c1", "content": "You pick up the mug 1."}], 4,
                 {"role": "assistant", "content": "next", "tool_calls": [
                     {"id": "c2", "type": "function", "function": {"name": "go", "arguments": '{"to": "cabinet 1"}'}}]},
                 None)
    store.close_with("t", {"success": True, "score": 1.0, "feedback": "done"})
    traj = curator_trajectory(store.get("t", with_calls=True))
    assert traj.task == "put a mug in the cabinet" and traj.env_success is True
    assert traj.turns[0].observation == "[system] be brief\nYou see a mug 1." and traj.turns[0].action == "take mug 1"
    assert traj.turns[1].observation == "[tool result c1] You pick up the mug 1."
    assert traj.turns[1].thought == "next" and traj.turns[1].action == 'go({"to": "cabinet 1"})'
    assert traj.turns[2].observation == "The agent reported the outcome: the task succeeded, score 1.0: done."
    store.close()


def test_an_agents_json_decision_is_read_as_its_thought_and_action(tmp_path):
    """Agents on structured outputs answer {"thought": ..., "action": ...}: the curator and the worked example
    read the action (an answer that is other JSON, or cut short, stays the text it is)."""
    store = TrajectoryStore(f"sqlite:///{tmp_path}/g.db", max_calls=10, max_bytes=100_000)
    store.create("t", "r", "put a mug in the cabinet", "m", SKILLS)
    for n, content in enumerate(['{"thought": "the mug first", "action": "take mug 1 from table 1"}',
                                 '{"answer": 3}', '{"thought": "cut sho']):
        store.record("t", [{"role": "user", "content": f"obs {n}"}], 2 * n + 1, {"role": "assistant", "content": content},
                     None)
    store.close_with("t", {"success": True})
    turns = curator_trajectory(store.get("t", with_calls=True)).turns
    assert (turns[0].thought, turns[0].action) == ("the mug first", "take mug 1 from table 1")
    assert (turns[1].thought, turns[1].action) == ("", '{"answer": 3}')
    assert turns[2].action == '{"thought": "cut sho'
    store.close()


def test_the_gateway_keeps_trajectories_in_the_skill_repos_postgresql_unless_told_otherwise():
    """A Helm existingSecret (or any deployment) that names only SKILLOS_DATABASE_URL must not leave each
    executor pod with a SQLite file of its own: trajectories would be lost with the pod."""
    from services.executor.gateway import EMBEDDED_DATABASE, database_of
    from services.executor.settings import ExecutorSettings

    pg = "postgresql+psycopg://skillos@db:5432/skillos"
    assert database_of(ExecutorSettings(_env_file=None, database_url=pg)) == pg
    assert database_of(ExecutorSettings(_env_file=None, database_url=pg,
                                        gateway_database_url="postgresql+psycopg://other/gw")).endswith("/gw")
    assert database_of(ExecutorSettings(_env_file=None, database_url="sqlite:///./skillos-skillrepo.db")) \
        == EMBEDDED_DATABASE
    assert database_of(ExecutorSettings(_env_file=None)) == EMBEDDED_DATABASE


def _schema_diff(url: str) -> list:
    """What Alembic's autogenerate would change: the migrated tables against `tables.metadata`."""
    from alembic.autogenerate import compare_metadata
    from alembic.migration import MigrationContext
    from sqlalchemy import create_engine

    from services.executor.gateway.trajectories.tables import VERSION_TABLE, metadata

    engine = create_engine(url)
    with engine.connect() as conn:
        ctx = MigrationContext.configure(conn, opts={
            "version_table": VERSION_TABLE, "compare_type": True,
            "include_object": lambda o, name, type_, r, c: type_ != "table" or name.startswith("gateway_")})
        diff = compare_metadata(ctx, metadata)
    engine.dispose()
    return diff


def _version(url: str) -> str | None:
    from sqlalchemy import create_engine, text

    engine = create_engine(url)
    with engine.connect() as conn:
        v = conn.execute(text("SELECT version_num FROM gateway_alembic_version")).scalar()
    engine.dispose()
    return v


def test_the_tables_are_made_by_migrations_that_match_the_code(store_url):
    """Alembic makes the tables (its own version table: they may share the skill repo's database), and what it
    makes is what the code declares: a change to `tables.py` without a migration fails here."""
    store = TrajectoryStore(store_url, max_calls=3, max_bytes=2000)
    store.create("m1", "default", "heat a mug", "m", SKILLS)
    store.close()
    assert _version(store_url) == "0003"
    assert _schema_diff(store_url) == []
    again = TrajectoryStore(store_url, max_calls=3, max_bytes=2000)   # a restart: nothing to do, data kept
    assert again.get("m1").task == "heat a mug"
    again.close()


def test_a_database_made_before_migrations_is_adopted_with_its_trajectories(store_url):
    """An older gateway made the tables with create_all and no version table: the first start with migrations
    stamps them (same schema as revision 0001) instead of failing to create them again."""
    from sqlalchemy import create_engine, text

    from services.executor.gateway.trajectories.tables import metadata

    engine = create_engine(store_url)
    with engine.begin() as conn:
        metadata.create_all(conn)
        conn.execute(text("ALTER TABLE gateway_trajectories DROP COLUMN owner"))   # revision 0001's schema
        conn.execute(text("ALTER TABLE gateway_trajectories DROP COLUMN withheld"))
        conn.execute(text("INSERT INTO gateway_trajectories (id, repo, task, model, skills, status, created_at, "
                          "updated_at, calls, bytes, seen_messages, truncated) VALUES ('old', 'default', "
                          "'cool a pan', 'm', '[]', 'open', 1.0, 1.0, 0, 0, 0, false)"))
    engine.dispose()
    store = TrajectoryStore(store_url, max_calls=3, max_bytes=2000)
    old = store.get("old")
    assert old.task == "cool a pan" and old.owner is None   # upgraded: opened before owners were kept
    store.close()
    assert _version(store_url) == "0003"
    assert _schema_diff(store_url) == []


def test_only_the_caller_who_opened_a_trajectory_uses_it():
    from services.executor.gateway.trajectories.owner import require_owner
    from services.executor.gateway.trajectories.store import TrajectoryRow
    from skillos.auth import Authenticator
    from skillos.errors import APIError

    auth = Authenticator("tokens", "ops:rw,alice:rw:team-,bob:rw:team-,carol:read")
    ops, alice, bob, carol = (auth.authenticate(f"Bearer {t}") for t in ("ops", "alice", "bob", "carol"))
    assert len({ops.caller_id, alice.caller_id, bob.caller_id, carol.caller_id}) == 4
    assert "alice" not in alice.caller_id and ops.operator and not alice.operator and not carol.operator
    row = TrajectoryRow(id="t", repo="team-a", task="x", model="m", skills=[], status="open", created_at=0,
                        updated_at=0, owner=alice.caller_id)
    require_owner(row, alice, read=False, param="p")
    require_owner(row, ops, read=True, param="p")
    for grant, read in ((bob, True), (bob, False), (ops, False), (carol, True)):
        with pytest.raises(APIError) as e:
            require_owner(row, grant, read=read, param="p")
        assert e.value.status == 403 and "another token" in e.value.message
    row.owner = None   # opened before owners were kept: any token that reaches the repo, as before
    require_owner(row, bob, read=False, param="p")



def test_an_overloaded_judge_defers_idle_trajectories_to_the_next_sweep(tmp_path):
    """The idle sweep's self-judge goes through the executor's admission: when the bound is full it gets
    429 overloaded, and the idle trajectories stay open for the next sweep instead of expiring uncurated.
    The judge's LLM answer is a fixed verdict here (what is tested is the sweep around it); the admission
    and its error are the service's own."""
    import asyncio

    from services.executor.admission import Admission, Overloaded
    from services.executor.gateway.trajectories.serving import Trajectories
    from skillos.protocol.executor import JudgeResponse, TokenCount

    admission = Admission(max_limit=1, wait_s=0.05)
    asked = []

    async def judge(request):   # as serving.judge: a turn first, 429 when none comes within the wait
        asked.append(request.task)
        try:
            turn = await admission.enter("judge")
        except Overloaded as e:
            raise e.api_error() from None
        turn.leave()
        return JudgeResponse(success=True, parsed=True, reason="done", completion="yes", tokens=TokenCount(),
                             latency_s=0.0)

    store = TrajectoryStore(f"sqlite:///{tmp_path}/g.db", max_calls=10, max_bytes=100_000)
    for tid in ("a", "b"):
        store.create(tid, "r", f"task {tid}", "m", [])
    time.sleep(0.05)

    async def go():
        sweeps = Trajectories(store, "http://127.0.0.1:9", None, ttl_s=0.01, sweep_interval_s=3600,
                              curator_timeout_s=1, curator_retries=0, judge=judge)
        try:
            held = await admission.enter("act")         # the executor busy: its one turn is taken
            await sweeps.sweep()
            assert len(asked) == 1                      # the first refusal ends this sweep's judging
            assert [store.get(t).status for t in ("a", "b")] == ["open", "open"]
            held.leave()
            await sweeps.sweep()
            assert sorted(asked[1:]) == ["task a", "task b"]
            rows = [store.get(t) for t in ("a", "b")]
            assert all(r.status not in ("open", "expired") and r.outcome["judged"] for r in rows), rows
        finally:
            await sweeps.aclose()

    asyncio.run(go())
    store.close()


def test_what_a_trajectory_keeps_is_bounded_and_goes_in_time(store_url):
    """Issue 51: the task and skills count toward the byte bound, the task is cut, a trajectory whose first call
    went unanswered is deleted, and ended ones are deleted after the retention, with their calls."""
    from sqlalchemy import text

    from services.executor.gateway.trajectories.store import MAX_TASK_CHARS

    store = TrajectoryStore(store_url, max_calls=10, max_bytes=20_000)
    store.create("huge", "r", "y" * 100_000, "m", SKILLS)
    row = store.get("huge")
    assert len(row.task) == MAX_TASK_CHARS and row.bytes > MAX_TASK_CHARS
    store.create("skilled", "r", "t", "m", [{"name": "s", "description": "d", "body": "z" * 19_000}])
    assert not store.record("skilled", [{"role": "user", "content": "w" * 2000}], 1, {"content": "ok"}, None)
    assert store.get("skilled").truncated

    assert store.discard_unused("huge") and store.get("huge") is None
    store.record("skilled", [{"role": "user", "content": "go"}], 1, {"content": "ok"}, None)
    store.create("used", "r", "t", "m", [])
    assert store.record("used", [{"role": "user", "content": "go"}], 1, {"content": "ok"}, None)
    assert not store.discard_unused("used")          # a recorded call: it is kept

    for tid in ("used", "skilled"):
        store.close_with(tid, {"success": True})
    claimed = store.claim("used", 60)
    store.finish("used", "curated", {"ops": []}, claimed)
    assert store.purge(3600) == 0                     # ended just now
    time.sleep(0.05)
    assert store.purge(0.01) == 1                     # "skilled" is closed (awaiting its curation): kept
    assert store.get("used") is None and store.get("skilled").status == "closed"
    with store.engine.connect() as c:   # its calls went with it
        assert c.execute(text("SELECT count(*) FROM gateway_calls WHERE trajectory_id = 'used'")).scalar() == 0
        assert c.execute(text("SELECT count(*) FROM gateway_calls WHERE trajectory_id = 'skilled'")).scalar() == 1
    store.close()


def test_a_judged_trajectory_is_curated_only_where_its_caller_could_write(tmp_path):
    """Issue 51: with the self-judge on idle trajectories, the curator writes with the executor's own token.
    A trajectory is judged and curated only where its caller holds rw on the repo with a token still
    configured; a read token's, another prefix's, or a removed token's expires uncurated. The judge's LLM
    answer is a fixed verdict here (what is tested is the sweep's rule)."""
    import asyncio

    from services.executor.gateway.trajectories.serving import Trajectories
    from skillos.auth import Authenticator, caller_id
    from skillos.protocol.executor import JudgeResponse, TokenCount

    asked = []

    async def judge(request):
        asked.append(request.task)
        return JudgeResponse(success=True, parsed=True, reason="done", completion="yes", tokens=TokenCount(),
                             latency_s=0.0)

    auth = Authenticator("tokens", "writer:rw:team-,reader:read")
    store = TrajectoryStore(f"sqlite:///{tmp_path}/g.db", max_calls=10, max_bytes=100_000)
    for tid, repo, owner in [("w", "team-a", caller_id("writer")), ("r", "team-a", caller_id("reader")),
                             ("x", "other", caller_id("writer")), ("gone", "team-a", caller_id("removed")),
                             ("old", "team-a", None)]:
        store.create(tid, repo, f"task {tid}", "m", [], owner)
    time.sleep(0.05)

    async def go():
        sweeps = Trajectories(store, "http://127.0.0.1:9", None, ttl_s=0.01, sweep_interval_s=3600,
                              curator_timeout_s=1, curator_retries=0, judge=judge, auth=auth)
        try:
            await sweeps.sweep()
        finally:
            await sweeps.aclose()

    asyncio.run(go())
    assert sorted(asked) == ["task old", "task w"]
    assert {t: store.get(t).status for t in ("r", "x", "gone")} == dict.fromkeys(("r", "x", "gone"), "expired")
    store.close()
