"""Issue 51, placeholder credentials: k8s/base ships ``CHANGE-ME`` as the token list, the services' API token and
the PostgreSQL password; a deployment applied as is must not serve with a secret everyone knows.

Defence: `skillos/placeholders.py`, checked where each credential is read (`skillos/auth.py` for
SKILLOS_AUTH_TOKENS, `skillos/settings.py` for SKILLOS_API_TOKEN, `skillos/db.py` for a database URL's
password): the process stops at start with a message naming the setting."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import httpx
import pytest
from conftest import ROOT, pg_database

from skillos.net import free_port

pytestmark = pytest.mark.slow


def refused_at_start(args: list[str], env: dict[str, str], tmp_path, what: str, timeout: float = 120) -> str:
    """Start `skillos serve ARGS` with ``env`` (``what``: the placeholder in it); it must exit non-zero without
    ever answering /healthz. Its log."""
    port = free_port()
    log = tmp_path / f"{args[0]}-{port}.log"
    cmd = [sys.executable, "-m", "skillos.cli", "serve", *args, "--host", "127.0.0.1", "--port", str(port)]
    with open(log, "wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, cwd=ROOT,
                                env={**os.environ, "SKILLOS_LOG_FORMAT": "json", **env})
    try:
        deadline = time.monotonic() + timeout
        while proc.poll() is None:
            try:
                served = httpx.get(f"http://127.0.0.1:{port}/healthz", timeout=1).status_code == 200
            except httpx.HTTPError:
                served = False
            assert not served, f"`skillos serve {args[0]}` serves with CHANGE-ME as {what}"
            assert time.monotonic() < deadline, f"still starting after {timeout}s"
            time.sleep(0.2)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    text = log.read_text(errors="replace")
    assert proc.returncode != 0, text[-2000:]
    return text


def test_a_placeholder_in_the_token_list_stops_the_service(tmp_path):
    text = refused_at_start(["skillrepo"], tmp_path=tmp_path, what="a token", env={
        "SKILLOS_DATABASE_URL": f"sqlite:///{tmp_path}/r.db", "SKILLOS_AUTH_MODE": "tokens",
        "SKILLOS_AUTH_TOKENS": "a-real-secret-0f9c:rw,CHANGE-ME:rw"})
    assert "SKILLOS_AUTH_TOKENS" in text and "placeholder" in text


def test_a_placeholder_api_token_stops_the_service(tmp_path):
    text = refused_at_start(["curator"], tmp_path=tmp_path, what="its API token", env={"SKILLOS_API_TOKEN": "CHANGE-ME"})
    assert "SKILLOS_API_TOKEN" in text and "placeholder" in text


def test_a_placeholder_database_password_stops_the_service(pg_server_url, tmp_path):
    """The test PostgreSQL trusts loopback, as a careless deployment's might: the password would not stop it."""
    with pg_database(pg_server_url) as url:
        scheme, rest = url.split("://", 1)
        user, host = rest.split("@", 1)
        text = refused_at_start(["skillrepo"], tmp_path=tmp_path, what="the database password", env={
            "SKILLOS_DATABASE_URL": f"{scheme}://{user.split(':')[0]}:CHANGE-ME@{host}"})
    assert "placeholder" in text
