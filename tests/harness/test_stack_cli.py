"""`skillos up --detach`, `skillos run` on the running stack (found through the state file), `skillos down`."""

from __future__ import annotations

import json
import os

import pytest

from harness.stack import StackState, healthy
from tests.conftest import free_port_offset, skillos_cli

pytestmark = pytest.mark.timeout(900)


def test_up_run_down(embedded_llm, tmp_path):
    offset = free_port_offset(["skillrepo", "reasoning", "executor", "curator", "console"])
    # a short answer budget keeps the one reasoning episode quick on 2 cores
    env = {**os.environ, "SKILLOS_STACK_DIR": str(tmp_path / "stack"), "SKILLOS_LLM_TIMEOUT_S": "600",
           "SKILLOS_EXECUTOR_REASONING_MAX_TOKENS": "48",
           "SKILLOS_LLM_MAX_RETRIES": "0", "SKILLOS_CONSOLE_RUNS_DIR": str(tmp_path)}
    up = skillos_cli(["up", "--envs", "reasoning", "--detach", "--port-offset", str(offset), "--llm-url", embedded_llm],
              env)
    assert up.returncode == 0, up.stderr[-3000:]
    state = StackState.load(tmp_path / "stack" / "stack.json")
    try:
        assert set(state.services) == {"skillrepo", "reasoning", "executor", "curator", "console"}
        assert state.url("executor") == f"http://127.0.0.1:{8002 + offset}"
        assert all(healthy(p.url) for p in state.services.values())
        # a second `up` refuses while this one runs
        again = skillos_cli(["up", "--envs", "reasoning", "--detach", "--port-offset", str(offset)], env, timeout=60)
        assert again.returncode != 0 and "already running" in again.stderr
        # `run` finds the stack through the state file (no URLs given, nothing started)
        out = tmp_path / "report"
        run = skillos_cli(["run", "--env", "reasoning", "--method", "none", "--limit", "1", "--seeds", "1",
                    "--out", str(out), "--no-start"], env)
        assert run.returncode == 0, run.stderr[-3000:]
        assert "using the running stack" in run.stderr
        summary = json.loads((out / "summary.json").read_text())
        assert summary["config"]["split"] in ("demo_choice", "demo_math", "test")
        assert list(summary["methods"]) == ["none"] and summary["methods"]["none"]["seeds"][0]["tasks"] == 1
        # the console `up` started shows the fresh run (its runs directory is tmp_path here)
        import httpx

        page = httpx.get(f"{state.url('console')}/runs/report", timeout=30)
        assert page.status_code == 200 and "done" in page.text and "/runs/report/tasks/none/0/0" in page.text
    finally:
        down = skillos_cli(["down"], env, timeout=120)
    assert down.returncode == 0, down.stderr
    assert "stopped:" in down.stdout
    assert not (tmp_path / "stack" / "stack.json").exists()
    assert not any(healthy(p.url, timeout=0.5) for p in state.services.values())
    assert "no stack is running" in skillos_cli(["down"], env, timeout=60).stdout
