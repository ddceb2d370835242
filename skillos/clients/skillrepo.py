"""HTTP clients of the skill repo service: `SkillRepoClient` (sync) and `AsyncSkillRepoClient`.

Both have the same methods (the async one's are coroutines): they are written once, in `_SkillRepoCalls`,
and the sync client runs them blocking (`skillos.clients.base`). Every 4xx/5xx answer, and a service
that cannot be reached, raises `SkillRepoError(status, code, message)` (status 0 when unreachable).

    c = SkillRepoClient("http://127.0.0.1:8001", token=None)
    c.create_repo("demo")
    c.put_skill("demo", {"name": "clean-object", "description": "...", "body": "..."})
    hits = c.search("demo", "clean the apple", k=5)
    c.apply_ops("demo", [{"name": "new_skill_insert",
                          "arguments": {"skill_name": "Heat Object", "content": "..."}}],
                example=worked_example)   # kept with the skills the ops write
    c.add_example("demo", "heat-object", worked_example)
"""

from __future__ import annotations

import copy
from typing import Any
from urllib.parse import quote

import httpx

from skillos.clients.base import AsyncHTTPClient, ServiceClient, ServiceError, SyncHTTPClient, auth_headers
from skillos.protocol.skillrepo import (
    ExampleResult,
    ImportResult,
    OpLog,
    OpOrigin,
    OpsResult,
    OutcomeRecorded,
    Proposal,
    ProposalList,
    Repo,
    RepoPolicy,
    SearchHit,
    SearchMode,
    Skill,
    SkillList,
    SkillStateEntry,
    SkillStateList,
    SkillVersion,
    Snapshot,
    TokenInfo,
    UtilityReport,
)
from skillos.worked_examples import WorkedExample

Origin = OpOrigin | dict[str, Any] | None
Example = WorkedExample | dict[str, Any]

SkillInput = str | dict[str, Any]  # a whole SKILL.md document, or {name, description, body, metadata}


class SkillRepoError(ServiceError):
    pass


def _q(part: str) -> str:
    return quote(part, safe="")


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


def _example(example: Example) -> dict[str, Any]:
    return example.model_dump(mode="json") if isinstance(example, WorkedExample) else dict(example)


def _ops_payload(ops: list[dict[str, Any]], idempotency_key: str | None, atomic: bool,
                 origin: Origin = None, example: Example | None = None,
                 provenance: dict[str, Any] | None = None) -> dict[str, Any]:
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
    if example is not None:  # likewise: a skill repo older than worked examples refuses the field
        body["example"] = _example(example)
    if provenance:           # an operator's token only (the services'): the repo refuses it from others
        body["provenance"] = {k: v for k, v in provenance.items() if v is not None}
    return body


def _restore_payload(version: int, origin: Origin) -> dict[str, Any]:
    body: dict[str, Any] = {"version": version}
    if _origin(origin):
        body["origin"] = _origin(origin)
    return body


def _page_params(**kw: Any) -> dict[str, Any]:
    return {k: v for k, v in kw.items() if v is not None}


def _repo(repo: str) -> str:
    return f"/v1/repos/{_q(repo)}"


def _skill_path(repo: str, name: str) -> str:
    return f"{_repo(repo)}/skills/{_q(name)}"


