"""HTTP clients of the skill repo service: `SkillRepoClient` (sync) and `AsyncSkillRepoClient`.

Both have the same methods (the async one's are coroutines). Every 4xx/5xx answer, and a service that
cannot be reached, raises `SkillRepoError(status, code, message)` (status 0 when unreachable).

    c = SkillRepoClient("http://127.0.0.1:8001", token=None)
    c.create_repo("demo")
    c.put_skill("demo", {"name": "clean-object", "description": "...", "body": "..."})
    hits = c.search("demo", "clean the apple", k=5)
    c.apply_ops("demo", [{"name": "new_skill_insert",
                          "arguments": {"skill_name": "Heat Object", "content": "..."}}])
"""

from __future__ import annotations

import copy
import json
from typing import Any
from urllib.parse import quote

import httpx

from skillos.clients.base import AsyncHTTPClient, ServiceError, SyncHTTPClient, auth_headers, raise_for_error
from skillos.protocol.skillrepo import (
    ImportResult,
    OpLog,
    OpOrigin,
    OpsResult,
    Repo,
    SearchHit,
    Skill,
    SkillList,
    SkillVersion,
    Snapshot,
    TokenInfo,
)

Origin = OpOrigin | dict[str, Any] | None

SkillInput = str | dict[str, Any]  # a whole SKILL.md document, or {name, description, body, metadata}


class SkillRepoError(ServiceError):
    pass


def _q(part: str) -> str:
    return quote(part, safe="")


def _raise_for(resp: httpx.Response) -> None:
    raise_for_error(resp, SkillRepoError)


def _skill_request(skill: SkillInput) -> tuple[dict[str, Any], str | None]:
    """(httpx request kwargs, the skill's name when it can be told without the service)."""
    if isinstance(skill, str):
        from skillos.skills import SkillFormatError, split_frontmatter

        try:
            front, _ = split_frontmatter(skill)
            name = (front or {}).get("name")
        except SkillFormatError:
            name = None
        return {"content": skill.encode("utf-8"), "headers": {"Content-Type": "text/markdown"}}, \
            name if isinstance(name, str) else None
    if isinstance(skill, dict):
        return {"json": skill}, skill.get("name") if isinstance(skill.get("name"), str) else None
    raise TypeError("a skill is a Markdown document (str) or a dict of fields")


def _origin(origin: Origin) -> dict[str, Any] | None:
    if origin is None:
        return None
    data = origin.model_dump(exclude_none=True) if isinstance(origin, OpOrigin) else dict(origin)
    return data or None


def _ops_payload(ops: list[dict[str, Any]], idempotency_key: str | None, atomic: bool,
                 origin: Origin = None) -> dict[str, Any]:
    norm = []
    for op in ops:
        # accept OpenAI tool calls as they come: {"function": {"name", "arguments"}} or flat
        if "function" in op and isinstance(op["function"], dict):
            op = op["function"]
        norm.append({"name": op.get("name"), "arguments": op.get("arguments", {})})
    body: dict[str, Any] = {"ops": norm, "atomic": atomic}
    if idempotency_key:
        body["idempotency_key"] = idempotency_key
    if _origin(origin):  # only when given: a skill repo older than the op log refuses the field
        body["origin"] = _origin(origin)
    return body


def _restore_payload(version: int, origin: Origin) -> dict[str, Any]:
    body: dict[str, Any] = {"version": version}
    if _origin(origin):
        body["origin"] = _origin(origin)
    return body


def _page_params(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


class _Base:
    _per_call_auth = False

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0):
        self.base_url = base_url.rstrip("/")
        self.headers = auth_headers(token)
        self.timeout = timeout

    def with_token(self, token: str | None):
        """This client sending ``token`` on every call instead of its own, sharing its connections (one
        client for many users, e.g. the console). Closing the original closes both."""
        clone = copy.copy(self)
        clone.headers = auth_headers(token)
        clone._per_call_auth = True
        return clone

    def _auth(self, kw: dict[str, Any]) -> dict[str, Any]:
        if self._per_call_auth and self.headers:
            kw["headers"] = {**self.headers, **(kw.get("headers") or {})}
        return kw

    # (method, path, kwargs) builders shared by both clients
    @staticmethod
    def _repo(repo: str) -> str:
        return f"/v1/repos/{_q(repo)}"

    def _skill_path(self, repo: str, name: str) -> str:
        return f"{self._repo(repo)}/skills/{_q(name)}"


