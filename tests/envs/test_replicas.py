"""Env servers behind a load balancer with more than one replica, and draining on SIGTERM.

Two real ALFWorld replicas sit behind a per-request round-robin proxy (written here: every request,
keep-alive or not, goes to the next replica, the worst case for a session that lives in one replica's
memory). Each replica advertises its own address; clients follow a session's `session_url`, so whole
episodes, through the env client and through the executor, see no 404. A replica that gets SIGTERM
drains: it leaves the rotation (/readyz 503), refuses new sessions with 503 (the client retries, the
proxy sends the retry to the other replica) and plays its open episodes to the end before it exits.
"""

from __future__ import annotations

import asyncio
import signal
import socket
import threading
import time
from collections import Counter
from contextlib import contextmanager

import httpx
import pytest
import uvicorn
from conftest import SHARED_DATA, free_port, run_service
from starlette.requests import Request
from starlette.responses import Response

from skillos.clients.envs import EnvClient, EnvError

pytestmark = pytest.mark.slow
ALFWORLD = SHARED_DATA / "alfworld"
HOP_BY_HOP = {"host", "connection", "keep-alive", "transfer-encoding", "content-length", "content-encoding",
              "te", "trailer", "upgrade", "proxy-connection"}


class RoundRobinProxy:
    """A reverse proxy that sends each request to the next upstream in turn, and records what it did."""

    def __init__(self, upstreams: list[str]):
        self.upstreams = upstreams
        self.turn = 0
        self.seen: list[tuple[str, str, str, int]] = []  # (upstream, method, path, status)
        self._client: httpx.AsyncClient | None = None

    async def __call__(self, scope, receive, send) -> None:
        assert scope["type"] == "http"
        request = Request(scope, receive)
        upstream = self.upstreams[self.turn % len(self.upstreams)]
        self.turn += 1
        self._client = self._client or httpx.AsyncClient(timeout=120)
        try:
            r = await self._client.request(
                request.method, upstream + scope["path"], params=scope["query_string"].decode(),
                content=await request.body(),
                headers={k: v for k, v in request.headers.items() if k.lower() not in HOP_BY_HOP})
            resp = Response(r.content, status_code=r.status_code,
                            headers={k: v for k, v in r.headers.items() if k.lower() not in HOP_BY_HOP})
        except httpx.HTTPError as e:
            resp = Response(f"proxy: {upstream} unreachable: {e}", status_code=502)
        self.seen.append((upstream, request.method, scope["path"], resp.status_code))
        await resp(scope, receive, send)

    def statuses(self) -> Counter:
        return Counter(status for *_, status in self.seen)


@contextmanager
def proxy_in_front_of(upstreams: list[str]):
    proxy = RoundRobinProxy(upstreams)
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(proxy, host="127.0.0.1", port=port, lifespan="off",
                                           log_level="warning", access_log=False))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + 20
    while not server.started:
        assert time.monotonic() < deadline, "proxy did not start"
        time.sleep(0.05)
    proxy.url = f"http://127.0.0.1:{port}"
    try:
        yield proxy
    finally:
        server.should_exit = True
        thread.join(timeout=10)


@contextmanager
def alfworld_replicas(tmp_path_factory, names=("a", "b"), drain_timeout_s: float = 0):
    if not (ALFWORLD / "json_2.1.1").is_dir():
        pytest.fail(f"ALFWorld data missing at {ALFWORLD}")
    with _replicas(tmp_path_factory, list(names), drain_timeout_s) as replicas:
        yield replicas


@contextmanager
def _replicas(tmp_path_factory, names: list[str], drain_timeout_s: float):
    if not names:
        yield []
        return
    port = free_port()
    env = {"SKILLOS_ALFWORLD_DATA": str(ALFWORLD), "SKILLOS_ALFWORLD_SPARE_WORKERS": "1",
           "SKILLOS_ENV_REPLICA_ID": names[0], "SKILLOS_ENV_ADVERTISE_URL": f"http://127.0.0.1:{port}",
           "SKILLOS_ENV_DRAIN_TIMEOUT_S": str(drain_timeout_s)}
    with run_service(["alfworld"], env=env, port=port, tmp_path=tmp_path_factory.mktemp(f"replica-{names[0]}")) \
            as svc, _replicas(tmp_path_factory, names[1:], drain_timeout_s) as rest:
        yield [svc, *rest]


@pytest.fixture(scope="module")
def replicas(tmp_path_factory):
    with alfworld_replicas(tmp_path_factory) as pair:
        yield pair


