"""Configuration of one LLM role (executor, curator, judge).

Every role is an OpenAI-compatible chat-completions endpoint. Its settings come from environment
variables ``SKILLOS_<ROLE>_LLM_<FIELD>`` (e.g. ``SKILLOS_CURATOR_LLM_BASE_URL``); a field a role does not
set falls back to ``SKILLOS_LLM_<FIELD>`` (one endpoint for every role), then to the role's entry in
`ROLE_DEFAULTS`, then to the field default (the embedded SmolLM2 server on 127.0.0.1:8080).
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, Field
from pydantic_settings import BaseSettings, SettingsConfigDict

Role = Literal["executor", "curator", "judge"]
ROLES: tuple[str, ...] = ("executor", "curator", "judge")

# Defaults per role where they differ from the field defaults: the executor takes many short turns
# (a 30-turn episode must stay within ~1-2 min on the embedded model), the judge must be deterministic.
ROLE_DEFAULTS: dict[str, dict] = {
    "executor": {"model": "qwen2.5-coder-1.5b-instruct", "temperature": 0.3, "max_tokens": 160},
    "curator": {"model": "qwen2.5-coder-1.5b-instruct", "temperature": 0.7, "max_tokens": 768},
    "judge": {"model": "qwen2.5-coder-1.5b-instruct", "temperature": 0.0, "max_tokens": 160},
}

DEFAULT_BASE_URL = "http://127.0.0.1:8080/v1"
DEFAULT_MODEL = "qwen2.5-coder-1.5b-instruct"


class LLMSettings(BaseModel):
    """Where one LLM role lives and how it is sampled."""

    base_url: str = DEFAULT_BASE_URL
    model: str = DEFAULT_MODEL
    api_key: str = ""  # sent as "Authorization: Bearer <key>" when set
    temperature: float = Field(0.7, ge=0.0, le=2.0)
    top_p: float = Field(1.0, gt=0.0, le=1.0)
    max_tokens: int = Field(256, ge=1)
    timeout_s: float = Field(60.0, gt=0.0)  # per HTTP attempt
    max_retries: int = Field(3, ge=0)  # extra attempts on connection errors, timeouts, 429 and 5xx
    backoff_s: float = Field(0.5, ge=0.0)  # first retry delay; doubles each attempt
    max_backoff_s: float = Field(8.0, ge=0.0)
    seed: int | None = None
    # a SQLite file of completions (skillos.llm.cache): repeatable requests are answered from it
    cache: str | None = None
    role: str = "default"  # label for metrics and logs

    @classmethod
    def for_role(cls, role: Role | str) -> LLMSettings:
        """Read ``SKILLOS_<ROLE>_LLM_*``, falling back to ``SKILLOS_LLM_*`` and the defaults."""
        role = role.lower()
        if role not in ROLES:
            raise ValueError(f"unknown LLM role {role!r}; expected one of {', '.join(ROLES)}")
        shared = _LLMEnv(_env_prefix="SKILLOS_LLM_").model_dump(exclude_unset=True)
        own = _LLMEnv(_env_prefix=f"SKILLOS_{role.upper()}_LLM_").model_dump(exclude_unset=True)
        return cls(**{**ROLE_DEFAULTS[role], **shared, **own, "role": role})

    def chat_url(self) -> str:
        return self.base_url.rstrip("/") + "/chat/completions"


class _LLMEnv(BaseSettings):
    """The environment-variable view of LLMSettings (all optional: unset means "not given")."""

    model_config = SettingsConfigDict(env_file=".env", extra="ignore")

    base_url: str | None = None
    model: str | None = None
    api_key: str | None = None
    temperature: float | None = None
    top_p: float | None = None
    max_tokens: int | None = None
    timeout_s: float | None = None
    max_retries: int | None = None
    backoff_s: float | None = None
    max_backoff_s: float | None = None
    seed: int | None = None
    cache: str | None = None
