"""HTTP clients of the environment servers (`skillos.protocol.envs`): `AsyncEnvClient` and its sync twin.

    c = AsyncEnvClient("http://127.0.0.1:8010")
    s = await c.create_session(split="valid_seen", index=0)
    r = await c.step(s.session_id, "look")
    await c.close_session(s.session_id)

Errors from the server (4xx/5xx in the common error shape) and transport failures are raised as
`EnvError(status, code, message)`; transport failures have status 0.
"""

from __future__ import annotations

from typing import Any

import httpx

from skillos.clients.base import AsyncHTTPClient, ServiceError, SyncHTTPClient, auth_headers, raise_for_error
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


def _raise_for(resp: httpx.Response) -> None:
    retry = resp.headers.get("Retry-After")
    raise_for_error(resp, EnvError,
                    retry_after=float(retry) if retry and retry.replace(".", "", 1).isdigit() else None)


_headers = auth_headers


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


class AsyncEnvClient(AsyncHTTPClient):
    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=_headers(token), timeout=timeout,
                                       transport=transport)

    async def _call(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            resp = await self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise EnvError(0, "unreachable", f"{method} {self.base_url}{path}: {type(e).__name__}: {e}") from e
        _raise_for(resp)
        return resp

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
        resp = await self._call("POST", "/v1/sessions", json=_session_body(task_id, split, index, expert, seed))
        return SessionCreated.model_validate(resp.json())

    async def step(self, session_id: str, action: str) -> StepResponse:
        resp = await self._call("POST", f"/v1/sessions/{session_id}/step", json={"action": action})
        return StepResponse.model_validate(resp.json())

    async def session(self, session_id: str) -> SessionState:
        return SessionState.model_validate((await self._call("GET", f"/v1/sessions/{session_id}")).json())

    async def close_session(self, session_id: str) -> None:
        await self._call("DELETE", f"/v1/sessions/{session_id}")



class EnvClient(SyncHTTPClient):
    """The synchronous twin of `AsyncEnvClient` (same methods, same errors)."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 120.0,
                 transport: httpx.BaseTransport | None = None):
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=_headers(token), timeout=timeout,
                                  transport=transport)

    def _call(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **kw)
        except httpx.HTTPError as e:
            raise EnvError(0, "unreachable", f"{method} {self.base_url}{path}: {type(e).__name__}: {e}") from e
        _raise_for(resp)
        return resp

    def splits(self) -> list[str]:
        return SplitsResponse.model_validate(self._call("GET", "/v1/splits").json()).splits

    def tasks(self, split: str | None = None, type: str | None = None) -> list[TaskInfo]:
        params = {k: v for k, v in (("split", split), ("type", type)) if v is not None}
        return TasksResponse.model_validate(self._call("GET", "/v1/tasks", params=params).json()).tasks

    def create_session(self, task_id: str | None = None, split: str | None = None, index: int | None = None,
                       expert: bool = False, seed: int | None = None) -> SessionCreated:
        resp = self._call("POST", "/v1/sessions", json=_session_body(task_id, split, index, expert, seed))
        return SessionCreated.model_validate(resp.json())

    def step(self, session_id: str, action: str) -> StepResponse:
        return StepResponse.model_validate(
            self._call("POST", f"/v1/sessions/{session_id}/step", json={"action": action}).json())

    def session(self, session_id: str) -> SessionState:
        return SessionState.model_validate(self._call("GET", f"/v1/sessions/{session_id}").json())

    def close_session(self, session_id: str) -> None:
        self._call("DELETE", f"/v1/sessions/{session_id}")

