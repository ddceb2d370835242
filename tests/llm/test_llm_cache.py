"""The completion cache (skillos.llm.cache) in front of a real HTTP server: a repeatable request is answered
once by the server and then from the file; another server, or a request that wants a fresh sample,
goes to the server; a damaged row is a miss, never a failed call."""

from __future__ import annotations

import asyncio
import json
import sqlite3
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import pytest

from skillos.llm import LLMClient, LLMSettings
from skillos.llm.cache import CompletionCache


class _Counting(BaseHTTPRequestHandler):
    calls = 0

    def do_POST(self):
        type(self).calls += 1
        body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
        answer = {"choices": [{"message": {"content": f"answer {type(self).calls} to {body['messages'][-1]['content']}"},
                               "finish_reason": "stop"}], "usage": {"prompt_tokens": 5, "completion_tokens": 3}}
        data = json.dumps(answer).encode()
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture
def servers():
    made = []
    for _ in range(2):
        handler = type("Handler", (_Counting,), {"calls": 0})
        httpd = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        threading.Thread(target=httpd.serve_forever, daemon=True).start()
        made.append((f"http://127.0.0.1:{httpd.server_address[1]}/v1", handler, httpd))
    yield made
    for _, _, httpd in made:
        httpd.shutdown()


def _chat(url: str, cache: str, **kw):
    async def go():
        async with LLMClient(LLMSettings(base_url=url, cache=cache, max_retries=0)) as llm:
            return await llm.chat([{"role": "user", "content": "hi"}], **kw)
    return asyncio.run(go())


def test_repeatable_requests_are_answered_from_the_file(servers, tmp_path):
    (a, a_handler, _), (b, b_handler, _) = servers
    cache = str(tmp_path / "c.sqlite")
    first = _chat(a, cache, seed=3)
    again = _chat(a, cache, seed=3)
    assert a_handler.calls == 1 and again.content == first.content and again.cached and not first.cached
    assert again.attempts == 0 and again.usage.completion_tokens == 3
    _chat(a, cache, seed=4)                       # another seed: another request
    _chat(a, cache, temperature=0.7)              # no seed, not greedy: a fresh sample every time
    _chat(a, cache, temperature=0.7)
    assert a_handler.calls == 4
    other = _chat(b, cache, seed=3)               # the same body to another server is not the same answer
    assert b_handler.calls == 1 and not other.cached


def test_a_damaged_row_is_a_miss(servers, tmp_path):
    (a, handler, _), _ = servers
    path = tmp_path / "c.sqlite"
    _chat(a, str(path), seed=1)
    with sqlite3.connect(path) as db:
        db.execute("UPDATE completions SET answer = 'not json'")
    result = _chat(a, str(path), seed=1)
    assert handler.calls == 2 and not result.cached and result.content.startswith("answer 2")
    assert CompletionCache(path).get({"x": 1}) is None


def test_the_key_of_a_body_with_a_lone_surrogate_is_computed():
    """A model's parsed text can hold a lone surrogate (an emoji cut at the token budget) and come back in a
    later request: the key is a hash of the body, so it must not need the text to be valid UTF-8."""
    from skillos.llm.cache import key_of

    assert len(key_of({"messages": [{"role": "assistant", "content": "cut \ud83c"}]})) == 64
    assert key_of({"a": "cut \ud83c"}) != key_of({"a": "cut \ufffd"})
