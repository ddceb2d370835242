"""The console's routes: thin, they read the request, call `ConsoleService` and render a template."""

from __future__ import annotations

import asyncio
import json
import secrets
import time
from typing import Annotated, Literal
from urllib.parse import urlparse

from fastapi import APIRouter, Depends, Form, Path, Query, Request
from fastapi.responses import FileResponse, HTMLResponse, JSONResponse, RedirectResponse, StreamingResponse
from starlette.concurrency import run_in_threadpool

from services.console.render import seg
from services.console.runs import Filters
from services.console.serving import ConsoleService, LoginRequired, PageError
from services.console.sessions import COOKIE, Session, session_cookie
from skillos.protocol.skillrepo import LOG_ID_MAX, OutcomeSource, SearchMode, SkillState
from skillos.textguard import decimal

router = APIRouter(include_in_schema=False)
LOGIN_CSRF = "skillos_console_login"
SSE_MAX_S = 3600          # a live stream ends after this; the browser reconnects with Last-Event-ID
SSE_POLL_S = 0.5
ROW_MAX = 10**9   # no run has more steps or tasks: a larger step number or event id is refused or ignored


async def console(request: Request) -> ConsoleService:
    return request.app.state.console


Svc = Annotated[ConsoleService, Depends(console)]


async def session(request: Request, svc: Svc) -> Session:
    """The user's session; a new one (no token) when the skill repo is open, else the login form."""
    s = svc.sessions.get(request.cookies.get(COOKIE))
    if s is None:
        info = await svc.open_repo()
        if info is None:
            raise LoginRequired()
        s = svc.sessions.create(None, info.mode, info.scope, info.prefix, info.label)
        request.state.new_session = s
    await svc.confirm(s)
    request.state.session = s
    return s


User = Annotated[Session, Depends(session)]


def page(request: Request, template: str, context: dict, status: int = 200) -> HTMLResponse:
    ctx = {"session": getattr(request.state, "session", None), **context}
    return request.app.state.templates.TemplateResponse(request, template, ctx, status_code=status)


def _same_origin(request: Request) -> None:
    """POSTs from other sites are refused (with SameSite cookies and CSRF tokens as the other locks)."""
    origin = request.headers.get("origin")
    if origin and origin != "null" and urlparse(origin).netloc != request.headers.get("host"):
        raise PageError(403, "Not allowed", "this form was sent from another site")


def _safe_next(target: str | None) -> str:
    if target and target.startswith("/") and not target.startswith("//") and "\\" not in target:
        return target
    return "/"


# --- login -------------------------------------------------------------------------------------

@router.get("/login")
async def login_form(request: Request, svc: Svc, next: str | None = None):
    if await svc.open_repo() is not None:
        return RedirectResponse(_safe_next(next), status_code=303)
    nonce = secrets.token_urlsafe(24)
    resp = page(request, "login.html", {"next": _safe_next(next), "nonce": nonce, "error": None})
    resp.set_cookie(LOGIN_CSRF, nonce, httponly=True, samesite="strict", max_age=3600,
                    secure=svc.settings.console_cookie_secure, path="/login")
    return resp


@router.post("/login")
async def login(request: Request, svc: Svc, token: Annotated[str, Form(max_length=4096)] = "",
                nonce: Annotated[str, Form(max_length=100)] = "", next: Annotated[str, Form(max_length=2000)] = "/"):
    _same_origin(request)
    cookie = request.cookies.get(LOGIN_CSRF)
    if not cookie or not secrets.compare_digest(cookie, nonce):
        raise PageError(403, "Not allowed", "the login form expired: reload the page and log in again")
    try:
        s = await svc.login(token)
    except PageError as e:
        if e.status != 401:
            raise
        return page(request, "login.html", {"next": _safe_next(next), "nonce": nonce, "error": e.message}, 401)
    resp = RedirectResponse(_safe_next(next), status_code=303)
    resp.headers.append("set-cookie", session_cookie(s.id, svc.settings.console_session_ttl_s,
                                                     svc.settings.console_cookie_secure))
    resp.delete_cookie(LOGIN_CSRF, path="/login")
    return resp


@router.post("/logout")
async def logout(request: Request, svc: Svc, user: User, csrf: Annotated[str, Form(max_length=100)] = ""):
    _same_origin(request)
    if not user.csrf_ok(csrf):
        raise PageError(403, "Not allowed", "the form expired: reload the page")
    svc.sessions.drop(user.id)
    resp = RedirectResponse("/login" if user.token else "/", status_code=303)
    resp.delete_cookie(COOKIE, path="/")
    return resp


# --- repos and skills ----------------------------------------------------------------------------

@router.get("/")
async def home(request: Request, svc: Svc, user: User):
    return page(request, "home.html", await svc.home(user))


@router.get("/repos/{repo}")
async def repo_page(request: Request, repo: str, svc: Svc, user: User,
                    q: Annotated[str | None, Query(max_length=2000)] = None,
                    after: Annotated[str | None, Query(max_length=128)] = None,
                    mode: SearchMode = "bm25"):
    return page(request, "repo.html", await svc.repo_page(user, repo, q, after, mode))


