"""LLMSettings per role, and LLMClient against the real embedded server and broken stand-ins."""

from __future__ import annotations

import asyncio
import json
import time

import pytest
from broken_llm_backend import broken_backend, chat_requests_seen
from conftest import free_port, run_service

from skillos.llm import LLMClient, LLMError, LLMSettings
from skillos.llm.client import LLM_TOKENS

HELLO = [{"role": "user", "content": "Say hello in one short sentence."}]


def run(coro):
    return asyncio.run(coro)


async def _chat(settings: LLMSettings, messages=HELLO, **kw):
    async with LLMClient(settings) as c:
        return await c.chat(messages, **kw)


# ---------------------------------------------------------------- settings
def test_for_role_reads_role_then_shared_env_then_role_defaults(monkeypatch):
    monkeypatch.delenv("SKILLOS_LLM_MODEL", raising=False)  # set for the suite by conftest
    monkeypatch.setenv("SKILLOS_LLM_BASE_URL", "http://shared:9/v1")
    monkeypatch.setenv("SKILLOS_LLM_MAX_RETRIES", "7")
    monkeypatch.setenv("SKILLOS_CURATOR_LLM_BASE_URL", "http://vllm:8000/v1")
    monkeypatch.setenv("SKILLOS_CURATOR_LLM_MODEL", "Qwen/Qwen3-8B")
    monkeypatch.setenv("SKILLOS_CURATOR_LLM_TEMPERATURE", "1.0")
    monkeypatch.setenv("SKILLOS_CURATOR_LLM_API_KEY", "k")
    cur = LLMSettings.for_role("curator")
    assert (cur.base_url, cur.model, cur.temperature, cur.api_key) == ("http://vllm:8000/v1", "Qwen/Qwen3-8B", 1.0, "k")
    assert cur.max_retries == 7 and cur.role == "curator"
    ex = LLMSettings.for_role("executor")
    assert ex.base_url == "http://shared:9/v1" and ex.model == "qwen2.5-coder-1.5b-instruct"
    assert ex.max_tokens == 160 and LLMSettings.for_role("judge").temperature == 0.0


def test_for_role_rejects_unknown_role_and_bad_values(monkeypatch):
    with pytest.raises(ValueError, match="unknown LLM role"):
        LLMSettings.for_role("planner")
    monkeypatch.setenv("SKILLOS_JUDGE_LLM_TIMEOUT_S", "soon")
    with pytest.raises(ValueError, match="timeout_s"):
        LLMSettings.for_role("judge")


# ---------------------------------------------------------------- the real embedded backend
@pytest.mark.llm
def test_chat_on_embedded_llm_counts_tokens(embedded_llm):
    before = LLM_TOKENS.labels("executor", "smollm2-135m-instruct", "completion")._value.get()
    s = LLMSettings(base_url=embedded_llm, role="executor", model="smollm2-135m-instruct")
    r = run(_chat(s, max_tokens=24, temperature=0.0))
    assert r.content.strip()
    assert r.usage.prompt_tokens > 5 and 0 < r.usage.completion_tokens <= 24
    assert r.finish_reason in ("stop", "length") and r.latency_s > 0 and r.attempts == 1
    after = LLM_TOKENS.labels("executor", "smollm2-135m-instruct", "completion")._value.get()
    assert after - before == r.usage.completion_tokens


@pytest.mark.llm
def test_stop_sequences_cut_the_completion(embedded_llm):
    # (greedy decoding is not bit-reproducible across requests on llama.cpp: its prompt cache changes
    # the batch shapes, so we do not assert equality of two completions)
    s = LLMSettings(base_url=embedded_llm)
    msgs = [{"role": "user", "content": "Count from 1 to 20, separated by commas."}]
    full = run(_chat(s, msgs, max_tokens=40, temperature=0.0))
    assert "5" in full.content
    cut = run(_chat(s, msgs, max_tokens=40, temperature=0.0, stop=["5"]))
    assert "5" not in cut.content and cut.finish_reason == "stop" and cut.usage.completion_tokens < 40


SCHEMA = {"type": "object", "properties": {"verdict": {"type": "string", "enum": ["success", "failure"]},
                                           "confidence": {"type": "integer"}},
          "required": ["verdict", "confidence"]}


@pytest.fixture(scope="module")
def llama_cpp_python_llm(tmp_path_factory):
    """The other embedded backend, llama-cpp-python's server (the compose llm image's), SmolLM2."""
    with run_service(["llm", "--model", "smollm2-135m-instruct", "--backend", "llama-cpp-python"],
                     tmp_path=tmp_path_factory.mktemp("llm-cpp-python"), ready_timeout=180) as svc:
        yield f"{svc.url}/v1"


@pytest.mark.llm
@pytest.mark.parametrize("backend", ["llama-server", "llama-cpp-python"])
@pytest.mark.parametrize("response_format", [
    {"type": "json_object", "schema": SCHEMA},  # llama.cpp's own form
    {"type": "json_schema", "json_schema": {"name": "verdict", "schema": SCHEMA}},  # OpenAI/vLLM form
], ids=["json_object", "json_schema"])
def test_structured_output_gives_valid_json(embedded_llm, llama_cpp_python_llm, backend, response_format):
    s = LLMSettings(base_url=embedded_llm if backend == "llama-server" else llama_cpp_python_llm)
    r = run(_chat(s, [{"role": "user", "content": "Did the robot put the apple in the fridge? Answer in JSON."}],
                  max_tokens=48, temperature=0.0, response_format=response_format))
    data = json.loads(r.content)
    assert data["verdict"] in ("success", "failure") and isinstance(data["confidence"], int)


