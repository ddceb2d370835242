"""`CurationOptions`: how a decision asks its LLM (output mode, call bounds, sampling). Plain data.

The curator service reads them from its settings (``SKILLOS_CURATOR_*``, `skillos.settings.CurationSettings`),
the trainer from the same settings with its own output mode, so both ask alike.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal

from skillos.curation.schema import CURATOR_TOOLS, curator_json_schema


@dataclass(frozen=True)
class CurationOptions:
    # json: one JSON object under grammar-constrained decoding; tools: the backend's tools API;
    # text: no constraint, calls printed as <tool_call> tags or JSON (read by the fallback parser)
    output_mode: Literal["json", "tools", "text"] = "json"
    json_style: Literal["llama_cpp", "openai"] = "llama_cpp"   # response_format dialect of json mode
    min_calls: int = 1
    max_calls: int = 2
    max_tokens: int = 400
    temperature: float | None = None    # None: the LLM role's configured temperature
    ask_token_ids: bool = False         # send vLLM's return_token_ids (prompt/completion ids for GRPO)


def response_format_for(style: str, schema: dict[str, Any]) -> dict[str, Any]:
    if style == "openai":
        return {"type": "json_schema", "json_schema": {"name": "curator_calls", "schema": schema}}
    return {"type": "json_object", "schema": schema}


def llm_arguments(options: CurationOptions, *, shown_skills: list[str], temperature: float | None,
                  seed: int | None, logprobs: bool) -> dict[str, Any]:
    """The keyword arguments of `ChatLLM.chat` for one decision.

    ``shown_skills``: names of the skills in the prompt; in json mode only those may be updated or
    deleted. ``temperature``: the request's, else the options'.
    """
    kwargs: dict[str, Any] = {"max_tokens": options.max_tokens, "seed": seed, "logprobs": logprobs}
    temperature = temperature if temperature is not None else options.temperature
    if temperature is not None:
        kwargs["temperature"] = temperature
    if options.output_mode == "tools":
        kwargs.update(tools=CURATOR_TOOLS, tool_choice="auto")
    elif options.output_mode == "json":
        schema = curator_json_schema(options.min_calls, options.max_calls, existing=shown_skills)
        kwargs["response_format"] = response_format_for(options.json_style, schema)
    if options.ask_token_ids:
        kwargs["extra_body"] = {"return_token_ids": True}
    return kwargs
