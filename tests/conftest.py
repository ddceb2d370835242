"""Shared fixtures: real PostgreSQL and Redis, and real services started on loopback.

In CI (CI=true) an unreachable PostgreSQL or Redis fails the tests that need them; on a
developer machine they are skipped with the reason.
"""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterable, Iterator
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import pytest

from bench import procstat
from skillos.net import free_port  # the one definition; tests import it from here too

ROOT = Path(__file__).resolve().parent.parent
SHARED_DATA = ROOT.parent / "shared" / "data"
IN_CI = os.environ.get("CI", "").lower() in ("1", "true", "yes")

# The suite's embedded LLM serves SmolLM2-135M (fast), so every LLM role of every service the tests
# start names that model (llama.cpp serves what it loaded whatever the name; metrics label by it).
os.environ.setdefault("SKILLOS_LLM_MODEL", "smollm2-135m-instruct")
# tests that count on a skill being served get it every time; the utility tests withhold on purpose
os.environ.setdefault("SKILLOS_GATEWAY_WITHHOLD_SHARE", "0")
# the suite's gateways curate into repos operators made without a policy, as before the gate; the default (off:
# such a repo learns nothing from traffic) is tested on its own (tests/security/test_poisoning_through_the_gateway.py)
os.environ.setdefault("SKILLOS_GATEWAY_LEARN_UNGATED", "true")

PG_ADMIN_URL = os.environ.get("SKILLOS_TEST_PG_URL", "postgresql+psycopg://postgres@127.0.0.1:5432/test")
REDIS_URL = os.environ.get("SKILLOS_TEST_REDIS_URL", "redis://127.0.0.1:6379/0")


def _unavailable(what: str, err: Exception):
    msg = f"{what} not reachable: {err}"
    if IN_CI:
        pytest.fail(msg)
    pytest.skip(msg)


def raw_request(url: str, head: bytes, chunks: Iterable[bytes] = ()) -> tuple[int, bytes]:
    """Send bytes as they are (what httpx would refuse to send) and read one response: (status, body)."""
    u = urlsplit(url)
    with socket.create_connection((u.hostname, u.port), timeout=20) as s:
        s.sendall(head)
        for chunk in chunks:
            try:
                s.sendall(chunk)
            except OSError:  # the server answered and closed: read what it said
                break
        data = b""
        while b"\r\n\r\n" not in data:
            part = s.recv(65536)
            assert part, data
            data += part
        head_bytes, body = data.split(b"\r\n\r\n", 1)
        lines = head_bytes.split(b"\r\n")
        headers = dict(line.split(b": ", 1) for line in lines[1:])
        length = int(headers[b"content-length"])
        while len(body) < length:
            part = s.recv(65536)
            assert part
            body += part
        return int(lines[0].split()[1]), body[:length]


def cpu_seconds(pid: int) -> float:
    """User + system CPU time of a process so far: what a request cost it, however busy the machine is."""
    return procstat.cpu_s(pid)


def peak_rss_mb(pid: int) -> float:
    """The process's peak resident memory so far (VmHWM), in MiB."""
    return procstat.status_mb(pid, "VmHWM")


@pytest.fixture(scope="session")
def pg_server_url() -> str:
    import psycopg

    try:
        psycopg.connect(PG_ADMIN_URL.replace("+psycopg", ""), connect_timeout=3).close()
    except Exception as e:  # noqa: BLE001
        _unavailable("PostgreSQL", e)
    return PG_ADMIN_URL


