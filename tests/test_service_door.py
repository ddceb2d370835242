"""The service door (`skillos.service._Door`, `skillos.http_protocols`): bad input is a JSON 4xx in the one
error shape, never a 500, a hang or a body read without bound; on a tiny app from the factory served by
`skillos.service.serve` (uvicorn) on loopback, and on one other real service (the reasoning env server)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from collections.abc import Iterator

import httpx
import pytest
from conftest import ROOT, cpu_seconds, free_port, raw_request, run_service
from fastapi import Request

from skillos.textguard import MAX_JSON_DEPTH, check_json_body, decimal

# generous: on a loaded machine a plain request can take seconds; what the tests bound is the service's CPU
http = httpx.Client(timeout=120)
LIMIT = 64 * 1024  # the tiny app's max_request_bytes


def build_tiny_app():
    from skillos.service import create_app

    app = create_app("doortest", max_request_bytes=LIMIT)

    @app.post("/echo")
    async def echo(body: dict) -> dict:
        return {"keys": sorted(body)}

    @app.post("/raw")
    async def raw(request: Request) -> dict:
        size = 0
        async for chunk in request.stream():
            size += len(chunk)
        return {"bytes": size}

    @app.get("/q")
    async def query(x: str = "") -> dict:
        return {"x": x}

    @app.get("/p/{name}")
    async def path(name: str) -> dict:
        return {"name": name}

    return app


def serve_tiny_app(port: int) -> None:  # run in a subprocess below: `serve` as every service runs
    from skillos.service import serve

    serve(build_tiny_app(), "127.0.0.1", port, log_level="warning")


@pytest.fixture(scope="module")
def tiny_server(tmp_path_factory) -> Iterator[tuple[str, int]]:
    port = free_port()
    log = tmp_path_factory.mktemp("door") / "tiny.log"
    code = f"import sys; sys.path.insert(0, 'tests'); import test_service_door as t; t.serve_tiny_app({port})"
    with open(log, "wb") as out:
        proc = subprocess.Popen([sys.executable, "-c", code], cwd=ROOT, stdout=out, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180  # a loaded machine: imports alone can take a minute
        while True:
            assert proc.poll() is None, log.read_text()
            try:
                if http.get(f"{url}/healthz").status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            assert time.monotonic() < deadline, log.read_text()
            time.sleep(0.2)
        yield url, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)
    assert "Traceback" not in log.read_text(), log.read_text()


@pytest.fixture
def tiny(tiny_server) -> str:
    return tiny_server[0]


def assert_refused(r: httpx.Response | tuple[int, bytes], status: int, code: str | None = None) -> dict:
    got, body = (r.status_code, r.content) if isinstance(r, httpx.Response) else r
    assert got == status, (got, body[:500])
    err = json.loads(body)["error"]
    assert set(err) == {"code", "message", "details"} and err["code"] and len(err["message"]) > 5, err
    if code is not None:
        assert err["code"] == code, err
    return err


def still_answers(url: str) -> None:
    assert http.get(f"{url}/healthz").status_code == 200


def deep_json(depth: int) -> bytes:
    return b'{"a":' + b"[" * (depth - 1) + b"]" * (depth - 1) + b"}"


@pytest.mark.parametrize(("body", "code"), [
    (b'{"a": 1}', None),
    (json.dumps({"a": "\U0001F600 \\u0000 [[[["}).encode(), None),        # an emoji, a backslash, brackets in text
    (json.dumps({"a": "\U0001F600"}, ensure_ascii=True).encode(), None),  # a valid surrogate pair escape
    (b'{"a": "\\\\u0000"}', None),                                         # an escaped backslash, then "u0000"
    (deep_json(MAX_JSON_DEPTH), None),
    (b"{nope", None),                                                     # not JSON: the route decides
    (b"[" * 100_000, "too_deep"),                                         # not JSON either, but deep
    (b'{"a": "x\\u0000"}', "invalid_character"),
    (b'{"a\\u0000": 1}', "invalid_character"),
    (b'{"a": ["\\ud800"]}', "invalid_character"),
    (b'{"a": "\\udc00"}', "invalid_character"),
    (b'{"a": "\\\\\\ud800x"}', "invalid_character"),
    (deep_json(MAX_JSON_DEPTH + 1), "too_deep"),
    (b"[" * 100_000 + b"]" * 100_000, "too_deep"),
    (b'["\\"[", ' * 70 + b"1" + b"]" * 70, "too_deep"),
])
def test_check_json_body(body, code):
    problem = check_json_body(body, MAX_JSON_DEPTH)
    assert (problem.code if problem else None) == code, problem


@pytest.mark.parametrize("text,number", [
    ("0", 0), ("007", 7), ("2147483647", 2147483647), ("0" * 20 + "5", 5),
    ("2147483648", None), ("\xb2", None), ("9" * 5000, None), ("", None), ("-1", None), ("1.0", None)])
def test_decimal_reads_only_what_fits(text, number):
    assert decimal(text, 2**31 - 1) == number


def test_path_query_and_headers(tiny):
    assert http.get(f"{tiny}/p/ok").json() == {"name": "ok"}
    assert_refused(http.get(f"{tiny}/p/a%00b"), 400, "invalid_character")
    assert_refused(http.get(f"{tiny}/q?x=a%00"), 400, "invalid_character")
    assert_refused(raw_request(tiny, b"GET /q HTTP/1.1\r\nhost: x\r\nx-key: a\x00b\r\n\r\n"), 400)
    assert_refused(raw_request(tiny, b"NOT HTTP AT ALL\r\n\r\n"), 400, "bad_request")
    long_url = b"GET /q?x=" + b"y" * (1 << 20) + b" HTTP/1.1\r\nhost: x\r\n\r\n"  # over httpx's own URL bound
    assert_refused(raw_request(tiny, long_url), 414, "uri_too_long")
    assert_refused(http.get(f"{tiny}/q", headers={"x-big": "y" * 200_000}), 431, "header_fields_too_large")
    assert http.get(f"{tiny}/q", params={"x": "é" * 4096}).json() == {"x": "é" * 4096}  # a long search query
    still_answers(tiny)


def test_json_bodies(tiny):
    ok = http.post(f"{tiny}/echo", content=deep_json(MAX_JSON_DEPTH), headers={"content-type": "application/json"})
    assert ok.json() == {"keys": ["a"]}
    for body, code in [(deep_json(MAX_JSON_DEPTH + 1), "json_too_deep"),
                       (b"[" * 30_000 + b"]" * 30_000, "json_too_deep"),
                       (b'{"k": "\\u0000"}', "invalid_character"),
                       (b'{"k": "\\ud800"}', "invalid_character")]:
        for ctype in ("application/json", None, "application/merge-patch+json"):
            headers = {"content-type": ctype} if ctype else {}
            assert_refused(http.post(f"{tiny}/echo", content=body, headers=headers), 400, code)
    # not JSON at all: the route's own answer, in the same shape
    assert_refused(http.post(f"{tiny}/echo", content=b"{nope", headers={"content-type": "application/json"}), 422)
    still_answers(tiny)


def test_body_size_declared_and_streamed(tiny, tiny_server):
    big = b"x" * (LIMIT + 1)
    assert_refused(http.post(f"{tiny}/raw", content=big), 413, "payload_too_large")
    assert http.post(f"{tiny}/raw", content=b"x" * LIMIT, headers={"content-type": "application/octet-stream"}
                      ).json() == {"bytes": LIMIT}

    def chunks(total: int) -> Iterator[bytes]:  # no Content-Length: counted as it streams
        for _ in range(total // 8192):
            yield b"x" * 8192

    cpu = cpu_seconds(tiny_server[1])
    for path, ctype in [("/raw", "application/octet-stream"), ("/echo", "application/json"), ("/raw", "text/plain")]:
        r = http.post(f"{tiny}{path}", content=chunks(30 << 20), headers={"content-type": ctype})
        assert_refused(r, 413, "payload_too_large")
    assert cpu_seconds(tiny_server[1]) - cpu < 10  # the server's CPU: the bodies were not parsed
    # the same over a raw socket, stopping once the server has answered
    head = (b"POST /raw HTTP/1.1\r\nhost: x\r\ntransfer-encoding: chunked\r\n"
            b"content-type: application/octet-stream\r\n\r\n")
    assert_refused(raw_request(tiny, head, (b"2000\r\n" + b"x" * 8192 + b"\r\n" for _ in range(3840))), 413)
    still_answers(tiny)


def test_nul_in_a_text_body(tiny):
    assert_refused(http.post(f"{tiny}/raw", content=b"a\x00b", headers={"content-type": "text/markdown"}), 400,
                   "invalid_character")
    assert http.post(f"{tiny}/raw", content=b"a\x00b", headers={"content-type": "application/octet-stream"}
                      ).json() == {"bytes": 3}
    still_answers(tiny)


def test_another_service_has_the_same_door(tmp_path):
    """The reasoning env server (no LLM, no database) is built by the same factory: the same refusals."""
    with run_service(["reasoning"], tmp_path=tmp_path, ready_timeout=300) as svc:
        url = f"{svc.url}/v1/sessions"
        assert_refused(http.post(url, content=b"[" * 100_000 + b"]" * 100_000,
                                  headers={"content-type": "application/json"}), 400, "json_too_deep")
        assert_refused(http.post(url, content=b'{"task_id": "a\\u0000"}', headers={"content-type": "application/json"}),
                       400, "invalid_character")
        assert_refused(http.post(url, content=b'{"task_id": "\\ud800"}', headers={"content-type": "application/json"}),
                       400, "invalid_character")
        assert_refused(raw_request(svc.url, b"GET /v1/tasks?split=" + b"y" * (1 << 20) + b" HTTP/1.1\r\nhost: x\r\n\r\n"),
                       414, "uri_too_long")
        assert_refused(http.post(url, content=b"x" * (9 << 20)), 413, "payload_too_large")
        still_answers(svc.url)
        assert "unhandled_error" not in svc.logs()
