"""The stack the attacks of tests/security run against: real services on loopback, as a deployment runs them.

The skill repo on a fresh PostgreSQL database with Redis for its change announcements, the curator, the executor
(its skill gateway, trajectories in PostgreSQL too), every one with ``SKILLOS_AUTH_MODE=tokens`` and the same
token list; the LLM of every role is `scripted_llm.ScriptedLLM` (the model that follows whatever reaches it).
Started with `conftest.run_service`, as every other folder's tests start theirs.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import ExitStack, contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx
from conftest import Service, pg_database, run_service
from scripted_llm import ScriptedLLM

OPS = "ops-t"   # an operator's token (rw, no prefix): the services' own, as deployments give them
TOKENS = ",".join([
    f"{OPS}:rw",
    "mallory-t:rw:shared",      # an agent allowed to play in, and report outcomes to, the shared repo
    "victim-t:read:shared",     # another caller of the shared repo
    "acme-t:rw:acme",           # tenant acme's agent
    "acme-other-t:rw:acme",     # another token of tenant acme (another agent, another team member)
    "acme-reader-t:read:acme",  # tenant acme's read-only token
    "acmecorp-t:rw:acmecorp",   # tenant acmecorp, another customer
])
AUTH = {"SKILLOS_AUTH_MODE": "tokens", "SKILLOS_AUTH_TOKENS": TOKENS, "SKILLOS_API_TOKEN": OPS}


def bearer(token: str | None) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"} if token else {}


def skill_md(name: str, description: str, body: str) -> str:
    return f"---\nname: {name}\ndescription: {description}\n---\n\n{body}\n"


@dataclass
class Stack:
    llm: ScriptedLLM
    repo: Service
    curator: Service | None
    gateway: Service | None
    gateway_db: str | None = None
    model: str = ""

    # ------------------------------------------------------------------ the skill repo, as an operator
    def put_repo(self, name: str, skills: dict[str, tuple[str, str]] | None = None) -> None:
        """A repo made by an operator through REST, with skills a person wrote: name -> (description, body)."""
        r = httpx.post(f"{self.repo.url}/v1/repos", json={"name": name}, headers=bearer(OPS), timeout=30)
        assert r.status_code in (200, 201), r.text
        for skill, (description, body) in (skills or {}).items():
            r = httpx.put(f"{self.repo.url}/v1/repos/{name}/skills/{skill}", headers=bearer(OPS), timeout=30,
                          json={"name": skill, "description": description, "body": body})
            assert r.status_code in (200, 201), r.text

    # ------------------------------------------------------------------ the gateway, as a caller
    def chat(self, token: str, text: str, *, repo: str | None = None, task: str | None = None,
             trajectory: str | None = None, **fields: Any) -> httpx.Response:
        headers = bearer(token)
        if repo:
            headers["X-SkillOS-Repo"] = repo
        if task:
            headers["X-SkillOS-Task"] = task
        if trajectory:
            headers["X-SkillOS-Trajectory"] = trajectory
        body = {"model": self.model, "messages": [{"role": "user", "content": text}], "max_tokens": 8, **fields}
        return httpx.post(f"{self.gateway.url}/v1/chat/completions", json=body, headers=headers, timeout=60)

    def outcome(self, token: str, tid: str, success: bool = True, feedback: str | None = None) -> httpx.Response:
        body = {"success": success, **({"feedback": feedback} if feedback is not None else {})}
        return httpx.post(f"{self.gateway.url}/v1/trajectories/{tid}/outcome", json=body, headers=bearer(token),
                          timeout=30)

    def trajectory(self, tid: str, token: str = OPS, calls: bool = False) -> httpx.Response:
        return httpx.get(f"{self.gateway.url}/v1/trajectories/{tid}", params={"calls": calls},
                         headers=bearer(token), timeout=30)

    def curated(self, tid: str, timeout: float = 120) -> dict[str, Any]:
        """The trajectory once its curation has ended (curated or failed), read with the operator's token."""
        deadline = time.monotonic() + timeout
        while True:
            r = self.trajectory(tid)
            assert r.status_code == 200, r.text
            t = r.json()
            if t["status"] in ("curated", "failed"):
                return t
            assert time.monotonic() < deadline, f"trajectory {tid} still {t['status']} after {timeout}s"
            time.sleep(0.3)


@contextmanager
def security_stack(pg_server_url: str, redis_url: str, tmp: Path, *, gateway: bool = True,
                   executor_env: dict[str, str] | None = None, curator_env: dict[str, str] | None = None,
                   slow_s: float = 3.0) -> Iterator[Stack]:
    with ExitStack() as es:
        llm = es.enter_context(ScriptedLLM(slow_s=slow_s))
        repo_db = es.enter_context(pg_database(pg_server_url))
        repo = es.enter_context(run_service(
            ["skillrepo"], tmp_path=tmp, ready_timeout=300,
            env={**AUTH, "SKILLOS_DATABASE_URL": repo_db, "SKILLOS_REDIS_URL": redis_url,
                 "SKILLOS_DENSE_SEARCH": "false"}))
        if not gateway:
            yield Stack(llm=llm, repo=repo, curator=None, gateway=None)
            return
        curator = es.enter_context(run_service(
            ["curator"], tmp_path=tmp,
            env={**AUTH, "SKILLOS_SKILLREPO_URL": repo.url, "SKILLOS_CURATOR_LLM_BASE_URL": llm.url,
                 "SKILLOS_JUDGE_LLM_BASE_URL": llm.url, "SKILLOS_CURATOR_JUDGE_BACKEND": "heuristic",
                 "SKILLOS_CURATOR_OUTPUT_MODE": "tools", **(curator_env or {})}))
        gateway_db = es.enter_context(pg_database(pg_server_url))
        gw = es.enter_context(run_service(
            ["executor"], tmp_path=tmp,
            env={**AUTH, "SKILLOS_EXECUTOR_LLM_BASE_URL": llm.url, "SKILLOS_JUDGE_LLM_BASE_URL": llm.url,
                 "SKILLOS_GATEWAY_DATABASE_URL": gateway_db, "SKILLOS_SKILLREPO_URL": repo.url,
                 "SKILLOS_CURATOR_URL": curator.url, "SKILLOS_GATEWAY_CURATOR_RETRIES": "0",
                 "SKILLOS_MAX_REQUEST_BYTES": str(256 * 1024), **(executor_env or {})}))
        model = httpx.get(f"{gw.url}/v1/models", headers=bearer(OPS), timeout=30).json()["data"][0]["id"]
        yield Stack(llm=llm, repo=repo, curator=curator, gateway=gw, gateway_db=gateway_db, model=model)