@router.get("/repos/{repo}/search")
async def search(request: Request, repo: str, svc: Svc, user: User,
                 q: Annotated[str, Query(max_length=2000)] = "", mode: SearchMode = "bm25"):
    """The search results as an HTML fragment (search as you type)."""
    return page(request, "_search_results.html", await svc.search(user, repo, q, mode))


@router.get("/repos/{repo}/ops")
async def timeline(request: Request, repo: str, svc: Svc, user: User,
                   before: Annotated[int | None, Query(ge=1)] = None):
    return page(request, "timeline.html", await svc.timeline(user, repo, before))


@router.get("/repos/{repo}/skills/{name}")
async def skill_page(request: Request, repo: str, name: str, svc: Svc, user: User,
                     version: Annotated[int | None, Query(ge=1)] = None,
                     restored: Annotated[int | None, Query(ge=1)] = None,
                     state_set: Annotated[SkillState | None, Query(alias="state")] = None):
    ctx = await svc.skill_page(user, repo, name, version)
    return page(request, "skill.html", {**ctx, "restored": restored, "state_set": state_set})


@router.get("/repos/{repo}/skills/{name}/diff")
async def diff_page(request: Request, repo: str, name: str, svc: Svc, user: User,
                    a: Annotated[int | None, Query(alias="from", ge=1)] = None,
                    b: Annotated[int | None, Query(alias="to", ge=1)] = None):
    return page(request, "diff.html", await svc.diff_page(user, repo, name, a, b))


@router.post("/repos/{repo}/skills/{name}/restore")
async def restore(request: Request, repo: str, name: str, svc: Svc, user: User,
                  version: Annotated[int, Form(ge=1)], csrf: Annotated[str, Form(max_length=100)] = ""):
    _same_origin(request)
    if not user.csrf_ok(csrf):
        raise PageError(403, "Not allowed", "the form expired or did not come from this console: reload the page")
    new_version = await svc.restore(user, repo, name, version)
    return RedirectResponse(f"/repos/{seg(repo)}/skills/{seg(name)}?restored={new_version}",
                            status_code=303)


# --- review and measured utility ------------------------------------------------------------------

ProposalId = Annotated[int, Path(ge=1, le=LOG_ID_MAX)]


@router.get("/repos/{repo}/review")
async def review_page(request: Request, repo: str, svc: Svc, user: User,
                      status: Literal["pending", "approved", "rejected", "all"] = "pending",
                      before: Annotated[int | None, Query(ge=1, le=LOG_ID_MAX)] = None):
    ctx = await svc.review_page(user, repo, None if status == "all" else status, before)
    return page(request, "review.html", {**ctx, "status": status})


@router.get("/repos/{repo}/review/{pid}")
async def proposal_page(request: Request, repo: str, pid: ProposalId, svc: Svc, user: User,
                        decided: Annotated[str | None, Query(pattern="^(approved|rejected)$")] = None):
    ctx = await svc.proposal_page(user, repo, pid)
    return page(request, "proposal.html", {**ctx, "decided": decided})


@router.post("/repos/{repo}/review/{pid}/decide")
async def decide(request: Request, repo: str, pid: ProposalId, svc: Svc, user: User,
                 decision: Annotated[Literal["approve", "reject"], Form()],
                 note: Annotated[str, Form(max_length=2000)] = "", csrf: Annotated[str, Form(max_length=100)] = ""):
    """A reviewer's approve or reject, made with the logged-in user's own token (never a token of the console's):
    the skill repo decides whether that token may decide this proposal."""
    _same_origin(request)
    if not user.csrf_ok(csrf):
        raise PageError(403, "Not allowed", "the form expired or did not come from this console: reload the page")
    p = await svc.decide(user, repo, pid, decision == "approve", note)
    return RedirectResponse(f"/repos/{seg(repo)}/review/{p.id}?decided={p.status}", status_code=303)


@router.get("/repos/{repo}/utility")
async def utility_page(request: Request, repo: str, svc: Svc, user: User,
                       source: Annotated[list[OutcomeSource] | None, Query()] = None):
    return page(request, "utility.html", await svc.utility_page(user, repo, source))


# --- a skill's life: candidates, retired skills --------------------------------------------------

@router.get("/repos/{repo}/states")
async def states_page(request: Request, repo: str, svc: Svc, user: User,
                      changed: Annotated[str | None, Query(max_length=64)] = None,
                      to: SkillState | None = None):
    ctx = await svc.states_page(user, repo)
    return page(request, "states.html", {**ctx, "changed": changed if to else None, "to": to})