@pytest.fixture
def proxy(replicas):
    with proxy_in_front_of([r.url for r in replicas]) as p:
        yield p


def play(client: EnvClient, session_id: str, first_actions: list[str], steps: int) -> int:
    """Take up to ``steps`` admissible actions; the number taken."""
    actions, taken = first_actions, 0
    for _ in range(steps):
        r = client.step(session_id, next((a for a in actions if a.startswith("go to")), actions[0]))
        taken += 1
        if r.done:
            break
        actions = r.admissible_actions
    return taken


def test_sessions_follow_their_replica_behind_round_robin(replicas, proxy):
    with EnvClient(proxy.url) as client:
        tasks = client.tasks("valid_seen")[:4]
        created = [client.create_session(task_id=t.id) for t in tasks]
        # round robin spread the creates over both replicas, and each session names its own
        assert sorted(c.session_id.split(".")[0] for c in created) == ["a", "a", "b", "b"]
        for c in created:
            owner = replicas[0] if c.session_id.startswith("a.") else replicas[1]
            assert c.session_url == f"{owner.url}/v1/sessions/{c.session_id}"
        for c in created:
            assert play(client, c.session_id, c.admissible_actions, steps=4) == 4
            assert client.session(c.session_id).steps == 4
            client.close_session(c.session_id)
    # only creates and task lists went through the balancer, and nothing it answered was an error
    assert {method for _, method, path, _ in proxy.seen if "/sessions/" in path} == set()
    assert set(proxy.statuses()) <= {200, 201}
    for r in replicas:
        assert httpx.get(f"{r.url}/v1/sessions", timeout=10).json()["count"] == 0


def test_a_call_that_reaches_the_wrong_replica_gets_421_with_what_to_do(replicas, proxy):
    created = httpx.post(f"{proxy.url}/v1/sessions", json={"split": "valid_seen", "index": 0}, timeout=120)
    assert created.status_code == 201
    sid = created.json()["session_id"]
    try:
        # a client that ignores session_url: every other request lands on the other replica
        answers = [httpx.post(f"{proxy.url}/v1/sessions/{sid}/step", json={"action": "look"}, timeout=60)
                   for _ in range(2)]
        assert sorted(a.status_code for a in answers) == [200, 421]
        wrong = next(a for a in answers if a.status_code == 421).json()["error"]
        assert wrong["code"] == "wrong_replica"
        assert "session_url" in wrong["message"] and "SKILLOS_ENV_ADVERTISE_URL" in wrong["message"]
        assert wrong["details"]["session_replica"] == sid.split(".")[0]
        # a session id no replica made is still a plain 404
        assert httpx.get(f"{replicas[0].url}/v1/sessions/a.{'0' * 32}", timeout=10).status_code == 404
    finally:
        httpx.delete(created.json()["session_url"], timeout=30)


@pytest.mark.llm
@pytest.mark.timeout(1800)  # the embedded LLM on 2 shared cores: a turn can take minutes under load
def test_executor_plays_whole_episodes_through_the_balancer(replicas, proxy, embedded_llm, tmp_path):
    logs_before = [len(r.logs()) for r in replicas]
    env = {"SKILLOS_EXECUTOR_LLM_BASE_URL": embedded_llm, "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "1200",
           "SKILLOS_ALFWORLD_URL": proxy.url}
    with run_service(["executor"], env=env, tmp_path=tmp_path) as executor:
        async def episodes():
            async with httpx.AsyncClient(timeout=1500) as http:
                # two at once: round robin puts one session on each replica
                return await asyncio.gather(*[
                    http.post(f"{executor.url}/v1/episodes",
                              json={"env": "alfworld", "split": "valid_seen", "index": i, "max_turns": 2,
                                    "sampling": {"max_tokens": 48, "temperature": 0.3}})
                    for i in range(2)])

        answers = asyncio.run(episodes())
    for a in answers:
        assert a.status_code == 200, a.text
        body = a.json()
        assert body["stop_reason"] in ("won", "done", "max_turns"), body
        assert body["steps"] >= 1
    # both replicas held an episode, and every step went to the replica that held the session
    creates = Counter(up for up, method, path, status in proxy.seen if method == "POST" and path == "/v1/sessions")
    assert set(creates) == {r.url for r in replicas}
    assert set(proxy.statuses()) <= {200, 201}
    for r, before in zip(replicas, logs_before, strict=True):
        new_lines = r.logs()[before:]
        assert "/step" in new_lines
        assert '"status": 404' not in new_lines and '"status": 421' not in new_lines


