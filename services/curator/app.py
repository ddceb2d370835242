"""The curator service's FastAPI app (`skillos serve curator`)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from services.curator.api_router import router
from services.curator.serving import Curator
from services.curator.settings import CuratorSettings
from skillos.auth import Authenticator
from skillos.llm import LLMSettings
from skillos.service import create_app


def build_app(settings: CuratorSettings | None = None, curator: Curator | None = None) -> FastAPI:
    settings = settings or CuratorSettings()

    @asynccontextmanager
    async def lifespan(app: FastAPI):
        app.state.curator = curator or Curator(settings)
        yield
        await app.state.curator.aclose()

    async def skillrepo() -> None:
        async with httpx.AsyncClient(timeout=3) as c:
            (await c.get(settings.skillrepo_url.rstrip("/") + "/healthz")).raise_for_status()

    async def curator_llm() -> None:
        llm = LLMSettings.for_role("curator")
        async with httpx.AsyncClient(timeout=3) as c:
            (await c.get(llm.base_url.rstrip("/") + "/models")).raise_for_status()

    app = create_app("curator", description="Skill curator: trajectories in, validated skill-repo ops out.",
                     readiness=[skillrepo, curator_llm], lifespan=lifespan)
    app.state.auth = Authenticator(settings.auth_mode, settings.auth_tokens)
    app.include_router(router)
    return app
