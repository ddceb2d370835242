"""HTTP clients of the environment servers (`skillos.protocol.envs`): `AsyncEnvClient` and its sync twin.

Both are written once, in `_EnvCalls`; `EnvClient` runs the same calls blocking (`skillos.clients.base`).

    c = AsyncEnvClient("http://127.0.0.1:8010")
    s = await c.create_session(split="valid_seen", index=0)
    r = await c.step(s.session_id, "look")
    await c.close_session(s.session_id)

Errors from the server (4xx/5xx in the common error shape) and transport failures are raised as
`EnvError(status, code, message)`; transport failures have status 0.

Behind a load balancer with several replicas, a new session comes with its replica's own address
(`session_url`); the client sends that session's later calls there, so they never reach a replica that
does not hold it. A create refused with 503 ``draining`` (a replica shutting down) is retried.
"""

from __future__ import annotations

from typing import Any

import httpx

from skillos.clients.base import (
    AsyncHTTPClient,
    ServiceClient,
    ServiceError,
    SyncHTTPClient,
    auth_headers,
    raise_for_error,
)
from skillos.protocol.envs import (
    SessionCreated,
    SessionState,
    SplitsResponse,
    StepResponse,
    TaskInfo,
    TasksResponse,
)


class EnvError(ServiceError):
    retry_after: float | None = None  # seconds, on 429


CREATE_RETRIES = 10  # 503 draining: each retry goes through the load balancer again
CONNECT_RETRIES = 3  # a create whose connection failed: 0.5 + 1 + 2 s, then the error
MAX_ROUTES = 10_000  # session -> replica address entries kept (oldest dropped; sessions are short-lived)


class _SessionRoutes:
    """Where each open session's calls go: its `session_url`, or this client's base URL."""

    def __init__(self) -> None:
        self._urls: dict[str, str] = {}

    def remember(self, created: SessionCreated) -> None:
        if created.session_url:
            if len(self._urls) >= MAX_ROUTES:
                self._urls.pop(next(iter(self._urls)))
            self._urls[created.session_id] = created.session_url.rstrip("/")

    def url(self, session_id: str, suffix: str = "") -> str:
        return self._urls.get(session_id, f"/v1/sessions/{session_id}") + suffix

    def forget(self, session_id: str) -> None:
        self._urls.pop(session_id, None)


def _retry_delay(e: EnvError, attempt: int) -> float | None:
    """Seconds to wait before retrying a create, or None when it must not be retried."""
    if e.status == 503 and e.code == "draining" and attempt < CREATE_RETRIES:
        return min(e.retry_after or 1.0, 5.0)
    # a replica gone (killed, restarted) behind the load balancer: the connection failed or was cut before an
    # answer; again through the load balancer, which sends it to another replica (a cut create may leave a
    # session on a live replica: its TTL reaps it). A timeout is not retried: the replica may still be working.
    gone = (e.status == 0 and isinstance(e.__cause__, (httpx.ConnectError, httpx.RemoteProtocolError))) \
        or (e.status in (502, 504) and e.code == "error")   # the load balancer's own answer, not the env's JSON
    if gone and attempt < CONNECT_RETRIES:
        return 0.5 * 2 ** attempt
    return None


def _session_body(task_id, split, index, expert, seed) -> dict[str, Any]:
    body: dict[str, Any] = {"expert": expert}
    if task_id is not None:
        body["task_id"] = task_id
    if split is not None:
        body["split"] = split
    if index is not None:
        body["index"] = index
    if seed is not None:
        body["seed"] = seed
    return body


class _EnvCalls(ServiceClient):
    """An env server's calls, once; `EnvClient` and `AsyncEnvClient` add the I/O."""

    error = EnvError
    unreachable = "{method} {where}: {kind}: {e}"

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120.0,
                 transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None):
        self._open(base_url, auth_headers(token), timeout, transport)
        self._routes = _SessionRoutes()

    def _raise_for(self, resp: httpx.Response) -> None:
        raise_for_error(resp, EnvError, retry_after=_seconds(resp.headers.get("Retry-After")))

    async def info(self) -> SplitsResponse:
        """The env's name, splits and data directory."""
        return SplitsResponse.model_validate((await self._call("GET", "/v1/splits")).json())

    async def splits(self) -> list[str]:
        return (await self.info()).splits

    async def tasks(self, split: str | None = None, type: str | None = None) -> list[TaskInfo]:
        params = {k: v for k, v in (("split", split), ("type", type)) if v is not None}
        return TasksResponse.model_validate((await self._call("GET", "/v1/tasks", params=params)).json()).tasks

    async def create_session(self, task_id: str | None = None, split: str | None = None,
                             index: int | None = None, expert: bool = False,
                             seed: int | None = None) -> SessionCreated:
        body = _session_body(task_id, split, index, expert, seed)
        for attempt in range(CREATE_RETRIES + 1):
            try:
                created = SessionCreated.model_validate((await self._call("POST", "/v1/sessions", json=body)).json())
                break
            except EnvError as e:
                if (delay := _retry_delay(e, attempt)) is None:
                    raise
                await self._sleep(delay)
        self._routes.remember(created)
        return created

    async def step(self, session_id: str, action: str) -> StepResponse:
        resp = await self._call("POST", self._routes.url(session_id, "/step"), json={"action": action})
        return StepResponse.model_validate(resp.json())

    async def session(self, session_id: str) -> SessionState:
        return SessionState.model_validate((await self._call("GET", self._routes.url(session_id))).json())

    async def close_session(self, session_id: str) -> None:
        try:
            await self._call("DELETE", self._routes.url(session_id))
        finally:
            self._routes.forget(session_id)


class AsyncEnvClient(_EnvCalls, AsyncHTTPClient):
    pass


class EnvClient(_EnvCalls, SyncHTTPClient):
    """The synchronous twin of `AsyncEnvClient` (same methods, same errors)."""


def _seconds(retry_after: str | None) -> float | None:
    """Retry-After in seconds, or None when it is not a plain number ('²' is a digit to str.isdigit,
    and 5,000 nines are a float('inf') that the executor would turn into an OverflowError)."""
    try:
        seconds = float(retry_after) if retry_after and retry_after.isascii() else None
    except ValueError:
        return None
    return seconds if seconds is not None and 0 <= seconds <= 3600 else None
