"""HTTP clients of the executor service (`skillos.protocol.executor`): `AsyncExecutorClient`, `ExecutorClient`.

    async with AsyncExecutorClient("http://127.0.0.1:8002") as ex:
        ep = await ex.episode(env="alfworld", task_id=tid, repo="stream-1")      # EpisodeResponse
        verdict = await ex.judge(task=ep.instruction, turns=[{"observation": t.observation, "action": t.action}
                                                              for t in ep.turns])  # JudgeResponse

An episode whose LLM failed is a normal answer (``success=False``, ``stop_reason="llm_error"``).
HTTP errors (4xx/5xx in the common error shape) and transport failures raise
`ExecutorError(status, code, message)`; transport failures have status 0.
Both clients are written once, in `_ExecutorCalls` (`skillos.clients.base`). Episodes take minutes on the
embedded model: the default timeout is long.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

import httpx

from skillos.clients.base import AsyncHTTPClient, ServiceClient, ServiceError, SyncHTTPClient, auth_headers
from skillos.protocol.executor import (
    ActRequest,
    ActResponse,
    EpisodeRequest,
    EpisodeResponse,
    JudgeRequest,
    JudgeResponse,
)

DEFAULT_TIMEOUT_S = 1800.0


class ExecutorError(ServiceError):
    pass


def _body(model, request, fields: dict[str, Any]) -> dict[str, Any]:
    req = request if request is not None else model.model_validate(fields)
    return req.model_dump(mode="json", exclude_none=True)


class _ExecutorCalls(ServiceClient):
    """The executor's calls, once; `ExecutorClient` and `AsyncExecutorClient` add the I/O."""

    error = ExecutorError
    unreachable = "executor at {base_url}: {kind}: {e}"

    def __init__(self, base_url: str, token: str | None = None, timeout: float = DEFAULT_TIMEOUT_S,
                 transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None):
        self._open(base_url, auth_headers(token), timeout, transport)

    async def _post(self, path: str, body: dict) -> dict:
        return (await self._call("POST", path, json=body)).json()

    async def episode(self, request: EpisodeRequest | None = None, **fields) -> EpisodeResponse:
        """Run one episode: pass an `EpisodeRequest` or its fields (env, task_id, repo, k, ...)."""
        return EpisodeResponse.model_validate(await self._post("/v1/episodes", _body(EpisodeRequest, request, fields)))

    async def act(self, request: ActRequest | None = None, **fields) -> ActResponse:
        return ActResponse.model_validate(await self._post("/v1/act", _body(ActRequest, request, fields)))

    async def judge(self, request: JudgeRequest | None = None, **fields) -> JudgeResponse:
        return JudgeResponse.model_validate(await self._post("/v1/judge", _body(JudgeRequest, request, fields)))

    async def record_outcome(self, trajectory: str, success: bool, score: float | None = None,
                             feedback: str | None = None) -> dict[str, Any]:
        """Close a gateway trajectory with its outcome (``POST /v1/trajectories/{id}/outcome``); the executor
        hands it to the curator. An unknown or expired trajectory raises `ExecutorError` with status 404."""
        body: dict[str, Any] = {"success": success, "score": score, "feedback": feedback}
        resp = await self._call("POST", f"/v1/trajectories/{quote(trajectory, safe='')}/outcome",
                                json={k: v for k, v in body.items() if v is not None})
        if not resp.content:
            return {}
        try:
            answer = resp.json()
        except ValueError:
            return {}
        return answer if isinstance(answer, dict) else {"answer": answer}


class AsyncExecutorClient(_ExecutorCalls, AsyncHTTPClient):
    pass


class ExecutorClient(_ExecutorCalls, SyncHTTPClient):
    """The synchronous twin of `AsyncExecutorClient`."""