class SkillRepoClient(_Base, SyncHTTPClient):
    """Synchronous client."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | None = None):
        super().__init__(base_url, token, timeout)
        self._http = httpx.Client(base_url=self.base_url, headers=self.headers, timeout=timeout,
                                  transport=transport)


    def _call(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            resp = self._http.request(method, path, **self._auth(kw))
        except httpx.HTTPError as e:
            raise SkillRepoError(0, "unreachable", f"skill repo at {self.base_url} not reachable: {e}") from e
        _raise_for(resp)
        return resp

    def whoami(self) -> TokenInfo:
        return TokenInfo.model_validate(self._call("GET", "/v1/whoami").json())

    # repos
    def create_repo(self, name: str) -> Repo:
        return Repo.model_validate(self._call("POST", "/v1/repos", json={"name": name}).json())

    def get_repo(self, name: str) -> Repo:
        return Repo.model_validate(self._call("GET", self._repo(name)).json())

    def list_repos(self) -> list[Repo]:
        return [Repo.model_validate(r) for r in self._call("GET", "/v1/repos").json()["repos"]]

    def delete_repo(self, name: str) -> None:
        self._call("DELETE", self._repo(name))

    def fork_repo(self, source: str, name: str, snapshot: str | None = None) -> Repo:
        body = {"name": name, **({"snapshot": snapshot} if snapshot else {})}
        return Repo.model_validate(self._call("POST", f"{self._repo(source)}/fork", json=body).json())

    # skills
    def list_skills(self, repo: str) -> list[Skill]:
        return [Skill.model_validate(s) for s in self._call("GET", f"{self._repo(repo)}/skills").json()["skills"]]

    def list_skills_page(self, repo: str, limit: int = 50, after: str | None = None) -> SkillList:
        """One page of skills by name; pass ``next_after`` of the answer as ``after`` for the next."""
        resp = self._call("GET", f"{self._repo(repo)}/skills", params=_page_params(limit=limit, after=after))
        return SkillList.model_validate(resp.json())

    def op_log(self, repo: str, before: int | None = None, limit: int = 50) -> OpLog:
        """The repo's op log, newest first; pass ``next_before`` of the answer as ``before`` for older."""
        resp = self._call("GET", f"{self._repo(repo)}/ops", params=_page_params(before=before, limit=limit))
        return OpLog.model_validate(resp.json())

    def get_skill(self, repo: str, name: str) -> Skill:
        return Skill.model_validate(self._call("GET", self._skill_path(repo, name)).json())

    def get_skill_markdown(self, repo: str, name: str) -> str:
        return self._call("GET", self._skill_path(repo, name), headers={"Accept": "text/markdown"}).text

    def insert_skill(self, repo: str, skill: SkillInput) -> Skill:
        kw, _ = _skill_request(skill)
        return Skill.model_validate(self._call("POST", f"{self._repo(repo)}/skills", **kw).json())

    def put_skill(self, repo: str, skill: SkillInput, if_match: int | None = None, name: str | None = None) -> Skill:
        kw, found = _skill_request(skill)
        target = name or found
        if not target:
            raise SkillRepoError(400, "invalid_name", "cannot tell the skill's name: give name=...")
        if if_match is not None:
            kw.setdefault("headers", {})["If-Match"] = str(if_match)
        return Skill.model_validate(self._call("PUT", self._skill_path(repo, target), **kw).json())

    def delete_skill(self, repo: str, name: str, if_match: int | None = None) -> None:
        headers = {"If-Match": str(if_match)} if if_match is not None else {}
        self._call("DELETE", self._skill_path(repo, name), headers=headers)

    def skill_versions(self, repo: str, name: str, content: bool = False) -> list[SkillVersion]:
        resp = self._call("GET", f"{self._skill_path(repo, name)}/versions",
                          params={"content": str(content).lower()})
        return [SkillVersion.model_validate(v) for v in resp.json()["versions"]]

    history = skill_versions

    def skill_version(self, repo: str, name: str, version: int) -> SkillVersion:
        """One version of a skill, with its document."""
        resp = self._call("GET", f"{self._skill_path(repo, name)}/versions/{int(version)}")
        return SkillVersion.model_validate(resp.json())

    def restore_skill(self, repo: str, name: str, version: int, origin: Origin = None) -> Skill:
        resp = self._call("POST", f"{self._skill_path(repo, name)}/restore", json=_restore_payload(version, origin))
        return Skill.model_validate(resp.json())

    # search and ops
    def search(self, repo: str, query: str, k: int = 5) -> list[SearchHit]:
        resp = self._call("GET", f"{self._repo(repo)}/search", params={"q": query, "k": k})
        return [SearchHit.model_validate(h) for h in resp.json()["hits"]]

    def apply_ops(self, repo: str, ops: list[dict[str, Any]], idempotency_key: str | None = None,
                  atomic: bool = True, origin: Origin = None) -> OpsResult:
        resp = self._call("POST", f"{self._repo(repo)}/ops",
                          json=_ops_payload(ops, idempotency_key, atomic, origin))
        return OpsResult.model_validate(resp.json())

    # export / import, snapshots
    def export(self, repo: str) -> bytes:
        return self._call("GET", f"{self._repo(repo)}/export").content

    def import_(self, repo: str, data: bytes, replace: bool = False) -> ImportResult:
        resp = self._call("POST", f"{self._repo(repo)}/import", content=data,
                          params={"replace": str(replace).lower()}, headers={"Content-Type": "application/gzip"})
        return ImportResult.model_validate(resp.json())

    def snapshot(self, repo: str, label: str) -> Snapshot:
        resp = self._call("POST", f"{self._repo(repo)}/snapshots", json={"label": label})
        return Snapshot.model_validate(resp.json())

    def list_snapshots(self, repo: str) -> list[Snapshot]:
        resp = self._call("GET", f"{self._repo(repo)}/snapshots")
        return [Snapshot.model_validate(s) for s in resp.json()["snapshots"]]

    def restore(self, repo: str, label: str) -> Repo:
        resp = self._call("POST", f"{self._repo(repo)}/snapshots/{_q(label)}/restore")
        return Repo.model_validate(resp.json())


