"""What of a chat request the gateway forwards to its backend: the checks an operator needs before a caller's
body reaches vLLM or llama-server (issue 51).

A body is forwarded as sent, less the OpenAI fields that mean nothing to a self-hosted backend (`DROPPED`:
``store``, ``metadata``...), except that it is refused (400, the field named) where it asks for:
- a field outside OpenAI's chat request and the backends' sampling options (`FORWARDED`, plus the operator's
  ``SKILLOS_GATEWAY_EXTRA_FIELDS``): vLLM's ``chat_template`` would run the caller's Jinja on the server,
  ``prompt_logprobs`` returns a vocabulary's worth of numbers a prompt token; ``chat_template_kwargs`` other
  than the template's switches (`TEMPLATE_SWITCHES`);
- ``ignore_eos`` without a token limit, ``min_tokens`` past the bound below;
- more choices than ``SKILLOS_GATEWAY_MAX_N`` (each is a whole generation; the trajectory records one);
- more tokens than ``SKILLOS_GATEWAY_MAX_TOKENS`` (an answer that names no limit is left to the backend's
  default, the rest of its context: set one there, vLLM's ``--override-generation-config
  '{"max_new_tokens": N}'`` or llama-server's ``--n-predict``; the gateway adds none, since vLLM refuses a
  limit that does not fit beside the prompt, and the prompt's length is the backend's to count);
- more than 20 ``top_logprobs`` (OpenAI's own bound);
- a content part that makes the backend fetch a URL (``image_url``, ``audio_url``, ``video_url``,
  ``file``...): an SSRF on a multimodal vLLM. Text parts pass; an image or audio inlined as ``data:`` passes
  where ``SKILLOS_GATEWAY_ALLOW_MEDIA`` is on.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from services.executor.gateway.errors import gateway_error
from skillos.errors import APIError

# OpenAI's chat request (https://platform.openai.com/docs/api-reference/chat/create), less what reaches
# outside the model (audio output, web search, stored completions' metadata)...
OPENAI_FIELDS = frozenset({
    "model", "messages", "stream", "stream_options", "temperature", "top_p", "max_tokens", "max_completion_tokens",
    "stop", "presence_penalty", "frequency_penalty", "logit_bias", "seed", "tools", "tool_choice",
    "parallel_tool_calls", "response_format", "user", "logprobs", "top_logprobs", "n", "functions",
    "function_call", "reasoning_effort"})
# ...and the sampling and output options vLLM and llama-server take beside it (nothing that fetches, runs a
# template or holds the backend's memory)
BACKEND_FIELDS = frozenset({
    "top_k", "min_p", "repetition_penalty", "min_tokens", "ignore_eos", "stop_token_ids", "skip_special_tokens",
    "spaces_between_special_tokens", "include_stop_str_in_output", "guided_json", "guided_regex", "guided_choice",
    "guided_grammar", "structured_outputs", "chat_template_kwargs", "grammar", "json_schema", "typical_p",
    "mirostat", "mirostat_tau", "mirostat_eta", "dry_multiplier", "dry_base", "dry_allowed_length",
    "dry_penalty_last_n", "repeat_penalty", "repeat_last_n", "cache_prompt"})
FORWARDED = OPENAI_FIELDS | BACKEND_FIELDS
# OpenAI fields a client library may send that mean nothing to a self-hosted backend: dropped, not refused
DROPPED = frozenset({"store", "metadata", "service_tier", "prompt_cache_key", "safety_identifier", "verbosity"})
# the chat template's own switches a caller may set: never a template (vLLM took ``chat_template`` from
# inside chat_template_kwargs before GHSA-6fvq-23cw-5628), nor any other of its variables
TEMPLATE_SWITCHES = frozenset({"enable_thinking", "thinking"})
MAX_TOP_LOGPROBS = 20
# parts whose payload is inline (the backend fetches nothing); every other part type is refused
TEXT_PARTS = frozenset({"text", "refusal"})
MEDIA_PARTS = {"image_url": ("image_url", "url"), "input_audio": ("input_audio", "data")}


@dataclass(frozen=True)
class RequestPolicy:
    max_n: int = 1
    max_tokens: int = 4096
    allow_media: bool = False
    extra_fields: frozenset[str] = frozenset()

    def check(self, body: dict[str, Any]) -> dict[str, Any]:
        """The body to forward (`DROPPED` fields and ``modalities: ["text"]`` taken out), or an `APIError` 400
        naming the field to change."""
        body = {k: v for k, v in body.items() if k not in DROPPED - self.extra_fields}
        if body.get("modalities") in (["text"], None):
            body.pop("modalities", None)
        allowed = FORWARDED | self.extra_fields
        unknown = sorted(k for k in body if k not in allowed)
        if unknown:
            raise _bad(unknown[0], f"the field {unknown[0]!r} is not forwarded by this gateway; it forwards OpenAI's "
                                   "chat request fields and the backends' sampling options (an operator can allow "
                                   "more with SKILLOS_GATEWAY_EXTRA_FIELDS)")
        _bounded(body, "n", 1, self.max_n, " at this gateway (SKILLOS_GATEWAY_MAX_N)")
        for field in ("max_tokens", "max_completion_tokens"):
            _bounded(body, field, 1, self.max_tokens, " at this gateway (SKILLOS_GATEWAY_MAX_TOKENS)")
        _bounded(body, "top_logprobs", 0, MAX_TOP_LOGPROBS, "")
        _bounded(body, "min_tokens", 0, self.max_tokens, " at this gateway (SKILLOS_GATEWAY_MAX_TOKENS)")
        if body.get("ignore_eos") and body.get("max_tokens") is None and body.get("max_completion_tokens") is None:
            raise _bad("ignore_eos", "ignore_eos needs max_tokens (at most SKILLOS_GATEWAY_MAX_TOKENS): without a "
                                     "limit it generates to the end of the backend's context")
        switches = body.get("chat_template_kwargs")
        if switches is not None and "chat_template_kwargs" not in self.extra_fields and (
                not isinstance(switches, dict) or set(switches) - TEMPLATE_SWITCHES):
            raise _bad("chat_template_kwargs", "chat_template_kwargs may only set "
                                               + ", ".join(sorted(TEMPLATE_SWITCHES)))
        for i, message in enumerate(body.get("messages") or []):
            content = message.get("content")
            if isinstance(content, list):
                for j, part in enumerate(content):
                    self._check_part(part, f"messages[{i}].content[{j}]")
        return body

    def _check_part(self, part: Any, where: str) -> None:
        kind = part.get("type") if isinstance(part, dict) else None
        if kind in TEXT_PARTS:
            return
        if kind in MEDIA_PARTS and self.allow_media:
            key, field = MEDIA_PARTS[kind]
            inner = part.get(key)
            value = inner.get(field) if isinstance(inner, dict) else None
            if kind == "input_audio" or (isinstance(value, str) and value.startswith("data:")):
                return
            raise _bad(where, f"{where} is an image by URL: the backend would fetch it; send it inline as a "
                              "data: URL")
        if kind in MEDIA_PARTS:
            raise _bad(where, f"{where} is a {kind!r} part: this gateway forwards text only "
                              "(SKILLOS_GATEWAY_ALLOW_MEDIA allows inline images and audio)")
        raise _bad(where, f"{where} is a {kind!r} part: this gateway forwards 'text' parts"
                          + (" and inline 'image_url' (data:) and 'input_audio' parts" if self.allow_media else ""))


def _bounded(body: dict[str, Any], field: str, low: int, high: int, why: str) -> None:
    v = body.get(field)
    if v is not None and (not isinstance(v, int) or isinstance(v, bool) or not low <= v <= high):
        raise _bad(field, f"{field} must be an integer from {low} to {high}{why}")


def _bad(param: str, message: str) -> APIError:
    return gateway_error(400, "unsupported_parameter", message, param=param)


def parse_fields(spec: str) -> frozenset[str]:
    return frozenset(f.strip() for f in spec.split(",") if f.strip())
