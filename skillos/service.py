"""The common shape of every SkillOS HTTP service.

`create_app` gives a FastAPI app with ``/healthz`` (alive), ``/readyz`` (dependencies reachable),
``/metrics`` (Prometheus text), request logging and metrics, every error rendered in the one
shape of `skillos.errors`, and one guard at the door for bad input (`_Door`). Parts add their
routers and readiness checks; `serve` runs it (uvicorn's own refusals in the same shape).
"""

from __future__ import annotations

import asyncio
import functools
import signal
import time
from collections.abc import Awaitable, Callable, Mapping
from contextlib import AbstractAsyncContextManager
from types import FrameType
from typing import Any

import uvicorn
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse
from prometheus_client import CONTENT_TYPE_LATEST, Counter, Histogram, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from skillos import __version__
from skillos.errors import APIError, ErrorBody, ErrorResponse, unavailable
from skillos.logging import get_logger
from skillos.textguard import MAX_JSON_DEPTH, bad_char, check_json_body

ReadinessCheck = Callable[[], Awaitable[None]]  # raises when the dependency is not reachable

HTTP_REQUESTS = Counter(
    "skillos_http_requests_total", "HTTP requests served", ["service", "method", "route", "status"])
HTTP_LATENCY = Histogram(
    "skillos_http_request_duration_seconds", "HTTP request latency", ["service", "method", "route"],
    buckets=(0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60))

_HTTP_CODES = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
               405: "method_not_allowed", 406: "not_acceptable", 409: "conflict", 411: "length_required",
               412: "precondition_failed", 413: "payload_too_large", 414: "uri_too_long",
               415: "unsupported_media_type", 422: "invalid_request", 429: "too_many_requests",
               431: "header_fields_too_large"}

DEFAULT_MAX_REQUEST_BYTES = 8 * 1024 * 1024
DEFAULT_MAX_JSON_DEPTH = MAX_JSON_DEPTH


def _error(status: int, code: str, message: str, details: Any = None, headers=None) -> JSONResponse:
    body = ErrorResponse(error=ErrorBody(code=code, message=message, details=details)).model_dump()
    return JSONResponse(body, status_code=status, headers=headers)


def _describe_validation(exc: RequestValidationError) -> tuple[str, list[dict]]:
    details = []
    for e in exc.errors():
        loc = ".".join(str(p) for p in e.get("loc", ()) if p != "body") or "body"
        details.append({"field": loc, "problem": e.get("msg", "invalid")})
    summary = "; ".join(f"{d['field']}: {d['problem']}" for d in details[:5])
    return f"invalid request: {summary}", details


class _Refused(APIError):
    """Raised from the door's ``receive`` while a body streams in; the door answers with it."""


def _content_kind(headers: dict[bytes, bytes]) -> str:
    ctype = headers.get(b"content-type", b"").split(b";")[0].strip().lower()
    # what FastAPI parses as JSON: no content type, application/json, application/*+json
    if not ctype or ctype == b"application/json" or (ctype.startswith(b"application/") and ctype.endswith(b"+json")):
        return "json"
    if ctype.startswith(b"text/") or ctype == b"application/x-www-form-urlencoded":
        return "text"
    return "other"


