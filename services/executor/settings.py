"""Executor service settings (env vars ``SKILLOS_<FIELD>``). The LLM it drives is configured by
``SKILLOS_EXECUTOR_LLM_*`` (see `skillos.llm.LLMSettings.for_role`)."""

from __future__ import annotations

from typing import Literal

from pydantic import Field

from skillos.settings import ApiTokenSettings, EnvAddresses, SkillRepoAddress


class ExecutorSettings(ApiTokenSettings, SkillRepoAddress, EnvAddresses):
    """The executor calls the skill repo (retrieval) and the env servers (episodes)."""

    # episodes run at the same time in this process; more wait (the LLM backend is the bottleneck)
    executor_max_concurrent_episodes: int = Field(8, ge=1)
    # HTTP timeout towards env servers and the skill repo
    executor_upstream_timeout_s: float = Field(120.0, gt=0)
    # completion budget of the single reasoning turn when the request does not set sampling.max_tokens
    executor_reasoning_max_tokens: int = Field(512, ge=16)
    # how a decision is asked for: "json" = a JSON schema (thought + one admissible action) the backend
    # decodes under (llama.cpp, vLLM and OpenAI-style APIs support it); "tags" = <think>/<action> text
    executor_action_format: Literal["json", "tags"] = "json"
    # how the executor decides when a request does not say (skillos.acting.options.ActingOptions)
    executor_state_line: bool = True
    executor_hold_back: bool = True
    executor_demos: Literal["generic", "expert"] = "expert"
    executor_demos_per_type: int = Field(1, ge=0, le=3)

