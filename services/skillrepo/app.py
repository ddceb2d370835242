"""The skill repo's FastAPI app: `build_app()` (migrations run here, at start)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from services.skillrepo.api_router import router
from services.skillrepo.lifecycle.api_router import router as lifecycle_router
from services.skillrepo.review.api_router import router as review_router
from services.skillrepo.serving import SkillRepoService
from services.skillrepo.settings import SkillRepoSettings
from services.skillrepo.utility.api_router import router as utility_router
from skillos.auth import Authenticator
from skillos.db import database_errors
from skillos.service import create_app, run_bounded

DESCRIPTION = """Skills as SKILL.md documents in named repos: versions, forks, snapshots, BM25 search and the
curator's function calls (`new_skill_insert`, `skill_update`, `skill_delete`) applied atomically."""


def build_app(settings: SkillRepoSettings | None = None) -> FastAPI:
    settings = settings or SkillRepoSettings()
    auth = Authenticator(settings.auth_mode, settings.auth_tokens)
    svc = SkillRepoService(settings)

    async def database() -> None:
        # bounded: a database that stopped answering must not make the probe itself hang
        await run_bounded(svc.check_database, timeout_s=3.0)

    # Redis only carries change announcements between replicas: without it searches stay exact (each reads
    # the repo's seq from the database) and other replicas' indexes catch up by the reconcile loop, so a lost
    # Redis degrades the replica (named in /readyz) but does not take it out of rotation
    degraded = []
    if svc.announcer.redis is not None:
        async def redis() -> None:
            await run_bounded(svc.announcer.redis.ping, timeout_s=1.0)
        degraded.append(redis)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        svc.start()
        try:
            yield
        finally:
            svc.stop()

    # the door (skillos.service) caps every body at max_request_bytes, streamed or declared
    app = create_app("skillrepo", title="SkillOS skill repo", description=DESCRIPTION, readiness=[database],
                     degraded_when=degraded, unavailable_on={e: "database" for e in database_errors()},
                     retry_after_s=settings.database_retry_after_s, lifespan=lifespan,
                     max_request_bytes=settings.max_request_bytes)
    app.state.skillrepo = svc
    app.state.auth = auth
    app.include_router(router)
    app.include_router(review_router)
    app.include_router(utility_router)
    app.include_router(lifecycle_router)
    return app
