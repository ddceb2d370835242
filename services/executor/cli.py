"""`skillos serve executor`.

Imports inside the commands are deliberate: every part's cli.py is loaded whenever any `skillos` command
starts (registration), so what only one command needs stays in it: the executor's app (FastAPI, pydantic-settings, the acting core).
"""

from __future__ import annotations

import typer

from skillos.cli.common import HostOption
from skillos.cli.serve import serve_service


def register(app: typer.Typer, serve_app: typer.Typer) -> None:
    @serve_app.command("executor")
    def serve_executor(host: str = HostOption,
                       port: int = typer.Option(8002, "--port", envvar="SKILLOS_EXECUTOR_PORT")) -> None:
        """The agent executor (ReAct episodes, /v1/act, /v1/judge). LLM: SKILLOS_EXECUTOR_LLM_* variables."""
        from services.executor.app import build_app
        from services.executor.settings import ExecutorSettings

        settings = ExecutorSettings()
        # a bad SKILLOS_AUTH_MODE / SKILLOS_AUTH_TOKENS: its message and exit 1, no traceback
        serve_service(settings, lambda: build_app(settings), host, port, refuse=(ValueError,))
