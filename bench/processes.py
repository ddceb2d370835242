"""Real processes for the benchmarks: started on a free loopback port, up when /healthz answers 200, stopped
(SIGTERM, then SIGKILL) on the way out; their output in /tmp/bench-<name>-<port>.log."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from skillos.net import free_port

ROOT = Path(__file__).resolve().parent.parent


@dataclass(frozen=True)
class Started:
    url: str
    pid: int
    seconds: float   # until /healthz first answered 200


@contextmanager
def started(argv: list[str], name: str, env: dict[str, str] | None = None, timeout: float = 120) -> Iterator[Started]:
    """``python -m <argv> <port>`` (``argv`` ends with ``--port``), logging at WARNING."""
    port = free_port()
    log = open(f"/tmp/bench-{name}-{port}.log", "wb")  # noqa: SIM115 - closed below
    start = time.perf_counter()
    proc = subprocess.Popen([sys.executable, "-m", *argv, str(port)], cwd=ROOT, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "SKILLOS_LOG_LEVEL": "WARNING", **(env or {})})
    url = f"http://127.0.0.1:{port}"
    try:
        while True:
            try:
                if httpx.get(f"{url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if proc.poll() is not None or time.perf_counter() - start > timeout:
                raise RuntimeError(f"{name} did not start; see {log.name}")
            time.sleep(0.1)
        yield Started(url, proc.pid, time.perf_counter() - start)
    finally:
        proc.terminate()
        try:
            proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