@contextmanager
def pg_database(server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database on the server of ``server_url``, dropped afterwards."""
    import psycopg

    name = f"skillos_t_{uuid.uuid4().hex[:12]}"
    admin = server_url.replace("+psycopg", "")
    with psycopg.connect(admin, autocommit=True) as c:
        c.execute(f'CREATE DATABASE "{name}"')
    try:
        yield f"{server_url.rsplit('/', 1)[0]}/{name}"
    finally:
        with psycopg.connect(admin, autocommit=True) as c:
            c.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


@pytest.fixture
def pg_url(pg_server_url: str) -> Iterator[str]:
    """A fresh, empty PostgreSQL database for one test, dropped afterwards."""
    with pg_database(pg_server_url) as url:
        yield url


@pytest.fixture(scope="session")
def redis_url() -> str:
    import redis

    try:
        redis.Redis.from_url(REDIS_URL, socket_connect_timeout=3).ping()
    except Exception as e:  # noqa: BLE001
        _unavailable("Redis", e)
    return REDIS_URL


class Service:
    """A real `skillos serve ...` process on loopback."""

    def __init__(self, proc: subprocess.Popen, url: str, log: Path):
        self.proc, self.url, self.log = proc, url, log

    def logs(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""

    def kill(self, sig: int = 9) -> None:
        if self.proc.poll() is None:
            self.proc.send_signal(sig)
            self.proc.wait(timeout=30)

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(timeout=20)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.proc.wait()


@contextmanager
def run_service(args: list[str], *, env: dict[str, str] | None = None, port: int | None = None,
                tmp_path: Path | None = None, ready_timeout: float = 120.0) -> Iterator[Service]:
    """Start `skillos serve <args> --port P` and wait for /healthz; stop it afterwards."""
    port = port or free_port()
    log = (tmp_path or Path(os.environ.get("TMPDIR", "/tmp"))) / f"svc-{args[0]}-{port}.log"
    # env servers drain open sessions on SIGTERM (up to 300 s by default); a test's teardown stops at once
    # unless the test asks for draining itself
    full_env = {"SKILLOS_ENV_DRAIN_TIMEOUT_S": "0", **os.environ, "SKILLOS_LOG_FORMAT": "json", **(env or {})}
    cmd = [sys.executable, "-m", "skillos.cli", "serve", *args, "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=full_env, cwd=ROOT)
    svc = Service(proc, f"http://127.0.0.1:{port}", log)
    deadline = time.monotonic() + ready_timeout
    try:
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{args[0]} exited with {proc.returncode}:\n{svc.logs()[-4000:]}")
            try:
                if httpx.get(f"{svc.url}/healthz", timeout=1).status_code == 200:
                    break
            except httpx.HTTPError:
                pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{args[0]} not healthy after {ready_timeout}s:\n{svc.logs()[-4000:]}")
            time.sleep(0.2)
        yield svc
    finally:
        svc.stop()


@pytest.fixture(scope="session")
def embedded_llm(tmp_path_factory) -> Iterator[str]:
    """The real embedded LLM (`skillos serve llm` with SmolLM2-135M, the fast test model, on the default
    backend: llama.cpp's llama-server), once per session.

    Yields its OpenAI base URL (".../v1"); point a role at it with SKILLOS_<ROLE>_LLM_BASE_URL.
    """
    # threads: SKILLOS_LLM_N_THREADS (default 2); use 1 on a machine busy with other work, where
    # llama.cpp's spinning threads slow each other down badly
    with run_service(["llm", "--model", "smollm2-135m-instruct"], tmp_path=tmp_path_factory.mktemp("llm"),
                     ready_timeout=180) as svc:
        yield f"{svc.url}/v1"


@pytest.fixture(scope="session")
def alfworld_stack(embedded_llm, tmp_path_factory):
    """One real stack for the stream tests (skill repo, ALFWorld games, executor, curator on the embedded
    SmolLM2), once per session: `skillos run` plays against it (`tests/harness/stream_run.py`)."""
    from harness.stack import Stack, healthy
    from tests.harness.stream_run import LLM_ENV

    names = ["skillrepo", "alfworld", "executor", "curator"]
    s = Stack(("alfworld",), directory=tmp_path_factory.mktemp("stack"), ports={n: free_port() for n in names},
              llm_url=embedded_llm, extra_env=LLM_ENV)
    state = s.start(timeout=600)
    yield state
    s.stop()
    assert not any(healthy(p.url, timeout=0.5) for p in state.services.values())


def free_port_offset(names: Iterable[str]) -> int:
    """An offset that makes every default port of these services free (`skillos up --port-offset`)."""
    import random

    from harness.stack import SERVICES

    for _ in range(50):
        offset = random.randrange(20000, 50000)
        try:
            for n in names:
                with socket.socket() as s:
                    s.bind(("127.0.0.1", SERVICES[n][0] + offset))
            return offset
        except OSError:
            continue
    raise RuntimeError("no free port range")


def skillos_cli(args: list[str], env: dict[str, str], timeout: float = 600) -> subprocess.CompletedProcess:
    """`skillos ARGS` as a user runs it, from the checkout, with its output captured."""
    return subprocess.run([sys.executable, "-m", "skillos.cli", *args], cwd=ROOT, env=env, capture_output=True,
                          text=True, timeout=timeout, check=False)
