"""uvicorn's HTTP/1.1 protocols with their own refusals in the one error shape of `skillos.errors`.

What uvicorn refuses before any app runs (a malformed request; with h11, a request line and headers over
h11's buffer) it answers as ``400 text/plain "Invalid HTTP request received."``. These subclasses answer
the same refusals as JSON, and bound the request head themselves with a status that says what to fix:
a URL over `MAX_URL_BYTES` is ``414 uri_too_long``, a request head (request line and headers) over
`MAX_HEAD_BYTES` is ``431 header_fields_too_large`` (httptools, uvicorn's default parser, has no bound
of its own: a header grows in memory as long as the client sends it).

`skillos.service.serve` runs every service with `JsonRefusalProtocol` (module level, so that uvicorn's
worker processes can import it by name).
"""

from __future__ import annotations

import json

import h11
from uvicorn.protocols.http.h11_impl import H11Protocol

MAX_URL_BYTES = 64 * 1024    # a 4096-char search query, percent-encoded, is at most ~48 KiB
MAX_HEAD_BYTES = 128 * 1024  # request line and headers

_REASONS = {400: b"Bad Request", 414: b"URI Too Long", 431: b"Request Header Fields Too Large"}


def _refusal_bytes(status: int, code: str, message: str, default_headers) -> bytes:
    body = json.dumps({"error": {"code": code, "message": message, "details": None}}).encode()
    head = [b"HTTP/1.1 %d %s\r\n" % (status, _REASONS.get(status, b"Bad Request"))]
    head += [name + b": " + value + b"\r\n" for name, value in default_headers]
    head.append(b"content-type: application/json\r\ncontent-length: %d\r\nconnection: close\r\n\r\n" % len(body))
    return b"".join(head) + body


def _head_too_large() -> tuple[int, str, str]:
    return 431, "header_fields_too_large", f"the request line and headers are over {MAX_HEAD_BYTES} bytes"


class _JsonRefusals:
    """`send_400_response` (uvicorn's answer to a request it cannot parse) in the JSON error shape, with the
    status and reason of a bound we hit ourselves (``self._refusal``) when that was the cause."""

    _refusal: tuple[int, str, str] | None = None

    def send_400_response(self, msg: str) -> None:
        status, code, message = self._refusal or (400, "bad_request", f"invalid HTTP request: {msg}")
        if not self.transport.is_closing():
            self.transport.write(_refusal_bytes(status, code, message, self.server_state.default_headers))
            self.transport.close()


class JsonH11Protocol(_JsonRefusals, H11Protocol):
    """h11 (the fallback parser): its buffer bound (``h11_max_incomplete_event_size``, set to `MAX_HEAD_BYTES`
    by `serve`) answered as 431 JSON."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        next_event = self.conn.next_event

        def guarded_next_event():
            try:
                return next_event()
            except h11.RemoteProtocolError as e:
                if e.error_status_hint == 431:
                    self._refusal = _head_too_large()
                raise

        self.conn.next_event = guarded_next_event


try:
    from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
except ImportError:  # pragma: no cover - uvicorn[standard] brings httptools
    JsonHttpToolsProtocol = None
else:
    class JsonHttpToolsProtocol(_JsonRefusals, HttpToolsProtocol):
        """httptools (uvicorn's default parser): the URL and the head bounded as they are parsed, and while
        they stream in (httptools holds a header's value until it ends)."""

        _head_open = True  # bytes received now belong to a request head
        _head_seen = 0     # bytes received since the head began (a chunk may carry some body too)
        _head_size = 0     # bytes of URL and headers parsed

        def data_received(self, data: bytes) -> None:
            if self._head_open:
                self._head_seen += len(data)
            super().data_received(data)
            # refused only when the head is still open past the bound (a chunk may carry a body too)
            if self._head_open and self._head_seen > MAX_HEAD_BYTES and not self.transport.is_closing():
                self._refusal = _head_too_large()
                self.send_400_response("request head too large")

        def on_message_begin(self) -> None:
            super().on_message_begin()
            self._head_size = 0

        def on_url(self, url: bytes) -> None:
            super().on_url(url)
            self._head_size += len(url)
            if len(self.url) > MAX_URL_BYTES:
                message = f"the URL is over {MAX_URL_BYTES} bytes: send less in the query string (or use a body)"
                self._refusal = (414, "uri_too_long", message)
                raise ValueError("URL too long")  # httptools stops; uvicorn calls send_400_response

        def on_header(self, name: bytes, value: bytes) -> None:
            self._head_size += len(name) + len(value) + 4
            if self._head_size > MAX_HEAD_BYTES:
                self._refusal = _head_too_large()
                raise ValueError("request head too large")
            super().on_header(name, value)

        def on_headers_complete(self) -> None:
            self._head_open = False
            super().on_headers_complete()

        def on_message_complete(self) -> None:
            super().on_message_complete()
            self._head_open, self._head_seen = True, 0


JsonRefusalProtocol = JsonHttpToolsProtocol or JsonH11Protocol
