"""The one body of every `skillos serve <service>` command.

A service's command reads its settings (and its own options), then hands over here: logging as the
settings say, the app built, served by uvicorn (`skillos.service.serve`) at ``host:port`` at the settings'
log level. What a service does differently is in the ``build`` it passes (and ``refuse``, ``then``).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from skillos.cli.common import fail, init_logging


def serve_service(settings: Any, build: Callable[[], Any], host: str, port: int, *,
                  refuse: tuple[type[Exception], ...] = (),
                  then: Callable[[Any], None] | None = None) -> None:
    """Log as ``settings`` say, build the app (an exception of ``refuse`` while building: its message
    and exit 1, no traceback), run ``then(app)`` if given (the skill repo seeds its first repo), and
    serve it until stopped. ``settings`` are a `skillos.settings.CommonSettings`."""
    from skillos.service import serve  # uvicorn and FastAPI: only when a service is served

    init_logging(settings)
    try:
        app = build()
    except refuse as e:
        fail(str(e))
    if then is not None:
        then(app)
    serve(app, host, port, log_level=settings.log_level)