@router.post("/repos/{repo}/skills/{name}/state")
async def set_state(request: Request, repo: str, name: str, svc: Svc, user: User,
                    state: Annotated[SkillState, Form()],
                    note: Annotated[str, Form(max_length=500)] = "", csrf: Annotated[str, Form(max_length=100)] = "",
                    back: Annotated[Literal["skill", "states"], Form()] = "skill"):
    """A reviewer's promote (active), retire or restore (active), made with the logged-in user's own token (never
    a token of the console's): the skill repo decides whether that token may change this repo's skill states."""
    _same_origin(request)
    if not user.csrf_ok(csrf):
        raise PageError(403, "Not allowed", "the form expired or did not come from this console: reload the page")
    if back == "states":
        to = (f"/repos/{seg(repo)}/states", f"back to the states of {repo}")
    else:
        to = (f"/repos/{seg(repo)}/skills/{seg(name)}", f"back to {name}")
    entry = await svc.set_state(user, repo, name, state, note, to)
    if back == "states":
        return RedirectResponse(f"/repos/{seg(repo)}/states?changed={seg(entry.name)}&to={entry.state}",
                                status_code=303)
    return RedirectResponse(f"/repos/{seg(repo)}/skills/{seg(name)}?state={entry.state}", status_code=303)


# --- runs ----------------------------------------------------------------------------------------

@router.get("/runs")
async def runs_page(request: Request, svc: Svc, user: User, page_no: Annotated[int, Query(alias="page", ge=1)] = 1):
    return page(request, "runs.html", await svc.runs_page(user, page_no))


@router.get("/runs/{run_id}")
async def run_page(request: Request, run_id: str, svc: Svc, user: User,
                   method: Annotated[str | None, Query(max_length=64)] = None,
                   seed: Annotated[int | None, Query()] = None,
                   outcome: Annotated[str | None, Query(pattern="^(success|failure)$")] = None,
                   page_no: Annotated[int, Query(alias="page", ge=1)] = 1):
    ctx = await svc.run_page(user, run_id, Filters(method or None, seed, outcome), page_no)
    return page(request, "train_run.html" if ctx["kind"] == "train" else "run.html", ctx)


def _seed(value: str) -> int | None:
    if value == "None":
        return None
    try:
        return int(value)
    except ValueError:
        raise PageError(404, "Task not found", "the seed in the address is not a number") from None


@router.get("/runs/{run_id}/tasks/{method}/{seed}/{position}")
async def task_page(request: Request, run_id: str, method: str, seed: str, position: int, svc: Svc, user: User):
    return page(request, "task.html", await svc.task_page(user, run_id, method, _seed(seed), position))


@router.get("/runs/{run_id}/steps/{step}")
async def step_page(request: Request, run_id: str, step: Annotated[int, Path(ge=0, le=ROW_MAX)], svc: Svc,
                    user: User):
    return page(request, "step.html", await svc.step_page(user, run_id, step))


@router.get("/runs/{run_id}/files/{name}")
async def run_file(run_id: str, name: str, svc: Svc, user: User):
    path = await run_in_threadpool(svc.run_file, user, run_id, name)
    media = "text/plain; charset=utf-8" if name.endswith(".md") else None
    return FileResponse(path, media_type=media)


@router.get("/api/runs/{run_id}/series")
async def series(run_id: str, svc: Svc, user: User):
    return JSONResponse(await svc.series(user, run_id))


@router.get("/api/runs/{run_id}/events")
async def events(request: Request, run_id: str, svc: Svc, user: User,
                 after: Annotated[int, Query(ge=0, description="rows the page already shows")] = 0):
    """Server-sent events of a run in progress: `task` (or `step`) per new row, `status` at the end."""
    info = await run_in_threadpool(svc.run_info, user, run_id)
    last = request.headers.get("last-event-id", "")
    seen = decimal(last, ROW_MAX)   # an id the page could not have sent is ignored, as SSE ignores it
    if seen is None:
        seen = after
    templates = request.app.state.templates
    row_template = templates.get_template("_step_row.html" if info.kind == "train" else "_task_row.html")
    summary_template = templates.get_template("_live_summary.html")

    async def stream():
        nonlocal seen
        yield "retry: 2000\n\n"
        deadline = time.monotonic() + SSE_MAX_S
        quiet_since = time.monotonic()
        while time.monotonic() < deadline and not await request.is_disconnected():
            rows, status, total = await run_in_threadpool(svc.new_rows, info, seen)
            for row in rows[:200]:
                seen += 1
                html = row_template.render(info=info, row=row, fresh=True)
                data = {"n": seen, "html": html, "total": total}
                yield f"id: {seen}\nevent: {'step' if info.kind == 'train' else 'task'}\ndata: {json.dumps(data)}\n\n"
                quiet_since = time.monotonic()
            if rows and info.kind == "stream":
                live = await run_in_threadpool(svc.live_summary, info)
                html = summary_template.render(info=info, live=live)
                yield f"event: summary\ndata: {json.dumps({'html': html})}\n\n"
            if not rows and status != "running":
                yield f"event: status\ndata: {json.dumps({'status': status})}\n\n"
                return
            if time.monotonic() - quiet_since > 15:
                yield ": keep-alive\n\n"
                quiet_since = time.monotonic()
            await asyncio.sleep(SSE_POLL_S)

    return StreamingResponse(stream(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})
