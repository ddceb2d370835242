"""`RequestPolicy` (issue 51) on its own: what an operator's settings let through to the backend."""

from __future__ import annotations

import pytest

from services.executor.gateway.chat.policy import RequestPolicy, parse_fields
from skillos.errors import APIError


def body(**extra) -> dict:
    return {"model": "m", "messages": [{"role": "user", "content": "hi"}], **extra}


def refused(policy: RequestPolicy, b: dict) -> dict:
    with pytest.raises(APIError) as e:
        policy.check(b)
    assert e.value.status == 400 and e.value.code == "unsupported_parameter"
    return e.value.details


def test_the_defaults_pass_openai_requests_and_refuse_the_rest():
    p = RequestPolicy()
    sent = p.check(body(store=True, metadata={"a": "b"}, modalities=["text"], service_tier="auto", temperature=0))
    assert sent == body(temperature=0)                                   # dropped, not refused
    assert refused(p, body(modalities=["text", "audio"]))["param"] == "modalities"
    assert refused(p, body(ignore_eos=True))["param"] == "ignore_eos"    # no limit: to the end of the context
    p.check(body(ignore_eos=True, max_tokens=64, min_tokens=8, chat_template_kwargs={"enable_thinking": False}))
    assert refused(p, body(min_tokens=10**6))["param"] == "min_tokens"
    assert refused(p, body(chat_template_kwargs={"chat_template": "{{ 7*7 }}"}))["param"] == "chat_template_kwargs"
    p.check(body(temperature=0, max_tokens=4096, tools=[], tool_choice="auto", response_format={"type": "text"},
                 stream=True, stream_options={"include_usage": True}, seed=1, stop=["\n"], logprobs=True,
                 top_logprobs=20, n=1, top_k=5, repetition_penalty=1.1))
    assert refused(p, body(n=2))["param"] == "n"
    assert refused(p, body(n=True))["param"] == "n"             # a bool is not a count
    assert refused(p, body(max_tokens="100"))["param"] == "max_tokens"
    assert refused(p, body(vllm_xargs={}))["param"] == "vllm_xargs"


def test_an_operator_widens_the_policy():
    p = RequestPolicy(max_n=4, max_tokens=100, allow_media=True, extra_fields=parse_fields(" priority , ,foo"))
    p.check(body(n=4, max_completion_tokens=100, priority=1, foo="x"))
    assert refused(p, body(max_tokens=101))["param"] == "max_tokens"
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,iVBORw0KGgo="}}
    audio = {"type": "input_audio", "input_audio": {"data": "UklGR", "format": "wav"}}
    p.check(body(messages=[{"role": "user", "content": [{"type": "text", "text": "see"}, image, audio]}]))
    fetched = {"type": "image_url", "image_url": {"url": "https://example.com/cat.png"}}
    details = refused(p, body(messages=[{"role": "system", "content": "s"},
                                        {"role": "user", "content": [fetched]}]))
    assert details["param"] == "messages[1].content[0]"
    assert refused(p, body(messages=[{"role": "user", "content": [{"type": "file", "file": {}}]}]))["param"] \
        == "messages[0].content[0]"
    assert refused(p, body(messages=[{"role": "user", "content": ["not a part"]}]))["param"] \
        == "messages[0].content[0]"