class _Door:
    """One guard for bad input in front of every route, as plain ASGI middleware.

    * the path, query string and headers: no NUL character (``%00``) and, in the path, no lone surrogate;
    * the body: a declared ``Content-Length`` over ``max_request_bytes`` is refused before reading, and the
      bytes are counted as they stream in (chunked bodies too): 413 at the limit, without reading on;
    * JSON bodies (what FastAPI parses as JSON) are read whole (bounded by the limit) and refused when
      nested deeper than ``max_json_depth`` or when a string holds a NUL or a lone surrogate; text bodies
      (``text/*``, forms) are refused on a NUL byte as they stream.
    Every refusal is a 4xx in the one error shape, so nothing of the kind reaches a database, a serializer
    or a recursive parser of a route.
    """

    def __init__(self, app, max_request_bytes: int, max_json_depth: int):
        self.app, self.limit, self.max_depth = app, max_request_bytes, max_json_depth

    @staticmethod
    async def _answer(scope, receive, send, status: int, code: str, message: str) -> None:
        await _error(status, code, message)(scope, receive, send)

    def _head_problem(self, scope) -> tuple[str, str] | None:
        path = scope["path"]
        if "\x00" in path or (not path.isascii() and bad_char(path)):
            return "invalid_character", f"the path holds {bad_char(path)}"
        qs = scope.get("query_string", b"")
        if b"%00" in qs or b"\x00" in qs:
            return "invalid_character", "the query string holds a NUL character (%00)"
        for k, v in scope["headers"]:
            if b"\x00" in v:
                return "invalid_character", f"header {k.decode('latin-1')!r} holds a NUL character"
        return None

    def _too_large(self, size: int | None = None) -> _Refused:
        said = f"request body is {size} bytes" if size is not None else f"request body is over {self.limit} bytes"
        return _Refused(413, "payload_too_large", f"{said}; the limit is {self.limit} (SKILLOS_MAX_REQUEST_BYTES)")

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        if problem := self._head_problem(scope):
            return await self._answer(scope, receive, send, 400, *problem)
        headers = dict(scope["headers"])
        length = headers.get(b"content-length")
        if length is not None and length.isdigit() and int(length) > self.limit:
            e = self._too_large(int(length))
            return await self._answer(scope, receive, send, e.status, e.code, e.message)
        if length in (None, b"0") and b"transfer-encoding" not in headers:
            return await self.app(scope, receive, send)  # no body (a GET): nothing more to guard

        kind = _content_kind(headers)
        if kind == "json":
            chunks, size = [], 0
            while True:
                message = await receive()
                if message["type"] != "http.request":
                    return  # the client went away before sending its body
                chunk = message.get("body", b"")
                size += len(chunk)
                if size > self.limit:
                    e = self._too_large()
                    return await self._answer(scope, receive, send, e.status, e.code, e.message)
                chunks.append(chunk)
                if not message.get("more_body", False):
                    break
            body = b"".join(chunks)
            # no content type: FastAPI may parse it as JSON, but an archive sent without one is not JSON
            declared = headers.get(b"content-type", b"").strip() != b""
            if problem := check_json_body(body, self.max_depth, declared=declared):
                return await self._answer(scope, receive, send, 400,
                                          "json_too_deep" if problem.code == "too_deep" else problem.code,
                                          problem.message)
            replayed = False

            async def guarded_receive():
                nonlocal replayed
                if not replayed:
                    replayed = True
                    return {"type": "http.request", "body": body, "more_body": False}
                return await receive()  # after the body: the disconnect, when it comes
        else:
            size = 0
            text = kind == "text"

            async def guarded_receive():
                nonlocal size, refused
                message = await receive()
                if message["type"] == "http.request":
                    chunk = message.get("body", b"")
                    size += len(chunk)
                    if size > self.limit:
                        refused = self._too_large()
                        raise refused
                    if text and b"\x00" in chunk:
                        refused = _Refused(400, "invalid_character", "the text body holds a NUL byte")
                        raise refused
                return message

        refused: _Refused | None = None
        started = False

        async def guarded_send(message):
            nonlocal started
            if refused is not None and not started:
                return  # the app's answer to a body it could not read: the door answers instead
            if message["type"] == "http.response.start":
                started = True
            await send(message)

        try:
            await self.app(scope, guarded_receive, guarded_send)
        except Exception:
            if refused is None or started:
                raise
        if refused is not None and not started:
            await self._answer(scope, receive, send, refused.status, refused.code, refused.message)


class _ObserveRequests:
    """Request metrics and one log line per request, as plain ASGI middleware.

    Starlette's `@app.middleware("http")` (BaseHTTPMiddleware) runs every request through an extra
    task and memory stream; with it gone (and async dependencies) the skill repo's HTTP search at 50k
    skills went from 4.5-5.6 ms to 3.3 ms p50 on the loaded development machine.
    """

    _QUIET = ("/healthz", "/readyz", "/metrics")

    def __init__(self, app, service: str, log):
        self.app, self.service, self.log = app, service, log

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()
        status = 500  # what the client gets if the app raises before answering

        async def send_observed(message):
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            elapsed = time.perf_counter() - start
            route = getattr(scope.get("route"), "path", "unmatched")
            HTTP_REQUESTS.labels(self.service, scope["method"], route, str(status)).inc()
            HTTP_LATENCY.labels(self.service, scope["method"], route).observe(elapsed)
            if route not in self._QUIET:
                self.log.info("request", method=scope["method"], path=scope["path"], status=status,
                              ms=round(elapsed * 1000, 2))


