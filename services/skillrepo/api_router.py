"""HTTP routes of the skill repo (``/v1/repos/...``): thin, they parse, authorize and call `SkillRepoService`."""

from __future__ import annotations

import json
from typing import Annotated

from fastapi import APIRouter, Depends, Path, Query, Request, Response

from services.skillrepo.serving import SkillRepoService, format_error, parse_if_match
from skillos.auth import Auth
from skillos.errors import APIError, ErrorResponse, unavailable
from skillos.protocol.skillrepo import (
    LOG_ID_MAX,
    VERSION_MAX,
    BulkResult,
    ExampleList,
    ExampleResult,
    ForkRequest,
    ImportResult,
    IndexStatus,
    OpLog,
    OpsRequest,
    OpsResult,
    Repo,
    RepoCreate,
    RepoList,
    RestoreSkillRequest,
    SearchMode,
    SearchResponse,
    Skill,
    SkillFields,
    SkillList,
    SkillVersion,
    SkillVersionList,
    Snapshot,
    SnapshotCreate,
    SnapshotList,
    TokenInfo,
)
from skillos.service import run_bounded
from skillos.skills import SkillDoc, SkillFormatError, from_fields, parse
from skillos.worked_examples import WorkedExample

_ERRORS = {s: {"model": ErrorResponse} for s in (400, 401, 403, 404, 409, 412, 413, 415, 422)}
_SKILL_BODY = {
    "requestBody": {"required": True, "content": {
        "text/markdown": {"schema": {"type": "string", "description": "a whole SKILL.md document"}},
        "application/json": {"schema": SkillFields.model_json_schema()},
    }}}
_ARCHIVE_BODY = {"requestBody": {"required": True, "content": {
    "application/octet-stream": {"schema": {"type": "string", "format": "binary"}}}}}

router = APIRouter(prefix="/v1", tags=["skillrepo"], responses=_ERRORS)


# async: FastAPI runs a plain `def` dependency in the thread pool, a thread hop per request for nothing
async def service(request: Request) -> SkillRepoService:
    return request.app.state.skillrepo


Svc = Annotated[SkillRepoService, Depends(service)]


async def _db(svc: SkillRepoService, method, *args, whole_repo: bool = False):
    """A service method (database work) in a worker thread, bounded by ``database_request_timeout_s``
    (``database_bulk_timeout_s`` for the work on a whole repo: import, export, fork, snapshots, whose time
    grows with the repo): a database that stopped answering gets the request a 503 with Retry-After, not a
    hang."""
    s = svc.settings
    limit, name = ((s.database_bulk_timeout_s, "SKILLOS_DATABASE_BULK_TIMEOUT_S") if whole_repo
                   else (s.database_request_timeout_s, "SKILLOS_DATABASE_REQUEST_TIMEOUT_S"))
    try:
        return await run_bounded(method, *args, timeout_s=limit)
    except TimeoutError:
        raise unavailable("database", f"the database did not answer within {limit:g} s "
                          f"({name}); a write may still be applied: retry it with the same "
                          "idempotency_key (or If-Match) to apply it once", svc.settings.database_retry_after_s) from None


