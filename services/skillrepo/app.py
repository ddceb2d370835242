"""The skill repo's FastAPI app: `build_app()` (migrations run here, at start)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI
from fastapi.responses import JSONResponse
from starlette.concurrency import run_in_threadpool

from services.skillrepo.api_router import router
from services.skillrepo.serving import SkillRepoService
from services.skillrepo.settings import SkillRepoSettings
from skillos.auth import Authenticator
from skillos.errors import APIError
from skillos.service import create_app

DESCRIPTION = """Skills as SKILL.md documents in named repos: versions, forks, snapshots, BM25 search and the
curator's function calls (`new_skill_insert`, `skill_update`, `skill_delete`) applied atomically."""


class _LimitBody:
    """Refuses a declared oversized body before reading it (streamed bodies are capped where read).

    Plain ASGI rather than `@app.middleware("http")`, which costs a task and a stream per request.
    """

    def __init__(self, app, limit: int):
        self.app, self.limit = app, limit

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http":
            length = next((v for k, v in scope["headers"] if k == b"content-length"), b"")
            if length.isdigit() and int(length) > self.limit:
                response = JSONResponse(APIError(
                    413, "payload_too_large", f"request body is {length.decode()} bytes; the limit is "
                    f"{self.limit} (SKILLOS_MAX_REQUEST_BYTES)").body(), status_code=413)
                return await response(scope, receive, send)
        await self.app(scope, receive, send)


def build_app(settings: SkillRepoSettings | None = None) -> FastAPI:
    settings = settings or SkillRepoSettings()
    auth = Authenticator(settings.auth_mode, settings.auth_tokens)
    svc = SkillRepoService(settings)

    async def database() -> None:
        await run_in_threadpool(svc.check_database)

    checks = [database]
    if svc.announcer.redis is not None:
        async def redis() -> None:
            await run_in_threadpool(svc.announcer.redis.ping)
        checks.append(redis)

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        svc.start()
        try:
            yield
        finally:
            svc.stop()

    app = create_app("skillrepo", title="SkillOS skill repo", description=DESCRIPTION, readiness=checks,
                     lifespan=lifespan)
    app.add_middleware(_LimitBody, limit=settings.max_request_bytes)
    app.state.skillrepo = svc
    app.state.auth = auth
    app.include_router(router)
    return app
