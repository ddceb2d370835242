"""The compose configuration, run for real without Docker: each SkillOS service is started with
`skillos serve` and exactly the environment docker-compose.yml gives its container, with only the
addresses moved to loopback (compose host names -> 127.0.0.1 ports, the compose PostgreSQL/Redis ->
the test servers, /data -> the shared data directory). Proves the settings in deploy/skillos.env are
accepted at start, services reach each other, and tokens are enforced."""

from __future__ import annotations

import re
from contextlib import ExitStack

import httpx
import pytest
from conftest import SHARED_DATA, free_port, run_service
from deploy_tools import PORTS, load_compose, service_env

TOKEN = "t0ken-for-smoke-tests"
pytestmark = pytest.mark.slow


def loopback_env(compose: dict, service: str, ports: dict[str, int], pg_url: str, redis_url: str) -> dict[str, str]:
    env = service_env(compose, service)
    env.pop("HEALTHCHECK_PORT", None)
    for key, value in env.items():
        for name, port in PORTS.items():
            value = re.sub(rf"//{name}:{port}\b", f"//127.0.0.1:{ports[name]}", value)
        value = re.sub(r"^/data/", f"{SHARED_DATA}/", value)
        env[key] = value
    if "SKILLOS_DATABASE_URL" in env:
        env["SKILLOS_DATABASE_URL"] = pg_url
    env["SKILLOS_REDIS_URL"] = redis_url
    return env


def test_compose_services_start_with_their_compose_environment(pg_url, redis_url, embedded_llm, tmp_path):
    compose = load_compose({"SKILLOS_API_TOKEN": TOKEN, "POSTGRES_PASSWORD": "pg-passw0rd-for-tests"})
    ports = {name: free_port() for name in PORTS}
    ports["llm"] = int(embedded_llm.rsplit(":", 1)[1].split("/")[0])
    started = {}
    with ExitStack() as stack:
        for name in ("skillrepo", "reasoning", "executor", "curator"):
            env = loopback_env(compose, name, ports, pg_url, redis_url)
            started[name] = stack.enter_context(
                run_service([name], env=env, port=ports[name], tmp_path=tmp_path, ready_timeout=180))
        for name, svc in started.items():
            r = httpx.get(f"{svc.url}/readyz", timeout=30)
            assert r.status_code == 200, f"{name} not ready with the compose settings: {r.text}\n{svc.logs()[-2000:]}"
            assert httpx.get(f"{svc.url}/metrics", timeout=10).status_code == 200

        # tokens are on: the skill repo refuses anonymous calls and accepts the compose token
        repo = started["skillrepo"].url
        anonymous = httpx.get(f"{repo}/v1/repos", timeout=10)
        assert anonymous.status_code == 401 and anonymous.json()["error"]["code"] == "unauthorized"
        auth = {"Authorization": f"Bearer {TOKEN}"}
        assert httpx.get(f"{repo}/v1/repos", headers=auth, timeout=10).status_code == 200
        assert httpx.get(f"{repo}/v1/repos", headers={"Authorization": "Bearer wrong"}, timeout=10).status_code == 401
