"""Executor service settings (env vars ``SKILLOS_<FIELD>``). The LLM it drives is configured by
``SKILLOS_EXECUTOR_LLM_*`` (see `skillos.llm.LLMSettings.for_role`)."""

from __future__ import annotations

from pydantic import Field

from skillos.settings import ActingSettings, InboundAuthSettings


class ExecutorSettings(ActingSettings, InboundAuthSettings):
    """The executor calls the skill repo (retrieval) and the env servers (episodes); how it plays and
    decides is `ActingSettings` (shared with the trainer's agent-policy mode). The ``gateway_*`` fields
    are the OpenAI-compatible skill gateway's (`services/executor/gateway/`). With auth on, a caller needs a
    token that reaches the repo it names: read to play, decide or chat with its skills, rw to report the
    outcome that curates into it."""

    # episodes run at the same time in this process; more wait (the LLM backend is the bottleneck)
    executor_max_concurrent_episodes: int = Field(8, ge=1)
    # single LLM calls (/v1/act, /v1/judge, the gateway's chat completions) at the backend at once, at most; the
    # bound adapts below it while calls take more than half the LLM timeout (services/executor/admission.py);
    # more calls wait their turn up to executor_llm_queue_s, then get 429 with Retry-After
    executor_max_llm_calls: int = Field(32, ge=1)
    executor_llm_queue_s: float = Field(30.0, ge=0)
    # a call at the backend longer than this cuts the bound; 0: half the executor LLM's timeout
    executor_llm_target_s: float = Field(0.0, ge=0)
    # the /v1/act and /v1/judge calls one token may have waiting or at the backend, counted with its gateway chat
    # calls (0: no bound), and the episodes it may have running or waiting for a slot (0: no bound; keep it below
    # executor_max_concurrent_episodes), so that no caller holds every turn or slot: beyond, 429 with Retry-After.
    # An operator's token (rw without a prefix: the services' own, which `skillos run` and the trainer send) and
    # open mode are not bounded per caller
    executor_max_calls_per_caller: int = Field(8, ge=0)
    executor_max_episodes_per_caller: int = Field(4, ge=0)
    # one HTTP request's body (bigger: 413 before it is read)
    max_request_bytes: int = Field(8 * 1024 * 1024, ge=1024)

    # --- the skill gateway (/v1/chat/completions, /v1/models, /v1/trajectories) ---
    # where closed trajectories go to be curated
    curator_url: str = "http://127.0.0.1:8003"
    # trajectories and their calls: a `postgresql+psycopg://user@host/db` URL in production (compose and the
    # Helm chart use the skill repo's database: the tables are gateway_*); empty: the skill repo's own
    # database_url when that is PostgreSQL (a Helm existingSecret need not name this one), else the SQLite
    # file ./skillos-gateway.db, made on the gateway's first use
    gateway_database_url: str = ""
    # the skill repo's database (SKILLOS_DATABASE_URL, read only for the fallback above)
    database_url: str = ""
    # the repo of a call without an X-SkillOS-Repo header from a token without a prefix (a prefixed token gets
    # its own: `ChatGateway.default_repo_of`); created on first use when missing
    gateway_default_repo: str = "default"
    # skills injected into a trajectory's conversation (top k for its task)
    gateway_k: int = Field(3, ge=0, le=50)
    # model names clients may ask for, comma-separated; empty: the executor LLM's model name
    gateway_models: str = ""
    # what of a caller's request reaches the backend (`services.executor.gateway.chat.policy`): choices and
    # tokens an answer may ask for, inline images and audio (never a URL the backend would fetch), and fields
    # forwarded beside OpenAI's and the backends' sampling options (comma-separated)
    gateway_max_n: int = Field(1, ge=1, le=16)
    gateway_max_tokens: int = Field(4096, ge=1)
    gateway_allow_media: bool = False
    gateway_extra_fields: str = ""
    # the chat calls one token may have waiting or at the backend (0: no bound; open mode is not bounded), so
    # that no caller holds every turn of SKILLOS_EXECUTOR_MAX_LLM_CALLS: beyond it, 429 with Retry-After
    gateway_max_calls_per_caller: int = Field(8, ge=0)
    # what one trajectory keeps: calls beyond either bound are still answered, not recorded
    gateway_max_calls: int = Field(256, ge=1)
    gateway_max_trajectory_bytes: int = Field(2 * 1024 * 1024, ge=1024)
    # an open trajectory with no call for this long expires without curation
    gateway_trajectory_ttl_s: float = Field(3600.0, gt=0)
    # an ended trajectory (curated, failed, expired) and its calls are deleted this long after it ended (0: kept)
    gateway_retention_s: float = Field(7 * 86400.0, ge=0)
    gateway_sweep_interval_s: float = Field(30.0, gt=0)
    # an idle trajectory judged by the executor's own model (the paper's self-judge) and curated with that
    # outcome, instead of expiring uncurated; off: only what an agent reports is learned from
    gateway_judge_expired: bool = False
    # a repo the gateway creates (a caller's first call to a new repo) reviews its curator op batches: skills
    # learned from traffic wait for a person (`skillos repo proposals`) before any caller is served them
    gateway_review_new_repos: bool = True
    # a repo the gateway creates has skill states: what its traffic writes is a candidate (served to the
    # exploration share only) until promoted, and op batches change only skills written from traffic; with
    # review on too, an approved batch's skills are active at once (`docs/security.md`, "A skill's life")
    gateway_candidates_new_repos: bool = True
    # curate traffic into a repo whose policy has neither review nor candidates (the shared default repo, repos
    # made through REST, unless an operator set a policy): what one caller teaches is then served to every
    # caller of the repo at once. Off: such trajectories end `failed` with the reason, their outcome counted
    gateway_learn_ungated: bool = False
    # the chance that a matching candidate skill is served to a new task (each independently); the tasks it
    # matched and was not served in are its utility's control arm. 0: candidates are never served
    gateway_explore_share: float = Field(0.1, ge=0, le=1)
    # the share of matching skills withheld at random from a task (each independently), the control arm of
    # each skill's measured utility (`skillos repo stats`); 0: every matching skill is served
    gateway_withhold_share: float = Field(0.1, ge=0, le=1)
    # the curator's time for one trajectory, and the tries when it is unreachable
    gateway_curator_timeout_s: float = Field(600.0, gt=0)
    gateway_curator_retries: int = Field(3, ge=0)
