"""The console's logic: what each page shows, gathered from the skill repo's API and the run folders.

Routes (`pages.py`) are thin: they read the request, call a method here and render its context with a
template. Every call to the skill repo carries the logged-in user's token, so the repo decides what the
user may see or change; the console keeps no data of its own besides sessions and the run indexes.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any, get_args

from starlette.concurrency import run_in_threadpool

from services.console.render import DiffLine, diff_lines, seg, skill_view
from services.console.runs import Filters, RunInfo, RunNotFound, RunStore, TaskRow
from services.console.sessions import Session, SessionStore
from services.console.settings import ConsoleSettings
from skillos.auth import prefix_reaches
from skillos.clients.skillrepo import AsyncSkillRepoClient, SkillRepoError
from skillos.protocol.runs import (
    STREAM_PLOTS,
    SUMMARY_MD,
    TRAIN_REPORT,
    RolloutRow,
    RunFolder,
    parse_line,
    to_dict,
)
from skillos.protocol.skillrepo import (
    REPO_NAME_PATTERN,
    OpLog,
    OpOrigin,
    OutcomeSource,
    Proposal,
    ProposedChange,
    SkillState,
    SkillStateEntry,
    SkillUtility,
    SkillVersion,
    TokenInfo,
    UtilityReport,
)
from skillos.worked_examples import render

TOKEN_RECHECK_S = 60.0     # a session's token is confirmed with the skill repo at most this often
OPEN_CHECK_S = 10.0        # how long "the skill repo is open" is believed
MAX_QUERY_CHARS = 500
PENDING_SHOWN = 50         # the repo page counts pending proposals up to this ("50+" beyond)
READ_PROPOSALS = ("Proposals hold unreviewed text from traffic and who sent it: reading them needs a token that "
                  "may write this repo (scope rw).")


class PageError(Exception):
    """An error page: status, a short title and what to do (``back``: a (path, text) link to go on from)."""

    def __init__(self, status: int, title: str, message: str, back: tuple[str, str] | None = None):
        super().__init__(message)
        self.status, self.title, self.message, self.back = status, title, message, back


class LoginRequired(Exception):
    """The session is gone or its token no longer works: back to the login form."""


def repo_error(e: SkillRepoError, what: str) -> Exception:
    if e.status == 401:
        return LoginRequired()
    if e.status == 0 or e.status >= 500:
        return PageError(502, "Skill repo unavailable", f"The skill repo could not answer ({e.message}). "
                                                        "Try again in a moment.")
    if e.status == 403:
        return PageError(403, "Not allowed", e.message)
    if e.status == 404:
        return PageError(404, f"{what} not found", e.message)
    return PageError(400, "Bad request", e.message)


def _valid_repo(repo: str) -> None:
    import re

    if not re.match(REPO_NAME_PATTERN, repo or ""):
        raise PageError(404, "Repo not found", f"{repo[:130]!r} is not a repo name")


def _valid_skill(name: str) -> None:
    if not name or len(name) > 64:
        raise PageError(404, "Skill not found", "that is not a skill name")


@dataclass
class Page:
    items: list[Any]
    page: int
    pages: int
    total: int


def paginate(items: list[Any], page: int, size: int) -> Page:
    pages = max(1, -(-len(items) // size))
    page = min(max(1, page), pages)
    return Page(items[(page - 1) * size: page * size], page, pages, len(items))


class ConsoleService:
    def __init__(self, settings: ConsoleSettings, repo: AsyncSkillRepoClient | None = None):
        self.settings = settings
        # no token of its own: each call carries the user's (with_token)
        self.repo = repo or AsyncSkillRepoClient(settings.skillrepo_url, token=None, timeout=20.0)
        self.runs = RunStore(settings.console_runs_dir)
        self.sessions = SessionStore(settings.console_session_ttl_s)
        self.page_size = max(1, settings.console_page_size)
        self._open: tuple[float, TokenInfo | None] = (0.0, None)

    async def aclose(self) -> None:
        await self.repo.aclose()

    def client(self, session: Session) -> AsyncSkillRepoClient:
        return self.repo.with_token(session.token)

    # --- sessions --------------------------------------------------------------------------------

    async def open_repo(self) -> TokenInfo | None:
        """The skill repo's whoami without a token: an answer means it is open (no login needed)."""
        checked, info = self._open
        if time.monotonic() - checked < OPEN_CHECK_S:
            return info
        try:
            info = await self.repo.whoami()
        except SkillRepoError as e:
            if e.status == 0 or e.status >= 500:
                raise PageError(502, "Skill repo unavailable", f"The skill repo could not answer ({e.message})."
                                ) from None
            info = None
        self._open = (time.monotonic(), info)
        return info

    async def login(self, token: str) -> Session:
        token = (token or "").strip()
        if not token or len(token) > 4096:
            raise PageError(401, "Log in", "Enter a token.")
        try:
            me = await self.repo.with_token(token).whoami()
        except SkillRepoError as e:
            if e.status == 401:
                raise PageError(401, "Log in", "The skill repo does not know this token.") from None
            raise repo_error(e, "Token") from None
        return self.sessions.create(token, me.mode, me.scope, me.prefix, me.label)

    async def confirm(self, session: Session) -> None:
        """Raise LoginRequired when the session's token no longer works (checked once a minute)."""
        if session.token is None or time.monotonic() - session.checked < TOKEN_RECHECK_S:
            return
        try:
            me = await self.client(session).whoami()
        except SkillRepoError as e:
            raise repo_error(e, "Token") from None
        session.scope, session.prefix, session.label = me.scope, me.prefix, me.label
        session.checked = time.monotonic()

    def visible(self, session: Session, info: RunInfo) -> bool:
        """A token limited to a repo prefix sees the runs whose folder or run id the prefix reaches as a repo
        name (`skillos.auth.prefix_reaches`)."""
        p = session.prefix
        return prefix_reaches(p, info.id) or bool(info.run_id and prefix_reaches(p, info.run_id))

    # --- repos -----------------------------------------------------------------------------------

    async def home(self, session: Session) -> dict[str, Any]:
        try:
            repos = await self.client(session).list_repos()
        except SkillRepoError as e:
            raise repo_error(e, "Repos") from None
        forks: dict[str, int] = {}
        for r in repos:
            if r.forked_from:
                forks[r.forked_from] = forks.get(r.forked_from, 0) + 1
        runs = [i for i in await run_in_threadpool(self.runs.list) if self.visible(session, i)]
        shown = runs[:10]
        progress = await run_in_threadpool(lambda: {i.id: self._progress(i) for i in shown})
        return {"repos": repos, "forks": forks, "runs": shown, "runs_total": len(runs), "progress": progress}

    def _progress(self, info: RunInfo) -> int | None:
        """Tasks or steps done; a finished stream run's count comes from its summary (no index needed)."""
        if info.kind == "stream" and info.status == "done" and info.summary:
            try:
                return sum(int(s.get("tasks", 0)) for m in info.summary["methods"].values() for s in m["seeds"])
            except (KeyError, TypeError, AttributeError, ValueError):
                pass
        return self.runs.progress(info)

    async def repo_page(self, session: Session, repo: str, q: str | None, after: str | None,
                        mode: str = "bm25") -> dict[str, Any]:
        _valid_repo(repo)
        c = self.client(session)
        q = (q or "").strip()
        if len(q) > MAX_QUERY_CHARS:
            raise PageError(400, "Query too long", f"Search with at most {MAX_QUERY_CHARS} characters.")
        try:
            info, skills, log, repos, pending, states = await asyncio.gather(
                c.get_repo(repo), c.list_skills_page(repo, limit=self.page_size, after=after or None),
                c.op_log(repo, limit=20), c.list_repos(), self.pending_count(session, repo), c.states(repo))
            hits = await c.search(repo, q, k=20, mode=mode) if q else None
        except SkillRepoError as e:
            raise repo_error(e, "Repo") from None
        usage = await run_in_threadpool(self.runs.usage, repo)
        return {"repo": info, "repo_name": repo, "skills": skills, "usage": usage, "q": q, "hits": hits, "after": after,
                "mode": mode,
                "forks": sorted(r.name for r in repos if r.forked_from == repo), "pending": pending,
                "pending_shown": PENDING_SHOWN, "states": {e.name: e for e in states},
                "state_counts": state_counts(states),
                "log": log, "origins": await self.origin_links(log)}

    async def search(self, session: Session, repo: str, q: str, mode: str = "bm25") -> dict[str, Any]:
        """The search results fragment (as-you-type)."""
        _valid_repo(repo)
        q = (q or "").strip()
        if len(q) > MAX_QUERY_CHARS:
            return {"repo_name": repo, "q": q[:MAX_QUERY_CHARS], "hits": [], "error": "query too long"}
        try:
            hits = await self.client(session).search(repo, q, k=20, mode=mode) if q else None
        except SkillRepoError as e:
            raise repo_error(e, "Repo") from None
        return {"repo_name": repo, "q": q, "hits": hits, "error": None, "mode": mode}

    async def timeline(self, session: Session, repo: str, before: int | None) -> dict[str, Any]:
        _valid_repo(repo)
        try:
            log = await self.client(session).op_log(repo, before=before, limit=self.page_size)
        except SkillRepoError as e:
            raise repo_error(e, "Repo") from None
        return {"repo": repo, "log": log, "before": before, "origins": await self.origin_links(log)}

    async def origin_links(self, log: OpLog) -> dict[int, str]:
        """Op log entry id -> the console page of the task whose curation wrote it (when its run is here)."""
        if not any(e.origin and e.origin.run for e in log.entries):
            return {}
        by_run = {i.run_id: i.id for i in await run_in_threadpool(self.runs.list) if i.run_id}
        out = {}
        for e in log.entries:
            link = _origin_link(e.origin, by_run)
            if link:
                out[e.id] = link
        return out

    # --- review: op batches that wait for a person ------------------------------------------------

    async def review_page(self, session: Session, repo: str, status: str | None, before: int | None) -> dict[str, Any]:
        """A repo's proposals (pending by default), newest first, with the policy that made them wait."""
        _valid_repo(repo)
        if not session.can_write:
            raise PageError(403, "Not allowed", READ_PROPOSALS, back=(f"/repos/{seg(repo)}", f"back to {repo}"))
        c = self.client(session)
        try:
            proposals, policy = await asyncio.gather(
                c.proposals(repo, status=status, before=before, limit=self.page_size), c.get_policy(repo))
        except SkillRepoError as e:
            raise repo_error(e, "Repo") from None
        next_before = proposals[-1].id if len(proposals) == self.page_size else None
        return {"repo": repo, "proposals": proposals, "policy": policy, "status": status, "before": before,
                "next_before": next_before, "touched": {p.id: touched(p) for p in proposals}}

    async def proposal_page(self, session: Session, repo: str, pid: int) -> dict[str, Any]:
        """One proposal: who sent it, why it waits, what it claims to come from, each op's diff against the
        skill as served now, and (pending) the reviewer's form."""
        _valid_repo(repo)
        if not session.can_write:
            raise PageError(403, "Not allowed", READ_PROPOSALS, back=(f"/repos/{seg(repo)}", f"back to {repo}"))
        c = self.client(session)
        try:
            p, policy = await asyncio.gather(c.proposal(repo, pid), c.get_policy(repo))
        except SkillRepoError as e:
            raise repo_error(e, "Proposal") from None
        changes = [ChangeView(ch, *diff_lines(ch.current or "", ch.proposed or "")) for ch in p.changes]
        link = None
        if p.origin and p.origin.run:
            by_run = {i.run_id: i.id for i in await run_in_threadpool(self.runs.list) if i.run_id}
            link = _origin_link(p.origin, by_run)
        example = render(p.example) if p.example is not None else None
        own = session.label not in (None, "open") and p.writer == session.label
        return {"repo": repo, "p": p, "policy": policy, "changes": changes, "origin_link": link,
                "example": example, "may_review": session.may_review(policy.reviewers), "own": own}

    async def decide(self, session: Session, repo: str, pid: int, approve: bool, note: str | None) -> Proposal:
        """Approve (the repo applies the batch now, as this user's write) or reject a pending proposal, with the
        user's own token: the skill repo checks that it is a reviewer's (an operator, or a label in the policy's
        `reviewers`) and not the proposal's writer."""
        _valid_repo(repo)
        back = (f"/repos/{seg(repo)}/review/{pid}", f"back to proposal {pid}")
        if not session.can_write:
            raise PageError(403, "Read-only", "This token may only read: deciding a proposal needs a reviewer's "
                                              "token (scope rw).", back=back)
        note = (note or "").strip() or None
        try:
            return await self.client(session).decide(repo, pid, approve, note)
        except SkillRepoError as e:
            if e.status == 409:
                raise PageError(409, "Not decided", e.message, back=back) from None
            err = repo_error(e, "Proposal")
            if isinstance(err, PageError):
                err.back = back
            raise err from None

    async def pending_count(self, session: Session, repo: str) -> int | None:
        """Pending proposals of the repo, up to PENDING_SHOWN + 1 (None: this token may not read them)."""
        if not session.can_write:
            return None
        try:
            return len(await self.client(session).proposals(repo, "pending", limit=PENDING_SHOWN + 1))
        except SkillRepoError as e:
            if e.status == 401:
                raise LoginRequired() from None
            return None

    # --- measured utility ------------------------------------------------------------------------

    async def utility_page(self, session: Session, repo: str, sources: list[OutcomeSource] | None) -> dict[str, Any]:
        """Per skill: tasks served and withheld, the success rate of each, the difference with its 95 % interval;
        the skills whose interval lies wholly below 0 first."""
        _valid_repo(repo)
        c = self.client(session)
        try:
            report, states = await asyncio.gather(c.utility(repo, list(sources) if sources else None),
                                                  c.states(repo))
        except SkillRepoError as e:
            raise repo_error(e, "Repo") from None
        rows = utility_rows(report)
        counts = {k: sum(1 for r in rows if r.verdict == k) for k in VERDICTS}
        return {"repo": repo, "report": report, "rows": rows, "counts": counts,
                "sources": list(sources or []), "all_sources": list(get_args(OutcomeSource)),
                "states": {e.name: e for e in states}}

    # --- a skill's life: candidates, retired skills -------------------------------------------

    async def states_page(self, session: Session, repo: str) -> dict[str, Any]:
        """The repo's candidates and retired skills (and the active ones written from traffic) with who set
        each state, when and why, beside the measured utility the policy's rules count; a reviewer's buttons."""
        _valid_repo(repo)
        c = self.client(session)
        try:
            states, policy = await asyncio.gather(c.states(repo), c.get_policy(repo))
            report = await c.utility(repo, list(policy.utility_sources))
        except SkillRepoError as e:
            raise repo_error(e, "Repo") from None
        by_state: dict[str, list[SkillStateEntry]] = {"candidate": [], "retired": [], "active": []}
        for e in sorted(states, key=lambda e: e.updated_at.timestamp() if e.updated_at else 0.0, reverse=True):
            by_state.setdefault(e.state, []).append(e)   # newest change first
        by_state["active"] = [e for e in by_state["active"] if e.traffic]
        utility = {r.u.name: r for r in utility_rows(report)}
        return {"repo": repo, "policy": policy, "by_state": by_state, "utility": utility,
                "may_review": session.may_review(policy.reviewers)}

    async def set_state(self, session: Session, repo: str, name: str, state: SkillState, note: str | None,
                        back: tuple[str, str]) -> SkillStateEntry:
        """Promote (active), retire or restore (active) a skill with the user's own token: the skill repo checks
        that it is a reviewer's (an operator, or a label in the policy's `reviewers`)."""
        _valid_repo(repo)
        _valid_skill(name)
        if not session.can_write:
            raise PageError(403, "Read-only", "This token may only read: promoting, retiring or restoring a skill "
                                              "needs a reviewer's token (scope rw).", back=back)
        note = (note or "").strip() or None
        try:
            return await self.client(session).set_state(repo, name, state, note)
        except SkillRepoError as e:
            err = repo_error(e, "Skill")
            if isinstance(err, PageError):
                err.back = back
            raise err from None

    # --- skills ----------------------------------------------------------------------------------

    async def _versions(self, session: Session, repo: str, name: str):
        """(client, the skill's versions, newest first) after checking both names."""
        _valid_repo(repo)
        _valid_skill(name)
        c = self.client(session)
        try:
            return c, await c.skill_versions(repo, name)
        except SkillRepoError as e:
            raise repo_error(e, "Skill") from None

    async def skill_page(self, session: Session, repo: str, name: str, version: int | None) -> dict[str, Any]:
        c, versions = await self._versions(session, repo, name)
        head = versions[0]
        wanted = version if version is not None else next((v.version for v in versions if not v.deleted), None)
        if version is not None and all(v.version != version for v in versions):
            raise PageError(404, "Version not found", f"skill {name!r} has no version {version}")
        shown: SkillVersion | None = None
        if wanted is not None:
            try:
                shown = await c.skill_version(repo, name, wanted)
            except SkillRepoError as e:
                raise repo_error(e, "Version") from None
        view = skill_view(shown.content) if shown is not None and shown.content is not None else None
        # each worked example as the executor is shown it
        examples = [(e, render(e)) for e in (shown.examples or [])] if shown is not None else []
        used_in = await run_in_threadpool(self.runs.tasks_with_skill, repo, name, 20)
        life, may_review = None, False
        if not head.deleted:
            try:
                states, policy = await asyncio.gather(
                    c.states(repo), c.get_policy(repo) if session.can_write else asyncio.sleep(0))
            except SkillRepoError as e:
                raise repo_error(e, "Skill") from None
            life = next((e for e in states if e.name == name), None) or SkillStateEntry(
                name=name, state="active", traffic=False)
            may_review = policy is not None and session.may_review(policy.reviewers)
        return {"repo": repo, "name": name, "versions": versions, "head": head, "shown": shown, "view": view,
                "examples": examples, "deleted": head.deleted, "used_in": used_in, "life": life,
                "may_review": may_review}

    async def diff_page(self, session: Session, repo: str, name: str, a: int | None, b: int | None) -> dict[str, Any]:
        c, versions = await self._versions(session, repo, name)
        numbers = {v.version for v in versions}
        b = b if b is not None else versions[0].version
        a = a if a is not None else b - 1
        for v in (a, b):
            if v not in numbers:
                raise PageError(404, "Version not found", f"skill {name!r} has no version {v}; "
                                                          f"its versions are {min(numbers)} to {max(numbers)}")
        try:
            va, vb = await asyncio.gather(c.skill_version(repo, name, a), c.skill_version(repo, name, b))
        except SkillRepoError as e:
            raise repo_error(e, "Version") from None
        rows, added, removed = diff_lines(va.content or "", vb.content or "")
        return {"repo": repo, "name": name, "a": va, "b": vb, "rows": rows, "added": added, "removed": removed,
                "versions": versions}

    async def restore(self, session: Session, repo: str, name: str, version: int) -> int:
        _valid_repo(repo)
        _valid_skill(name)
        if not session.can_write:
            raise PageError(403, "Read-only", "This token may only read: log in with a token that may write "
                                              "(scope rw) to restore versions.")
        try:
            skill = await self.client(session).restore_skill(repo, name, version, origin={"source": "console"})
        except SkillRepoError as e:
            raise repo_error(e, "Version") from None
        return skill.version

    # --- runs ------------------------------------------------------------------------------------

    def run_info(self, session: Session, run_id: str) -> RunInfo:
        return self._run(session, run_id)

    def _run(self, session: Session, run_id: str) -> RunInfo:
        try:
            info = self.runs.get(run_id)
        except RunNotFound:
            raise PageError(404, "Run not found", f"no run folder {run_id[:200]!r} in the runs directory") from None
        if not self.visible(session, info):
            raise PageError(403, "Not allowed", "this token does not reach this run")
        return info

    async def runs_page(self, session: Session, page: int) -> dict[str, Any]:
        def gather() -> dict[str, Any]:
            runs = [i for i in self.runs.list() if self.visible(session, i)]
            p = paginate(runs, page, self.page_size)
            return {"runs": p, "progress": {i.id: self._progress(i) for i in p.items},
                    "runs_dir": str(self.settings.console_runs_dir),
                    "runs_dir_exists": self.settings.console_runs_dir.is_dir()}
        return await run_in_threadpool(gather)

    async def run_page(self, session: Session, run_id: str, filters: Filters, page: int) -> dict[str, Any]:
        def gather() -> dict[str, Any]:
            info = self._run(session, run_id)
            if info.kind == "train":
                steps = self.runs.steps(info)
                rows = list(reversed(steps.rows))
                return {"info": info, "kind": "train", "steps": paginate(rows, page, self.page_size),
                        "done": len(steps.rows), "version": steps.version,
                        "files": self._files(info)}
            idx = self.runs.tasks(info)
            rows = [r for r in reversed(idx.rows) if filters.match(r)]
            methods = sorted({r.method for r in idx.rows})
            seeds = sorted({r.seed for r in idx.rows if r.seed is not None})
            return {"info": info, "kind": "stream", "tasks": paginate(rows, page, self.page_size),
                    "done": len(idx.rows), "version": idx.version, "filters": filters, "methods": methods,
                    "seeds": seeds, "live": idx.live_summary(), "files": self._files(info)}
        return await run_in_threadpool(gather)

    @staticmethod
    def _files(info: RunInfo) -> list[str]:
        names = [*STREAM_PLOTS, TRAIN_REPORT, SUMMARY_MD]
        return [n for n in names if (info.path / n).is_file()]

    def run_file(self, session: Session, run_id: str, name: str):
        info = self._run(session, run_id)
        if name not in self._files(info):
            raise PageError(404, "File not found", "only the report's plots and summary are served")
        return info.path / name

    async def task_page(self, session: Session, run_id: str, method: str, seed: int | None,
                        position: int) -> dict[str, Any]:
        def gather() -> dict[str, Any]:
            info = self._run(session, run_id)
            if info.kind != "stream":
                raise PageError(404, "Task not found", "a training run has steps, not tasks")
            idx = self.runs.tasks(info)
            row = idx.by_key.get((method, seed, position))
            if row is None:
                raise PageError(404, "Task not found",
                                f"run {run_id} has no task {position} of stream {method}/seed {seed}")
            rec = idx.record(row)
            return {"info": info, "row": row, "rec": rec, "used": set(row.used),
                    "prev": idx.by_key.get((method, seed, position - 1)),
                    "next": idx.by_key.get((method, seed, position + 1))}
        return await run_in_threadpool(gather)

    async def step_page(self, session: Session, run_id: str, step: int) -> dict[str, Any]:
        def gather() -> dict[str, Any]:
            info = self._run(session, run_id)
            if info.kind != "train":
                raise PageError(404, "Step not found", "a stream run has tasks, not steps")
            path = RunFolder(info.path).rollouts(step)
            metrics = next((r for r in self.runs.steps(info).rows if r.get("step") == step), None)
            if not path.is_file() and metrics is None:
                raise PageError(404, "Step not found", f"run {run_id} has no step {step}")
            rollouts = []
            if path.is_file():
                for line in path.read_text(encoding="utf-8", errors="replace").splitlines()[:2000]:
                    rec = parse_line(line, RolloutRow)
                    if rec is not None:
                        rollouts.append(to_dict(rec))
            return {"info": info, "step": step, "metrics": metrics or {}, "rollouts": rollouts}
        return await run_in_threadpool(gather)

    async def series(self, session: Session, run_id: str) -> dict[str, Any]:
        def gather() -> dict[str, Any]:
            info = self._run(session, run_id)
            if info.kind == "train":
                return self.runs.steps(info).series()
            return self.runs.tasks(info).series()
        return await run_in_threadpool(gather)

    def live_summary(self, info: RunInfo) -> list[dict[str, Any]]:
        return self.runs.tasks(self.runs.get(info.id)).live_summary()

    def new_rows(self, info: RunInfo, seen: int) -> tuple[list[Any], str, int]:
        """(rows after the first ``seen``, the run's status now, rows in all) for the live stream."""
        fresh = self.runs.get(info.id)
        if info.kind == "train":
            rows: list[Any] = self.runs.steps(fresh).rows
        else:
            rows = self.runs.tasks(fresh).rows
        return rows[seen:], fresh.status, len(rows)


