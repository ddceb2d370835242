"""The chaos suite's scenarios (`bench/chaos.py`) in their short form: the same code, small parameters.

Each starts its own PostgreSQL cluster (initdb into a temporary folder, its own port) and, for scenario 2,
its own Redis, so the faults it injects (PostgreSQL stopped, Redis killed and frozen) touch nothing else.
"""

from __future__ import annotations

import shutil

import pytest
from conftest import IN_CI

from bench import chaos

pytestmark = pytest.mark.slow


def _need(tool: str, found: bool) -> None:
    if not found:
        msg = f"{tool} not installed: the chaos scenarios start their own servers"
        if IN_CI:
            pytest.fail(msg)
        pytest.skip(msg)


@pytest.fixture
def pg_tools():
    _need(f"PostgreSQL ({chaos.PG_BIN})", (chaos.PG_BIN / "initdb").exists() and (chaos.PG_BIN / "pg_ctl").exists())


@pytest.fixture
def redis_tools():
    _need("redis-server", shutil.which(chaos.REDIS_SERVER) is not None)


def test_postgres_stopped_under_write_load(pg_tools, tmp_path):
    r = chaos.pg_restart(clients=4, rate=20, warmup_s=2.5, outage_s=2.5, after_s=3, read_rate=5, workdir=tmp_path)
    print(chaos.render_pg(r, "tests/test_chaos.py"))
    assert r["acked"] > 20 and r["during"]["n"] > 5       # real load, and it met the outage
    assert set(r["all"]["statuses"]) <= {200, 503}         # never a 500, never a dropped connection or hang
    assert r["during"]["statuses"].get(503, 0) > 0
    assert r["all"]["503_without_retry_after"] == 0
    assert r["during"]["codes"].keys() <= {"database_unavailable"}
    assert r["lost"] == [] and r["applied_twice"] == [] and r["applied_never_sent"] == []
    assert all(i["equal"] for i in r["index"].values())
    assert r["recovery_write_s"] is not None               # back without a restart
    assert r["unhandled_errors_logged"] == 0
    assert chaos.pg_invariants(r) == []


def test_postgres_frozen_under_write_load(pg_tools, tmp_path):
    """SIGSTOP of the whole cluster: connections stay open and nothing answers; the request bound turns that
    into 503s within SKILLOS_DATABASE_REQUEST_TIMEOUT_S instead of requests hanging until the thaw."""
    r = chaos.pg_restart(clients=4, rate=20, warmup_s=2.5, outage_s=4, after_s=3, read_rate=5, workdir=tmp_path,
                         fault="freeze", env={"SKILLOS_DATABASE_REQUEST_TIMEOUT_S": "1.5"})
    print(chaos.render_pg(r, "tests/test_chaos.py"))
    assert set(r["all"]["statuses"]) <= {200, 503}
    assert r["during"]["statuses"].get(503, 0) > 0 and r["all"]["503_without_retry_after"] == 0
    assert r["all"]["max_s"] < 4                           # bounded by the request timeout, not by the freeze
    assert r["lost"] == [] and r["applied_twice"] == []
    assert all(i["equal"] for i in r["index"].values())
    assert chaos.pg_invariants(r) == []


def test_redis_lost_and_back_with_two_replicas(pg_tools, redis_tools, tmp_path):
    r = chaos.redis_loss(clients=2, rate=8, warmup_s=2.5, outage_s=3, between_s=3, after_s=3, read_rate=5,
                         sync_interval_s=1.5, workdir=tmp_path)
    print(chaos.render_redis(r, "tests/test_chaos.py"))
    assert r["acked"] > 20 and sum(p["lag_n"] for p in r["phases"].values()) > 10
    assert set(r["all"]["statuses"]) == {200}
    assert r["stale_reads"] == 0
    assert r["lost"] == [] and r["applied_twice"] == []
    assert all(i["equal"] for i in r["index"].values())
    assert chaos.redis_invariants(r) == []