class AsyncSkillRepoClient(_Base, AsyncHTTPClient):
    """Asynchronous client: the same methods as `SkillRepoClient`, as coroutines."""

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.AsyncBaseTransport | None = None):
        super().__init__(base_url, token, timeout)
        self._http = httpx.AsyncClient(base_url=self.base_url, headers=self.headers, timeout=timeout,
                                       transport=transport)

    close = AsyncHTTPClient.aclose

    async def _call(self, method: str, path: str, **kw) -> httpx.Response:
        try:
            resp = await self._http.request(method, path, **self._auth(kw))
        except httpx.HTTPError as e:
            raise SkillRepoError(0, "unreachable", f"skill repo at {self.base_url} not reachable: {e}") from e
        _raise_for(resp)
        return resp

    async def whoami(self) -> TokenInfo:
        return TokenInfo.model_validate((await self._call("GET", "/v1/whoami")).json())

    async def create_repo(self, name: str) -> Repo:
        return Repo.model_validate((await self._call("POST", "/v1/repos", json={"name": name})).json())

    async def get_repo(self, name: str) -> Repo:
        return Repo.model_validate((await self._call("GET", self._repo(name))).json())

    async def list_repos(self) -> list[Repo]:
        return [Repo.model_validate(r) for r in (await self._call("GET", "/v1/repos")).json()["repos"]]

    async def delete_repo(self, name: str) -> None:
        await self._call("DELETE", self._repo(name))

    async def fork_repo(self, source: str, name: str, snapshot: str | None = None) -> Repo:
        body = {"name": name, **({"snapshot": snapshot} if snapshot else {})}
        return Repo.model_validate((await self._call("POST", f"{self._repo(source)}/fork", json=body)).json())

    async def list_skills(self, repo: str) -> list[Skill]:
        resp = await self._call("GET", f"{self._repo(repo)}/skills")
        return [Skill.model_validate(s) for s in resp.json()["skills"]]

    async def list_skills_page(self, repo: str, limit: int = 50, after: str | None = None) -> SkillList:
        resp = await self._call("GET", f"{self._repo(repo)}/skills", params=_page_params(limit=limit, after=after))
        return SkillList.model_validate(resp.json())

    async def op_log(self, repo: str, before: int | None = None, limit: int = 50) -> OpLog:
        resp = await self._call("GET", f"{self._repo(repo)}/ops", params=_page_params(before=before, limit=limit))
        return OpLog.model_validate(resp.json())

    async def get_skill(self, repo: str, name: str) -> Skill:
        return Skill.model_validate((await self._call("GET", self._skill_path(repo, name))).json())

    async def get_skill_markdown(self, repo: str, name: str) -> str:
        return (await self._call("GET", self._skill_path(repo, name), headers={"Accept": "text/markdown"})).text

    async def insert_skill(self, repo: str, skill: SkillInput) -> Skill:
        kw, _ = _skill_request(skill)
        return Skill.model_validate((await self._call("POST", f"{self._repo(repo)}/skills", **kw)).json())

    async def put_skill(self, repo: str, skill: SkillInput, if_match: int | None = None,
                        name: str | None = None) -> Skill:
        kw, found = _skill_request(skill)
        target = name or found
        if not target:
            raise SkillRepoError(400, "invalid_name", "cannot tell the skill's name: give name=...")
        if if_match is not None:
            kw.setdefault("headers", {})["If-Match"] = str(if_match)
        return Skill.model_validate((await self._call("PUT", self._skill_path(repo, target), **kw)).json())

    async def delete_skill(self, repo: str, name: str, if_match: int | None = None) -> None:
        headers = {"If-Match": str(if_match)} if if_match is not None else {}
        await self._call("DELETE", self._skill_path(repo, name), headers=headers)

    async def skill_versions(self, repo: str, name: str, content: bool = False) -> list[SkillVersion]:
        resp = await self._call("GET", f"{self._skill_path(repo, name)}/versions",
                                params={"content": str(content).lower()})
        return [SkillVersion.model_validate(v) for v in resp.json()["versions"]]

    history = skill_versions

    async def skill_version(self, repo: str, name: str, version: int) -> SkillVersion:
        resp = await self._call("GET", f"{self._skill_path(repo, name)}/versions/{int(version)}")
        return SkillVersion.model_validate(resp.json())

    async def restore_skill(self, repo: str, name: str, version: int, origin: Origin = None) -> Skill:
        resp = await self._call("POST", f"{self._skill_path(repo, name)}/restore",
                                json=_restore_payload(version, origin))
        return Skill.model_validate(resp.json())

    async def search(self, repo: str, query: str, k: int = 5) -> list[SearchHit]:
        resp = await self._call("GET", f"{self._repo(repo)}/search", params={"q": query, "k": k})
        return [SearchHit.model_validate(h) for h in resp.json()["hits"]]

    async def apply_ops(self, repo: str, ops: list[dict[str, Any]], idempotency_key: str | None = None,
                        atomic: bool = True, origin: Origin = None) -> OpsResult:
        resp = await self._call("POST", f"{self._repo(repo)}/ops",
                                json=_ops_payload(ops, idempotency_key, atomic, origin))
        return OpsResult.model_validate(resp.json())

    async def export(self, repo: str) -> bytes:
        return (await self._call("GET", f"{self._repo(repo)}/export")).content

    async def import_(self, repo: str, data: bytes, replace: bool = False) -> ImportResult:
        resp = await self._call("POST", f"{self._repo(repo)}/import", content=data,
                                params={"replace": str(replace).lower()},
                                headers={"Content-Type": "application/gzip"})
        return ImportResult.model_validate(resp.json())

    async def snapshot(self, repo: str, label: str) -> Snapshot:
        resp = await self._call("POST", f"{self._repo(repo)}/snapshots", json={"label": label})
        return Snapshot.model_validate(resp.json())

    async def list_snapshots(self, repo: str) -> list[Snapshot]:
        resp = await self._call("GET", f"{self._repo(repo)}/snapshots")
        return [Snapshot.model_validate(s) for s in resp.json()["snapshots"]]

    async def restore(self, repo: str, label: str) -> Repo:
        resp = await self._call("POST", f"{self._repo(repo)}/snapshots/{_q(label)}/restore")
        return Repo.model_validate(resp.json())


def ops_json_arguments(arguments: dict[str, Any] | str) -> dict[str, Any]:
    """Helper for callers holding raw tool calls: arguments as a dict (parsing a JSON string)."""
    return json.loads(arguments) if isinstance(arguments, str) else dict(arguments)
