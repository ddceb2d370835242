"""The service clients are written once (async) and run blocking by their sync twins: both faces must agree
on signatures, answers and errors. No service: httpx's MockTransport answers."""

from __future__ import annotations

import asyncio
import inspect

import httpx
import pytest

from skillos.clients.envs import AsyncEnvClient, EnvClient, EnvError
from skillos.clients.executor import AsyncExecutorClient, ExecutorClient
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoClient, SkillRepoError

PAIRS = [(SkillRepoClient, AsyncSkillRepoClient), (EnvClient, AsyncEnvClient), (ExecutorClient, AsyncExecutorClient)]


@pytest.mark.parametrize(("sync", "async_"), PAIRS, ids=lambda c: c.__name__)
def test_the_sync_twin_has_every_method_blocking_with_the_same_signature(sync, async_):
    public = [n for n in dir(async_) if not n.startswith("_") and inspect.iscoroutinefunction(getattr(async_, n))]
    assert len(public) >= 3
    for name in public:
        if name in ("aclose", "close"):
            continue
        method = getattr(sync, name)
        assert not inspect.iscoroutinefunction(method), name
        assert inspect.signature(method) == inspect.signature(getattr(async_, name)), name
        assert method.__doc__ == getattr(async_, name).__doc__


def _repo_handler(request: httpx.Request) -> httpx.Response:
    if request.url.path == "/v1/repos/demo":
        return httpx.Response(200, json={"name": "demo", "skill_count": 2, "seq": 5,
                                         "created_at": "2025-01-01T00:00:00Z"})
    if request.url.path == "/v1/whoami":
        return httpx.Response(200, json={"mode": "tokens", "scope": "rw", "prefix": request.headers["authorization"]})
    return httpx.Response(404, json={"error": {"code": "repo_not_found", "message": "no such repo", "details": None}})


def test_both_faces_answer_and_fail_alike():
    sync = SkillRepoClient("http://repo", transport=httpx.MockTransport(_repo_handler))

    async def run_async():
        async with AsyncSkillRepoClient("http://repo", transport=httpx.MockTransport(_repo_handler)) as c:
            repo = await c.get_repo("demo")
            with pytest.raises(SkillRepoError) as err:
                await c.get_repo("other")
            return repo, err.value, await c.with_token("t2").whoami()

    a_repo, a_err, a_who = asyncio.run(run_async())
    s_repo = sync.get_repo("demo")
    with pytest.raises(SkillRepoError) as err:
        sync.get_repo("other")
    assert s_repo == a_repo and s_repo.seq == 5
    assert (err.value.status, err.value.code, err.value.message) == (a_err.status, a_err.code, a_err.message) \
        == (404, "repo_not_found", "no such repo")
    assert sync.with_token("t2").whoami() == a_who and a_who.prefix == "Bearer t2"
    sync.close()


def test_retry_after_is_read_only_when_it_is_a_plain_number_of_seconds():
    # '²' is a digit to str.isdigit and 5,000 nines are float('inf'): both were passed on before, and the
    # executor's int(retry_after) then raised (a 500)
    for header, seconds in (("2", 2.0), ("0.5", 0.5), ("\xb2", None), ("9" * 5000, None), ("-1", None),
                            ("nan", None), ("soon", None)):
        def busy(request: httpx.Request, header=header) -> httpx.Response:
            return httpx.Response(429, headers={"Retry-After": header.encode("latin-1")},
                                  json={"error": {"code": "too_many_requests", "message": "busy"}})

        with EnvClient("http://env", transport=httpx.MockTransport(busy)) as c, pytest.raises(EnvError) as err:
            c.splits()
        assert (err.value.status, err.value.retry_after) == (429, seconds), header


def test_unreachable_is_status_0_on_both_faces():
    def refuse(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("refused", request=request)

    with EnvClient("http://env", transport=httpx.MockTransport(refuse)) as c, pytest.raises(EnvError) as err:
        c.splits()  # awaits info() inside: a nested public call stays a coroutine
    assert err.value.status == 0 and err.value.code == "unreachable" and err.value.retry_after is None
    assert err.value.message == "GET http://env/v1/splits: ConnectError: refused"

    async def run_async():
        async with AsyncEnvClient("http://env", transport=httpx.MockTransport(refuse)) as a:
            with pytest.raises(EnvError) as aerr:
                await a.splits()
            return aerr.value

    assert asyncio.run(run_async()).message == err.value.message


def test_a_sync_client_works_inside_a_running_event_loop():
    async def inside():
        with SkillRepoClient("http://repo", transport=httpx.MockTransport(_repo_handler)) as c:
            return c.get_repo("demo").name

    assert asyncio.run(inside()) == "demo"