class _SkillRepoCalls(ServiceClient):
    """The skill repo's calls, once; `SkillRepoClient` and `AsyncSkillRepoClient` add the I/O."""

    error = SkillRepoError
    unreachable = "skill repo at {base_url} not reachable: {e}"
    _per_call_auth = False

    def __init__(self, base_url: str, token: str | None = None, timeout: float = 30.0,
                 transport: httpx.BaseTransport | httpx.AsyncBaseTransport | None = None):
        self.headers = auth_headers(token)
        self.timeout = timeout
        self._open(base_url, self.headers, timeout, transport)

    def with_token(self, token: str | None):
        """This client sending ``token`` on every call instead of its own, sharing its connections (one
        client for many users, e.g. the console). Closing the original closes both."""
        clone = copy.copy(self)
        clone.headers = auth_headers(token)
        clone._per_call_auth = True
        return clone

    def _request_kwargs(self, kw: dict[str, Any]) -> dict[str, Any]:
        if self._per_call_auth and self.headers:
            kw["headers"] = {**self.headers, **(kw.get("headers") or {})}
        return kw

    async def whoami(self) -> TokenInfo:
        return TokenInfo.model_validate((await self._call("GET", "/v1/whoami")).json())

    # repos
    async def create_repo(self, name: str, policy: RepoPolicy | dict[str, Any] | None = None) -> Repo:
        """``policy`` None: the service's default (SKILLOS_REVIEW_DEFAULT)."""
        body: dict[str, Any] = {"name": name}
        if policy is not None:
            body["policy"] = RepoPolicy.model_validate(policy).model_dump(mode="json")
        return Repo.model_validate((await self._call("POST", "/v1/repos", json=body)).json())

    # review: the repo's policy for curator op batches, and the batches that wait for a person
    async def get_policy(self, repo: str) -> RepoPolicy:
        return RepoPolicy.model_validate((await self._call("GET", f"{_repo(repo)}/policy")).json())

    async def set_policy(self, repo: str, policy: RepoPolicy | dict[str, Any]) -> RepoPolicy:
        body = RepoPolicy.model_validate(policy).model_dump(mode="json")
        return RepoPolicy.model_validate((await self._call("PUT", f"{_repo(repo)}/policy", json=body)).json())

    async def proposals(self, repo: str, status: str | None = "pending", before: int | None = None,
                        limit: int = 50) -> list[Proposal]:
        params = {k: v for k, v in {"status": status, "before": before, "limit": limit}.items() if v is not None}
        resp = await self._call("GET", f"{_repo(repo)}/proposals", params=params)
        return ProposalList.model_validate(resp.json()).proposals

    async def proposal(self, repo: str, pid: int) -> Proposal:
        """One proposal, each op with its diff against the skill as served."""
        return Proposal.model_validate((await self._call("GET", f"{_repo(repo)}/proposals/{int(pid)}")).json())

    async def decide(self, repo: str, pid: int, approve: bool, note: str | None = None) -> Proposal:
        """Approve (apply it now, as this token's write) or reject a pending proposal."""
        verb = "approve" if approve else "reject"
        resp = await self._call("POST", f"{_repo(repo)}/proposals/{int(pid)}/{verb}",
                                json={"note": note} if note else {})
        return Proposal.model_validate(resp.json())

    # measured utility: a task's outcome per skill served or withheld, and the per-skill numbers
    async def record_outcome(self, repo: str, trajectory: str, success: bool, source: str,
                             served: list[str] | None = None, withheld: list[str] | None = None) -> int:
        """The skills counted (0: this trajectory was reported before)."""
        return (await self.report_outcome(repo, trajectory, success, source, served, withheld)).recorded

    async def report_outcome(self, repo: str, trajectory: str, success: bool, source: str,
                             served: list[str] | None = None, withheld: list[str] | None = None) -> OutcomeRecorded:
        """The skills counted, and those the repo's policy promoted or retired on the new numbers."""
        body = {"trajectory": trajectory, "success": success, "source": source, "served": served or [],
                "withheld": withheld or []}
        return OutcomeRecorded.model_validate((await self._call("POST", f"{_repo(repo)}/outcomes", json=body)).json())

    # a skill's life: candidates, retired skills; a reviewer's promote / retire / restore
    async def states(self, repo: str, state: str | None = None) -> list[SkillStateEntry]:
        resp = await self._call("GET", f"{_repo(repo)}/states", params={"state": state} if state else None)
        return SkillStateList.model_validate(resp.json()).skills

    async def set_state(self, repo: str, name: str, state: str, note: str | None = None) -> SkillStateEntry:
        body = {"state": state, **({"note": note} if note else {})}
        return SkillStateEntry.model_validate((await self._call("POST", f"{_skill_path(repo, name)}/state",
                                                                json=body)).json())

    async def utility(self, repo: str, sources: list[str] | None = None, skill: str | None = None) -> UtilityReport:
        params: dict[str, Any] = {k: v for k, v in {"source": sources, "skill": skill}.items() if v}
        return UtilityReport.model_validate((await self._call("GET", f"{_repo(repo)}/utility", params=params)).json())

    async def get_repo(self, name: str) -> Repo:
        return Repo.model_validate((await self._call("GET", _repo(name))).json())

    async def list_repos(self) -> list[Repo]:
        return [Repo.model_validate(r) for r in (await self._call("GET", "/v1/repos")).json()["repos"]]

    async def delete_repo(self, name: str) -> None:
        await self._call("DELETE", _repo(name))

    async def fork_repo(self, source: str, name: str, snapshot: str | None = None,
                        policy: RepoPolicy | dict[str, Any] | None = None) -> Repo:
        body: dict[str, Any] = {"name": name, **({"snapshot": snapshot} if snapshot else {})}
        if policy is not None:
            body["policy"] = RepoPolicy.model_validate(policy).model_dump(mode="json")
        return Repo.model_validate((await self._call("POST", f"{_repo(source)}/fork", json=body)).json())

    # skills
    async def list_skills(self, repo: str) -> list[Skill]:
        resp = await self._call("GET", f"{_repo(repo)}/skills")
        return [Skill.model_validate(s) for s in resp.json()["skills"]]

    async def list_skills_page(self, repo: str, limit: int = 50, after: str | None = None) -> SkillList:
        """One page of skills by name; pass ``next_after`` of the answer as ``after`` for the next."""
        resp = await self._call("GET", f"{_repo(repo)}/skills", params=_page_params(limit=limit, after=after))
        return SkillList.model_validate(resp.json())

    async def op_log(self, repo: str, before: int | None = None, limit: int = 50) -> OpLog:
        """The repo's op log, newest first; pass ``next_before`` of the answer as ``before`` for older."""
        resp = await self._call("GET", f"{_repo(repo)}/ops", params=_page_params(before=before, limit=limit))
        return OpLog.model_validate(resp.json())

    async def get_skill(self, repo: str, name: str) -> Skill:
        return Skill.model_validate((await self._call("GET", _skill_path(repo, name))).json())

    async def get_skill_markdown(self, repo: str, name: str) -> str:
        return (await self._call("GET", _skill_path(repo, name), headers={"Accept": "text/markdown"})).text

    async def insert_skill(self, repo: str, skill: SkillInput) -> Skill:
        kw, _ = _skill_request(skill)
        return Skill.model_validate((await self._call("POST", f"{_repo(repo)}/skills", **kw)).json())

    async def put_skill(self, repo: str, skill: SkillInput, if_match: int | None = None,
                        name: str | None = None) -> Skill:
        kw, found = _skill_request(skill)
        target = name or found
        if not target:
            raise SkillRepoError(400, "invalid_name", "cannot tell the skill's name: give name=...")
        if if_match is not None:
            kw.setdefault("headers", {})["If-Match"] = str(if_match)
        return Skill.model_validate((await self._call("PUT", _skill_path(repo, target), **kw)).json())

    async def delete_skill(self, repo: str, name: str, if_match: int | None = None) -> None:
        headers = {"If-Match": str(if_match)} if if_match is not None else {}
        await self._call("DELETE", _skill_path(repo, name), headers=headers)

    async def skill_versions(self, repo: str, name: str, content: bool = False) -> list[SkillVersion]:
        resp = await self._call("GET", f"{_skill_path(repo, name)}/versions",
                                params={"content": str(content).lower()})
        return [SkillVersion.model_validate(v) for v in resp.json()["versions"]]

    async def skill_version(self, repo: str, name: str, version: int) -> SkillVersion:
        """One version of a skill, with its document."""
        resp = await self._call("GET", f"{_skill_path(repo, name)}/versions/{int(version)}")
        return SkillVersion.model_validate(resp.json())

    async def restore_skill(self, repo: str, name: str, version: int, origin: Origin = None) -> Skill:
        resp = await self._call("POST", f"{_skill_path(repo, name)}/restore",
                                json=_restore_payload(version, origin))
        return Skill.model_validate(resp.json())

    # search and ops
    async def search(self, repo: str, query: str, k: int = 5, mode: SearchMode = "bm25",
                     candidates: bool = False) -> list[SearchHit]:
        """Top k skills; ``mode``: bm25 (keywords), dense (sentence embeddings) or hybrid (both, RRF);
        ``candidates``: up to k candidate skills follow the active ones (their ``state`` says so)."""
        params: dict[str, Any] = {"q": query, "k": k} if mode == "bm25" else {"q": query, "k": k, "mode": mode}
        if candidates:
            params["candidates"] = "true"
        resp = await self._call("GET", f"{_repo(repo)}/search", params=params)
        body = resp.json()
        if body.get("mode", "bm25") != mode:  # a skill repo older than search modes ignores the parameter
            raise SkillRepoError(501, "search_mode_unsupported",
                                 f"the skill repo at {self.base_url} does not support mode={mode} (upgrade it)")
        return [SearchHit.model_validate(h) for h in body["hits"]]

    async def apply_ops(self, repo: str, ops: list[dict[str, Any]], idempotency_key: str | None = None,
                        atomic: bool = True, origin: Origin = None, example: Example | None = None,
                        provenance: dict[str, Any] | None = None) -> OpsResult:
        """``example``: a worked example of the episode, kept with every skill an applied insert or update
        writes (each op's verdict says what became of it). ``provenance``: what the writing service vouches
        for (`skillos.protocol.skillrepo.Provenance`; an operator's token only)."""
        resp = await self._call("POST", f"{_repo(repo)}/ops",
                                json=_ops_payload(ops, idempotency_key, atomic, origin, example, provenance))
        return OpsResult.model_validate(resp.json())

    # worked examples
    async def list_examples(self, repo: str, name: str) -> list[WorkedExample]:
        resp = await self._call("GET", f"{_skill_path(repo, name)}/examples")
        return [WorkedExample.model_validate(e) for e in resp.json()["examples"]]

    async def add_example(self, repo: str, name: str, example: Example) -> ExampleResult:
        """Keep ``example`` with the skill by the repo's rule; ``result`` says whether it was kept."""
        resp = await self._call("POST", f"{_skill_path(repo, name)}/examples", json=_example(example))
        return ExampleResult.model_validate(resp.json())

    async def delete_example(self, repo: str, name: str, example_id: str) -> None:
        await self._call("DELETE", f"{_skill_path(repo, name)}/examples/{_q(example_id)}")

    # export / import, snapshots
    async def export(self, repo: str) -> bytes:
        return (await self._call("GET", f"{_repo(repo)}/export")).content

    async def import_(self, repo: str, data: bytes, replace: bool = False) -> ImportResult:
        resp = await self._call("POST", f"{_repo(repo)}/import", content=data,
                                params={"replace": str(replace).lower()},
                                headers={"Content-Type": "application/gzip"})
        return ImportResult.model_validate(resp.json())

    async def snapshot(self, repo: str, label: str) -> Snapshot:
        resp = await self._call("POST", f"{_repo(repo)}/snapshots", json={"label": label})
        return Snapshot.model_validate(resp.json())

    async def list_snapshots(self, repo: str) -> list[Snapshot]:
        resp = await self._call("GET", f"{_repo(repo)}/snapshots")
        return [Snapshot.model_validate(s) for s in resp.json()["snapshots"]]

    async def restore(self, repo: str, label: str) -> Repo:
        resp = await self._call("POST", f"{_repo(repo)}/snapshots/{_q(label)}/restore")
        return Repo.model_validate(resp.json())


class SkillRepoClient(_SkillRepoCalls, SyncHTTPClient):
    """Synchronous client."""


class AsyncSkillRepoClient(_SkillRepoCalls, AsyncHTTPClient):
    """Asynchronous client: the same methods as `SkillRepoClient`, as coroutines."""

    close = AsyncHTTPClient.aclose