async def _body(request: Request, svc: SkillRepoService) -> bytes:
    limit = svc.settings.max_request_bytes
    chunks, size = [], 0
    async for chunk in request.stream():
        size += len(chunk)
        if size > limit:
            raise APIError(413, "payload_too_large", f"request body is over {limit} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


async def _skill_doc(request: Request, svc: SkillRepoService, url_name: str | None = None) -> SkillDoc:
    raw = await _body(request, svc)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    max_body = svc.settings.max_body_bytes
    try:
        if ctype in ("text/markdown", "text/x-markdown", "text/plain"):
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError as e:
                raise APIError(400, "invalid_utf8", f"the document is not valid UTF-8 (byte {e.start})") from None
            return parse(text, max_body_bytes=max_body)
        if ctype in ("application/json", ""):
            try:
                data = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
                raise APIError(400, "invalid_json", f"the body is not valid JSON: {type(e).__name__}: {e}") from None
            if not isinstance(data, dict):
                raise APIError(400, "invalid_json", "the body must be a JSON object {name, description, body}")
            if url_name is not None:
                data.setdefault("name", url_name)
            try:
                fields = SkillFields.model_validate(data)
            except ValueError as e:
                raise APIError(422, "invalid_request", f"invalid skill fields: {e}".replace("\n", " ")) from None
            return from_fields(fields.name, fields.description, fields.body, fields.metadata, max_body_bytes=max_body)
    except SkillFormatError as e:
        raise format_error(e) from None
    raise APIError(415, "unsupported_media_type",
                   "send the skill as text/markdown (a SKILL.md document) or application/json")


def _etag(response: Response, version: int) -> None:
    response.headers["ETag"] = f'"{version}"'


@router.get("/whoami", response_model=TokenInfo,
            summary="What the caller's token may do (scope, repo prefix) and its label")
async def whoami(request: Request, auth: Auth) -> TokenInfo:
    return TokenInfo(mode=request.app.state.auth.mode, scope=auth.scope, prefix=auth.prefix, label=auth.token_label)


# --- repos ---

@router.post("/repos", status_code=201, response_model=Repo, summary="Create a repo")
async def create_repo(body: RepoCreate, svc: Svc, auth: Auth) -> Repo:
    auth.require(body.name, write=True)
    return await _db(svc, svc.create_repo, body.name, body.policy)


@router.get("/repos", response_model=RepoList, summary="List repos (those the token reaches)")
async def list_repos(svc: Svc, auth: Auth) -> RepoList:
    return RepoList(repos=await _db(svc, svc.list_repos, auth.prefix))


@router.get("/repos/{repo}", response_model=Repo, summary="One repo")
async def get_repo(repo: str, svc: Svc, auth: Auth) -> Repo:
    auth.require(repo)
    return await _db(svc, svc.get_repo, repo)


@router.delete("/repos/{repo}", status_code=204, summary="Delete a repo")
async def delete_repo(repo: str, svc: Svc, auth: Auth) -> Response:
    auth.require(repo, write=True)
    await _db(svc, svc.delete_repo, repo)
    return Response(status_code=204)


@router.post("/repos/{repo}/fork", status_code=201, response_model=Repo,
             summary="Fork a repo (or one of its snapshots) into a new repo; copies no skill body")
async def fork_repo(repo: str, body: ForkRequest, svc: Svc, auth: Auth) -> Repo:
    auth.require(repo)
    auth.require(body.name, write=True)
    return await _db(svc, svc.fork_repo, repo, body.name, body.snapshot, body.policy, whole_repo=True)


# --- skills ---

@router.get("/repos/{repo}/skills", response_model=SkillList,
            summary="The skills of a repo by name: all of them, or a page with ?limit (and ?after)")
async def list_skills(repo: str, svc: Svc, auth: Auth,
                      limit: Annotated[int | None, Query(ge=1, le=1000, description="page size")] = None,
                      after: Annotated[str | None, Query(max_length=128,
                                                         description="names after this one")] = None) -> SkillList:
    auth.require(repo)
    return await _db(svc, svc.list_skills, repo, limit, after)


@router.post("/repos/{repo}/skills", status_code=201, response_model=Skill, openapi_extra=_SKILL_BODY,
             summary="Add a skill (text/markdown document or JSON fields); 409 when the name exists")
async def insert_skill(repo: str, request: Request, response: Response, svc: Svc, auth: Auth) -> Skill:
    auth.require(repo, write=True)
    doc = await _skill_doc(request, svc)
    skill = await _db(svc, svc.insert_skill, repo, doc)
    _etag(response, skill.version)
    return skill


@router.get("/repos/{repo}/skills/{name}", response_model=Skill,
            responses={200: {"content": {"text/markdown": {"schema": {"type": "string"}}}}},
            summary="One skill; the SKILL.md document with 'Accept: text/markdown'")
async def get_skill(repo: str, name: str, request: Request, svc: Svc, auth: Auth):
    auth.require(repo)
    skill = await _db(svc, svc.get_skill, repo, name)
    headers = {"ETag": f'"{skill.version}"'}
    accept = request.headers.get("accept", "")
    if "text/markdown" in accept and "application/json" not in accept:
        return Response(skill.content, media_type="text/markdown; charset=utf-8", headers=headers)
    return Response(skill.model_dump_json(), media_type="application/json", headers=headers)


@router.put("/repos/{repo}/skills/{name}", response_model=Skill, openapi_extra=_SKILL_BODY,
            responses={201: {"model": Skill, "description": "created"}},
            summary="Create or replace a skill; honours 'If-Match: <version>' (412 when stale)")
async def put_skill(repo: str, name: str, request: Request, response: Response, svc: Svc, auth: Auth) -> Skill:
    auth.require(repo, write=True)
    if_match = parse_if_match(request.headers.get("if-match"))
    doc = await _skill_doc(request, svc, url_name=name)
    skill, created = await _db(svc, svc.put_skill, repo, name, doc, if_match)
    response.status_code = 201 if created else 200
    _etag(response, skill.version)
    return skill


@router.delete("/repos/{repo}/skills/{name}", status_code=204, summary="Delete a skill (a new, deleted version)")
async def delete_skill(repo: str, name: str, request: Request, svc: Svc, auth: Auth) -> Response:
    auth.require(repo, write=True)
    if_match = parse_if_match(request.headers.get("if-match"))
    await _db(svc, svc.delete_skill, repo, name, if_match)
    return Response(status_code=204)


@router.get("/repos/{repo}/skills/{name}/versions", response_model=SkillVersionList,
            summary="The skill's history, newest first (through the repos it was forked from)")
async def skill_versions(repo: str, name: str, svc: Svc, auth: Auth,
                         content: Annotated[bool, Query(description="include each version's document")] = False):
    auth.require(repo)
    return await _db(svc, svc.versions, repo, name, content)


@router.get("/repos/{repo}/skills/{name}/versions/{version}", response_model=SkillVersion,
            summary="One version of a skill, with its document")
async def skill_version(repo: str, name: str, version: Annotated[int, Path(ge=1, le=VERSION_MAX)], svc: Svc,
                        auth: Auth) -> SkillVersion:
    auth.require(repo)
    return await _db(svc, svc.version, repo, name, version)


@router.post("/repos/{repo}/skills/{name}/restore", response_model=Skill,
             summary="Make an earlier version the skill's newest one")
async def restore_skill(repo: str, name: str, body: RestoreSkillRequest, svc: Svc, auth: Auth) -> Skill:
    auth.require(repo, write=True)
    origin = body.origin.model_dump(exclude_none=True) if body.origin else None
    return await _db(svc, svc.restore_skill, repo, name, body.version, origin)


# --- worked examples ---

@router.get("/repos/{repo}/skills/{name}/examples", response_model=ExampleList,
            summary="The skill's worked examples (system-written, at most 3)")
async def list_examples(repo: str, name: str, svc: Svc, auth: Auth) -> ExampleList:
    auth.require(repo)
    return ExampleList(examples=await _db(svc, svc.list_examples, repo, name))


@router.post("/repos/{repo}/skills/{name}/examples", response_model=ExampleResult,
             summary="Keep a worked example with the skill, by the repo's rule (a few, the shortest, one per kind)")
async def add_example(repo: str, name: str, body: WorkedExample, svc: Svc, auth: Auth) -> ExampleResult:
    auth.require(repo, write=True)
    return await _db(svc, svc.add_example, repo, name, body)


@router.delete("/repos/{repo}/skills/{name}/examples/{example_id}", status_code=204,
               summary="Drop one of the skill's worked examples (a new version)")
async def delete_example(repo: str, name: str, example_id: Annotated[str, Path(max_length=64)], svc: Svc,
                         auth: Auth) -> Response:
    auth.require(repo, write=True)
    await _db(svc, svc.delete_example, repo, name, example_id)
    return Response(status_code=204)


# --- search and ops ---

@router.get("/repos/{repo}/search", response_model=SearchResponse,
            summary="Top-k skills: BM25 over name x2, description x2, body x1; dense (MiniLM cosine); or hybrid (RRF)")
async def search(repo: str, svc: Svc, auth: Auth,
                 q: Annotated[str, Query(max_length=4096, description="the query, e.g. the task text")],
                 k: Annotated[int, Query(ge=1, le=100)] = 5,
                 mode: Annotated[SearchMode, Query(description=(
                     "bm25: keywords (default); dense: meaning (sentence embeddings); hybrid: both, fused by "
                     "reciprocal rank, BM25's best hit always kept"))] = "bm25",
                 candidates: Annotated[bool, Query(description=(
                     "also up to k candidate skills (written from traffic, not yet promoted) that rank among the "
                     "top 2k, after the hits: for a caller that explores them"))] = False) -> SearchResponse:
    auth.require(repo)
    if len(q) > svc.settings.max_query_chars:
        raise APIError(413, "query_too_long", f"the query is over {svc.settings.max_query_chars} chars")
    hits = await _db(svc, svc.search, repo, q, min(k, svc.settings.max_search_k), mode, candidates)
    return SearchResponse(hits=hits, mode=mode)


async def batch_limit(request: Request, svc: Svc) -> None:
    """Refuses a batch over the op limit from the request's parsed JSON, before the body is validated
    (FastAPI validates it after the dependencies): 100k ops would cost seconds and 100+ MB as models."""
    try:
        data = await request.json()  # parsed once, by FastAPI already (the request caches it)
    except Exception:  # noqa: BLE001 - not JSON: FastAPI answers it
        return
    ops = data.get("ops") if isinstance(data, dict) else None
    limit = svc.settings.max_ops_per_batch
    if isinstance(ops, list) and len(ops) > limit:
        raise APIError(413, "batch_too_large", f"{len(ops)} ops in one batch; the limit is {limit}: split the batch")


@router.post("/repos/{repo}/ops", response_model=OpsResult, dependencies=[Depends(batch_limit)],
             summary="Apply curator function calls (atomic by default), one verdict per op")
async def apply_ops(repo: str, body: OpsRequest, svc: Svc, auth: Auth) -> OpsResult:
    auth.require(repo, write=True)
    return await _db(svc, svc.apply_ops, repo, body)


@router.get("/repos/{repo}/ops", response_model=OpLog,
            summary="The repo's op log, newest first: every batch of ops with each op's verdict, and REST writes")
async def op_log(repo: str, svc: Svc, auth: Auth,
                 before: Annotated[int | None, Query(ge=1, le=LOG_ID_MAX, description="entries older than this id")] = None,
                 limit: Annotated[int, Query(ge=1, le=500)] = 50) -> OpLog:
    auth.require(repo)
    log = await _db(svc, svc.op_log, repo, before, limit)
    if auth.scope != "rw":   # a trajectory id (the origin's, or in the gateway's idempotency key) names a
        hidden = "(hidden: rw tokens see it)"   # caller's conversation: for the repo's writers
        for entry in log.entries:
            if entry.origin is not None and entry.origin.trajectory:
                entry.origin.trajectory = hidden
            if entry.provenance is not None and entry.provenance.trajectory:
                entry.provenance.trajectory = hidden
            if entry.idempotency_key:
                entry.idempotency_key = hidden
    return log


@router.get("/repos/{repo}/index", response_model=IndexStatus,
            summary="This replica's search index of the repo, next to the database's state (diagnostics)")
async def index_status(repo: str, svc: Svc, auth: Auth) -> IndexStatus:
    auth.require(repo)
    return await _db(svc, svc.index_status, repo)


# --- export / import, snapshots ---

@router.get("/repos/{repo}/export", response_class=Response,
            responses={200: {"content": {"application/gzip": {"schema": {"type": "string", "format": "binary"}}}}},
            summary="A tar.gz of <name>/SKILL.md folders, with each skill's <name>/examples/NN-<id>.md")
async def export(repo: str, svc: Svc, auth: Auth) -> Response:
    auth.require(repo)
    data = await _db(svc, svc.export, repo, whole_repo=True)
    return Response(data, media_type="application/gzip",
                    headers={"Content-Disposition": f'attachment; filename="{repo}.tar.gz"'})


@router.post("/repos/{repo}/import", response_model=ImportResult, openapi_extra=_ARCHIVE_BODY,
             summary=("Add or replace skills from a tar.gz of <name>/SKILL.md folders (all or nothing); a folder's "
                      "examples/*.md become the skill's worked examples (none there: it keeps its own, unless "
                      "?replace=true, which makes the repo the archive)"))
async def import_(repo: str, request: Request, svc: Svc, auth: Auth,
                  replace: Annotated[bool, Query(description="also delete skills not in the archive")] = False):
    auth.require(repo, write=True)
    data = await _body(request, svc)
    return await _db(svc, svc.import_, repo, data, replace, whole_repo=True)


_NDJSON_SCHEMA = {"schema": {"type": "string", "description": "one JSON object {name, description, body, metadata} per line"}}
# text/plain too: NDJSON is text, and generic clients (and API fuzzers) can send that type
_NDJSON_BODY = {"requestBody": {"required": True, "content": {"application/x-ndjson": _NDJSON_SCHEMA,
                                                              "text/plain": _NDJSON_SCHEMA}}}
_NDJSON_TYPES = ("application/x-ndjson", "application/jsonl", "application/json", "text/plain", "")


@router.post("/repos/{repo}/bulk", response_model=BulkResult, openapi_extra=_NDJSON_BODY,
             summary="Add or replace many skills (NDJSON, one per line) in one transaction: the bulk-load path")
async def bulk(repo: str, request: Request, svc: Svc, auth: Auth) -> BulkResult:
    auth.require(repo, write=True)
    ctype = request.headers.get("content-type", "").split(";")[0].strip().lower()
    if ctype not in _NDJSON_TYPES:
        raise APIError(415, "unsupported_media_type", "send application/x-ndjson (or text/plain): one JSON skill "
                                                      "object per line")
    data = await _body(request, svc)
    return await _db(svc, svc.bulk_put, repo, data, whole_repo=True)


@router.post("/repos/{repo}/snapshots", status_code=201, response_model=Snapshot,
             summary="Remember the repo's skills under a label (a training step, a stream position)")
async def create_snapshot(repo: str, body: SnapshotCreate, svc: Svc, auth: Auth) -> Snapshot:
    auth.require(repo, write=True)
    return await _db(svc, svc.snapshot, repo, body.label, whole_repo=True)


@router.get("/repos/{repo}/snapshots", response_model=SnapshotList, summary="The repo's snapshots")
async def list_snapshots(repo: str, svc: Svc, auth: Auth) -> SnapshotList:
    auth.require(repo)
    return SnapshotList(snapshots=await _db(svc, svc.list_snapshots, repo))


@router.post("/repos/{repo}/snapshots/{label}/restore", response_model=Repo,
             summary="Make the repo's skills what they were at the snapshot (new versions, history kept)")
async def restore_snapshot(repo: str, label: str, svc: Svc, auth: Auth) -> Repo:
    auth.require(repo, write=True)
    return await _db(svc, svc.restore_snapshot, repo, label, whole_repo=True)
