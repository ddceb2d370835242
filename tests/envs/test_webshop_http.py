"""WebShop over HTTP: the real `skillos serve webshop` on loopback, driven by `EnvClient`."""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor

import httpx
import pytest
from thefuzz import fuzz

from services.envs.webshop import WebShopEnvironment
from services.envs.webshop.environment import search_query, wanted_option_values
from skillos.clients.envs import EnvClient, EnvError
from skillos.settings import DEFAULT_SHARED_DATA
from tests.conftest import run_service

DATA = DEFAULT_SHARED_DATA / "webshop"
pytestmark = pytest.mark.skipif(not DATA.is_dir(), reason=f"WebShop data not found at {DATA}")


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    with run_service(
        ["webshop", "--data-dir", str(DATA)], tmp_path=tmp_path_factory.mktemp("webshop")
    ) as svc:
        yield svc


@pytest.fixture(scope="module")
def client(server):
    with EnvClient(server.url) as c:
        yield c


@pytest.fixture(scope="module")
def env():
    # the same data in-process: to know each task's goal (the server does not reveal it)
    return WebShopEnvironment(DATA)


def open_goal_product(client, env, task_id):
    """Start a session, search the instruction, page to the goal product and open it."""
    goal = env.goal(env.task(task_id))
    s = client.create_session(task_id=task_id)
    r = client.step(s.session_id, f"search[{search_query(goal)}]")
    for _ in range(5):
        if f"click[{goal.asin.lower()}]" in r.admissible_actions:
            return s, goal, client.step(s.session_id, f"click[{goal.asin.lower()}]")
        r = client.step(s.session_id, "click[next >]")
    pytest.fail(f"{goal.asin} not found for {task_id}")


def test_ready_only_when_the_background_load_is_done(server):
    """spaCy loads in a thread after start; /readyz says so (503 with the reason) until it is done."""
    import time

    deadline, seen = time.monotonic() + 180, []
    while time.monotonic() < deadline:
        r = httpx.get(f"{server.url}/readyz")
        seen.append(r.status_code)
        if r.status_code == 200:
            break
        assert r.status_code == 503 and "warming up" in str(r.json()), r.text
        time.sleep(0.2)
    assert seen[-1] == 200, f"not ready after 180 s: {seen[-5:]}"


def test_readiness_follows_the_warm_up(env, monkeypatch):
    """The same check as above, made deterministic: an unfinished load must make /readyz 503."""
    import asyncio
    import threading

    from services.envs.app import build_app
    from services.envs.webshop import reward

    async def readyz() -> httpx.Response:
        async with httpx.AsyncClient(transport=httpx.ASGITransport(app=build_app(env)), base_url="http://t") as c:
            return await c.get("/readyz")

    loading = threading.Event()
    monkeypatch.setattr(reward, "_warm_done", loading)
    r = asyncio.run(readyz())
    assert r.status_code == 503 and "loading spaCy" in r.text
    loading.set()
    assert asyncio.run(readyz()).status_code == 200


def test_tasks_listed_over_http(client):
    tasks = client.tasks("test")
    assert len(tasks) == 500
    assert tasks[0].id == "webshop-0" and tasks[0].type and tasks[0].instruction
    assert set(client.splits()) == {"train", "test", "human"}


def test_scripted_purchase_earns_reward_one_over_http(client, env):
    s, goal, r = open_goal_product(client, env, "webshop-0")
    assert s.observation.startswith("WebShop [SEP] Instruction: [SEP] ")
    assert s.admissible_actions == ["search[<your query>]"]
    for value in wanted_option_values(goal):
        r = client.step(s.session_id, f"click[{value}]")
        assert r.info["invalid"] is False
    r = client.step(s.session_id, "click[buy now]")
    assert (r.done, r.won, r.reward) == (True, True, 1.0)
    assert r.info["score"] == 100.0
    # step after done: 409
    with pytest.raises(EnvError) as e:
        client.step(s.session_id, "click[buy now]")
    assert e.value.status == 409
    client.close_session(s.session_id)


def test_wrong_option_partial_reward_over_http(client, env):
    # a goal with 2 attributes and 2 options whose right purchase is worth 1.0; one option wrong:
    #   (2 attributes + 1 option + 1 price) / (2 + 2 + 1) = 0.8
    task = next(
        t
        for t in env.tasks("test")
        if len(env.goal(t).goal_options) == 2 and len(env.goal(t).attributes) == 2
    )
    s, goal, _ = open_goal_product(client, env, task.id)
    name = min(goal.goal_options)
    product = env.data.catalog.by_asin[goal.asin]
    wrong = next(
        v
        for v in product.options[name]
        if all(fuzz.token_set_ratio(v, str(p)) <= 85 for p in goal.goal_options.items())
    )
    for value in wanted_option_values(goal):
        client.step(s.session_id, f"click[{value}]")
    client.step(s.session_id, f"click[{wrong}]")
    r = client.step(s.session_id, "click[buy now]")
    assert r.done and not r.won
    assert r.reward == pytest.approx(0.8) and r.info["score"] == pytest.approx(80.0)


def test_invalid_action_is_an_observation_over_http(client):
    s = client.create_session(split="test", index=3)
    r = client.step(s.session_id, "click[does not exist]")
    assert r.info["invalid"] is True and r.observation == s.observation and not r.done
    r = client.step(s.session_id, "search[coffee]")
    assert "Page 1 (Total results:" in r.observation
    client.close_session(s.session_id)


def test_bad_requests_get_4xx(client, server):
    with pytest.raises(EnvError) as e:
        client.create_session(task_id="webshop-99999")
    assert 400 <= e.value.status < 500
    with pytest.raises(EnvError) as e:
        client.step("no-such-session", "search[x]")
    assert e.value.status == 404
    s = client.create_session(task_id="webshop-1")
    resp = httpx.post(
        f"{server.url}/v1/sessions/{s.session_id}/step", json={"action": "x" * 1_000_000}, timeout=30
    )
    assert 400 <= resp.status_code < 500 and "error" in resp.json()
    client.close_session(s.session_id)


def test_parallel_sessions_over_http(client, env):
    def play(i: int) -> float:
        task = env.tasks("test")[i]
        goal = env.goal(task)
        s = client.create_session(task_id=task.id, expert=True)
        r = None
        action = s.info.get("expert_action")
        for _ in range(15):
            if action is None:
                break
            r = client.step(s.session_id, action)
            if r.done:
                break
            action = r.info.get("expert_action")
        client.close_session(s.session_id)
        assert goal.asin
        return r.reward if r is not None and r.done else -1.0

    with ThreadPoolExecutor(8) as pool:
        rewards = list(pool.map(play, range(8)))
    assert sum(1 for x in rewards if x == 1.0) >= 6, rewards