def create_app(
    service: str,
    *,
    title: str | None = None,
    description: str = "",
    readiness: list[ReadinessCheck] | None = None,
    degraded_when: list[ReadinessCheck] | None = None,
    unavailable_on: Mapping[type[BaseException], str] | None = None,
    retry_after_s: int = 1,
    lifespan: Callable[[FastAPI], AbstractAsyncContextManager] | None = None,
    extra_metrics: Callable[[], Awaitable[bytes]] | None = None,
    max_request_bytes: int = DEFAULT_MAX_REQUEST_BYTES,
    max_json_depth: int = DEFAULT_MAX_JSON_DEPTH,
) -> FastAPI:
    """``extra_metrics``: Prometheus text appended to ours (a backend's own metrics, e.g. llama.cpp's).
    ``max_request_bytes``, ``max_json_depth``: the door's limits (`_Door`).

    ``readiness``: checks whose failure makes ``/readyz`` 503 (take the replica out of rotation);
    ``degraded_when``: checks of dependencies the service can serve without (a cache, change announcements):
    their failure is named in ``/readyz``'s answer, which stays 200.
    ``unavailable_on``: exception types raised when a dependency cannot be reached (the database driver's
    connection errors), each with the dependency's name: a request that meets one is answered 503
    ``<name>_unavailable`` with ``Retry-After: retry_after_s``, in the one error shape, never a 500."""
    app = FastAPI(title=title or f"SkillOS {service}", version=__version__, description=description,
                  lifespan=lifespan)
    log = get_logger(service)
    checks = list(readiness or [])
    app.state.readiness = checks
    app.state.degraded_when = list(degraded_when or [])

    @app.exception_handler(APIError)
    async def _api_error(_: Request, exc: APIError):
        return _error(exc.status, exc.code, exc.message, exc.details, exc.headers)

    @app.exception_handler(RequestValidationError)
    async def _validation(_: Request, exc: RequestValidationError):
        message, details = _describe_validation(exc)
        return _error(422, "invalid_request", message, details)

    @app.exception_handler(StarletteHTTPException)
    async def _http(_: Request, exc: StarletteHTTPException):
        code = _HTTP_CODES.get(exc.status_code, "error")
        return _error(exc.status_code, code, str(exc.detail), headers=getattr(exc, "headers", None))

    for exc_type, dependency in (unavailable_on or {}).items():
        async def _unavailable(request: Request, exc: BaseException, dependency: str = dependency) -> JSONResponse:
            first_line = (str(exc).strip().splitlines() or [""])[0][:200]
            # the driver's words (hosts, ports) go to the log, not to the client
            log.warning("dependency_unavailable", dependency=dependency, path=request.url.path,
                        error=f"{type(exc).__name__}: {first_line}")
            e = unavailable(dependency, f"the {dependency} cannot be reached now ({type(exc).__name__}): "
                                        f"retry after {retry_after_s} s", retry_after_s)
            return _error(e.status, e.code, e.message, headers=e.headers)

        app.add_exception_handler(exc_type, _unavailable)

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled_error", path=request.url.path)
        return _error(500, "internal_error", f"internal error: {type(exc).__name__}")

    # the door inside the observer: its refusals are counted and logged like any answer
    app.add_middleware(_Door, max_request_bytes=max_request_bytes, max_json_depth=max_json_depth)
    app.add_middleware(_ObserveRequests, service=service, log=log)

    @app.get("/healthz", tags=["ops"], summary="The process is alive")
    async def healthz() -> dict:
        return {"status": "ok", "service": service}

    @app.get("/readyz", tags=["ops"], summary="Dependencies are reachable",
             responses={503: {"model": ErrorResponse}})
    async def readyz():
        failed, degraded = {}, {}
        for found, group in ((failed, app.state.readiness), (degraded, app.state.degraded_when)):
            for check in group:
                try:
                    await check()
                except Exception as e:  # noqa: BLE001 - any failure means not ready (or degraded)
                    found[getattr(check, "__name__", "check")] = f"{type(e).__name__}: {e}"
        if failed:
            return _error(503, "not_ready", "dependencies not reachable", {**failed, **degraded})
        if degraded:
            return {"status": "ready", "service": service, "degraded": degraded}
        return {"status": "ready", "service": service}

    @app.get("/metrics", tags=["ops"], summary="Prometheus metrics", response_class=PlainTextResponse)
    async def metrics():
        body = generate_latest()
        if extra_metrics is not None:
            body += b"\n" + await extra_metrics()
        return PlainTextResponse(body, media_type=CONTENT_TYPE_LATEST)

    return app


