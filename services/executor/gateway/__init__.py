"""The OpenAI-compatible skill gateway of the executor (laid out like vLLM's OpenAI server: a folder per
resource with its routes, wire schemas and work): ``chat/`` (`/v1/chat/completions`), ``models/``
(`/v1/models`), ``trajectories/`` (outcomes, curation, expiry, the store). `Gateway` builds and owns them."""

from __future__ import annotations

from fastapi import FastAPI

from services.executor.admission import Admission
from services.executor.gateway.chat.api_router import router as chat_router
from services.executor.gateway.chat.policy import RequestPolicy, parse_fields
from services.executor.gateway.chat.serving import ChatGateway
from services.executor.gateway.errors import OpenAIErrors
from services.executor.gateway.models.api_router import router as models_router
from services.executor.gateway.models.serving import ServedModels
from services.executor.gateway.trajectories.api_router import router as trajectories_router
from services.executor.gateway.trajectories.serving import Trajectories
from services.executor.gateway.trajectories.store import TrajectoryStore
from services.executor.settings import ExecutorSettings
from skillos.auth import Authenticator
from skillos.llm import LLMSettings

ROUTERS = (chat_router, models_router, trajectories_router)
EMBEDDED_DATABASE = "sqlite:///./skillos-gateway.db"


def database_of(settings: ExecutorSettings) -> str:
    """Where the trajectories are kept: SKILLOS_GATEWAY_DATABASE_URL, else the skill repo's PostgreSQL
    (SKILLOS_DATABASE_URL, which every deployment hands each service; a SQLite path there is the skill repo
    process's own file, not shared), else a SQLite file of this process."""
    if settings.gateway_database_url:
        return settings.gateway_database_url
    if settings.database_url.startswith("postgresql"):
        return settings.database_url
    return EMBEDDED_DATABASE


def add_routes(app: FastAPI) -> None:
    """The gateway's routes, their errors in OpenAI's shape."""
    for router in ROUTERS:
        app.include_router(router)
    app.add_middleware(OpenAIErrors)


class Gateway:
    """The gateway's parts of one process; `start` in the app's lifespan, `aclose` at its end."""

    def __init__(self, settings: ExecutorSettings, llm: LLMSettings, admission: Admission, judge=None,
                 auth: Authenticator | None = None):
        """``judge``: the executor's own `judge` (a `JudgeRequest` in, a `JudgeResponse` out), used on idle
        trajectories when ``gateway_judge_expired`` is on; ``admission``: the executor's bound on its single LLM
        calls in flight, shared with /v1/act and /v1/judge."""
        self.store = TrajectoryStore(database_of(settings), settings.gateway_max_calls,
                                     settings.gateway_max_trajectory_bytes)
        names = [m.strip() for m in settings.gateway_models.split(",") if m.strip()] or [llm.model]
        self.models = ServedModels(names)
        token = settings.api_token or None
        self.chat = ChatGateway(llm=llm, store=self.store, skillrepo_url=settings.skillrepo_url, token=token,
                                default_repo=settings.gateway_default_repo, k=settings.gateway_k, models=names,
                                admission=admission, examples=settings.executor_examples,
                                examples_chars=settings.executor_examples_chars,
                                policy=RequestPolicy(settings.gateway_max_n, settings.gateway_max_tokens,
                                                     settings.gateway_allow_media,
                                                     parse_fields(settings.gateway_extra_fields)),
                                max_calls_per_caller=settings.gateway_max_calls_per_caller,
                                review_new_repos=settings.gateway_review_new_repos,
                                withhold_share=settings.gateway_withhold_share,
                                candidates_new_repos=settings.gateway_candidates_new_repos,
                                explore_share=settings.gateway_explore_share)
        self.trajectories = Trajectories(
            self.store, settings.curator_url, token, ttl_s=settings.gateway_trajectory_ttl_s,
            sweep_interval_s=settings.gateway_sweep_interval_s, curator_timeout_s=settings.gateway_curator_timeout_s,
            curator_retries=settings.gateway_curator_retries,
            judge=judge if settings.gateway_judge_expired else None,
            auth=auth or Authenticator(settings.auth_mode, settings.auth_tokens), examples=settings.executor_examples,
            examples_chars=settings.executor_examples_chars, retention_s=settings.gateway_retention_s,
            skillrepo_url=settings.skillrepo_url, learn_ungated=settings.gateway_learn_ungated)

    def attach(self, app: FastAPI) -> None:
        app.state.gateway, app.state.models, app.state.trajectories = self.chat, self.models, self.trajectories

    def start(self) -> None:
        self.trajectories.start()

    async def aclose(self) -> None:
        await self.chat.aclose()
        await self.trajectories.aclose()
        self.store.close()
