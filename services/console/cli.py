"""`skillos serve console`: the web console (port 8004).

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the console's app (FastAPI, Jinja2) and its settings (pydantic-settings).
"""

from __future__ import annotations

import typer

from skillos.cli.common import HostOption
from skillos.cli.serve import serve_service


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    @serve_app.command("console")
    def serve_console(host: str = HostOption,
                      port: int = typer.Option(8004, "--port", envvar="SKILLOS_CONSOLE_PORT")) -> None:
        """The web console: repos, skills, versions, diffs, the op timeline and runs (live)."""
        from services.console.app import build_app
        from services.console.settings import ConsoleSettings

        settings = ConsoleSettings()
        serve_service(settings, lambda: build_app(settings), host, port)
