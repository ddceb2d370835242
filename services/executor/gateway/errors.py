"""The OpenAI error object on the gateway's routes, as vLLM's OpenAI server answers:
``{"error": {"message", "type", "param", "code"}}``.

Every part of the service raises and renders errors in the project's one shape (`skillos.errors`); the
gateway's routes are for clients written against the OpenAI API, so `OpenAIErrors` rewrites an error
answer of those routes at the edge, whoever produced it: a route (`APIError`), request validation (422,
answered 400 as OpenAI and vLLM do), the door of `skillos.service` (413 oversized body, 400 bad JSON), an
unknown path (404). ``details.param`` of an `APIError` becomes ``param``.
"""

from __future__ import annotations

import json
from typing import Any

from pydantic import BaseModel

from skillos.errors import APIError

# the paths whose errors are answered as OpenAI's
OPENAI_PATHS = ("/v1/chat/", "/v1/models", "/v1/trajectories")


class OpenAIErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class OpenAIErrorResponse(BaseModel):
    error: OpenAIErrorBody


def error_type(status: int) -> str:
    if status == 404:
        return "not_found_error"
    if status == 429:
        return "rate_limit_error"
    if status in (401, 403):
        return "authentication_error" if status == 401 else "permission_error"
    return "invalid_request_error" if status < 500 else "server_error"


def openai_error(status: int, code: str, message: str, param: str | None = None) -> dict[str, Any]:
    return OpenAIErrorResponse(error=OpenAIErrorBody(message=message, type=error_type(status), param=param,
                                                     code=code)).model_dump()


def gateway_error(status: int, code: str, message: str, param: str | None = None,
                  headers: dict[str, str] | None = None) -> APIError:
    """An `APIError` whose OpenAI rendering names ``param``."""
    return APIError(status, code, message, {"param": param} if param else None, headers=headers)


def translate(status: int, body: bytes) -> tuple[int, bytes]:
    """(status, body) of an error answer in the project's shape, as the OpenAI error object."""
    try:
        err = json.loads(body)["error"]
        code, message, details = err.get("code"), err.get("message", ""), err.get("details")
    except (ValueError, KeyError, TypeError, AttributeError):
        return status, body
    if "type" in err:  # already OpenAI's
        return status, body
    param = None
    if isinstance(details, dict):
        param = details.get("param")
    elif isinstance(details, list) and details and isinstance(details[0], dict):
        param = details[0].get("field")  # request validation: the first field at fault
        if isinstance(param, str) and param.isdigit():
            param = None  # a JSON syntax error: the position, not a field
    if status == 422:
        status = 400
    return status, json.dumps(openai_error(status, code, message, param)).encode()


class OpenAIErrors:
    """ASGI middleware: the error answers of `OPENAI_PATHS` in the OpenAI shape; anything else untouched
    (a success, a stream, another route's error). Only an error's body is held back, never a stream's."""

    def __init__(self, app):
        self.app = app

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http" or not scope["path"].startswith(OPENAI_PATHS):
            return await self.app(scope, receive, send)
        start: dict | None = None
        chunks: list[bytes] = []

        async def send_translated(message):
            nonlocal start
            if message["type"] == "http.response.start":
                headers = dict(message.get("headers") or [])
                if message["status"] >= 400 and headers.get(b"content-type", b"").startswith(b"application/json"):
                    start = message
                    return
                return await send(message)
            if start is None or message["type"] != "http.response.body":
                return await send(message)
            chunks.append(message.get("body", b""))
            if message.get("more_body", False):
                return
            status, body = translate(start["status"], b"".join(chunks))
            headers = [(k, v) for k, v in start.get("headers") or [] if k.lower() != b"content-length"]
            headers.append((b"content-length", str(len(body)).encode()))
            await send({**start, "status": status, "headers": headers})
            await send({"type": "http.response.body", "body": body})

        await self.app(scope, receive, send_translated)
