"""Async client for OpenAI-compatible ``/chat/completions`` endpoints (vLLM, llama.cpp, hosted APIs).

Retries with exponential backoff on connection errors, timeouts, 429 and 5xx; never retries other
4xx (the request itself is wrong). Every failure surfaces as one `LLMError` with a ``kind`` the
caller can branch on. Tokens are counted in Prometheus (``skillos_llm_tokens_total``).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass, field
from typing import Any, Literal, Self

import httpx
from prometheus_client import Counter, Histogram

from skillos.llm.cache import CompletionCache, cacheable
from skillos.llm.settings import LLMSettings
from skillos.logging import get_logger

log = get_logger("skillos.llm")

LLM_TOKENS = Counter("skillos_llm_tokens_total", "LLM tokens used", ["role", "model", "kind"])
LLM_REQUESTS = Counter("skillos_llm_requests_total", "LLM chat requests by outcome",
                       ["role", "model", "outcome"])
LLM_LATENCY = Histogram("skillos_llm_request_duration_seconds", "LLM chat latency (all attempts)",
                        ["role", "model"],
                        buckets=(0.05, 0.1, 0.25, 0.5, 1, 2, 4, 8, 15, 30, 60, 120, 300))

ErrorKind = Literal["timeout", "connection", "http", "bad_response"]
# how backends say a prompt is longer than their context: llama-server (exceed_context_size_error, "exceeds the
# available context size", "exceeds context size"), vLLM and OpenAI ("maximum context length",
# "context_length_exceeded"), vLLM's engine ("maximum model length"), SGLang ("longer than the model's context
# length"), Anthropic-compatible servers ("prompt is too long"), LiteLLM (ContextWindowExceededError) and TGI
# (422 "`inputs` tokens + `max_new_tokens` must be <= ...")
CONTEXT_EXCEEDED = ("exceed_context_size_error", "exceeds the available context size", "exceeds context size",
                    "maximum context length", "context_length_exceeded", "maximum model length",
                    "longer than the model's context length", "prompt is too long", "contextwindowexceedederror",
                    "`max_new_tokens` must be <=")


class LLMError(Exception):
    """The LLM backend could not give an answer (after retries)."""

    def __init__(self, kind: ErrorKind, message: str, status: int | None = None):
        super().__init__(f"{kind}: {message}")
        self.kind = kind
        self.status = status
        self.message = message
        self.latency_s = 0.0  # time spent on all attempts

    @property
    def context_exceeded(self) -> bool:
        """The backend refused the prompt as longer than its context (llama.cpp, vLLM, OpenAI wordings):
        a shorter prompt may be answered, the same one never."""
        return self.status in (400, 413, 422) and any(m in self.message.lower() for m in CONTEXT_EXCEEDED)

    def describe(self) -> str:
        status = f" (HTTP {self.status})" if self.status else ""
        return f"LLM {self.kind}{status}: {self.message}"


@dataclass
class Usage:
    prompt_tokens: int = 0
    completion_tokens: int = 0

    @property
    def total_tokens(self) -> int:
        return self.prompt_tokens + self.completion_tokens

    def add(self, other: Usage) -> None:
        self.prompt_tokens += other.prompt_tokens
        self.completion_tokens += other.completion_tokens


@dataclass
class ChatResult:
    content: str
    tool_calls: list[dict] = field(default_factory=list)  # OpenAI shape: {id, type, function{name, arguments}}
    finish_reason: str | None = None
    usage: Usage = field(default_factory=Usage)
    logprobs: list[dict] | None = None  # choices[0].logprobs.content when asked for and returned
    latency_s: float = 0.0
    attempts: int = 1
    cached: bool = False  # answered from the completion cache (skillos.llm.cache)
    raw: dict = field(default_factory=dict)


_RETRY_STATUS = {408, 409, 425, 429, 500, 502, 503, 504}



class LLMClient:
    """One LLM role. Reuse one instance: it keeps a pooled HTTP connection."""

    def __init__(self, settings: LLMSettings, *, transport: httpx.AsyncBaseTransport | None = None):
        self.settings = settings
        headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
        self._http = httpx.AsyncClient(timeout=httpx.Timeout(settings.timeout_s, connect=min(10.0, settings.timeout_s)),
                                       headers=headers, transport=transport,
                                       limits=httpx.Limits(max_connections=64, max_keepalive_connections=16))
        self.total_usage = Usage()
        self.cache = None
        if settings.cache:
            self.cache = CompletionCache(settings.cache)

    @property
    def model(self) -> str:
        """The model this role asks for (`skillos.curation.ChatLLM`)."""
        return self.settings.model

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(self, *exc) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        await self._http.aclose()
        if self.cache is not None:
            self.cache.close()

    def build_payload(self, messages: list[dict], *, tools=None, tool_choice=None, temperature=None,
                      top_p=None, max_tokens=None, seed=None, logprobs=False, top_logprobs=None,
                      response_format=None, stop=None, extra_body=None) -> dict[str, Any]:
        s = self.settings
        body: dict[str, Any] = {
            "model": s.model,
            "messages": messages,
            "temperature": s.temperature if temperature is None else temperature,
            "top_p": s.top_p if top_p is None else top_p,
            "max_tokens": s.max_tokens if max_tokens is None else max_tokens,
        }
        seed = s.seed if seed is None else seed
        if seed is not None:
            body["seed"] = seed
        if tools:
            body["tools"] = tools
            if tool_choice is not None:
                body["tool_choice"] = tool_choice
        if logprobs:
            body["logprobs"] = True
            if top_logprobs:
                body["top_logprobs"] = top_logprobs
        if response_format is not None:
            body["response_format"] = response_format
        if stop:
            body["stop"] = stop
        if extra_body:
            body.update(extra_body)
        return body

    async def chat(self, messages: list[dict], *, tools: list[dict] | None = None, tool_choice: Any = None,
                   temperature: float | None = None, top_p: float | None = None, max_tokens: int | None = None,
                   seed: int | None = None, logprobs: bool = False, top_logprobs: int | None = None,
                   response_format: dict | None = None, stop: list[str] | None = None,
                   extra_body: dict | None = None) -> ChatResult:
        """One chat completion. Raises `LLMError` when no valid answer came back after the retries."""
        s = self.settings
        body = self.build_payload(messages, tools=tools, tool_choice=tool_choice, temperature=temperature,
                                  top_p=top_p, max_tokens=max_tokens, seed=seed, logprobs=logprobs,
                                  top_logprobs=top_logprobs, response_format=response_format, stop=stop,
                                  extra_body=extra_body)
        start = time.perf_counter()
        use_cache = self.cache is not None and cacheable(body)
        if use_cache and (stored := self.cache.get(body, s.chat_url())) is not None:
            result = _parse_completion(stored)
            # answered from the cache: no request made, so no attempt, and the time is the lookup's;
            # the usage is what the stored answer cost when it was made (not added to this client's total)
            result.attempts, result.cached = 0, True
            result.latency_s = time.perf_counter() - start
            LLM_REQUESTS.labels(s.role, s.model, "cache_hit").inc()
            return result
        attempt = 0
        while True:
            attempt += 1
            try:
                data = await self._post(body)
                result = _parse_completion(data)
                break
            except LLMError as err:
                retryable = err.kind in ("timeout", "connection") or (
                    err.kind == "http" and err.status in _RETRY_STATUS)
                if not retryable or attempt > s.max_retries:
                    err.latency_s = time.perf_counter() - start
                    LLM_REQUESTS.labels(s.role, s.model, err.kind).inc()
                    LLM_LATENCY.labels(s.role, s.model).observe(err.latency_s)
                    if attempt > 1:
                        err.message = f"{err.message} (after {attempt} attempts)"
                    raise
                delay = min(s.max_backoff_s, s.backoff_s * 2 ** (attempt - 1))
                log.warning("llm_retry", role=s.role, attempt=attempt, error=err.describe(), delay_s=delay)
                await asyncio.sleep(delay)
        result.latency_s = time.perf_counter() - start
        result.attempts = attempt
        if use_cache:
            self.cache.put(body, data, s.chat_url())
        self.total_usage.add(result.usage)
        LLM_REQUESTS.labels(s.role, s.model, "ok").inc()
        LLM_LATENCY.labels(s.role, s.model).observe(result.latency_s)
        LLM_TOKENS.labels(s.role, s.model, "prompt").inc(result.usage.prompt_tokens)
        LLM_TOKENS.labels(s.role, s.model, "completion").inc(result.usage.completion_tokens)
        return result

    async def _post(self, body: dict) -> dict:
        url = self.settings.chat_url()
        try:
            resp = await self._http.post(url, json=body)
        except httpx.TimeoutException as e:
            raise LLMError("timeout", f"no answer from {url} within {self.settings.timeout_s}s "
                                      f"({type(e).__name__})") from e
        except httpx.HTTPError as e:  # refused, reset, DNS, protocol errors
            raise LLMError("connection", f"cannot reach {url}: {type(e).__name__}: {e}") from e
        if resp.status_code >= 400:
            raise LLMError("http", f"{url} answered {resp.status_code}: {resp.text[:300]}", resp.status_code)
        try:
            data = resp.json()
        except ValueError as e:
            raise LLMError("bad_response", f"{url} answered non-JSON: {resp.text[:200]!r}") from e
        if not isinstance(data, dict):
            raise LLMError("bad_response", f"{url} answered {type(data).__name__}, expected an object")
        return data


def _parse_completion(data: dict) -> ChatResult:
    choices = data.get("choices")
    if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
        raise LLMError("bad_response", f"no choices in the answer: {str(data)[:200]}")
    choice = choices[0]
    message = choice.get("message") or {}
    if not isinstance(message, dict):
        raise LLMError("bad_response", "choices[0].message is not an object")
    usage_raw = data.get("usage") or {}
    usage = Usage(int(usage_raw.get("prompt_tokens") or 0), int(usage_raw.get("completion_tokens") or 0))
    lp = choice.get("logprobs")
    logprobs = lp.get("content") if isinstance(lp, dict) else None
    return ChatResult(content=message.get("content") or "", tool_calls=list(message.get("tool_calls") or []),
                      finish_reason=choice.get("finish_reason"), usage=usage, logprobs=logprobs, raw=data)
