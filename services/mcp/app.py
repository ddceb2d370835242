"""`skillos serve mcp --transport http`: the MCP server's streamable HTTP endpoint (``/mcp``) inside the common
service app (`skillos.service.create_app`: ``/healthz``, ``/readyz``, ``/metrics``, the door for bad input)."""

from __future__ import annotations

from contextlib import asynccontextmanager

import httpx
from fastapi import FastAPI

from services.mcp.server import build_server
from services.mcp.settings import MCPSettings
from skillos.service import create_app

MCP_PATH = "/mcp"


def build_app(settings: MCPSettings, host: str = "127.0.0.1") -> FastAPI:
    """The HTTP app. ``host``: the address served; on loopback the SDK refuses requests whose Host or
    Origin header is not loopback (DNS rebinding)."""
    server = build_server(settings, "http")
    mcp_app = server.streamable_http_app(streamable_http_path=MCP_PATH, stateless_http=settings.mcp_stateless_http,
                                         host=host)

    @asynccontextmanager
    async def lifespan(_: FastAPI):
        async with server.session_manager.run():
            yield
        await server.skillos.aclose()

    async def skillrepo() -> None:
        async with httpx.AsyncClient(timeout=5.0) as http:
            (await http.get(f"{settings.skillrepo_url.rstrip('/')}/healthz")).raise_for_status()

    app = create_app("mcp", title="SkillOS MCP server", lifespan=lifespan, readiness=[skillrepo],
                     description=f"The skill repo as MCP tools and resources: streamable HTTP at {MCP_PATH}.")
    app.router.routes.extend(mcp_app.routes)
    app.state.mcp = server
    return app
