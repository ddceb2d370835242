"""`skillos serve console`: the web console (port 8004)."""

from __future__ import annotations

import typer

from skillos.cli.common import HostOption


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    @serve_app.command("console")
    def serve_console(host: str = HostOption,
                      port: int = typer.Option(8004, "--port", envvar="SKILLOS_CONSOLE_PORT")) -> None:
        """The web console: repos, skills, versions, diffs, the op timeline and runs (live)."""
        from services.console.app import build_app
        from services.console.settings import ConsoleSettings
        from skillos.cli.common import init_logging
        from skillos.service import serve

        settings = ConsoleSettings()
        init_logging(settings)
        serve(build_app(settings), host, port, log_level=settings.log_level)
