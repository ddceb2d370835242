"""Issue 51, env session hijack: a token lists, reads, steps or closes an environment session another token opened,
or takes its expert's actions (a session's steps are an episode's rewards: a trainer's rollout, an evaluation).

Defences: env servers check tokens on every route (`services/envs/app.py`, `SKILLOS_AUTH_MODE=tokens`), a session
is its opener's (`services/envs/server.py` ``SessionManager.owned``)."""

from __future__ import annotations

import os
import time
from pathlib import Path

import httpx
import pytest
from conftest import run_service
from security_fixtures import AUTH, bearer

from skillos.settings import DEFAULT_SHARED_DATA

pytestmark = pytest.mark.slow

ALICE, MALLORY = "acme-t", "mallory-t"   # two tokens of the list, neither an operator's
WEBSHOP_DATA = Path(os.environ.get("SKILLOS_WEBSHOP_DATA") or DEFAULT_SHARED_DATA / "webshop")


@pytest.fixture(scope="module")
def reasoning(tmp_path_factory):
    with run_service(["reasoning"], env=AUTH, tmp_path=tmp_path_factory.mktemp("reasoning")) as svc:
        _ready(svc)
        yield svc


def _ready(svc, timeout: float = 300) -> None:
    deadline = time.monotonic() + timeout
    while httpx.get(f"{svc.url}/readyz", timeout=30).status_code != 200:
        assert time.monotonic() < deadline, f"not ready after {timeout}s"
        time.sleep(0.5)


def _open(svc, token: str = ALICE, **body) -> str:
    r = httpx.post(f"{svc.url}/v1/sessions", headers=bearer(token), timeout=120,
                   json=body or {"split": "demo_math", "index": 0})
    assert r.status_code == 201, r.text
    return r.json()["session_id"]


def _state(svc, sid: str, token: str = ALICE) -> httpx.Response:
    return httpx.get(f"{svc.url}/v1/sessions/{sid}", headers=bearer(token), timeout=30)


def test_without_a_token_an_env_server_answers_nothing_but_its_probes(reasoning):
    sid = _open(reasoning)
    for method, path in [("GET", "/v1/tasks"), ("GET", "/v1/sessions"), ("GET", f"/v1/sessions/{sid}"),
                         ("POST", "/v1/sessions")]:
        r = httpx.request(method, f"{reasoning.url}{path}", timeout=30,
                          json={"split": "demo_math", "index": 1} if method == "POST" else None)
        assert r.status_code == 401, (method, path, r.status_code)
    assert httpx.get(f"{reasoning.url}/healthz", timeout=30).status_code == 200


def test_another_token_does_not_see_a_session_in_the_list(reasoning):
    sid = _open(reasoning)
    listed = httpx.get(f"{reasoning.url}/v1/sessions", headers=bearer(MALLORY), timeout=30)
    assert listed.status_code == 200 and sid not in listed.json()["session_ids"], listed.text


def test_another_token_cannot_read_a_session(reasoning):
    sid = _open(reasoning)
    assert _state(reasoning, sid, MALLORY).status_code == 403


def test_another_token_cannot_step_a_session(reasoning):
    sid = _open(reasoning)
    r = httpx.post(f"{reasoning.url}/v1/sessions/{sid}/step", headers=bearer(MALLORY), json={"action": "0"},
                   timeout=30)
    assert r.status_code == 403, r.text
    state = _state(reasoning, sid).json()
    assert state["steps"] == 0 and not state["done"], state   # the opener's episode is untouched


def test_another_token_cannot_close_a_session(reasoning):
    sid = _open(reasoning)
    r = httpx.delete(f"{reasoning.url}/v1/sessions/{sid}", headers=bearer(MALLORY), timeout=30)
    assert r.status_code == 403, r.text
    assert _state(reasoning, sid).status_code == 200   # still open for its opener


@pytest.mark.skipif(not WEBSHOP_DATA.is_dir(), reason=f"WebShop data not found at {WEBSHOP_DATA}")
def test_another_token_cannot_take_the_expert_actions_of_a_session(tmp_path):
    """A session opened with ``expert: true`` answers each step with the handcoded expert's next action; stepping
    someone else's would hand them over (and spend the opener's episode)."""
    with run_service(["webshop", "--data-dir", str(WEBSHOP_DATA)], env=AUTH, tmp_path=tmp_path,
                     ready_timeout=300) as svc:
        _ready(svc)
        sid = _open(svc, task_id="webshop-0", expert=True)
        r = httpx.post(f"{svc.url}/v1/sessions/{sid}/step", headers=bearer(MALLORY), timeout=60,
                       json={"action": "search[anything]"})
        assert r.status_code == 403, r.text
        assert "expert_action" not in r.text
        assert _state(svc, sid).json()["steps"] == 0
