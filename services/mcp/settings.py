"""Settings of the MCP server (environment variables ``SKILLOS_<FIELD>``).

The server reaches the skill repo at ``SKILLOS_SKILLREPO_URL`` and the executor (trajectory outcomes) at
``SKILLOS_EXECUTOR_URL``. Which token it sends: over stdio, ``SKILLOS_API_TOKEN`` (the process is the
agent's own, started with its credentials); over HTTP, the caller's ``Authorization: Bearer`` header and
never ``SKILLOS_API_TOKEN`` (a read token must stay read-only through this server).
"""

from __future__ import annotations

from pydantic import Field

from skillos.settings import ApiTokenSettings, SkillRepoAddress


class MCPSettings(ApiTokenSettings, SkillRepoAddress):
    # the executor whose gateway records trajectories (record_outcome closes one)
    executor_url: str = "http://127.0.0.1:8002"
    # the repo of a tool call that names none, and the repo whose skills resources/list lists
    mcp_default_repo: str = "default"
    # the most skills search_skills returns (the skill repo's own limit is 100)
    mcp_max_k: int = Field(20, ge=1, le=100)
    # HTTP timeout towards the skill repo and the executor
    mcp_upstream_timeout_s: float = Field(30.0, gt=0)
    # skills per page of resources/list
    mcp_page_size: int = Field(100, ge=1, le=1000)
    # streamable HTTP without server-side sessions: any replica answers any request (no sticky sessions)
    mcp_stateless_http: bool = True
