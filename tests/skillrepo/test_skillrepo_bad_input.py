"""Bad input to the skill repo over HTTP, on SQLite and on PostgreSQL (issue 13): every case is a JSON 4xx
in the one error shape (or, for a curator op, a refused verdict), never a 500, a hang or a body, an archive
header or a YAML document expanded without bound; and the service answers normally afterwards."""
# ruff: noqa: F811 - pytest fixtures imported from skillrepo_fixtures are redefined as parameters

from __future__ import annotations

import io
import json
import tarfile
import zlib
from collections.abc import Iterator

import httpx
import pytest
from conftest import cpu_seconds, peak_rss_mb, raw_request
from skillrepo_fixtures import backend_url, client, repo, repo_service, skill_md  # noqa: F401

pytestmark = pytest.mark.slow

# generous: on a loaded machine a plain request can take seconds; what the tests bound is the service's CPU
http = httpx.Client(timeout=120)

JSON = {"content-type": "application/json"}
MD = {"content-type": "text/markdown"}


def refused(r: httpx.Response, status: int, code: str | None = None) -> dict:
    assert r.status_code == status, (r.status_code, r.text[:500])
    assert r.headers["content-type"].startswith("application/json"), r.headers
    err = r.json()["error"]
    assert set(err) == {"code", "message", "details"} and err["code"] and len(err["message"]) > 5, err
    if code is not None:
        assert err["code"] == code, err
    return err


def still_answers(client, repo: str) -> None:
    """The service (and its database connections) work normally after the bad request."""
    client.put_skill(repo, {"name": "still-ok", "description": "d", "body": "b"})
    assert [s.name for s in client.search(repo, "still ok")][:1] == ["still-ok"]


def op(content: str, name: str = "s") -> dict:
    return {"name": "new_skill_insert", "arguments": {"skill_name": name, "content": content}}


def test_nul_characters(client, repo, repo_service):
    u = f"{repo_service.url}/v1/repos"
    refused(http.get(f"{u}/a%00b"), 400, "invalid_character")
    refused(http.get(f"{u}/{repo}/skills/a%00b"), 400, "invalid_character")
    refused(http.put(f"{u}/{repo}/skills/a%00b", content=skill_md("a", "d"), headers=MD), 400, "invalid_character")
    refused(http.delete(f"{u}/{repo}/skills/a%00b"), 400, "invalid_character")
    refused(http.get(f"{u}/{repo}/skills", params={"limit": 5, "after": "a\x00"}), 400, "invalid_character")
    refused(http.get(f"{u}/{repo}/search", params={"q": "a\x00"}), 400, "invalid_character")
    refused(http.post(u, json={"name": "a\x00"}), 400, "invalid_character")
    refused(http.post(f"{u}/{repo}/ops", json={"ops": [op("x")], "idempotency_key": "k\x00"}), 400,
            "invalid_character")
    refused(http.post(f"{u}/{repo}/ops", json={"ops": [op("a\x00b")]}), 400, "invalid_character")
    refused(http.post(f"{u}/{repo}/snapshots", json={"label": "l\x00"}), 400, "invalid_character")
    refused(http.post(f"{u}/{repo}/skills", json={"name": "a", "description": "d", "metadata": {"k": "\x00"}}), 400,
            "invalid_character")
    refused(http.post(f"{u}/{repo}/skills", content=skill_md("a", "d", "x\x00y").encode(), headers=MD), 400,
            "invalid_character")
    # JSON in a JSON string (the OpenAI tool-call shape) is decoded past the door: refused as a verdict
    for args in ({"skill_name": "a", "content": "x\x00"}, {"skill_name": "a\x00"}):
        r = http.post(f"{u}/{repo}/ops", json={"ops": [{"name": "skill_delete" if len(args) == 1 else
                                                         "new_skill_insert", "arguments": json.dumps(args)}]})
        assert r.status_code == 200 and r.json()["verdicts"][0]["code"] == "invalid_arguments", r.text
    # a SKILL.md with a NUL in an archive
    refused(http.post(f"{u}/{repo}/import", content=_archive({"a/SKILL.md": skill_md("a", "d", "x\x00")})), 400,
            "invalid_character")
    assert client.list_skills(repo) == []
    still_answers(client, repo)


def test_lone_surrogates(client, repo, repo_service):
    u = f"{repo_service.url}/v1/repos/{repo}"
    body = b'{"ops": [{"name": "new_skill_insert", "arguments": {"skill_name": "s", "content": "x\\ud800"}}]}'
    refused(http.post(f"{u}/ops", content=body, headers=JSON), 400, "invalid_character")
    refused(http.put(f"{u}/skills/s", content=b'{"description": "\\udfff"}', headers=JSON), 400, "invalid_character")
    refused(http.put(f"{u}/skills/s", content=skill_md("s", "d").encode() + b"\xed\xa0\x80", headers=MD), 400,
            "invalid_utf8")
    args = '{"skill_name": "s", "content": "x\\ud800"}'  # decoded by the repo: a lone surrogate in the content
    r = http.post(f"{u}/ops", json={"ops": [{"name": "new_skill_insert", "arguments": args}]})
    assert r.status_code == 200 and r.json()["verdicts"][0]["code"] == "invalid_arguments", r.text
    assert client.list_skills(repo) == []
    still_answers(client, repo)


