"""`skillos up` starts the console with the stack and prints its URL; the console shows the stack's
repos and the run folders of ./runs (here: SKILLOS_CONSOLE_RUNS_DIR). No LLM is needed for this:
the stack is pointed at an LLM URL that nothing serves (executor and curator start without it)."""

from __future__ import annotations

import os

import httpx
import pytest
from console_data import StreamPlan, apply_run_ops, write_stream_run

from harness.stack import StackState, healthy
from skillos.clients.skillrepo import SkillRepoClient
from tests.conftest import free_port_offset, skillos_cli

pytestmark = [pytest.mark.slow, pytest.mark.timeout(600)]
NAMES = ["skillrepo", "reasoning", "executor", "curator", "console"]


def test_up_starts_the_console_and_prints_its_url(tmp_path):
    offset = free_port_offset(NAMES)
    runs = tmp_path / "runs"
    env = {**os.environ, "SKILLOS_STACK_DIR": str(tmp_path / "stack"), "SKILLOS_CONSOLE_RUNS_DIR": str(runs)}
    env.pop("SKILLOS_AUTH_MODE", None)
    up = skillos_cli(["up", "--envs", "reasoning", "--detach", "--port-offset", str(offset),
               "--llm-url", "http://127.0.0.1:9/v1"], env)
    assert up.returncode == 0, up.stderr[-3000:]
    state = StackState.load(tmp_path / "stack" / "stack.json")
    try:
        assert set(state.services) == set(NAMES)
        url = f"http://127.0.0.1:{8004 + offset}"
        assert state.url("console") == url and f"open the console: {url}" in up.stderr
        # a run of this stack: its repo through the stack's skill repo, its folder by the report code
        plan = StreamPlan(run_id="run-20260104-000000-c0ffee", tasks=3, seeds=1)
        write_stream_run(runs / "20260104-000000", plan, plots=False)
        with SkillRepoClient(state.url("skillrepo")) as repo:
            apply_run_ops(repo, plan, 0)
        with httpx.Client(base_url=url, timeout=30) as c:
            home = c.get("/")
            assert home.status_code == 200
            assert 'href="/runs/20260104-000000"' in home.text and f'href="/repos/{plan.run_id}-s0"' in home.text
            assert c.get(f"/repos/{plan.run_id}-s0").status_code == 200
            assert c.get("/readyz").json()["status"] == "ready"
    finally:
        down = skillos_cli(["down"], env, timeout=120)
    assert down.returncode == 0 and "console" in down.stdout
    assert not any(healthy(p.url, timeout=0.5) for p in state.services.values())
