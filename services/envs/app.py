"""An environment server's FastAPI app: `build_app(env)`, the env protocol (`api_router`) over a
`SessionManager` (`server`) for any `Environment` (`base`)."""

from __future__ import annotations

from contextlib import asynccontextmanager

from fastapi import FastAPI

from services.envs.api_router import build_router
from services.envs.base import Environment
from services.envs.server import SessionManager
from services.envs.settings import EnvServerSettings
from skillos.auth import Authenticator
from skillos.service import create_app


def build_app(env: Environment, settings: EnvServerSettings | None = None) -> FastAPI:
    """The HTTP server of one environment: `skillos.protocol.envs` over a `SessionManager`."""
    settings = settings or EnvServerSettings()
    manager = SessionManager(env, settings)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        await manager.start()
        try:
            yield
        finally:
            await manager.stop()

    async def environment_loaded() -> None:
        if not env.splits():
            raise RuntimeError(f"{env.name}: no splits found in its data directory")
        # not ready while a background load holds the GIL: traffic routed now would see slow steps
        if (pending := env.warming_up()) is not None:
            raise RuntimeError(f"{env.name}: warming up ({pending})")

    async def not_draining() -> None:
        # a draining replica leaves the load balancer's rotation; its open sessions go on at session_url
        if manager.draining:
            raise RuntimeError(f"draining: {len(manager.sessions)} open sessions, no new ones")

    app = create_app(env.name, title=f"SkillOS {env.name} environment",
                     description="One environment behind the SkillOS env protocol (skillos.protocol.envs).",
                     readiness=[environment_loaded, not_draining], lifespan=lifespan)
    app.state.auth = Authenticator(settings.auth_mode, settings.auth_tokens)
    app.state.sessions = manager
    app.state.drain = manager.drain  # skillos.service.serve runs it on SIGTERM
    app.include_router(build_router(manager))
    return app
