"""The skill repo as an MCP server, on the official SDK (`mcp.server.mcpserver.MCPServer`).

Tools
    ``search_skills(query, k, repo?, mode?)``  the top-k skills for a task (BM25 by default), each with its URI
    ``get_skill(name, repo?)``                 one skill: its fields and its whole SKILL.md document
    ``record_outcome(trajectory, success, feedback?, score?)``
                                               closes a gateway trajectory at the executor
                                               (``POST /v1/trajectories/{id}/outcome``), which hands it to
                                               the curator
Resources
    ``skill://{repo}/{name}``   a skill's SKILL.md (text/markdown); ``resources/list`` lists the default
                                repo's skills, paged
    ``skills://{repo}``         the index of a repo: every skill's name, description, version and URI (JSON)

Every call goes to the skill repo (and the executor) over HTTP through `skillos.clients`, with the caller's
token (`services.mcp.settings`): what a token may do here is what the skill repo lets it do, and
``record_outcome``, which ends in writes to the repo, needs a token with the ``rw`` scope. Bad input and
upstream failures are MCP tool errors (``isError``) or resource errors with a message saying what went
wrong, never a crash of the server.
"""

# No `from __future__ import annotations`: the SDK reads the tools' parameter annotations (their limits
# come from the settings, local to build_server) when they are registered.
import json
import time
from collections.abc import Callable
from typing import Annotated, Any, Literal

from mcp.server.mcpserver import Context, MCPServer
from mcp.server.mcpserver.exceptions import ResourceError, ResourceNotFoundError, ToolError
from mcp_types import ListResourcesResult, PaginatedRequestParams
from mcp_types import Resource as MCPResource
from prometheus_client import Counter
from pydantic import Field

from services.mcp.settings import MCPSettings
from skillos import __version__
from skillos.auth import default_repo_for
from skillos.clients.executor import AsyncExecutorClient, ExecutorError
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoError
from skillos.protocol.skillrepo import REPO_NAME_PATTERN, TokenInfo

Transport = Literal["stdio", "http"]

TOOL_CALLS = Counter("skillos_mcp_tool_calls_total", "MCP tool calls served", ["tool", "outcome"])

INSTRUCTIONS = (
    "SkillOS skill repo: reusable procedures (skills) written from the experience of earlier tasks. "
    "Before a task, call search_skills with the task's text and read the skills that fit (get_skill, or the "
    "resource skill://{repo}/{name}). When the task is done, call record_outcome with the trajectory id the "
    "SkillOS gateway gave you (X-SkillOS-Trajectory) so the curator can learn from it.")

RepoArg = Annotated[str | None, Field(max_length=128, pattern=REPO_NAME_PATTERN,
                                      description="the skill repo (default: the server's default repo)")]


def _not_served(repo: str, skill) -> str:
    """Why a candidate or retired skill is not given to an agent (the repo's search does not serve it either)."""
    return (f"skill {skill.name!r} of {repo!r} is {skill.state}: it is not served to agents (written from traffic "
            "and not promoted, or retired); a reviewer promotes it (skillos repo promote)")

def skill_uri(repo: str, name: str) -> str:
    return f"skill://{repo}/{name}"


class BadAuthorization(Exception):
    """The caller's Authorization header is not a bearer token."""


class _Auth:
    """The token of the request being served: the caller's bearer token over HTTP, the process's own
    (``SKILLOS_API_TOKEN``) over stdio."""

    def __init__(self, transport: Transport, api_token: str):
        self.transport, self.api_token = transport, api_token or None

    def token(self, headers: Any) -> str | None:
        if self.transport == "stdio" or headers is None:
            return self.api_token if self.transport == "stdio" else None
        value = headers.get("authorization")
        if not value:
            return None
        scheme, _, token = value.partition(" ")
        if scheme.lower() != "bearer" or not token.strip():
            raise BadAuthorization("malformed Authorization header: send 'Authorization: Bearer <token>'")
        return token.strip()


def _headers_of(request: Any) -> Any:
    return getattr(request, "headers", None)


