"""`skillos run` in a subprocess against a running stack (the stream tests' one way to play)."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

from harness.stack import StackState
from tests.conftest import ROOT

# the executor and curator wait long for a busy 2-core CPU, but never retry a timed-out generation
LLM_ENV = {"SKILLOS_LLM_TIMEOUT_S": "600", "SKILLOS_LLM_MAX_RETRIES": "0"}


def skillos_run(args: list[str], state: StackState, out: Path, extra_env: dict | None = None,
                executor_url: str | None = None) -> subprocess.CompletedProcess:
    cmd = [sys.executable, "-m", "skillos.cli", "run", *args, "--out", str(out), "--no-start",
           "--skillrepo-url", state.url("skillrepo"), "--executor-url", executor_url or state.url("executor"),
           "--curator-url", state.url("curator"), "--env-url", state.url("alfworld")]
    env = {**os.environ, **state.env(), **LLM_ENV, **(extra_env or {})}
    return subprocess.run(cmd, cwd=ROOT, env=env, capture_output=True, text=True, timeout=2700,
                          check=False)
