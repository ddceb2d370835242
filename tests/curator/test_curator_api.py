"""The curator service over HTTP: real skill repo (SQLite), real embedded LLM, real curator process."""

from __future__ import annotations

import http.server
import json
import socketserver
import threading
import time
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest

from tests.conftest import free_port, run_service

TRAJ = json.loads((Path(__file__).parent / "data" / "trajectory_clean_apple.json").read_text())

pytestmark = pytest.mark.timeout(1200)


@pytest.fixture(scope="module")
def skillrepo(tmp_path_factory):
    tmp = tmp_path_factory.mktemp("repo")
    with run_service(["skillrepo"], env={"SKILLOS_DATABASE_URL": f"sqlite:///{tmp / 'repo.db'}"},
                     tmp_path=tmp) as svc:
        yield svc.url


def _curator_env(skillrepo: str, llm_url: str, **extra) -> dict[str, str]:
    return {"SKILLOS_SKILLREPO_URL": skillrepo, "SKILLOS_CURATOR_LLM_BASE_URL": llm_url,
            "SKILLOS_JUDGE_LLM_BASE_URL": llm_url, "SKILLOS_CURATOR_LLM_TIMEOUT_S": "600",
            "SKILLOS_JUDGE_LLM_TIMEOUT_S": "600",
            "SKILLOS_CURATOR_LLM_MAX_RETRIES": "0", **extra}


@pytest.fixture(scope="module")
def curator(skillrepo, embedded_llm, tmp_path_factory):
    with run_service(["curator"], env=_curator_env(skillrepo, embedded_llm),
                     tmp_path=tmp_path_factory.mktemp("cur")) as svc:
        yield svc.url


def _new_repo(skillrepo: str) -> str:
    name = f"cur-{time.monotonic_ns()}"
    httpx.post(f"{skillrepo}/v1/repos", json={"name": name}).raise_for_status()
    return name


def test_curate_applies_real_calls_to_the_repo(curator, skillrepo):
    repo = _new_repo(skillrepo)
    origin = {"source": "run", "run": "run-x", "seed": 0, "position": 2, "task_id": "valid_seen/t-2"}
    body = {"trajectory": TRAJ, "self_judged_success": True, "retrieved_skills": [], "repo": repo,
            "apply": True, "seed": 3, "temperature": 0.7, "origin": origin}
    r = httpx.post(f"{curator}/v1/curate", json=body, timeout=900)
    assert r.status_code == 200, r.text
    out = r.json()
    assert out["error"] is None and out["raw_completion"]
    assert len(out["calls"]) >= 1  # the embedded default's grammar asks for at least one call
    valid = [c for c in out["calls"] if c["valid"]]
    assert out["validity_rate"] == pytest.approx(len(valid) / len(out["calls"]))
    for c in out["calls"]:
        assert c["valid"] == c["applied"] or c["reason"]  # applied, or refused with a reason
    skills = httpx.get(f"{skillrepo}/v1/repos/{repo}/skills").json()["skills"]
    applied_inserts = [c for c in out["calls"] if c["applied"] and c["name"] == "new_skill_insert"]
    assert len(skills) == len({c["arguments"]["skill_name"] for c in applied_inserts})
    assert out["messages"][0]["role"] == "system" and "put a clean apple" in out["messages"][1]["content"]
    assert out["usage"]["completion_tokens"] > 0
    # the batch sent to the repo carries the origin and this decision's id (the console's op timeline)
    log = httpx.get(f"{skillrepo}/v1/repos/{repo}/ops").json()["entries"]
    assert len(log) <= 1 and (log or not any(c["applied"] for c in out["calls"]))
    if log:
        given = {k: v for k, v in log[0]["origin"].items() if v is not None}   # unset fields come back null
        assert out["call_id"] and given == {**origin, "curator_call": out["call_id"]}


def test_curate_without_apply_leaves_repo_untouched(curator, skillrepo):
    repo = _new_repo(skillrepo)
    body = {"trajectory": TRAJ, "self_judged_success": False, "repo": repo, "apply": False, "seed": 1}
    out = httpx.post(f"{curator}/v1/curate", json=body, timeout=900).json()
    assert out["applied"] is False and all(not c["applied"] for c in out["calls"])
    assert httpx.get(f"{skillrepo}/v1/repos/{repo}/skills").json()["skills"] == []


@pytest.mark.parametrize("body,status,fragment", [
    ({"self_judged_success": True}, 422, "trajectory"),
    ({"trajectory": {"task": ""}, "self_judged_success": True, "apply": False}, 422, "trajectory.task"),
    ({"trajectory": TRAJ, "self_judged_success": True, "apply": True}, 422, "no repo"),
    ({"trajectory": TRAJ, "self_judged_success": "maybe"}, 422, "self_judged_success"),
    ({"trajectory": TRAJ, "self_judged_success": True, "temperature": 9}, 422, "temperature"),
    ({"trajectory": TRAJ, "self_judged_success": True, "apply": False, "seed": 2**63}, 422, "seed"),
])
def test_bad_requests_get_clear_4xx(curator, body, status, fragment):
    r = httpx.post(f"{curator}/v1/curate", json=body, timeout=60)
    assert r.status_code == status, r.text
    assert fragment in r.json()["error"]["message"]