def test_invariants_catch_what_they_are_for():
    """The checks themselves: a 500, a 503 without Retry-After, a lost write each break an invariant."""
    ok = {"all": chaos.tally([chaos.Attempt("write", "a", 0, 0.01, 200), chaos.Attempt("write", "a", 1, 1.01, 503,
                                                                                       retry_after="1")]),
          "during": chaos.tally([chaos.Attempt("write", "a", 1, 1.01, 503, retry_after="1")]),
          "ready_during": chaos.tally([chaos.Attempt("ready", "a", 1, 1.01, 503)]),
          "lost": [], "applied_twice": [], "applied_never_sent": [], "stale_reads": 0,
          "index": {"a": {"equal": True}}, "recovery_write_s": 0.2}
    assert chaos.pg_invariants(ok) == []
    with_500 = {**ok, "all": chaos.tally([chaos.Attempt("write", "a", 0, 0.01, 500)])}
    assert any("200/503" in b for b in chaos.pg_invariants(with_500))
    bare_503 = {**ok, "all": chaos.tally([chaos.Attempt("write", "a", 0, 0.01, 503)])}
    assert any("Retry-After" in b for b in chaos.pg_invariants(bare_503))
    assert any("lost" in b for b in chaos.pg_invariants({**ok, "lost": ["c0-1"]}))
    assert any("index" in b for b in chaos.pg_invariants({**ok, "index": {"a": {"equal": False}}}))
    hang = {**ok, "all": chaos.tally([chaos.Attempt("write", "a", 0, chaos.HANG_S, 200)])}
    assert any("hang" in b for b in chaos.pg_invariants(hang))


def test_env_replica_killed_mid_episode(tmp_path):
    """Scenario 3 short: 2 episode streams through the executor (embedded SmolLM2), two ALFWorld replicas
    behind a round-robin proxy; replica a SIGKILLed mid-episode. Its episodes end env_lost, the rest finish,
    new episodes go to b."""
    from conftest import SHARED_DATA

    data = SHARED_DATA / "alfworld"
    _need(f"the ALFWorld data ({data})", (data / "json_2.1.1").is_dir())
    r = chaos.env_replica_loss(clients=2, max_turns=2, warmup_s=5, after_s=5, workdir=tmp_path, alfworld_data=data)
    print(chaos.render_env(r, "tests/test_chaos.py"))
    assert r["lost"] >= 1 and r["lost"] <= r["in_flight_at_kill"]
    assert r["after_kill_finished"] >= 1
    assert chaos.env_invariants(r) == []


def test_env_invariants_catch_what_they_are_for():
    """A lost episode started after the kill, an env_lost without a reason, a 500 each break an invariant."""
    def ep(start, end, status=200, stop_reason="max_turns", error=None, code=None):
        return {"client": 0, "index": 0, "start": start, "end": end, "status": status, "stop_reason": stop_reason,
                "error": error, "code": code, "steps": 2}

    def result(eps):
        kill = 10.0
        lost = [e for e in eps if e["stop_reason"] == "env_lost"]
        after = [e for e in eps if e["start"] >= kill + 1]
        return {"episodes": eps, "kill_at_s": kill, "grace_s": 1.0, "hang_s": 300.0, "clients_still_running": 0,
                "max_s": max(e["end"] - e["start"] for e in eps), "failed_to_start": [e for e in eps if e["status"] != 200],
                "lost": len(lost), "in_flight_at_kill": sum(1 for e in eps if e["start"] < kill < e["end"]),
                "lost_not_in_flight": [e for e in lost if not e["start"] < kill < e["end"]],
                "open_sessions_at_kill": {"a": 1, "b": 1}, "unhandled_errors_logged": 0,
                "after_kill_finished": sum(1 for e in after if e["status"] == 200 and e["stop_reason"] in chaos.NORMAL_ENDS)}

    good = [ep(5, 12, stop_reason="env_lost", error="alfworld env unreachable"), ep(6, 14), ep(12, 20, stop_reason="won"),
            ep(9.8, 10.2, 502, None, "create cut", "upstream_unavailable")]
    assert chaos.env_invariants(result(good)) == []
    assert any("started after the kill" in b for b in chaos.env_invariants(result(good + [ep(13, 15, stop_reason="env_lost", error="x")])))
    assert any("why" in b for b in chaos.env_invariants(result([*good[1:], ep(5, 12, stop_reason="env_lost")])))
    assert any("other than 200" in b for b in chaos.env_invariants(result(good + [ep(3, 4, 500, None, "boom", "internal")])))
    assert any("no episode ended env_lost" in b for b in chaos.env_invariants(result(good[1:])))
    assert any("abnormally" in b for b in chaos.env_invariants(result(good + [ep(2, 3, stop_reason="llm_error", error="x")])))