def _origin_link(o: OpOrigin | None, by_run: dict[str, str]) -> str | None:
    """The console page of the run task an origin names (None: no such run here)."""
    if o is None or o.run not in by_run:
        return None
    if o.seed is not None and o.position is not None:
        return f"/runs/{by_run[o.run]}/tasks/skillos/{o.seed}/{o.position}"
    return f"/runs/{by_run[o.run]}"


def state_counts(states: list[SkillStateEntry]) -> dict[str, int]:
    """Skills per state among those with one (candidate, retired; active: written from traffic)."""
    out = {"candidate": 0, "retired": 0, "active": 0}
    for e in states:
        out[e.state] = out.get(e.state, 0) + 1
    return out


def touched(p: Proposal) -> list[tuple[str, str]]:
    """(op, skill) of each op the repo found valid when the batch was proposed (refused ones wait for nothing)."""
    out = []
    for v in p.verdicts:
        if v.status != "refused":
            out.append((v.name, v.skill_name or "?"))
    return out


@dataclass
class ChangeView:
    """One op of a proposal and its line diff against the skill as served now."""
    change: ProposedChange
    rows: list[DiffLine]
    added: int
    removed: int


VERDICTS = ("worse", "unclear", "better", "unmeasured")
BAR_W = 160   # the interval bar's width in pixels: -1 .. +1 of the difference


