"""The executor's FastAPI app (built with `skillos.service.create_app`)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from services.executor.api_router import router
from services.executor.gateway import Gateway, add_routes
from services.executor.serving import Executor
from services.executor.settings import ExecutorSettings
from skillos.auth import Authenticator
from skillos.db import database_errors
from skillos.llm import LLMSettings
from skillos.service import create_app

DESCRIPTION = """The frozen agent executor: ReAct episodes over an env server with top-k skills from the
skill repo, single decisions for agents in production, and self-judged correctness.

Action parsing: the action is read from the last `<action>...</action>`; an exact (case-insensitive)
admissible action is sent as is; otherwise the closest admissible action by fuzzy matching (score >= 85)
replaces it; otherwise the text is sent as written and the turn is marked invalid (the environment
answers "Nothing happens.").

The skill gateway: `/v1/chat/completions` and `/v1/models` in OpenAI's wire format (the official `openai`
client works with its `base_url` changed, and its `api_key` a token where tokens are on) with the top-k skills of the conversation's task injected,
every call recorded in a trajectory (`X-SkillOS-Trajectory`), and `/v1/trajectories/{id}/outcome` to hand a
finished trajectory to the curator. Their errors are OpenAI's error object.

Tokens (SKILLOS_AUTH_MODE=tokens, the SKILLOS_AUTH_TOKENS of the skill repo): every route but the probes needs
one, and a caller reaches only the repos its token reaches (`read` to play, decide or chat with a repo's
skills; `rw` to report an outcome, which the curator turns into writes, or to have the gateway create a
missing repo): 401 without a known token, 403 beyond its scope or prefix."""


def build_app(settings: ExecutorSettings | None = None, llm_settings: LLMSettings | None = None) -> FastAPI:
    settings = settings or ExecutorSettings()
    llm_settings = llm_settings or LLMSettings.for_role("executor")

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.executor = Executor(settings, llm_settings)
        gateway = Gateway(settings, llm_settings, judge=app.state.executor.judge,
                          admission=app.state.executor.admission, auth=app.state.auth)
        gateway.attach(app)
        gateway.start()
        try:
            yield
        finally:
            await gateway.aclose()
            await app.state.executor.aclose()

    async def llm_backend() -> None:
        headers = {"Authorization": f"Bearer {llm_settings.api_key}"} if llm_settings.api_key else {}
        async with httpx.AsyncClient(timeout=5) as c:
            (await c.get(llm_settings.base_url.rstrip("/") + "/models", headers=headers)).raise_for_status()

    app = create_app("executor", description=DESCRIPTION, readiness=[llm_backend], lifespan=lifespan,
                     max_request_bytes=settings.max_request_bytes,
                     # the gateway's trajectory store down or stuck: 503 with Retry-After (OpenAI-shaped there)
                     unavailable_on={e: "database" for e in database_errors()})
    app.state.auth = Authenticator(settings.auth_mode, settings.auth_tokens)
    app.include_router(router)
    add_routes(app)
    return app