class SkillOSMCPServer(MCPServer):
    """`MCPServer` whose ``resources/list`` lists the skills of the default repo, page by page, as the
    caller's token sees them (the SDK lists only resources registered up front)."""

    skillos: "SkillOSMCP"

    async def _handle_list_resources(self, ctx, params: PaginatedRequestParams | None) -> ListResourcesResult:
        static = await self.list_resources()
        cursor = params.cursor if params is not None else None
        return await self.skillos.list_skill_resources(_headers_of(ctx.request), cursor, static)


class SkillOSMCP:
    """The tools and resources over one skill repo client (and, per call, an executor client)."""

    def __init__(self, settings: MCPSettings, transport: Transport):
        self.settings, self.transport = settings, transport
        self.auth = _Auth(transport, settings.api_token)
        self.repo = AsyncSkillRepoClient(settings.skillrepo_url, timeout=settings.mcp_upstream_timeout_s)
        self._whoamis: dict[str | None, tuple[TokenInfo, float]] = {}   # token -> (its whoami, when asked)

    # ------------------------------------------------------------------ upstream calls and their errors
    def _client(self, headers: Any, error: Callable[[str], Exception] = ToolError) -> AsyncSkillRepoClient:
        """The skill repo client sending the caller's token; a malformed Authorization header raises
        ``error`` (a tool error, a resource error, ...)."""
        try:
            return self.repo.with_token(self.auth.token(headers))
        except BadAuthorization as e:
            raise error(str(e)) from None

    async def _repo_name(self, repo: str | None, headers: Any) -> str:
        """The repo named, else the caller's default (`skillos.auth.default_repo_for` of its token's prefix, as
        the gateway's: a prefixed token's own repo, not the shared one)."""
        if repo:
            return repo
        return default_repo_for(await self._prefix(headers), self.settings.mcp_default_repo)

    async def _prefix(self, headers: Any) -> str | None:
        """The caller's repo prefix; None when it cannot be asked: the call that follows reports why."""
        try:
            return (await self._whoami(self.auth.token(headers))).prefix
        except (BadAuthorization, SkillRepoError):
            return None

    async def _whoami(self, token: str | None) -> TokenInfo:
        """What the skill repo says this token may do, kept a minute a token (a tool call that names no repo,
        and an outcome, both ask); raises `SkillRepoError`."""
        kept = self._whoamis.get(token)
        if kept is not None and time.monotonic() - kept[1] < 60:
            return kept[0]
        info = await self.repo.with_token(token).whoami()
        if len(self._whoamis) > 1024:
            self._whoamis.clear()
        self._whoamis[token] = (info, time.monotonic())
        return info

    def _repo_message(self, e: SkillRepoError) -> str:
        if e.status == 0:
            return f"the skill repo at {self.settings.skillrepo_url} is not reachable; try again later ({e.message})"
        if e.status == 401:
            how = ("set SKILLOS_API_TOKEN for `skillos serve mcp`" if self.transport == "stdio"
                   else "send 'Authorization: Bearer <token>' to the MCP endpoint")
            return f"the skill repo refused the call: {e.message} ({how})"
        if e.status == 403:
            return f"this token may not do that: {e.message}"
        if e.status >= 500:
            return f"the skill repo failed ({e.status} {e.code}): {e.message}"
        return e.message or f"{e.status} {e.code}"

    def tool_error(self, e: SkillRepoError) -> ToolError:
        return ToolError(self._repo_message(e))

    # ------------------------------------------------------------------------------------------- tools
    async def counted(self, tool: str, work: Any) -> dict:
        """Await a tool's work, counting it (``skillos_mcp_tool_calls_total``) as ok or error."""
        try:
            result = await work
        except Exception:
            TOOL_CALLS.labels(tool, "error").inc()
            raise
        TOOL_CALLS.labels(tool, "ok").inc()
        return result

    async def search_skills(self, query: str, k: int, repo: str | None, mode: str, headers: Any) -> dict:
        repo = await self._repo_name(repo, headers)
        if not query.strip():
            raise ToolError("query is empty: pass the task's text")
        try:
            hits = await self._client(headers).search(repo, query, k=k, mode=mode)
        except SkillRepoError as e:
            raise self.tool_error(e) from None
        return {"repo": repo, "query": query, "mode": mode,
                "skills": [{"name": h.name, "description": h.description, "score": round(h.score, 6),
                            "version": h.version, "uri": skill_uri(repo, h.name), "body": h.body}
                           for h in hits]}

    async def get_skill(self, name: str, repo: str | None, headers: Any) -> dict:
        repo = await self._repo_name(repo, headers)
        try:
            skill = await self._client(headers).get_skill(repo, name)
        except SkillRepoError as e:
            raise self.tool_error(e) from None
        if skill.state != "active":
            raise ToolError(_not_served(repo, skill))
        return {"repo": repo, "name": skill.name, "description": skill.description, "version": skill.version,
                "metadata": skill.metadata, "uri": skill_uri(repo, skill.name), "content": skill.content}

    async def record_outcome(self, trajectory: str, success: bool, feedback: str | None, score: float | None,
                             headers: Any) -> dict:
        try:
            token = self.auth.token(headers)
        except BadAuthorization as e:
            raise ToolError(str(e)) from None
        await self._require_write(token)
        url = self.settings.executor_url
        async with AsyncExecutorClient(url, token=token, timeout=self.settings.mcp_upstream_timeout_s) as ex:
            try:
                answer = await ex.record_outcome(trajectory, success=success, score=score, feedback=feedback)
            except ExecutorError as e:
                raise ToolError(_outcome_message(e, trajectory, url)) from None
        return {"trajectory": trajectory, "recorded": True, "success": success, "executor": answer}

    async def _require_write(self, token: str | None) -> None:
        """An outcome ends in writes to the repo (the curator's ops): refuse a read-only token here, as the
        skill repo would. A skill repo that cannot be asked leaves the decision to the executor."""
        try:
            info = await self._whoami(token)
        except SkillRepoError as e:
            if e.status in (401, 403):
                raise self.tool_error(e) from None
            return
        if info.scope != "rw":
            raise ToolError("this token is read-only: recording an outcome hands the trajectory to the curator, "
                            "which writes the repo; use a token with the 'rw' scope")

    # --------------------------------------------------------------------------------------- resources
    async def read_skill(self, repo: str, name: str, headers: Any) -> str:
        try:
            skill = await self._client(headers, ResourceError).get_skill(repo, name)
        except SkillRepoError as e:
            if e.status == 404:
                raise ResourceNotFoundError(self._repo_message(e)) from None
            raise ResourceError(self._repo_message(e)) from None
        if skill.state != "active":
            raise ResourceNotFoundError(_not_served(repo, skill))
        return skill.content

    async def repo_index(self, repo: str, headers: Any) -> str:
        try:
            skills = await self._client(headers, ResourceError).list_skills(repo)
        except SkillRepoError as e:
            if e.status == 404:
                raise ResourceNotFoundError(self._repo_message(e)) from None
            raise ResourceError(self._repo_message(e)) from None
        return json.dumps({"repo": repo, "skills": [
            {"name": s.name, "description": s.description, "version": s.version, "uri": skill_uri(repo, s.name)}
            for s in skills if s.state == "active"]}, ensure_ascii=False)

    async def list_skill_resources(self, headers: Any, cursor: str | None,
                                   static: list[MCPResource]) -> ListResourcesResult:
        """One page of the default repo's skills as resources (the cursor is the last name of the page
        before). A repo that cannot be listed is a protocol error with the skill repo's reason."""
        from mcp.shared.exceptions import MCPError
        from mcp_types import INTERNAL_ERROR, INVALID_PARAMS

        repo = await self._repo_name(None, headers)
        client = self._client(headers, lambda m: MCPError(code=INVALID_PARAMS, message=m))
        try:
            page = await client.list_skills_page(repo, limit=self.settings.mcp_page_size, after=cursor or None)
        except SkillRepoError as e:
            if e.status == 404:  # no default repo (yet): nothing to list
                return ListResourcesResult(resources=static if not cursor else [])
            code = INVALID_PARAMS if 400 <= e.status < 500 else INTERNAL_ERROR
            raise MCPError(code=code, message=self._repo_message(e)) from None
        resources = [MCPResource(uri=skill_uri(repo, s.name), name=s.name, title=s.name,
                                 description=s.description, mime_type="text/markdown")
                     for s in page.skills if s.state == "active"]
        return ListResourcesResult(resources=(static if not cursor else []) + resources,
                                   next_cursor=page.next_after)

    async def aclose(self) -> None:
        await self.repo.aclose()


