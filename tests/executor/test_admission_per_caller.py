"""One token cannot hold every turn of the executor (issue 51): `/v1/act`, `/v1/judge` and episodes count per
token (SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER, SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER) against the real
executor service on loopback, its LLM a backend that accepts every call and never answers (the stand-in
`tests/llm/broken_llm_backend.py` "hang", which counts the calls that reached it): a token holding its share is
answered 429 at once, in the one error shape with a Retry-After, while another token still reaches the LLM, and
an operator's token (the services' own: `skillos run`, the trainer) has no share."""

from __future__ import annotations

import asyncio
import importlib.util
import time
from pathlib import Path

import httpx
import pytest
from conftest import free_port, run_service

pytestmark = pytest.mark.slow

_spec = importlib.util.spec_from_file_location(
    "broken_llm_backend", Path(__file__).resolve().parents[1] / "llm" / "broken_llm_backend.py")
_broken = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(_broken)

TOKENS = "tok-a-secret:read:acme:tenant-a,tok-b-secret:read:bob:tenant-b,tok-op-secret:rw::operator"
A, B, OP = ({"Authorization": f"Bearer {t}"} for t in ("tok-a-secret", "tok-b-secret", "tok-op-secret"))
ACT = {"task": "put a clean mug on the desk", "observation": "You are in a kitchen.", "skills": []}
JUDGE = {"task": "put a clean mug on the desk", "turns": [{"observation": "o", "action": "look"}]}
EPISODE = {"env": "reasoning", "split": "demo_math", "index": 0}


@pytest.fixture(scope="module")
def stack(tmp_path_factory):
    """(executor, the hanging LLM's base URL): one call or episode per token at most, a reasoning env server."""
    tmp = tmp_path_factory.mktemp("per-caller")
    with _broken.broken_backend("hang", free_port()) as llm, \
            run_service(["reasoning"], tmp_path=tmp) as reasoning, \
            run_service(["executor"], tmp_path=tmp, env={
                "SKILLOS_EXECUTOR_LLM_BASE_URL": llm, "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "600",
                "SKILLOS_EXECUTOR_LLM_MAX_RETRIES": "0", "SKILLOS_REASONING_URL": reasoning.url,
                "SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": TOKENS,
                "SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER": "1", "SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER": "1",
                "SKILLOS_GATEWAY_DATABASE_URL": f"sqlite:///{tmp}/gateway.db"}) as executor:
        yield executor, llm


async def _reached(llm: str, n: int, within_s: float = 30.0) -> None:
    """Wait until ``n`` chat calls have reached the LLM backend in all (the stand-in counts them)."""
    deadline = time.monotonic() + within_s
    while (seen := await asyncio.to_thread(_broken.chat_requests_seen, llm)) < n:
        assert time.monotonic() < deadline, f"{seen} calls reached the LLM, not {n}"
        await asyncio.sleep(0.1)


async def _admitted(c: httpx.AsyncClient, path: str, body: dict, headers: dict, within_s: float = 15.0):
    """A call that is not refused (still pending after 1.5 s: at the LLM), sent again while answered 429 (a share
    comes back when the server sees an earlier call's client gone: `unless_disconnected` polls each second)."""
    deadline = time.monotonic() + within_s
    while True:
        call = asyncio.create_task(c.post(path, json=body, headers=headers))
        done, _ = await asyncio.wait({call}, timeout=1.5)
        if not done:
            return call
        assert call.result().status_code == 429 and time.monotonic() < deadline, call.result().text
        await asyncio.sleep(0.5)


def _refused(r: httpx.Response, setting: str) -> None:
    """429 in the one error shape, with a Retry-After, naming the setting."""
    assert r.status_code == 429, r.text
    err = r.json()["error"]
    assert err["code"] == "too_many_requests" and setting in err["message"], err
    assert 1 <= int(r.headers["Retry-After"]) <= 60


def test_a_token_holding_its_share_of_calls_gets_429_while_another_gets_through(stack):
    executor, llm = stack

    async def go():
        async with httpx.AsyncClient(base_url=executor.url, timeout=60) as c:
            base = await asyncio.to_thread(_broken.chat_requests_seen, llm)
            held = asyncio.create_task(c.post("/v1/act", json=ACT, headers=A))   # at the LLM, never answered
            await _reached(llm, base + 1)
            t = time.monotonic()
            _refused(await c.post("/v1/act", json=ACT, headers=A), "SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER")
            _refused(await c.post("/v1/judge", json=JUDGE, headers=A), "SKILLOS_EXECUTOR_MAX_CALLS_PER_CALLER")
            assert time.monotonic() - t < 10                                   # refused at once, not queued
            other = asyncio.create_task(c.post("/v1/act", json=ACT, headers=B))
            await _reached(llm, base + 2)                                      # B's call is at the LLM
            assert not other.done()
            ops = [asyncio.create_task(c.post("/v1/act", json=ACT, headers=OP)) for _ in range(2)]   # no share
            await _reached(llm, base + 4)
            assert not any(o.done() for o in ops)
            assert (await c.get("/healthz")).status_code == 200
            for task in (held, other, *ops):                                   # the clients go away
                task.cancel()
            await asyncio.gather(held, other, *ops, return_exceptions=True)
        # A's call was cancelled with its connection (`unless_disconnected`): its share is back
        async with httpx.AsyncClient(base_url=executor.url, timeout=60) as c:
            base = await asyncio.to_thread(_broken.chat_requests_seen, llm)
            again = await _admitted(c, "/v1/act", ACT, A)
            await _reached(llm, base + 1)
            again.cancel()
            await asyncio.gather(again, return_exceptions=True)

    asyncio.run(go())


def test_a_token_holding_its_share_of_episodes_gets_429_while_another_plays(stack):
    executor, llm = stack

    async def go():
        async with httpx.AsyncClient(base_url=executor.url, timeout=60) as c:
            base = await asyncio.to_thread(_broken.chat_requests_seen, llm)
            held = asyncio.create_task(c.post("/v1/episodes", json=EPISODE, headers=A))
            await _reached(llm, base + 1)                                      # its first turn is at the LLM
            t = time.monotonic()
            _refused(await c.post("/v1/episodes", json=EPISODE, headers=A), "SKILLOS_EXECUTOR_MAX_EPISODES_PER_CALLER")
            assert time.monotonic() - t < 10
            # the episode's share is its own: A may still make a single call (once its call of the test before
            # is seen gone)
            single = await _admitted(c, "/v1/act", ACT, A)
            other = asyncio.create_task(c.post("/v1/episodes", json=EPISODE, headers=B))
            ops = [asyncio.create_task(c.post("/v1/episodes", json=EPISODE, headers=OP)) for _ in range(2)]
            await _reached(llm, base + 5)
            assert not any(x.done() for x in (held, single, other, *ops))
            for task in (held, single, other, *ops):
                task.cancel()
            await asyncio.gather(held, single, other, *ops, return_exceptions=True)

    asyncio.run(go())
    assert "skillos_executor_episodes_refused_total 1.0" in httpx.get(f"{executor.url}/metrics", timeout=10).text
