"""Structured logging: JSON lines by default, readable console output on request."""

from __future__ import annotations

import logging
import sys

import structlog


class _CurrentStderr:
    """Writes to `sys.stderr` as it is at each write, not as it was when logging was configured: whoever
    swaps the stream later (pytest's capture, a daemon redirecting its output) would otherwise leave every
    cached logger writing to a closed file."""

    def write(self, text: str) -> int:
        return sys.stderr.write(text)

    def flush(self) -> None:
        sys.stderr.flush()


def configure_logging(level: str = "INFO", fmt: str = "json") -> None:
    renderer = (
        structlog.dev.ConsoleRenderer(colors=sys.stderr.isatty())
        if fmt == "console"
        else structlog.processors.JSONRenderer()
    )
    shared = [
        structlog.contextvars.merge_contextvars,
        structlog.processors.add_log_level,
        structlog.processors.TimeStamper(fmt="iso", utc=True),
    ]
    structlog.configure(
        processors=[*shared, structlog.processors.format_exc_info, renderer],
        wrapper_class=structlog.make_filtering_bound_logger(logging.getLevelName(level.upper())),
        logger_factory=structlog.PrintLoggerFactory(file=_CurrentStderr()),
        cache_logger_on_first_use=True,
    )
    # libraries that log through stdlib logging go through the same renderer
    handler = logging.StreamHandler(_CurrentStderr())
    handler.setFormatter(
        structlog.stdlib.ProcessorFormatter(processors=[
            structlog.stdlib.ProcessorFormatter.remove_processors_meta, renderer], foreign_pre_chain=shared)
    )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # httpx logs every request at INFO: our own request logs already say what matters
    logging.getLogger("httpx").setLevel(max(logging.WARNING, root.level))


def get_logger(name: str | None = None):
    return structlog.get_logger(name)
