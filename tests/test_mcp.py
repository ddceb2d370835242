"""The MCP server (`skillos serve mcp`) against a real skill repo on PostgreSQL, through the official SDK's own
client, over both transports: stdio (the client starts the server process) and streamable HTTP (a served
`skillos serve mcp --transport http` on loopback).

Trajectory outcomes go to the real executor's ``POST /v1/trajectories/{id}/outcome`` (its skill gateway, on the
embedded LLM; a trajectory is opened by one chat call through it), with tokens on or off as the skill repo.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator
from contextlib import asynccontextmanager, contextmanager
from pathlib import Path

import anyio
import httpx
import httpx2
import pytest
from mcp import Client, MCPError, StdioServerParameters
from mcp.client.streamable_http import streamable_http_client

from skillos.clients.skillrepo import SkillRepoClient
from skillos.net import free_port
from tests.conftest import ROOT, pg_database, run_service

pytestmark = pytest.mark.slow

SEEDED = sorted(p.name for p in (ROOT / "examples" / "skills").iterdir() if (p / "SKILL.md").exists())
OTHER_SKILL = "---\nname: slice-bread\ndescription: Slice bread with a knife.\n---\n1. take a knife\n2. slice\n"
TOKENS = "rtok:read,wtok:rw,ptok:rw:team-"
QUIET = {"SKILLOS_DENSE_SEARCH": "false", "SKILLOS_LOG_LEVEL": "WARNING"}


# ------------------------------------------------------------------------------------------ the executor
class Gateway:
    """The real executor (its skill gateway) on loopback with the embedded LLM: ``open_trajectory`` makes one
    chat call through it (an open trajectory, as an agent's first call makes), ``state`` reads a trajectory
    back. Its curator is unreachable: an outcome closes the trajectory and its curation fails, which these
    tests do not look at."""

    def __init__(self, url: str, token: str | None = None):
        self.url, self.token = url, token

    def _headers(self) -> dict[str, str]:
        return {"Authorization": f"Bearer {self.token}"} if self.token else {}

    def open_trajectory(self) -> str:
        model = httpx.get(f"{self.url}/v1/models", headers=self._headers(), timeout=30).json()["data"][0]["id"]
        r = httpx.post(f"{self.url}/v1/chat/completions", headers=self._headers(), timeout=600, json={
            "model": model, "max_tokens": 4, "messages": [{"role": "user", "content": "heat a mug"}]})
        assert r.status_code == 200, r.text
        return r.headers["X-SkillOS-Trajectory"]

    def state(self, tid: str) -> dict:
        r = httpx.get(f"{self.url}/v1/trajectories/{tid}", headers=self._headers(), timeout=30)
        assert r.status_code == 200, r.text
        return r.json()


@contextmanager
def gateway_service(llm_url: str, skillrepo_url: str, tmp: Path, token: str | None = None, **env: str):
    with run_service(["executor"], tmp_path=tmp, env={
            "SKILLOS_EXECUTOR_LLM_BASE_URL": llm_url, "SKILLOS_EXECUTOR_LLM_TIMEOUT_S": "600",
            "SKILLOS_SKILLREPO_URL": skillrepo_url, "SKILLOS_GATEWAY_DATABASE_URL": f"sqlite:///{tmp}/gateway.db",
            "SKILLOS_CURATOR_URL": f"http://127.0.0.1:{free_port()}", "SKILLOS_GATEWAY_CURATOR_RETRIES": "0",
            **QUIET, **env}) as svc:
        yield Gateway(svc.url, token)


@contextmanager
def skillrepo_service(pg_server_url: str, tmp: Path, **env: str) -> Iterator[str]:
    with pg_database(pg_server_url) as db, \
            run_service(["skillrepo", "--seed", "default"], env={"SKILLOS_DATABASE_URL": db, **QUIET, **env},
                        tmp_path=tmp) as svc:
        token = "wtok" if env.get("SKILLOS_AUTH_MODE") == "tokens" else None
        with SkillRepoClient(svc.url, token=token) as c:
            c.create_repo("other")
            c.put_skill("other", OTHER_SKILL)
        yield svc.url


@pytest.fixture(scope="module")
def executor(embedded_llm, skillrepo, tmp_path_factory) -> Iterator[Gateway]:
    with gateway_service(embedded_llm, skillrepo, tmp_path_factory.mktemp("executor")) as gw:
        yield gw


@pytest.fixture(scope="module")
def skillrepo(pg_server_url, tmp_path_factory) -> Iterator[str]:
    with skillrepo_service(pg_server_url, tmp_path_factory.mktemp("repo")) as url:
        yield url


@pytest.fixture(scope="module")
def tokens_skillrepo(pg_server_url, tmp_path_factory) -> Iterator[str]:
    with skillrepo_service(pg_server_url, tmp_path_factory.mktemp("repo-tokens"), SKILLOS_AUTH_MODE="tokens",
                           SKILLOS_AUTH_TOKENS=TOKENS) as url:
        yield url


def mcp_env(skillrepo_url: str, executor_url: str, **extra: str) -> dict[str, str]:
    return {"SKILLOS_SKILLREPO_URL": skillrepo_url, "SKILLOS_EXECUTOR_URL": executor_url, **QUIET, **extra}


@pytest.fixture(scope="module")
def http_mcp(skillrepo, executor, tmp_path_factory) -> Iterator[str]:
    with run_service(["mcp", "--transport", "http"], env=mcp_env(skillrepo, executor.url),
                     tmp_path=tmp_path_factory.mktemp("mcp")) as svc:
        yield svc.url


@pytest.fixture(scope="module")
def tokens_executor(embedded_llm, tokens_skillrepo, tmp_path_factory) -> Iterator[Gateway]:
    """The executor with tokens on, as the skill repo has them: an outcome needs the caller's own rw token."""
    with gateway_service(embedded_llm, tokens_skillrepo, tmp_path_factory.mktemp("executor-tokens"), token="wtok",
                         SKILLOS_AUTH_MODE="tokens", SKILLOS_AUTH_TOKENS=TOKENS, SKILLOS_API_TOKEN="wtok") as gw:
        yield gw


@pytest.fixture(scope="module")
def tokens_http_mcp(tokens_skillrepo, tokens_executor, tmp_path_factory) -> Iterator[str]:
    with run_service(["mcp", "--transport", "http"], env=mcp_env(tokens_skillrepo, tokens_executor.url),
                     tmp_path=tmp_path_factory.mktemp("mcp-tokens")) as svc:
        yield svc.url


def stdio_server(env: dict[str, str]) -> StdioServerParameters:
    """`skillos serve mcp` as an agent starts it: a child process speaking MCP on its stdin/stdout."""
    full = {"PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)), **env}
    return StdioServerParameters(command=sys.executable, args=["-m", "skillos.cli", "serve", "mcp"], env=full,
                                 cwd=str(ROOT))


@asynccontextmanager
async def connect(transport: str, *, http_url: str | None = None, env: dict[str, str] | None = None,
                  token: str | None = None):
    if transport == "stdio":
        target = stdio_server(env or {})
    else:
        headers = {"Authorization": f"Bearer {token}"} if token else {}
        target = streamable_http_client(f"{http_url}/mcp", http_client=httpx2.AsyncClient(headers=headers,
                                                                                          timeout=60))
    async with Client(target, read_timeout_seconds=60) as client:
        yield client


@pytest.fixture(params=["stdio", "http"])
def session(request, skillrepo, executor):
    """Open a client session over the transport of the parameter, to the servers of this module."""
    transport = request.param

    def open_():
        if transport == "http":
            return connect("http", http_url=request.getfixturevalue("http_mcp"))
        return connect("stdio", env=mcp_env(skillrepo, executor.url))

    return open_


def text_of(result) -> str:
    return "\n".join(getattr(c, "text", "") for c in result.content)


# ------------------------------------------------------------------------------------------------ the tests
def test_tools_resources_and_search(session):
    async def scenario():
        async with session() as c:
            assert {t.name for t in (await c.list_tools()).tools} == {"search_skills", "get_skill",
                                                                      "record_outcome"}
            tools = {t.name: t for t in (await c.list_tools()).tools}
            assert tools["search_skills"].input_schema["properties"]["k"]["maximum"] == 20

            found = await c.call_tool("search_skills", {"query": "heat a mug in the microwave", "k": 3})
            assert not found.is_error, text_of(found)
            hits = found.structured_content["skills"]
            assert hits[0]["name"] == "heat-object" and hits[0]["uri"] == "skill://default/heat-object"
            assert 1 <= len(hits) <= 3 and found.structured_content["repo"] == "default"

            got = await c.call_tool("get_skill", {"name": "heat-object"})
            assert not got.is_error, text_of(got)
            doc = got.structured_content["content"]
            assert doc.startswith("---\n") and "name: heat-object" in doc and got.structured_content["version"] >= 1

            other = await c.call_tool("search_skills", {"query": "slice bread", "k": 1, "repo": "other"})
            assert other.structured_content["skills"][0]["name"] == "slice-bread"

            listed = await c.list_resources()
            assert sorted(str(r.uri) for r in listed.resources) == [f"skill://default/{n}" for n in SEEDED]
            assert all(r.mime_type == "text/markdown" and r.description for r in listed.resources)
            templates = {t.uri_template for t in (await c.list_resource_templates()).resource_templates}
            assert templates == {"skill://{repo}/{name}", "skills://{repo}"}

            read = await c.read_resource("skill://default/heat-object")
            assert read.contents[0].text == doc and read.contents[0].mime_type == "text/markdown"
            read = await c.read_resource("skill://other/slice-bread")
            assert "1. take a knife" in read.contents[0].text
            index = await c.read_resource("skills://other")
            assert '"uri": "skill://other/slice-bread"' in index.contents[0].text

    anyio.run(scenario)


def test_resources_list_pages(skillrepo, executor):
    """resources/list pages through the repo (SKILLOS_MCP_PAGE_SIZE), every skill once."""
    async def scenario():
        async with connect("stdio", env=mcp_env(skillrepo, executor.url, SKILLOS_MCP_PAGE_SIZE="2")) as c:
            uris, cursor, pages = [], None, 0
            while True:
                page = await c.list_resources(cursor=cursor) if cursor else await c.list_resources()
                uris += [str(r.uri) for r in page.resources]
                pages += 1
                cursor = page.next_cursor
                if not cursor:
                    break
            assert uris == [f"skill://default/{n}" for n in SEEDED] and pages >= 3

    anyio.run(scenario)


def test_bad_input_is_a_clear_error_never_a_crash(session):
    async def scenario():
        async with session() as c:
            cases = [
                ("get_skill", {"name": "no-such-skill"}, "does not exist"),
                ("get_skill", {"name": "heat-object", "repo": "nope"}, "repo 'nope' does not exist"),
                ("search_skills", {"query": "heat", "k": 0}, "k"),
                ("search_skills", {"query": "heat", "k": 1000}, "k"),
                ("search_skills", {"query": "heat", "k": "many"}, "k"),
                ("search_skills", {"query": "heat", "repo": "nope"}, "repo 'nope' does not exist"),
                ("search_skills", {"query": "heat", "repo": "../etc"}, "repo"),
                ("search_skills", {"query": "   "}, "query is empty"),
                ("search_skills", {"k": 3}, "query"),
                ("search_skills", {"query": "heat", "mode": "psychic"}, "mode"),
                ("record_outcome", {"trajectory": "t", "success": "perhaps"}, "success"),
                ("record_outcome", {"trajectory": "t", "success": True, "score": 7}, "score"),
            ]
            for tool, args, says in cases:
                result = await c.call_tool(tool, args)
                assert result.is_error, (tool, args, result)
                assert says in text_of(result), (tool, args, text_of(result))
            unknown = await c.call_tool("no_such_tool", {})
            assert unknown.is_error and "no_such_tool" in text_of(unknown)

            for uri, says in (("skill://default/no-such-skill", "does not exist"),
                              ("skill://nope/heat-object", "repo 'nope' does not exist"),
                              ("skills://nope", "repo 'nope' does not exist")):
                with pytest.raises(MCPError) as err:
                    await c.read_resource(uri)
                assert says in str(err.value), (uri, err.value)
            # the session still serves
            ok = await c.call_tool("search_skills", {"query": "clean an apple", "k": 1})
            assert not ok.is_error and ok.structured_content["skills"][0]["name"] == "clean-object"

    anyio.run(scenario)


def test_record_outcome_closes_the_gateways_trajectory_and_says_when_the_executor_cannot_take_it(session, executor):
    async def scenario():
        async with session() as c:
            tid = executor.open_trajectory()
            ok = await c.call_tool("record_outcome", {"trajectory": tid, "success": True,
                                                      "feedback": "bought the right shirt", "score": 0.75})
            assert not ok.is_error, text_of(ok)
            assert ok.structured_content["recorded"] is True
            assert ok.structured_content["executor"]["status"] == "closed"
            state = executor.state(tid)
            assert state["status"] != "open"
            assert state["outcome"] == {"success": True, "score": 0.75, "feedback": "bought the right shirt",
                                        "judged": False}

            again = await c.call_tool("record_outcome", {"trajectory": tid, "success": False})
            assert again.is_error and "cannot take this outcome" in text_of(again), text_of(again)

            minimal = executor.open_trajectory()
            done = await c.call_tool("record_outcome", {"trajectory": minimal, "success": False})
            assert not done.is_error and executor.state(minimal)["outcome"]["success"] is False

            gone = await c.call_tool("record_outcome", {"trajectory": "trj-never", "success": True})
            assert gone.is_error and "unknown trajectory 'trj-never'" in text_of(gone), text_of(gone)

    anyio.run(scenario)


def test_record_outcome_executor_unreachable_or_without_the_endpoint(skillrepo, tmp_path):
    dead = f"http://127.0.0.1:{free_port()}"

    async def scenario(executor_url: str, says: str):
        async with connect("stdio", env=mcp_env(skillrepo, executor_url)) as c:
            result = await c.call_tool("record_outcome", {"trajectory": "t-1", "success": True})
            assert result.is_error and says in text_of(result), text_of(result)
            assert not (await c.call_tool("get_skill", {"name": "heat-object"})).is_error

    anyio.run(scenario, dead, "is not reachable")
    # a service without the route (here: the skill repo itself answers 404 "Not Found" for it)
    anyio.run(scenario, skillrepo, "has no trajectory outcomes")


def test_tokens_as_the_skill_repo_has_them(tokens_skillrepo, tokens_http_mcp, tokens_executor):
    executor = tokens_executor

    async def over_http():
        async with connect("http", http_url=tokens_http_mcp) as c:  # no token
            r = await c.call_tool("search_skills", {"query": "heat"})
            assert r.is_error and "Authorization: Bearer" in text_of(r), text_of(r)
            with pytest.raises(MCPError):
                await c.list_resources()
        async with connect("http", http_url=tokens_http_mcp, token="wrong") as c:
            r = await c.call_tool("get_skill", {"name": "heat-object"})
            assert r.is_error and "unknown token" in text_of(r)
        async with connect("http", http_url=tokens_http_mcp, token="rtok") as c:  # read: reads, never writes
            r = await c.call_tool("search_skills", {"query": "heat a mug", "k": 2})
            assert not r.is_error and r.structured_content["skills"][0]["name"] == "heat-object"
            assert len((await c.list_resources()).resources) == len(SEEDED)
            tid = executor.open_trajectory()
            r = await c.call_tool("record_outcome", {"trajectory": tid, "success": True})
            assert r.is_error and "read-only" in text_of(r) and executor.state(tid)["status"] == "open"
        async with connect("http", http_url=tokens_http_mcp, token="ptok") as c:  # rw, repos team-* only
            r = await c.call_tool("get_skill", {"name": "heat-object", "repo": "default"})
            assert r.is_error and "only reaches repos starting with 'team-'" in text_of(r)
            # naming no repo, a prefixed token works in its own (as at the gateway), not the shared default
            r = await c.call_tool("search_skills", {"query": "heat a mug"})
            assert r.is_error and "team-default" in text_of(r), text_of(r)
        async with connect("http", http_url=tokens_http_mcp, token="wtok") as c:
            # the caller's token goes on to the executor, which has tokens on too: closed with it
            r = await c.call_tool("record_outcome", {"trajectory": tid, "success": True})
            assert not r.is_error, text_of(r)
            assert executor.state(tid)["status"] != "open"

    async def over_stdio():
        env = mcp_env(tokens_skillrepo, executor.url, SKILLOS_API_TOKEN="rtok")
        async with connect("stdio", env=env) as c:
            r = await c.call_tool("get_skill", {"name": "heat-object"})
            assert not r.is_error
            r = await c.call_tool("record_outcome", {"trajectory": executor.open_trajectory(), "success": True})
            assert r.is_error and "read-only" in text_of(r)
        async with connect("stdio", env=mcp_env(tokens_skillrepo, executor.url)) as c:
            r = await c.call_tool("get_skill", {"name": "heat-object"})
            assert r.is_error and "SKILLOS_API_TOKEN" in text_of(r)

    anyio.run(over_http)
    anyio.run(over_stdio)


def test_http_service_door(http_mcp, tokens_http_mcp):
    for url in (http_mcp, tokens_http_mcp):
        assert httpx.get(f"{url}/healthz").json()["service"] == "mcp"
        assert httpx.get(f"{url}/readyz").status_code == 200
        metrics = httpx.get(f"{url}/metrics").text
        assert "skillos_http_requests_total" in metrics

    async def calls():
        async with connect("http", http_url=http_mcp) as c:
            assert not (await c.call_tool("search_skills", {"query": "heat"})).is_error
            assert (await c.call_tool("get_skill", {"name": "no-such-skill"})).is_error

    anyio.run(calls)
    metrics = httpx.get(f"{http_mcp}/metrics").text
    assert 'skillos_mcp_tool_calls_total{outcome="ok",tool="search_skills"}' in metrics
    assert 'skillos_mcp_tool_calls_total{outcome="error",tool="get_skill"}' in metrics
    # DNS rebinding: served on loopback, a foreign Host is refused
    r = httpx.post(f"{http_mcp}/mcp", headers={"Host": "evil.example"}, json={})
    assert r.status_code in (403, 421), r.text


def test_example_mcp_client_runs(skillrepo, http_mcp):
    env = {**os.environ, "PYTHONPATH": os.environ.get("PYTHONPATH", str(ROOT)), "SKILLOS_SKILLREPO_URL": skillrepo,
           **QUIET}
    for extra in ([], ["--http", f"{http_mcp}/mcp"]):
        proc = subprocess.run([sys.executable, "examples/mcp_client.py", "--query", "cool an apple in the fridge",
                               *extra], cwd=ROOT, env=env, capture_output=True, text=True, timeout=180, check=False)
        assert proc.returncode == 0, proc.stdout + proc.stderr
        out = proc.stdout
        assert "tools: " in out and "search_skills" in out
        assert f"skills ({len(SEEDED)}):" in out and "skill://default/heat-object" in out
        assert "name: clean-object" in out  # the first resource, read
        assert out.split("search 'cool an apple in the fridge':")[1].split("\n")[1].split()[1] == "cool-object:"


def test_unknown_transport_is_refused():
    proc = subprocess.run([sys.executable, "-m", "skillos.cli", "serve", "mcp", "--transport", "sse"], cwd=ROOT,
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 1 and "unknown transport 'sse': use stdio or http" in proc.stderr


def test_candidates_and_retired_skills_are_not_given_to_agents(skillrepo, executor):
    """A skill written from traffic and not promoted (a candidate), or retired, is not served through MCP either:
    not searched, not listed, not in the index, and a read by its name says why."""
    repo = f"mcp-{uuid.uuid4().hex[:6]}"
    doc = "---\nname: heat-the-mug\ndescription: heat a mug in the microwave\n---\n1. heat it"
    with SkillRepoClient(skillrepo) as rc:
        rc.create_repo(repo, {"candidates": True})
        rc.apply_ops(repo, [{"name": "new_skill_insert", "arguments": {"skill_name": "heat-the-mug", "content": doc}}])
        rc.insert_skill(repo, "---\nname: cool-the-mug\ndescription: cool a mug in the fridge\n---\n1. cool it")
        rc.set_state(repo, "cool-the-mug", "retired")

    async def scenario():
        async with connect("stdio", env=mcp_env(skillrepo, executor.url)) as c:
            found = await c.call_tool("search_skills", {"query": "heat cool a mug", "k": 5, "repo": repo})
            assert found.structured_content["skills"] == [], found.structured_content
            for name, state in (("heat-the-mug", "candidate"), ("cool-the-mug", "retired")):
                got = await c.call_tool("get_skill", {"name": name, "repo": repo})
                assert got.is_error and f"is {state}" in text_of(got), text_of(got)
                with pytest.raises(Exception, match=state):
                    await c.read_resource(f"skill://{repo}/{name}")
            index = await c.read_resource(f"skills://{repo}")
            assert json.loads(index.contents[0].text)["skills"] == []

    anyio.run(scenario)