def test_unknown_repo_is_404_before_any_llm_call(curator):
    body = {"trajectory": TRAJ, "self_judged_success": True, "repo": "no-such-repo-xyz", "apply": True}
    r = httpx.post(f"{curator}/v1/curate", json=body, timeout=60)
    assert r.status_code == 404, r.text
    assert "no-such-repo-xyz" in r.json()["error"]["message"]


def test_skillrepo_down_is_502(embedded_llm, tmp_path):
    env = _curator_env(f"http://127.0.0.1:{free_port()}", embedded_llm)
    with run_service(["curator"], env=env, tmp_path=tmp_path) as svc:
        body = {"trajectory": TRAJ, "self_judged_success": True, "repo": "r", "apply": True}
        r = httpx.post(f"{svc.url}/v1/curate", json=body, timeout=60)
        assert r.status_code == 502 and "skill repo" in r.json()["error"]["message"]
        assert httpx.get(f"{svc.url}/readyz").status_code == 503


def test_content_judge_heuristic_ranks_a_real_skill_above_junk(curator):
    good = ("---\nname: clean-then-place\ndescription: Clean an object, then put it somewhere.\n---\n"
            "1. Find the object: go to each countertop or table until you see it.\n"
            "2. Take it, go to the sinkbasin and clean it.\n"
            "3. If the target receptacle is closed, open it first, then put the object in it.\n")
    ops = [{"name": "new_skill_insert", "skill_name": "clean-then-place", "content": good},
           {"name": "new_skill_insert", "skill_name": "apple", "content": "Apple"},
           {"name": "skill_delete", "skill_name": "apple"}]
    r = httpx.post(f"{curator}/v1/judge/content", json={"ops": ops, "backend": "heuristic"})
    assert r.status_code == 200, r.text
    scores = [s["score"] for s in r.json()["scores"]]
    assert scores[0] > 0.8 and scores[1] < 0.3 and scores[2] == 0.5
    assert r.json()["backend"] == "heuristic"
    bad = httpx.post(f"{curator}/v1/judge/content", json={"ops": []})
    assert bad.status_code == 422 and "ops" in bad.json()["error"]["message"]


def test_content_judge_on_the_embedded_llm(curator):
    ops = [{"name": "new_skill_insert", "skill_name": "heat-then-place",
            "content": "1. Take the food.\n2. Heat it with the microwave.\n3. Put it on the table."}]
    r = httpx.post(f"{curator}/v1/judge/content", json={"ops": ops, "backend": "llm", "task": "heat an egg"},
                   timeout=600)
    assert r.status_code == 200, r.text
    assert 0.0 <= r.json()["score"] <= 1.0 and r.json()["backend"] == "llm"


# --- a broken LLM backend: the decision is reported as failed with the reason, never as valid ---------

class _Handler(http.server.BaseHTTPRequestHandler):
    mode = "500"

    def do_POST(self):
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        if self.mode == "slow":
            time.sleep(5)
        self.send_response(500)
        self.send_header("Content-Type", "application/json")
        self.end_headers()
        self.wfile.write(b'{"error": "boom"}')

    def log_message(self, *args):
        pass


@contextmanager
def _broken_backend(mode: str):
    handler = type("H", (_Handler,), {"mode": mode})
    server = socketserver.ThreadingTCPServer(("127.0.0.1", 0), handler)
    server.daemon_threads = True
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_address[1]}/v1"
    finally:
        server.shutdown()
        server.server_close()


@pytest.mark.parametrize("failure", ["down", "500", "timeout"])
def test_llm_failure_is_reported_not_counted_valid(failure, skillrepo, tmp_path):
    if failure == "down":
        ctx = None
        llm_url = f"http://127.0.0.1:{free_port()}/v1"
    else:
        ctx = _broken_backend("slow" if failure == "timeout" else "500")
        llm_url = ctx.__enter__()
    try:
        env = _curator_env(skillrepo, llm_url, SKILLOS_CURATOR_LLM_TIMEOUT_S="1",
                           SKILLOS_CURATOR_LLM_MAX_RETRIES="1", SKILLOS_CURATOR_LLM_BACKOFF_S="0.1")
        with run_service(["curator"], env=env, tmp_path=tmp_path) as svc:
            repo = _new_repo(skillrepo)
            body = {"trajectory": TRAJ, "self_judged_success": True, "repo": repo}
            r = httpx.post(f"{svc.url}/v1/curate", json=body, timeout=60)
            assert r.status_code == 200, r.text
            out = r.json()
            expected = {"down": "connection", "500": "HTTP 500", "timeout": "timeout"}[failure]
            assert out["error"] and expected in out["error"]
            assert out["calls"] == [] and out["validity_rate"] == 0.0 and out["applied"] is False
            assert httpx.get(f"{skillrepo}/v1/repos/{repo}/skills").json()["skills"] == []
            judge = httpx.post(f"{svc.url}/v1/judge/content", timeout=60, json={
                "ops": [{"name": "new_skill_insert", "skill_name": "a", "content": "1. x"}], "backend": "llm"})
            assert judge.status_code == 502 and "judge" in judge.json()["error"]["message"]
            ready = httpx.get(f"{svc.url}/readyz")
            assert ready.status_code == 503 if failure == "down" else ready.status_code in (200, 503)
    finally:
        if ctx is not None:
            ctx.__exit__(None, None, None)
