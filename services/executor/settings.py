"""Executor service settings (env vars ``SKILLOS_<FIELD>``). The LLM it drives is configured by
``SKILLOS_EXECUTOR_LLM_*`` (see `skillos.llm.LLMSettings.for_role`)."""

from __future__ import annotations

from pydantic import Field

from skillos.settings import ActingSettings


class ExecutorSettings(ActingSettings):
    """The executor calls the skill repo (retrieval) and the env servers (episodes); how it plays and
    decides is `ActingSettings` (shared with the trainer's agent-policy mode)."""

    # episodes run at the same time in this process; more wait (the LLM backend is the bottleneck)
    executor_max_concurrent_episodes: int = Field(8, ge=1)