async def run_bounded(fn: Callable[..., Any], *args: Any, timeout_s: float) -> Any:
    """``fn(*args)`` in a worker thread, awaited at most ``timeout_s`` (raises `TimeoutError` past it).

    Starlette's `run_in_threadpool` cannot be cancelled: a thread blocked on a dependency that stopped
    answering (a frozen database keeps its connections open) holds the request for as long as it blocks.
    Here the request is let go at the bound and the thread finishes on its own; what it was doing (a write)
    may still complete afterwards, which the caller must say in its answer."""
    import anyio.to_thread

    return await asyncio.wait_for(anyio.to_thread.run_sync(functools.partial(fn, *args), abandon_on_cancel=True),
                                  timeout=timeout_s)


async def unless_disconnected(request: Request, work: Awaitable[Any], poll_s: float = 1.0) -> Any:
    """Await ``work`` but cancel it when the client goes away: an episode or a completion nobody waits
    for any more would keep the LLM busy for minutes (Starlette does not cancel handlers itself)."""
    task = asyncio.ensure_future(work)
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=poll_s)
            if done:
                return task.result()
            if await request.is_disconnected():
                task.cancel()
                raise APIError(499, "client_closed_request", "the client closed the connection; work cancelled")
    finally:
        if not task.done():
            task.cancel()


def serve(app: FastAPI | str, host: str, port: int, *, log_level: str = "info", factory: bool = False,
          workers: int = 1) -> None:
    """Run with uvicorn. Our middleware logs requests, so uvicorn's access log is off; uvicorn's own refusals
    (malformed requests, a URL or headers too long) answer in our error shape (`skillos.http_protocols`).

    An app with ``app.state.drain`` (an async callable) drains on SIGTERM: the callable runs while the
    server keeps serving, and the server shuts down when it returns (a second signal: at once)."""
    from skillos.http_protocols import MAX_HEAD_BYTES, JsonRefusalProtocol

    options: dict[str, Any] = {
        "host": host, "port": port, "log_level": log_level.lower(), "access_log": False, "factory": factory,
        "timeout_graceful_shutdown": 10, "http": JsonRefusalProtocol,
        "h11_max_incomplete_event_size": MAX_HEAD_BYTES}
    drain = getattr(getattr(app, "state", None), "drain", None)
    if drain is None or workers != 1:
        uvicorn.run(app, workers=workers, **options)
        return
    _DrainingServer(uvicorn.Config(app, **options), drain).run()


class _DrainingServer(uvicorn.Server):
    """uvicorn's server that, on the first SIGTERM, keeps serving until ``drain()`` returns.

    uvicorn closes its listening socket as soon as a signal arrives; an env replica being scaled down must
    instead go on answering the steps of its open episodes (clients reach it by its advertised address)
    while the load balancer stops sending it new sessions."""

    def __init__(self, config: uvicorn.Config, drain: Callable[[], Awaitable[None]]):
        super().__init__(config)
        self._drain = drain
        self._draining: asyncio.Future | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    async def serve(self, sockets=None) -> None:
        self._loop = asyncio.get_running_loop()
        await super().serve(sockets)

    def handle_exit(self, sig: int, frame: FrameType | None) -> None:
        if sig == signal.SIGTERM and self._draining is None and not self.should_exit and self._loop:
            self._captured_signals.append(sig)  # re-raised after shutdown, as uvicorn does
            self._loop.call_soon_threadsafe(self._start_draining)
            return
        super().handle_exit(sig, frame)

    def _start_draining(self) -> None:
        if self._draining is None:
            self._draining = asyncio.ensure_future(self._drain_then_exit())

    async def _drain_then_exit(self) -> None:
        try:
            await self._drain()
        except Exception:  # noqa: BLE001 - a failed drain still ends in a shutdown
            get_logger("service").exception("drain_failed")
        finally:
            self.should_exit = True
