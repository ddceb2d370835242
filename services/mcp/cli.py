"""`skillos serve mcp`: the skill repo as an MCP server (stdio, or streamable HTTP on port 8005).

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the MCP SDK and the server's app.
"""

from __future__ import annotations

import typer

from skillos.cli.common import HostOption
from skillos.cli.serve import serve_service


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    @serve_app.command("mcp")
    def serve_mcp(transport: str = typer.Option("stdio", "--transport", envvar="SKILLOS_MCP_TRANSPORT",
                                                help="stdio (an agent starts this process) or http "
                                                     "(streamable HTTP at /mcp)"),
                  host: str = HostOption,
                  port: int = typer.Option(8005, "--port", envvar="SKILLOS_MCP_PORT")) -> None:
        """The skill repo as MCP tools (search_skills, get_skill, record_outcome) and resources
        (skill://{repo}/{name})."""
        from skillos.cli.common import fail, init_logging

        if transport not in ("stdio", "http"):
            fail(f"unknown transport {transport!r}: use stdio or http")
        from services.mcp.settings import MCPSettings

        settings = MCPSettings()
        if transport == "http":
            from services.mcp.app import build_app

            serve_service(settings, lambda: build_app(settings, host), host, port)
            return
        import anyio

        from services.mcp.server import build_server

        init_logging(settings)  # to stderr: stdout carries the protocol
        server = build_server(settings, "stdio")
        anyio.run(server.run_stdio_async)
