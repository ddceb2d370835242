"""The console's FastAPI app (`skillos serve console`): pages, static files, security headers.

Front end: server-rendered Jinja templates with a little progressive enhancement (one small script:
search as you type, live run updates over server-sent events, interactive charts with uPlot). Every
page works without JavaScript; nothing is loaded from elsewhere (uPlot is vendored under static/).
Why not a single-page app: the pages are lists and documents that the server already has, a build
step would be a second toolchain to keep, and server rendering keeps untrusted skill text in one
escaping path (Jinja autoescape + markdown-it with HTML off) instead of scattered DOM code.
"""

from __future__ import annotations

import time
from contextlib import asynccontextmanager
from pathlib import Path
from urllib.parse import quote

import httpx
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, RedirectResponse
from fastapi.staticfiles import StaticFiles
from fastapi.templating import Jinja2Templates
from starlette.exceptions import HTTPException as StarletteHTTPException

from services.console import render
from services.console.pages import router
from services.console.serving import ConsoleService, LoginRequired, PageError
from services.console.sessions import COOKIE, session_cookie
from services.console.settings import ConsoleSettings
from skillos.logging import get_logger
from skillos.protocol.skillrepo import SEARCH_MODES
from skillos.service import create_app

HERE = Path(__file__).resolve().parent
CSP = ("default-src 'self'; script-src 'self'; style-src 'self'; img-src 'self' data:; connect-src 'self'; "
       "font-src 'self'; object-src 'none'; base-uri 'none'; frame-ancestors 'none'; form-action 'self'")
_SECURITY_HEADERS = [(b"content-security-policy", CSP.encode()), (b"x-content-type-options", b"nosniff"),
                     (b"referrer-policy", b"same-origin"), (b"x-frame-options", b"DENY")]


class _PageHeaders:
    """Security headers on every answer, the server's own time (Server-Timing, read by the benchmark)
    and the cookie of a session opened during the request (open skill repo: no login form)."""

    def __init__(self, app, secure_cookie: bool, ttl_s: int):
        self.app, self.secure, self.ttl = app, secure_cookie, ttl_s

    async def __call__(self, scope, receive, send):
        if scope["type"] != "http":
            return await self.app(scope, receive, send)
        start = time.perf_counter()

        async def send_with_headers(message):
            if message["type"] == "http.response.start":
                headers = list(message.get("headers", []))
                headers += _SECURITY_HEADERS
                headers.append((b"server-timing", f"app;dur={(time.perf_counter() - start) * 1000:.2f}".encode()))
                new = scope.get("state", {}).get("new_session")
                if new is not None:
                    headers.append((b"set-cookie", session_cookie(new.id, self.ttl, self.secure).encode()))
                message = {**message, "headers": headers}
            await send(message)

        await self.app(scope, receive, send_with_headers)


def templates() -> Jinja2Templates:
    t = Jinja2Templates(directory=str(HERE / "templates"))
    env = t.env
    env.autoescape = True
    env.filters.update(seg=render.seg, ago=render.ago, exact=render.exact, pct=render.pct, num=render.num,
                       markdown=render.markdown)
    env.globals.update(field_text=render.field_text, search_modes=SEARCH_MODES)
    return t


def _wants_json(request: Request) -> bool:
    return request.url.path.startswith("/api/")


def build_app(settings: ConsoleSettings | None = None) -> FastAPI:
    settings = settings or ConsoleSettings()
    svc = ConsoleService(settings)
    tpl = templates()

    @asynccontextmanager
    async def lifespan(_app: FastAPI):
        yield
        await svc.aclose()

    async def skillrepo() -> None:
        async with httpx.AsyncClient(timeout=3) as c:
            (await c.get(settings.skillrepo_url.rstrip("/") + "/healthz")).raise_for_status()

    # a missing runs directory is not a readiness failure: the console then lists no runs (and says so)
    app = create_app("console", title="SkillOS console", readiness=[skillrepo], lifespan=lifespan,
                     description="Web pages over the skill repo's API and the run reports.")
    app.state.console = svc
    app.state.templates = tpl
    app.add_middleware(_PageHeaders, secure_cookie=settings.console_cookie_secure,
                       ttl_s=settings.console_session_ttl_s)
    app.mount("/static", StaticFiles(directory=str(HERE / "static")), name="static")

    def error_page(request: Request, status: int, title: str, message: str, back: tuple[str, str] | None = None):
        if _wants_json(request):
            code = {400: "bad_request", 401: "unauthorized", 403: "forbidden", 404: "not_found",
                    409: "conflict"}.get(status, "error")
            return JSONResponse({"error": {"code": code, "message": message, "details": None}}, status_code=status)
        session = getattr(request.state, "session", None)
        return tpl.TemplateResponse(request, "error.html", {"status": status, "title": title, "message": message,
                                                            "session": session, "back": back}, status_code=status)

    @app.exception_handler(PageError)
    async def _page_error(request: Request, exc: PageError):
        return error_page(request, exc.status, exc.title, exc.message, exc.back)

    @app.exception_handler(LoginRequired)
    async def _login(request: Request, _exc: LoginRequired):
        svc.sessions.drop(request.cookies.get(COOKIE))
        if _wants_json(request):
            return JSONResponse({"error": {"code": "unauthorized", "message": "log in again", "details": None}},
                                status_code=401)
        target = request.url.path + (f"?{request.url.query}" if request.url.query else "")
        return RedirectResponse(f"/login?next={quote(target, safe='')}", status_code=303)

    @app.exception_handler(RequestValidationError)
    async def _invalid(request: Request, exc: RequestValidationError):
        problems = "; ".join(f"{'.'.join(str(p) for p in e.get('loc', ())[1:]) or 'request'}: {e.get('msg')}"
                             for e in exc.errors()[:5])
        return error_page(request, 400 if not _wants_json(request) else 422, "Bad request",
                          f"The address is not valid: {problems}")

    log = get_logger("console")

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, exc: Exception):
        log.exception("unhandled_error", path=request.url.path)
        return error_page(request, 500, "Something went wrong", f"internal error: {type(exc).__name__}")

    @app.exception_handler(StarletteHTTPException)
    async def _http(request: Request, exc: StarletteHTTPException):
        title = {404: "Not found", 405: "Method not allowed"}.get(exc.status_code, "Error")
        return error_page(request, exc.status_code, title, str(exc.detail))

    app.include_router(router)
    return app
