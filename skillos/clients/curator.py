"""HTTP client of the curator service.

    async with AsyncCuratorClient("http://127.0.0.1:8003") as c:
        resp = await c.curate(CurateRequest(...))        # -> CurateResponse
        score = await c.judge_content(ContentJudgeRequest(...))

It satisfies `skillos.stream.CuratorLike`, so the stream loop can use it or an in-process
policy interchangeably. Errors: `CuratorError(status, code, message)`; status 0 when unreachable.
"""

from __future__ import annotations

import httpx

from skillos.clients.base import AsyncHTTPClient, ServiceError, auth_headers
from skillos.protocol.curator import ContentJudgeRequest, ContentJudgeResponse, CurateRequest, CurateResponse


class CuratorError(ServiceError):
    pass


class AsyncCuratorClient(AsyncHTTPClient):
    error = CuratorError
    unreachable = "curator at {base_url} not reachable: {e!r}"

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 600.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        self._open(base_url, auth_headers(token), timeout, transport)

    async def curate(self, request: CurateRequest) -> CurateResponse:
        resp = await self._call("POST", "/v1/curate", json=request.model_dump(mode="json"))
        return CurateResponse.model_validate(resp.json())

    async def judge_content(self, request: ContentJudgeRequest) -> ContentJudgeResponse:
        resp = await self._call("POST", "/v1/judge/content", json=request.model_dump(mode="json", exclude_none=True))
        return ContentJudgeResponse.model_validate(resp.json())
