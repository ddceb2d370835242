"""The settings every part is built from. Each service has one settings class in its own
`settings.py` that composes only the pieces below it reads: the skill repo knows no URL, an env server
knows its data and no other service, the executor knows the skill repo and the env servers.

All names are environment variables prefixed ``SKILLOS_`` (a ``.env`` file in the working directory
is read too). The same names are used in docker-compose, the Helm values and the CLI options, and
`all_settings_classes()` lists them for the test that checks that. Deployments may hand every
container one shared environment: a class ignores the names it does not read.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Literal

from pydantic import Field, field_validator
from pydantic_settings import BaseSettings, SettingsConfigDict

from skillos.acting.options import ActingOptions, PlayerOptions
from skillos.placeholders import refuse_placeholder

if TYPE_CHECKING:
    from skillos.curation.options import CurationOptions

# ../shared/data beside the checkout: where development and CI keep the real data sets.
_REPO_ROOT = Path(__file__).resolve().parent.parent
DEFAULT_SHARED_DATA = _REPO_ROOT.parent / "shared" / "data"


class CommonSettings(BaseSettings):
    """What every process reads: how it logs."""

    model_config = SettingsConfigDict(env_prefix="SKILLOS_", env_file=".env", extra="ignore")

    # logging: "json" for machines (default in deployment), "console" for people
    log_level: str = "INFO"
    log_format: str = "json"


class ApiTokenSettings(CommonSettings):
    """For a process that calls other SkillOS services."""

    # bearer token this process sends to other SkillOS services (empty: none)
    api_token: str = ""

    @field_validator("api_token")
    @classmethod
    def _not_a_placeholder(cls, v: str) -> str:
        refuse_placeholder(v, "SKILLOS_API_TOKEN")
        return v


class InboundAuthSettings(CommonSettings):
    """For a service whose callers reach skill repos through it (the skill repo itself, the executor and
    its gateway, the curator), and the env servers: who may call it, with the same tokens everywhere
    (`skillos.auth`)."""

    # "open" (no token needed; the embedded default) or "tokens" (SKILLOS_AUTH_TOKENS); checked by
    # `skillos.auth.Authenticator` when the app is built, so a wrong value is a one-line refusal to start
    auth_mode: str = "open"
    # comma-separated `token:scope[:repo-prefix[:label]]`, scope `read` or `rw`, e.g. "s3cret:rw,ro1:read:train-";
    # the label names the token in the op log (default token#<n>)
    auth_tokens: str = ""


class SkillRepoAddress(CommonSettings):
    # where the skill repo is (defaults: ARCHITECTURE.md ports on loopback)
    skillrepo_url: str = "http://127.0.0.1:8001"


class EnvAddresses(CommonSettings):
    # where the env servers are
    alfworld_url: str = "http://127.0.0.1:8010"
    webshop_url: str = "http://127.0.0.1:8011"
    reasoning_url: str = "http://127.0.0.1:8012"

    def env_url(self, env: str) -> str:
        """Where the env server of ``env`` (alfworld, webshop, reasoning) is: ``SKILLOS_<ENV>_URL``.
        The one env-name -> URL mapping; an unknown env raises KeyError."""
        return {"alfworld": self.alfworld_url, "webshop": self.webshop_url, "reasoning": self.reasoning_url}[env]


class ActingSettings(ApiTokenSettings, SkillRepoAddress, EnvAddresses):
    """How episodes are played in process (`skillos.acting.player.EpisodePlayer`): the env servers and
    the skill repo they reach, and how the executor decides when a request does not say. The executor
    service's settings, and the trainer's for its agent-policy mode (the same ``SKILLOS_EXECUTOR_*``)."""

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
    executor_demos: Literal["none", "generic", "expert"] = "generic"
    executor_demos_per_type: int = Field(1, ge=0, le=3)
    executor_examples: int = Field(1, ge=0, le=3)
    executor_examples_chars: int = Field(1600, ge=0, le=8000)

    def player_options(self) -> PlayerOptions:
        """What an `EpisodePlayer` built from these settings reaches, and how it decides by default."""
        return PlayerOptions(
            env_urls={"alfworld": self.alfworld_url, "webshop": self.webshop_url, "reasoning": self.reasoning_url},
            skillrepo_url=self.skillrepo_url, api_token=self.api_token or None,
            timeout_s=self.executor_upstream_timeout_s, reasoning_max_tokens=self.executor_reasoning_max_tokens,
            action_format=self.executor_action_format,
            acting=ActingOptions(state_line=self.executor_state_line, hold_back=self.executor_hold_back,
                                 demos=self.executor_demos, demos_per_type=self.executor_demos_per_type,
                                 examples=self.executor_examples, examples_chars=self.executor_examples_chars))


class EnvDataSettings(CommonSettings):
    """Where the data sets are: read by the env servers, and by the commands that start them
    (`skillos up`, `run`, `train`) or fetch the data (`skillos data`)."""

    alfworld_data: Path = DEFAULT_SHARED_DATA / "alfworld"
    webshop_data: Path = DEFAULT_SHARED_DATA / "webshop"
    reasoning_data: Path | None = None  # None: the small demonstration set shipped with the package


class ServiceAddresses(ApiTokenSettings, SkillRepoAddress, EnvAddresses):
    """Where every service is, and the token to call them: a client of the whole stack (the
    trainer's rollouts, a one-off CLI call to a service)."""

    executor_url: str = "http://127.0.0.1:8002"
    curator_url: str = "http://127.0.0.1:8003"


class StackSettings(ServiceAddresses, EnvDataSettings):
    """The harness's commands (`skillos run`, `up`, `group`): they call every service, start the
    env servers on their data, and link to the console."""

    console_url: str = "http://127.0.0.1:8004"   # the web console (`skillos run` links to it when it is up)


class CurationSettings(CommonSettings):
    """How a curation decision asks its LLM (`skillos.curation.CurationOptions`), read from the
    environment: the curator service's settings, and the trainer's for its in-process policy."""

    # How the model is asked to write its calls:
    #   json  - one JSON object under grammar-constrained decoding (llama.cpp, vLLM guided decoding);
    #           the embedded default: SmolLM2-135M does not use a tools API reliably
    #   tools - the backend's tools API (vLLM with --enable-auto-tool-choice --tool-call-parser hermes)
    #   text  - no constraint; calls printed as <tool_call> tags or JSON, read by the fallback parser
    curator_output_mode: Literal["json", "tools", "text"] = "json"
    # response_format dialect for json mode: llama.cpp wants {"type": "json_object", "schema": ...},
    # OpenAI and vLLM {"type": "json_schema", "json_schema": {...}}
    curator_json_style: Literal["llama_cpp", "openai"] = "llama_cpp"
    # json mode: the least number of calls the grammar allows. 1 for the embedded default, where the
    # small model otherwise often answers {"calls": []}; 0 lets a capable model decide to do nothing.
    curator_min_calls: int = 1
    curator_max_calls: int = 2
    curator_max_tokens: int = 400
    curator_temperature: float | None = None  # None: the curator LLM role's configured temperature
    curator_ask_token_ids: bool = False  # send vLLM's return_token_ids (prompt/completion ids for GRPO)

    def curation_options(self) -> CurationOptions:
        from skillos.curation.options import CurationOptions

        return CurationOptions(output_mode=self.curator_output_mode, json_style=self.curator_json_style,
                               min_calls=self.curator_min_calls, max_calls=self.curator_max_calls,
                               max_tokens=self.curator_max_tokens, temperature=self.curator_temperature,
                               ask_token_ids=self.curator_ask_token_ids)


def all_settings_classes() -> list[type[BaseSettings]]:
    """Every settings class of the project that is imported (for the compose/Helm/code name
    consistency test, which imports each part's settings module first)."""
    seen: list[type[BaseSettings]] = []
    stack = [CommonSettings]
    while stack:
        cls = stack.pop()
        if cls not in seen:
            seen.append(cls)
            stack.extend(cls.__subclasses__())
    return seen
