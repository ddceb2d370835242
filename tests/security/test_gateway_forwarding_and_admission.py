"""Issue 51, what the gateway forwards: a caller's request reached the LLM backend field for field (``n`` choices,
any ``max_tokens``, vLLM's ``prompt_logprobs``, an image or audio part the backend would fetch by URL: an SSRF
from inside the cluster), and one token could hold every admission slot of the executor.

Defences: `services/executor/gateway/chat/policy.py` ``RequestPolicy`` (``SKILLOS_GATEWAY_MAX_N``,
``_MAX_TOKENS``, ``_ALLOW_MEDIA``, ``_EXTRA_FIELDS``: 400 naming the field, before any backend call); a caller's
share of the turns (`services/executor/admission.py`, ``SKILLOS_GATEWAY_MAX_CALLS_PER_CALLER``: 429)."""

from __future__ import annotations

import time
import uuid
from concurrent.futures import ThreadPoolExecutor

import pytest
from scripted_llm import SLOW, text_of
from security_fixtures import security_stack

pytestmark = pytest.mark.slow

METADATA_URL = "http://169.254.169.254/latest/meta-data/iam/security-credentials/"


@pytest.fixture(scope="module")
def stack(pg_server_url, redis_url, tmp_path_factory):
    env = {"SKILLOS_EXECUTOR_MAX_LLM_CALLS": "2", "SKILLOS_EXECUTOR_LLM_QUEUE_S": "0",
           "SKILLOS_GATEWAY_MAX_CALLS_PER_CALLER": "1"}
    with security_stack(pg_server_url, redis_url, tmp_path_factory.mktemp("forwarding"), executor_env=env,
                        slow_s=4.0) as s:
        s.put_repo("shared")
        yield s


def _parts(marker: str, *parts: dict) -> list[dict]:
    return [{"role": "user", "content": [{"type": "text", "text": f"what is this? {marker}"}, *parts]}]


@pytest.mark.parametrize("what", ["n", "max_tokens", "prompt_logprobs", "image_url", "audio_url"])
def test_the_gateway_does_not_forward_what_the_operator_did_not_allow(stack, what):
    marker = f"fwd-{uuid.uuid4().hex}"
    fields = {
        "n": {"n": 16},                                     # 16 answers for the price of one call
        "max_tokens": {"max_tokens": 10**6},                # the backend's whole context, per call
        "prompt_logprobs": {"prompt_logprobs": 20},         # vLLM: the prompt's log-probs (the injected skills)
        "image_url": {"messages": _parts(marker, {"type": "image_url", "image_url": {"url": METADATA_URL}})},
        "audio_url": {"messages": _parts(marker, {"type": "audio_url", "audio_url": {"url": METADATA_URL}})},
    }[what]
    r = stack.chat("mallory-t", f"say hi {marker}", repo="shared", **fields)
    assert r.status_code == 400, (r.status_code, r.text[:300])
    assert not stack.llm.seen(marker), "the request reached the backend"
    assert not stack.llm.seen(METADATA_URL)


def test_one_token_cannot_hold_every_turn_at_the_backend(stack):
    """Two turns at the backend (SKILLOS_EXECUTOR_MAX_LLM_CALLS=2, no queue): mallory's two slow calls must not
    take both, so that another caller still gets an answer."""
    marker = uuid.uuid4().hex
    with ThreadPoolExecutor(2) as pool:
        held = [pool.submit(stack.chat, "mallory-t", f"{SLOW} {marker} {i}", repo="shared") for i in range(2)]
        deadline = time.monotonic() + 3   # the backend takes 4 s to answer each
        while time.monotonic() < deadline and not any(f.done() for f in held):   # refused, or both at the backend
            if sum(marker in text_of(b) for b in stack.llm.chat_requests()) == 2:
                break
            time.sleep(0.05)
        victim = stack.chat("victim-t", "say hi", repo="shared")
        statuses = sorted(f.result().status_code for f in held)
    assert victim.status_code == 200, (victim.status_code, victim.text[:300])
    assert statuses == [200, 429], statuses