@pytest.mark.llm
def test_logprobs_request_without_logits_all_answers_without_logprobs(llama_cpp_python_llm):
    # llama-cpp-python keeps no logits by default; asking for log-probs must not fail the request
    r = run(_chat(LLMSettings(base_url=llama_cpp_python_llm), max_tokens=8, logprobs=True, top_logprobs=2))
    assert r.content and r.logprobs is None


@pytest.mark.llm
def test_llama_server_returns_logprobs(embedded_llm):
    r = run(_chat(LLMSettings(base_url=embedded_llm), max_tokens=8, logprobs=True, top_logprobs=2))
    assert r.content and len(r.logprobs) == r.usage.completion_tokens
    assert all(t["logprob"] <= 0 and len(t["top_logprobs"]) == 2 for t in r.logprobs)


@pytest.mark.llm
def test_llama_server_answers_like_every_skillos_service(embedded_llm):
    import httpx

    root = embedded_llm.removesuffix("/v1")
    assert httpx.get(f"{root}/healthz").json()["service"] == "llm"
    assert httpx.get(f"{root}/readyz").json()["status"] == "ready"
    metrics = httpx.get(f"{root}/metrics").text
    assert "skillos_http_requests_total" in metrics and "llamacpp:" in metrics  # ours, then llama.cpp's
    served = httpx.get(f"{embedded_llm}/models").json()["data"][0]
    assert served["id"] == "smollm2-135m-instruct" and served["meta"]["n_params"] > 100_000_000
    bad = httpx.post(f"{embedded_llm}/chat/completions", json={"messages": "not a list"})
    assert 400 <= bad.status_code < 500 and "error" in bad.json()


@pytest.mark.llm
def test_forced_tool_call_returns_openai_tool_calls(llama_cpp_python_llm):
    # llama-cpp-python forces a named tool with a grammar; llama-server follows the model's chat
    # template, and SmolLM2's has no tools (the curator's JSON mode is the embedded default)
    tool = {"type": "function", "function": {
        "name": "skill_delete", "description": "delete a skill from the repo",
        # maxLength: the grammar then ends the string in time; a 135M model may ramble past max_tokens
        "parameters": {"type": "object", "properties": {"skill_name": {"type": "string", "maxLength": 40}},
                       "required": ["skill_name"]}}}
    s = LLMSettings(base_url=llama_cpp_python_llm)
    r = run(_chat(s, [{"role": "user", "content": "Delete the skill called heat-food."}], tools=[tool],
                  tool_choice={"type": "function", "function": {"name": "skill_delete"}}, max_tokens=64))
    call = r.tool_calls[0]
    assert call["type"] == "function" and call["function"]["name"] == "skill_delete"
    # llama.cpp's JSON grammar lets raw control characters (newlines) into strings: strict=False reads them
    assert isinstance(json.loads(call["function"]["arguments"], strict=False)["skill_name"], str)


@pytest.mark.llm
def test_retries_through_503s_then_succeeds_on_real_backend(embedded_llm):
    with broken_backend("flaky:2", free_port(), upstream=embedded_llm) as url:
        s = LLMSettings(base_url=url, max_retries=3, backoff_s=0.05)
        r = run(_chat(s, max_tokens=8))
        assert r.attempts == 3 and r.content
        assert chat_requests_seen(url) == 3


# ---------------------------------------------------------------- failures
def test_backend_down_is_connection_error_after_retries():
    s = LLMSettings(base_url=f"http://127.0.0.1:{free_port()}/v1", max_retries=2, backoff_s=0.01)
    with pytest.raises(LLMError) as e:
        run(_chat(s))
    assert e.value.kind == "connection" and "after 3 attempts" in e.value.message


@pytest.mark.parametrize("mode,kind,status,attempts", [("500", "http", 500, 2), ("429", "http", 429, 2),
                                                        ("400", "http", 400, 1), ("garbage", "bad_response", None, 1)])
def test_broken_backend_errors(mode, kind, status, attempts):
    with broken_backend(mode, free_port()) as url:
        s = LLMSettings(base_url=url, max_retries=1, backoff_s=0.01)
        with pytest.raises(LLMError) as e:
            run(_chat(s))
        assert e.value.kind == kind and e.value.status == status
        assert chat_requests_seen(url) == attempts  # 400 and bad bodies are not retried


def test_hanging_backend_times_out():
    with broken_backend("hang", free_port()) as url:
        s = LLMSettings(base_url=url, timeout_s=0.5, max_retries=1, backoff_s=0.01)
        t = time.perf_counter()
        with pytest.raises(LLMError) as e:
            run(_chat(s))
        assert e.value.kind == "timeout" and time.perf_counter() - t < 5
        assert chat_requests_seen(url) == 2
