"""`skillos serve curator` and `skillos curate` (one decision from a JSON file, for debugging).

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the curator's app and core (FastAPI, pydantic-settings, the LLM client).
"""

from __future__ import annotations

from pathlib import Path

import typer

from skillos.cli.common import HostOption
from skillos.cli.serve import serve_service

RequestFileArg = typer.Argument(..., exists=True, help="a CurateRequest as JSON")


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    @serve_app.command("curator")
    def serve_curator(host: str = HostOption,
                      port: int = typer.Option(8003, "--port", envvar="SKILLOS_CURATOR_PORT")) -> None:
        """The skill curator service (POST /v1/curate, POST /v1/judge/content)."""
        from services.curator.app import build_app
        from services.curator.settings import CuratorSettings

        settings = CuratorSettings()
        # a bad SKILLOS_AUTH_MODE / SKILLOS_AUTH_TOKENS: its message and exit 1, no traceback
        serve_service(settings, lambda: build_app(settings), host, port, refuse=(ValueError,))

    @app.command("curate")
    def curate(request_file: Path = RequestFileArg,
               url: str = typer.Option(None, "--url", help="curator URL (default: SKILLOS_CURATOR_URL)")) -> None:
        """Send one curate request to a running curator and print the answer."""
        import asyncio
        import json

        from skillos.cli.common import print_json
        from skillos.clients.curator import AsyncCuratorClient
        from skillos.protocol.curator import CurateRequest
        from skillos.settings import ServiceAddresses

        settings = ServiceAddresses()
        req = CurateRequest.model_validate(json.loads(request_file.read_text()))

        async def go():
            async with AsyncCuratorClient(url or settings.curator_url, token=settings.api_token or None) as c:
                return await c.curate(req)

        print_json(asyncio.run(go()).model_dump())
