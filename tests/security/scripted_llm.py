"""An OpenAI-compatible LLM backend that does what the attack needs and records what reached it.

The attacks of tests/security are about what the services let through, not about what a particular model does
with it: the worst case is a model that follows whatever text reaches it. This backend is that model, on
loopback, in the test's own process (a thread), so a test reads every request it got:

* a **curator** call (its ``tools`` or ``response_format`` name the curator's functions) is answered with the
  calls of the first `curate_when` rule whose trigger text is in the prompt (a faithful curator: what a task
  text, a tool output or a feedback asked for becomes its op), as tool calls in tools mode and as
  ``{"calls": [...]}`` otherwise; no rule matches: no calls;
* any other call (the gateway's forwarding of a caller's chat) is answered ``"ok"``, streamed when asked; a
  message containing `REFUSE` is answered 400 (a backend refusing the call), one containing `SLOW` after
  ``slow_s`` seconds.
"""

from __future__ import annotations

import asyncio
import json
import threading
import time
import uuid
from typing import Any, Self

import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from skillos.net import free_port

REFUSE = "BACKEND-REFUSES-THIS"
SLOW = "BACKEND-TAKES-ITS-TIME"
CURATOR_FUNCTIONS = ("new_skill_insert", "skill_update", "skill_delete")


def text_of(body: dict[str, Any]) -> str:
    """Every text a request carries (messages, content parts), one string."""
    out = []
    for m in body.get("messages") or []:
        content = m.get("content")
        if isinstance(content, list):
            out += [str(p.get("text", "")) for p in content if isinstance(p, dict)]
        elif content is not None:
            out.append(str(content))
    return "\n".join(out)


def is_curator_call(body: dict[str, Any]) -> bool:
    asked = json.dumps({k: body.get(k) for k in ("tools", "response_format")})
    return any(name in asked for name in CURATOR_FUNCTIONS)


class ScriptedLLM:
    def __init__(self, slow_s: float = 3.0):
        self.slow_s = slow_s
        self.requests: list[dict[str, Any]] = []
        self.rules: list[tuple[str, list[dict[str, Any]]]] = []
        self._lock = threading.Lock()
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/v1"
        self._server: uvicorn.Server | None = None
        self._thread: threading.Thread | None = None

    # ------------------------------------------------------------------ what a test sets and reads
    def curate_when(self, trigger: str, calls: list[dict[str, Any]]) -> None:
        """A curator call whose prompt contains ``trigger`` is answered with ``calls`` ({name, arguments})."""
        with self._lock:
            self.rules.append((trigger, calls))

    def chat_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if not is_curator_call(r)]

    def curator_requests(self) -> list[dict[str, Any]]:
        with self._lock:
            return [r for r in self.requests if is_curator_call(r)]

    def seen(self, text: str) -> bool:
        """Whether any request carried ``text`` anywhere (messages, fields, content parts)."""
        with self._lock:
            return any(text in json.dumps(r) for r in self.requests)

    # ------------------------------------------------------------------ the server
    def _app(self) -> Starlette:
        async def chat(request: Request) -> Response:
            body = await request.json()
            with self._lock:
                self.requests.append(body)
                rules = list(self.rules)
            said = text_of(body)
            if is_curator_call(body):
                calls = next((c for trigger, c in rules if trigger in said), [])
                return JSONResponse(self._curator_answer(body, calls))
            if REFUSE in said:
                return JSONResponse({"error": {"message": "the backend refuses this request", "type": "invalid"}},
                                    status_code=400)
            if SLOW in said:
                await asyncio.sleep(self.slow_s)
            if body.get("stream"):
                return StreamingResponse(self._stream(), media_type="text/event-stream")
            return JSONResponse(_completion({"role": "assistant", "content": "ok"}, "stop"))

        async def models(_: Request) -> Response:
            return JSONResponse({"object": "list", "data": [{"id": "scripted", "object": "model",
                                                             "owned_by": "tests"}]})

        async def health(_: Request) -> Response:
            return JSONResponse({"status": "ok"})

        return Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"]),
                                 Route("/v1/models", models), Route("/health", health)])

    @staticmethod
    def _curator_answer(body: dict[str, Any], calls: list[dict[str, Any]]) -> dict[str, Any]:
        if body.get("tools"):
            tool_calls = [{"id": f"call_{i}", "type": "function",
                           "function": {"name": c["name"], "arguments": json.dumps(c["arguments"])}}
                          for i, c in enumerate(calls)]
            message = {"role": "assistant", "content": None if tool_calls else "nothing to change",
                       **({"tool_calls": tool_calls} if tool_calls else {})}
            return _completion(message, "tool_calls" if tool_calls else "stop")
        return _completion({"role": "assistant", "content": json.dumps({"calls": calls})}, "stop")

    @staticmethod
    async def _stream():
        for piece in ("o", "k"):
            chunk = {"id": "c", "object": "chat.completion.chunk", "created": int(time.time()), "model": "scripted",
                     "choices": [{"index": 0, "delta": {"content": piece}, "finish_reason": None}]}
            yield f"data: {json.dumps(chunk)}\n\n".encode()
        end = {"id": "c", "object": "chat.completion.chunk", "created": int(time.time()), "model": "scripted",
               "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}]}
        yield f"data: {json.dumps(end)}\n\ndata: [DONE]\n\n".encode()

    def __enter__(self) -> Self:
        config = uvicorn.Config(self._app(), host="127.0.0.1", port=self.port, log_level="warning",
                                lifespan="off")
        self._server = uvicorn.Server(config)
        self._thread = threading.Thread(target=self._server.run, daemon=True, name="scripted-llm")
        self._thread.start()
        deadline = time.monotonic() + 30
        while not self._server.started:
            if time.monotonic() > deadline or not self._thread.is_alive():
                raise RuntimeError("the scripted LLM did not start")
            time.sleep(0.05)
        return self

    def __exit__(self, *exc) -> None:
        if self._server is not None:
            self._server.should_exit = True
        if self._thread is not None:
            self._thread.join(timeout=10)


def _completion(message: dict[str, Any], finish_reason: str) -> dict[str, Any]:
    return {"id": f"chatcmpl-{uuid.uuid4().hex[:12]}", "object": "chat.completion", "created": int(time.time()),
            "model": "scripted", "choices": [{"index": 0, "message": message, "finish_reason": finish_reason}],
            "usage": {"prompt_tokens": 10, "completion_tokens": 1, "total_tokens": 11}}