def _nested_yaml(depth: int) -> str:
    return "---\nname: deep\ndescription: d\nmeta: " + "[" * depth + "]" * depth + "\n---\nbody\n"


def test_deep_nesting(client, repo, repo_service):
    u = f"{repo_service.url}/v1/repos/{repo}"
    deep = b'{"name": "s", "description": "d", "metadata": {"k": ' + b"[" * 100_000 + b"]" * 100_000 + b"}}"
    refused(http.put(f"{u}/skills/s", content=deep, headers=JSON), 400, "json_too_deep")
    refused(http.put(f"{u}/skills/s", content=b"[" * 100_000 + b"]" * 100_000, headers=JSON), 400, "json_too_deep")
    refused(http.put(f"{u}/skills/deep", content=_nested_yaml(600), headers=MD), 400, "frontmatter_too_deep")
    meta: object = "leaf"
    for _ in range(500):
        meta = {"k": meta}
    # 500 levels: over the door's JSON depth; 40: under it, over the frontmatter's
    refused(http.post(f"{u}/skills", content=json.dumps({"name": "s", "description": "d", "metadata": meta}),
                       headers=JSON), 400, "json_too_deep")
    meta = "leaf"
    for _ in range(40):
        meta = {"k": meta}
    refused(http.post(f"{u}/skills", json={"name": "s", "description": "d", "metadata": meta}), 400,
            "frontmatter_too_deep")
    r = http.post(f"{u}/ops", json={"ops": [op(_nested_yaml(600))]})
    assert r.status_code == 200 and r.json()["verdicts"][0]["code"] == "frontmatter_too_deep", r.text
    args = '{"skill_name": "s", "content": ' + "[" * 100_000 + "]" * 100_000 + "}"  # deep JSON inside a string
    r = http.post(f"{u}/ops", json={"ops": [{"name": "new_skill_insert", "arguments": args}]})
    assert r.status_code == 200 and r.json()["verdicts"][0]["code"] == "invalid_arguments", r.text
    assert client.list_skills(repo) == []
    still_answers(client, repo)


ALIAS_BOMB = """---
name: bomb
description: d
a: &a ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]
b: &b [*a,*a,*a,*a,*a,*a,*a,*a,*a]
c: &c [*b,*b,*b,*b,*b,*b,*b,*b,*b]
d: &d [*c,*c,*c,*c,*c,*c,*c,*c,*c]
e: &e [*d,*d,*d,*d,*d,*d,*d,*d,*d]
f: &f [*e,*e,*e,*e,*e,*e,*e,*e,*e]
g: &g [*f,*f,*f,*f,*f,*f,*f,*f,*f]
---
boom
"""


def test_yaml_aliases_and_frontmatter_size(client, repo, repo_service):
    u = f"{repo_service.url}/v1/repos/{repo}"
    cpu = cpu_seconds(repo_service.proc.pid)
    r = http.post(f"{u}/skills", content=ALIAS_BOMB, headers=MD)
    refused(r, 400, "yaml_alias")
    assert len(r.content) < 2000 and cpu_seconds(repo_service.proc.pid) - cpu < 5
    refused(http.post(f"{u}/skills", content="---\nname: a\ndescription: &x d\nk: *x\n---\n", headers=MD), 400,
            "yaml_alias")
    r = http.post(f"{u}/ops", json={"ops": [op(ALIAS_BOMB)]})
    assert r.status_code == 200 and r.json()["verdicts"][0]["code"] == "yaml_alias", r.text
    big = "---\nname: big\ndescription: d\nk: " + "x" * 20_000 + "\n---\nbody\n"
    refused(http.post(f"{u}/skills", content=big, headers=MD), 413, "frontmatter_too_large")
    refused(http.post(f"{u}/skills", json={"name": "big", "description": "d", "metadata": {"k": "x" * 20_000}}), 413,
            "frontmatter_too_large")
    # YAML values JSON cannot hold
    for value in ("!!binary aGVsbG8=", "!!set {a, b}", "!!timestamp 2020-01-01"):
        refused(http.post(f"{u}/skills", content=f"---\nname: t\ndescription: d\nk: {value}\n---\n", headers=MD),
                400, "invalid_metadata")
    assert client.list_skills(repo) == []
    still_answers(client, repo)


def test_chunked_body_is_counted_while_streaming(client, repo, repo_service):
    """No Content-Length: the door counts the bytes and answers 413 at the limit (8 MiB here), for a route
    whose body FastAPI parses and for one that reads the stream itself."""

    def chunks() -> Iterator[bytes]:  # 30 MB, as JSON would start
        yield b'{"ops": ["'
        for _ in range(30 * 16):
            yield b"x" * 65536

    cpu = cpu_seconds(repo_service.proc.pid)
    for path, headers in (("ops", JSON), ("skills", MD), ("import", {"content-type": "application/gzip"})):
        r = http.post(f"{repo_service.url}/v1/repos/{repo}/{path}", content=chunks(), headers=headers)
        refused(r, 413, "payload_too_large")
    assert cpu_seconds(repo_service.proc.pid) - cpu < 10
    still_answers(client, repo)


