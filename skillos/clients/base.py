"""What every SkillOS service client shares: the error type, the one call helper, sync from async.

Every service answers errors as ``{"error": {"code", "message", "details"}}`` (`skillos.errors`);
a client turns that into its own `ServiceError` subclass. Status 0 means the service was unreachable.

A client is written once, as coroutines, in a class deriving from `ServiceClient` whose methods go
through `ServiceClient._call` (and `_sleep` to wait). Its two faces add the I/O:

    class AsyncFooClient(_FooCalls, AsyncHTTPClient): ...   # httpx.AsyncClient, the methods as written
    class FooClient(_FooCalls, SyncHTTPClient): ...         # httpx.Client, every public coroutine
                                                            # method turned into a blocking one

The sync face's I/O never suspends, so each of its calls runs the shared coroutine to its end without
an event loop (`run_blocking`): same code path, same errors, same signatures.
"""

from __future__ import annotations

import asyncio
import functools
import inspect
import threading
import time
from collections.abc import Coroutine
from typing import Any, ClassVar, TypeVar

import httpx

T = TypeVar("T")


class ServiceError(Exception):
    def __init__(self, status: int, code: str, message: str, details: Any = None, **extra: Any):
        super().__init__(f"{status} {code}: {message}")
        self.status, self.code, self.message, self.details = status, code, message, details
        for key, value in extra.items():
            setattr(self, key, value)


def error_fields(resp: httpx.Response) -> tuple[str, str, Any]:
    """(code, message, details) of an error answer; a body not in the common shape becomes the message."""
    try:
        err = resp.json()["error"]
        return err.get("code", "error"), err.get("message", ""), err.get("details")
    except (ValueError, KeyError, TypeError, AttributeError):
        return "error", resp.text[:500], None


def raise_for_error(resp: httpx.Response, error: type[ServiceError] = ServiceError, **extra: Any) -> None:
    if resp.status_code >= 400:
        raise error(resp.status_code, *error_fields(resp), **extra)


def auth_headers(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


class ServiceClient:
    """One service's calls. Subclasses set `error` and `unreachable`, and write their methods as
    coroutines over `_call`; `AsyncHTTPClient` / `SyncHTTPClient` supply `_open`, `_send` and `_sleep`."""

    error: ClassVar[type[ServiceError]] = ServiceError
    # the message of a transport failure (status 0); fields: base_url, method, where (the URL), kind, e
    unreachable: ClassVar[str] = "{where}: {kind}: {e}"
    base_url: str

    def _open(self, base_url: str, headers: dict[str, str], timeout: float, transport: Any) -> None:
        raise NotImplementedError

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        raise NotImplementedError

    async def _sleep(self, seconds: float) -> None:
        raise NotImplementedError

    def _request_kwargs(self, kw: dict[str, Any]) -> dict[str, Any]:
        """The httpx keyword arguments of a call, as sent (a hook: e.g. per-call auth headers)."""
        return kw

    def _raise_for(self, resp: httpx.Response) -> None:
        raise_for_error(resp, self.error)

    async def _call(self, method: str, path: str, **kw: Any) -> httpx.Response:
        """Send one request; an error answer or a transport failure raises `error`."""
        try:
            resp = await self._send(method, path, **self._request_kwargs(kw))
        except httpx.HTTPError as e:
            where = path if path.startswith("http") else self.base_url + path
            raise self.error(0, "unreachable", self.unreachable.format(
                base_url=self.base_url, method=method, where=where, kind=type(e).__name__, e=e)) from e
        self._raise_for(resp)
        return resp


class AsyncHTTPClient(ServiceClient):
    """The asynchronous face: an `httpx.AsyncClient` in ``self._http``, closing and `async with`."""

    _http: httpx.AsyncClient

    def _open(self, base_url: str, headers: dict[str, str], timeout: float,
              transport: httpx.AsyncBaseTransport | None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=headers, timeout=timeout,
                                       transport=transport)

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return await self._http.request(method, path, **kw)

    async def _sleep(self, seconds: float) -> None:
        await asyncio.sleep(seconds)

    async def aclose(self) -> None:
        await self._http.aclose()

    async def __aenter__(self):
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()


_running = threading.local()  # how deep this thread is in run_blocking


def run_blocking(coro: Coroutine[Any, Any, T]) -> T:
    """The result of a coroutine that never suspends (a sync client's call), run without an event loop."""
    _running.depth = getattr(_running, "depth", 0) + 1
    try:
        coro.send(None)
    except StopIteration as done:
        return done.value
    finally:
        _running.depth -= 1
    coro.close()
    raise RuntimeError("a synchronous client's call waited on the event loop")


def _blocking(method):
    @functools.wraps(method)
    def call(*args, **kwargs):
        coro = method(*args, **kwargs)
        if getattr(_running, "depth", 0):  # awaited by a shared method already being run: stay a coroutine
            return coro
        return run_blocking(coro)

    return call


class SyncHTTPClient(ServiceClient):
    """The synchronous face: an `httpx.Client` in ``self._http``, closing and `with`.

    A subclass gets every public coroutine method of its bases as a blocking method of the same name,
    signature and documentation; called from inside another of them (``await self.info()``), it stays the
    coroutine that the caller awaits."""

    _http: httpx.Client

    def __init_subclass__(cls, **kw: Any) -> None:
        super().__init_subclass__(**kw)
        for name in dir(cls):
            if not name.startswith("_") and inspect.iscoroutinefunction(inspect.getattr_static(cls, name)):
                setattr(cls, name, _blocking(getattr(cls, name)))

    def _open(self, base_url: str, headers: dict[str, str], timeout: float,
              transport: httpx.BaseTransport | None) -> None:
        self.base_url = base_url.rstrip("/")
        self._http = httpx.Client(base_url=self.base_url, headers=headers, timeout=timeout, transport=transport)

    async def _send(self, method: str, path: str, **kw: Any) -> httpx.Response:
        return self._http.request(method, path, **kw)  # blocks; never suspends

    async def _sleep(self, seconds: float) -> None:
        time.sleep(seconds)  # noqa: ASYNC251 -- the sync face blocks by design

    def close(self) -> None:
        self._http.close()

    def __enter__(self):
        return self

    def __exit__(self, *exc) -> None:
        self.close()
