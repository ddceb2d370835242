"""Small networking helpers shared by services, benchmarks and tests."""

from __future__ import annotations

import socket


def free_port(host: str = "127.0.0.1") -> int:
    """A port free on ``host`` right now (the OS picks it; a later bind can still race)."""
    with socket.socket() as s:
        s.bind((host, 0))
        return s.getsockname()[1]