@dataclass
class UtilityRow:
    u: SkillUtility
    verdict: str                # worse | unclear | better | unmeasured (an arm has no task yet)
    served_rate: float | None
    withheld_rate: float | None
    bar: tuple[float, float, float] | None   # x of the interval's low end, high end, the difference


def utility_rows(report: UtilityReport) -> list[UtilityRow]:
    """The report's skills with a verdict, sorted: interval wholly below 0 (worse when shown) first, by its upper
    end; then unclear and better by difference; then the skills without an interval, most served first."""
    def x(v: float) -> float:
        return round((max(-1.0, min(1.0, v)) + 1) / 2 * BAR_W, 1)

    rows = []
    for u in report.skills:
        lo_hi = u.interval
        if lo_hi is None:
            verdict = "unmeasured"
        elif lo_hi[1] < 0:
            verdict = "worse"
        elif lo_hi[0] > 0:
            verdict = "better"
        else:
            verdict = "unclear"
        bar = (x(lo_hi[0]), x(lo_hi[1]), x(u.difference or 0.0)) if lo_hi is not None else None
        rows.append(UtilityRow(u, verdict, u.served_success / u.served if u.served else None,
                               u.withheld_success / u.withheld if u.withheld else None, bar))

    def key(r: UtilityRow) -> tuple[int, float, str]:
        if r.verdict == "worse":
            return (0, r.u.interval[1], r.u.name)
        if r.verdict == "unmeasured":
            return (2, -float(r.u.served + r.u.withheld), r.u.name)
        return (1, r.u.difference if r.u.difference is not None else 0.0, r.u.name)
    return sorted(rows, key=key)


def task_key(row: TaskRow) -> str:
    return f"{row.method}/{row.seed}/{row.position}"