def test_scale_down_drains_the_replica_while_the_other_takes_new_sessions(tmp_path_factory):
    with alfworld_replicas(tmp_path_factory, ("a", "b"), drain_timeout_s=120) as (a, b), \
            proxy_in_front_of([a.url, b.url]) as proxy, EnvClient(proxy.url) as client:
        on_a = next(c for c in (client.create_session(split="valid_seen", index=i) for i in range(2))
                    if c.session_id.startswith("a."))
        a.proc.send_signal(signal.SIGTERM)
        deadline = time.monotonic() + 30
        while httpx.get(f"{a.url}/readyz", timeout=10).status_code != 503:
            assert time.monotonic() < deadline, "a draining replica must leave the rotation"
            time.sleep(0.2)
        refused = httpx.post(f"{a.url}/v1/sessions", json={"split": "valid_seen", "index": 0}, timeout=30)
        assert refused.status_code == 503 and refused.json()["error"]["code"] == "draining"
        assert refused.headers["Retry-After"] == "1"
        # new sessions through the balancer: the ones sent to `a` are retried and land on `b`
        new = [client.create_session(split="valid_seen", index=i) for i in range(3)]
        assert all(c.session_id.startswith("b.") for c in new)
        # the episode on the draining replica goes on to its end
        assert play(client, on_a.session_id, on_a.admissible_actions, steps=5) == 5
        assert a.proc.poll() is None, "a replica with an open episode must not exit"
        client.close_session(on_a.session_id)
        a.proc.wait(timeout=30)
        assert '"drained"' in a.logs()
        for c in new:
            client.close_session(c.session_id)
        with pytest.raises(EnvError) as gone:
            EnvClient(a.url).splits()
        assert gone.value.status == 0


def test_drain_ends_at_its_timeout_when_a_session_is_left_open(tmp_path):
    env = {"SKILLOS_ENV_DRAIN_TIMEOUT_S": "2", "SKILLOS_ENV_ADVERTISE_URL": "http://{hostname}:{port}"}
    port = free_port()
    with run_service(["reasoning"], env=env, port=port, tmp_path=tmp_path) as svc:
        created = httpx.post(f"{svc.url}/v1/sessions", json={"split": "demo_math", "index": 0}, timeout=30).json()
        assert created["session_url"] == f"http://{socket.gethostname()}:{port}/v1/sessions/{created['session_id']}"
        started = time.monotonic()
        svc.proc.send_signal(signal.SIGTERM)
        svc.proc.wait(timeout=30)
        assert 1.5 <= time.monotonic() - started < 20
        assert '"drain_timeout"' in svc.logs()


@pytest.mark.parametrize("value", ["not a url", "ftp://x:1"])
def test_a_bad_advertise_url_stops_the_server_with_a_clear_message(tmp_path, value):
    with pytest.raises(RuntimeError, match="SKILLOS_ENV_ADVERTISE_URL must be an http"), \
            run_service(["reasoning"], env={"SKILLOS_ENV_ADVERTISE_URL": value}, tmp_path=tmp_path, ready_timeout=60):
        pass



def test_a_create_that_meets_a_gone_replica_is_retried_through_the_balancer(tmp_path):
    """A replica killed or restarted behind the load balancer: the create's connection fails, or the balancer
    answers 502 itself; the client sends it again through the balancer, which reaches a live replica (a
    timeout is not retried: the replica may still be creating). With no live replica it gives up after a few
    seconds with the reason."""
    dead = f"http://127.0.0.1:{free_port()}"
    with run_service(["reasoning"], tmp_path=tmp_path) as live, proxy_in_front_of([dead, live.url]) as proxy:
        with EnvClient(proxy.url, timeout=10) as client:
            created = client.create_session(task_id="demo-math-005")
            assert created.session_id
        assert [status for *_, status in proxy.seen[:2]] == [502, 201], proxy.seen
    slept: list[float] = []

    async def no_wait(seconds: float) -> None:
        slept.append(seconds)

    from skillos.clients.envs import AsyncEnvClient

    async def go() -> None:
        async with AsyncEnvClient(dead, timeout=5) as c:
            c._sleep = no_wait
            await c.create_session(task_id="demo-math-005")

    with pytest.raises(EnvError) as e:
        asyncio.run(go())
    assert e.value.status == 0 and slept == [0.5, 1.0, 2.0]