def _archive(files: dict[str, str]) -> bytes:
    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w:gz") as tar:
        for name, text in files.items():
            data = text.encode("utf-8")
            info = tarfile.TarInfo(name)
            info.size = len(data)
            tar.addfile(info, io.BytesIO(data))
    return buf.getvalue()


def _bomb(member_type: bytes, name: str, size: int) -> bytes:
    """A .tar.gz whose first member says ``size`` bytes of ``member_type`` and holds them (zeros, compressed
    ~1000:1), then a small SKILL.md: a few hundred KB on the wire."""
    info = tarfile.TarInfo(name)
    info.type, info.size = member_type, size
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    out = [gz.compress(info.tobuf(format=tarfile.GNU_FORMAT))]
    zeros = bytes(1 << 20)
    for _ in range(size >> 20):
        out.append(gz.compress(zeros))
    out.append(gz.compress(bytes(size & ((1 << 20) - 1)) + bytes(-size % 512)))
    skill = skill_md("a", "d").encode()
    tail = tarfile.TarInfo("a/SKILL.md")
    tail.size = len(skill)
    out.append(gz.compress(tail.tobuf(format=tarfile.GNU_FORMAT) + skill + bytes(-len(skill) % 512) + bytes(1024)))
    out.append(gz.flush())
    return b"".join(out)


@pytest.fixture(scope="module")
def bombs() -> dict[str, bytes]:
    return {"longname": _bomb(tarfile.GNUTYPE_LONGNAME, "././@LongLink", 300 << 20),
            "pax": _bomb(tarfile.XHDTYPE, "././@PaxHeader", 8 << 20),
            "big-member": _bomb(tarfile.REGTYPE, "a/big.bin", 300 << 20)}


def test_import_bounds_headers_and_uncompressed_size(client, repo, repo_service, bombs):
    u = f"{repo_service.url}/v1/repos/{repo}/import"
    for kind, code in (("longname", "archive_header_too_large"), ("pax", "archive_header_too_large"),
                       ("big-member", "archive_too_large")):
        assert len(bombs[kind]) < 1 << 20
        cpu = cpu_seconds(repo_service.proc.pid)
        refused(http.post(u, content=bombs[kind], headers={"content-type": "application/gzip"}), 413,
                code)
        assert cpu_seconds(repo_service.proc.pid) - cpu < 5, kind
    # nothing was inflated: 300 MB read whole would show here (RSS was 716 MB)
    assert peak_rss_mb(repo_service.proc.pid) < 400
    # a chain of GNU long-name headers (each one small) is an invalid archive, not a RecursionError
    chain = io.BytesIO()
    gz = zlib.compressobj(9, zlib.DEFLATED, 31)
    for _ in range(5000):
        info = tarfile.TarInfo("././@LongLink")
        info.type, info.size = tarfile.GNUTYPE_LONGNAME, 10
        chain.write(gz.compress(info.tobuf(format=tarfile.GNU_FORMAT) + b"a" * 10 + bytes(502)))
    chain.write(gz.flush())
    refused(http.post(u, content=chain.getvalue(), headers={"content-type": "application/gzip"}), 400)
    # a normal archive still imports
    r = http.post(u, content=_archive({"ok/SKILL.md": skill_md("ok", "d")}), headers={"content-type": "application/gzip"})
    assert r.status_code == 200 and r.json()["imported"] == ["ok"], r.text
    still_answers(client, repo)


def test_oversize_batch_refused_before_validation(client, repo, repo_service):
    """Over the op limit (8 here): 413 before pydantic builds 100k ops, so also when every op is invalid."""
    u = f"{repo_service.url}/v1/repos/{repo}/ops"
    cpu = cpu_seconds(repo_service.proc.pid)
    refused(http.post(u, json={"ops": [{"arguments": {}}] * 100_000}), 413, "batch_too_large")
    refused(http.post(u, json={"ops": [{"name": "skill_delete", "arguments": {"skill_name": "x"}}] * 100_000},
                       timeout=120), 413, "batch_too_large")
    assert cpu_seconds(repo_service.proc.pid) - cpu < 5
    still_answers(client, repo)


def test_long_urls_and_headers(client, repo, repo_service):
    u = f"{repo_service.url}/v1/repos/{repo}/search"
    status, body = raw_request(u, b"GET /v1/repos/%s/search?q=%s HTTP/1.1\r\nhost: x\r\n\r\n"
                               % (repo.encode(), b"x" * (1 << 20)))  # httpx sends no URL over 64 KiB
    assert status == 414 and json.loads(body)["error"]["code"] == "uri_too_long", (status, body)
    refused(http.get(u, params={"q": "x"}, headers={"x-big": "y" * 200_000}), 431, "header_fields_too_large")
    refused(http.get(u, params={"q": "x" * 5000}), 422)  # under the URL bound: the route's own limit
    still_answers(client, repo)