@pytest.mark.timeout(1800)
def test_llm_killed_mid_episode_and_mid_curation(tmp_path):
    """Scenario 4 short: 2 episode streams and 2 curate calls on the embedded SmolLM2; the LLM SIGKILLed under
    each and started again on its port. Episodes in flight end llm_error with the reason, later ones finish;
    a curate call that lost its LLM wrote nothing, every other batch is in the op log whole."""
    from conftest import SHARED_DATA

    from bench import chaos_llm

    data = SHARED_DATA / "alfworld"
    _need(f"the ALFWorld data ({data})", (data / "json_2.1.1").is_dir())
    r = chaos_llm.llm_loss(clients=2, max_turns=3, warmup_s=8, down_s=2, after_s=3, curations=2, workdir=tmp_path,
                           alfworld_data=data)
    print(chaos_llm.render_llm(r, "tests/test_chaos.py"))
    assert r["in_flight_at_kill"] >= 1 and r["after_back_finished"] >= 1
    assert any(c["error"] for c in r["curations_cut"])
    assert chaos_llm.llm_invariants(r) == []


def test_llm_invariants_catch_what_they_are_for():
    """A 500, an llm_error without a reason, a cut curate call that wrote, a batch logged in part each break one."""
    from bench import chaos_llm

    def ep(start, end, status=200, stop_reason="max_turns", error=None, code=None):
        return {"client": 0, "index": 0, "start": start, "end": end, "status": status, "stop_reason": stop_reason,
                "error": error, "code": code, "steps": 2}

    def call(key, error=None, applied=(), calls=None):
        return {"key": key, "status": 200, "s": 1.0, "error": error, "call_id": key,
                "calls": len(applied) if calls is None else calls, "applied": sorted(applied)}

    def result(eps, cut, again, log, unkeyed=0):
        return {"episodes": eps, "kill_at_s": 10.0, "back_at_s": 15.0, "hang_s": 300.0, "clients_still_running": 0,
                "max_s": max(e["end"] - e["start"] for e in eps),
                "in_flight_at_kill": sum(1 for e in eps if e["start"] < 10 < e["end"]),
                "after_back_finished": sum(1 for e in eps if e["start"] >= 15 and e["stop_reason"] in chaos_llm.NORMAL_ENDS),
                "curations_cut": cut, "curations_again": again, "op_log": log, "op_log_unkeyed": unkeyed,
                "unhandled_errors_logged": 0}

    eps = [ep(5, 11, stop_reason="llm_error", error="llm unreachable"), ep(11, 12, 502, None, "x", "llm_unavailable"),
           ep(16, 20, stop_reason="won")]
    cut, again = [call("cut-0", error="connection refused")], [call("again-0", applied=["a", "b"])]
    log = {"again-0": [{"kind": "ops", "applied": True,
                        "ops": [("new_skill_insert", "applied", "a"), ("new_skill_insert", "applied", "b")]}]}
    assert chaos_llm.llm_invariants(result(eps, cut, again, log)) == []
    broken = lambda *a, **k: " ".join(chaos_llm.llm_invariants(result(*a, **k)))
    assert "neither 200 nor 502" in broken(eps + [ep(3, 4, 500, None, "boom", "internal")], cut, again, log)
    assert "saying why" in broken([ep(5, 11, stop_reason="llm_error"), *eps[1:]], cut, again, log)
    assert "wrote" not in broken(eps, cut, again, log)
    assert "lost its LLM but has" in broken(eps, cut, again, {**log, "cut-0": [{"kind": "ops", "applied": True, "ops": []}]})
    partial = {"again-0": [{"kind": "ops", "applied": True, "ops": [("new_skill_insert", "applied", "a")]}]}
    assert "the op log ['a']" in broken(eps, cut, again, partial)
    # a batch with a refused op is applied=false as a whole, its other ops applied (non-atomic by design)
    mixed = {"again-0": [{"kind": "ops", "applied": False, "ops": [("new_skill_insert", "applied", "a"),
                                                                   ("new_skill_insert", "refused", "a"),
                                                                   ("new_skill_insert", "applied", "b")]}]}
    assert chaos_llm.llm_invariants(result(eps, cut, again, mixed)) == []
    assert "no curate call accounts for" in broken(eps, cut, again, log, unkeyed=1)
    assert "did not recover" in broken(eps[:2], cut, again, log)