def _outcome_message(e: ExecutorError, trajectory: str, url: str) -> str:
    if e.status == 0:
        return (f"the executor at {url} is not reachable, so the outcome of trajectory {trajectory!r} was not "
                f"recorded; try again later ({e.message})")
    if e.status == 404:
        if e.message.strip().lower() in ("not found", ""):  # no such route: an executor without the gateway
            return (f"the executor at {url} has no trajectory outcomes (POST /v1/trajectories/{{id}}/outcome): "
                    "it predates the SkillOS gateway; upgrade it")
        return (f"unknown trajectory {trajectory!r}: the executor has no open trajectory with this id (never "
                f"started, already closed, or expired) ({e.message})")
    if e.status in (401, 403):
        hint = (" (a trajectory's outcome is recorded with the token that opened it: the agent's api_key at the "
                "gateway must be this server's token)" if "another token" in e.message else "")
        return f"the executor refused the outcome: {e.message}{hint}"
    if e.status == 409:
        return f"trajectory {trajectory!r} cannot take this outcome: {e.message}"
    return f"the executor answered {e.status} {e.code}: {e.message}"


def build_server(settings: MCPSettings, transport: Transport = "stdio") -> SkillOSMCPServer:
    """The MCP server over the skill repo of ``settings``; ``transport`` decides whose token is sent."""
    core = SkillOSMCP(settings, transport)
    server = SkillOSMCPServer("skillos", title="SkillOS skill repo", version=__version__,
                              instructions=INSTRUCTIONS)
    server.skillos = core
    max_k = settings.mcp_max_k

    @server.tool(title="Search skills", structured_output=True)
    async def search_skills(
        query: Annotated[str, Field(min_length=1, max_length=4096, description="the task, in your own words")],
        ctx: Context,
        k: Annotated[int, Field(ge=1, le=max_k, description=f"how many skills (1-{max_k})")] = 5,
        repo: RepoArg = None,
        mode: Annotated[Literal["bm25", "dense", "hybrid"],
                        Field(description="bm25 (keywords), dense (embeddings) or hybrid")] = "bm25",
    ) -> dict[str, Any]:
        """The skills of the repo that best fit a task, best first: name, description, score, body and the
        skill's resource URI."""
        return await core.counted("search_skills", core.search_skills(query, k, repo, mode, ctx.headers))

    @server.tool(title="Get a skill", structured_output=True)
    async def get_skill(
        name: Annotated[str, Field(min_length=1, max_length=128, description="the skill's name")],
        ctx: Context,
        repo: RepoArg = None,
    ) -> dict[str, Any]:
        """One skill: name, description, version, metadata and its whole SKILL.md document (content)."""
        return await core.counted("get_skill", core.get_skill(name, repo, ctx.headers))

    @server.tool(title="Record a task's outcome", structured_output=True)
    async def record_outcome(
        trajectory: Annotated[str, Field(min_length=1, max_length=128,
                                         description="the X-SkillOS-Trajectory id the gateway returned")],
        success: Annotated[bool, Field(description="whether the task was solved")],
        ctx: Context,
        feedback: Annotated[str | None, Field(max_length=4000,
                                              description="what went right or wrong, for the curator")] = None,
        score: Annotated[float | None, Field(ge=0.0, le=1.0, description="a graded outcome, 0-1")] = None,
    ) -> dict[str, Any]:
        """Close a trajectory of the SkillOS gateway with its outcome; the executor hands it to the skill
        curator, which may write skills from it. Needs a token with the 'rw' scope."""
        return await core.counted("record_outcome",
                                  core.record_outcome(trajectory, success, feedback, score, ctx.headers))

    @server.resource("skill://{repo}/{name}", name="skill", title="A skill (SKILL.md)", mime_type="text/markdown",
                     description="one skill of a repo as its SKILL.md document")
    async def skill_resource(repo: str, name: str, ctx: Context) -> str:
        return await core.read_skill(repo, name, ctx.headers)

    @server.resource("skills://{repo}", name="skill-index", title="A repo's skills", mime_type="application/json",
                     description="every skill of a repo: name, description, version and URI")
    async def repo_index(repo: str, ctx: Context) -> str:
        return await core.repo_index(repo, ctx.headers)

    return server