def test_million_skills_short_form(pg_tools, tmp_path):
    """Scenario 6 with 3000 skills: bulk import, searches with writes, the three restarts (saved index,
    stale saved index, none), the baselines and PostgreSQL's full-text search; the invariants, not the timings."""
    from bench import chaos_million

    r = chaos_million.million(skills=3000, batch=500, queries=40, write_rate=20, kill_writes=60, fts_queries=3,
                              rank_bm25_max=3000, workdir=tmp_path)
    print(chaos_million.render_million(r, "tests/test_chaos.py"))
    assert r["acked"] >= 60 and r["killed_behind"] >= 60
    assert r["index_equal"] and r["restart_same"] and r["restart_killed_same"] and r["rebuild_same"]
    assert set(r["baselines"]) >= {"ours", "bm25s", "rank_bm25"} and r["pg_fts"]["n"] == 3
    assert chaos_million.million_invariants(r) == []
    # the import's CPU, told apart: the service's and PostgreSQL's are inside the machine's busy time
    assert 0 < r["import_cpu_s"] and 0 < r["import_pg_cpu_s"]
    assert r["import_cpu_s"] + r["import_pg_cpu_s"] <= r["import_machine_busy_s"] + 0.1


@pytest.mark.timeout(900)
def test_executor_under_load_short_form(tmp_path):
    """Scenario 5 short: 8 clients for 20 s on /v1/act and the gateway (streamed and not) over the embedded
    SmolLM2 with a small admission bound: every answer a 200 or a 429 with Retry-After, no hang, the RSS bound;
    the timings are the full run's."""
    from bench import chaos_load

    # a bound of 2 calls that wait at most 1 s: with 8 clients the admission engages, and answers 429, not 5xx
    r = chaos_load.executor_load(clients=8, duration_s=20, skills=300, hang_s=240, max_llm_calls=2, queue_s=1,
                                 workdir=tmp_path)
    print(chaos_load.render_load(r, "tests/test_chaos.py"))
    # 20 s at a bound of 2 answers a handful of 200s: /v1/act and the gateway each got some (which of the
    # gateway's kinds is chance)
    assert "act" in r["latency"] and {"chat", "chat-new", "chat-stream", "chat-stream-new"} & set(r["latency"]), r
    assert set(r["statuses"]) <= {"200", "429"} and r["statuses"].get("429"), r["codes"]
    assert chaos_load.load_invariants(r) == []


def test_load_invariants_catch_what_they_are_for():
    """A 502, a hang, an answer outside the error shape, RSS growth and a logged unhandled error each break one."""
    from bench import chaos_load

    def result(codes=None, growth=2.0, unhandled=0, latency=True):
        return {"codes": codes or {}, "rss_mb": {"growth_pct": growth}, "unhandled_errors_logged": unhandled,
                "latency": {"act": {}} if latency else {}}

    assert chaos_load.load_invariants(result()) == []
    assert chaos_load.load_invariants(result({"429 too_many_requests": 3})) == []
    broken = lambda **k: " ".join(chaos_load.load_invariants(result(**k)))
    assert "5xx" in broken(codes={"502 llm_unavailable": 1})
    assert "hangs" in broken(codes={"-1 hang": 1}) and "hangs" in broken(codes={"0 ReadError": 1})
    assert "error shape" in broken(codes={"404 not-the-error-shape": 1})
    assert "RSS moved +12.0" in broken(growth=12.0)
    assert "unhandled_error" in broken(unhandled=2)
    assert "no request was answered" in broken(latency=False)
