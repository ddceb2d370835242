"""Measured utility's logic: recording a task's outcome per skill, and the per-skill report."""

from __future__ import annotations

from collections.abc import Callable
from datetime import UTC, datetime
from typing import TYPE_CHECKING

from prometheus_client import Counter

from services.skillrepo.store import RepoNotFound
from services.skillrepo.utility import store as sql
from skillos.errors import APIError
from skillos.logging import get_logger
from skillos.protocol.skillrepo import (
    OutcomeRecorded,
    OutcomeReport,
    SkillStateEntry,
    SkillUtility,
    UtilityReport,
)
from skillos.skills import normalize_name
from skillos.utility import Z95, difference_interval


def now() -> datetime:
    return datetime.now(UTC)

if TYPE_CHECKING:
    from services.skillrepo.store import Store

log = get_logger("skillrepo")
ALL_SOURCES = ["caller", "environment", "judge"]
# per arm, not per skill: a label per skill would be a series per skill of every repo (the API has those)
OUTCOMES = Counter("skillos_skillrepo_skill_outcomes_total",
                   "Skill-task outcomes recorded for measured utility", ["arm", "success", "source"])


def utility_of(name: str, arms: dict[str, tuple[int, int]], z: float = Z95) -> SkillUtility:
    (n_s, w_s), (n_w, w_w) = arms.get("served", (0, 0)), arms.get("withheld", (0, 0))
    return SkillUtility(name=name, served=n_s, served_success=w_s, withheld=n_w, withheld_success=w_w,
                        difference=(w_s / n_s - w_w / n_w) if n_s and n_w else None,
                        interval=difference_interval(w_s, n_s, w_w, n_w, z))


class Utility:
    def __init__(self, store: Store, judge: Callable[[str, int, list[str]], list[SkillStateEntry]] | None = None):
        """``judge(repo, repo id, skills)``: the repo policy's rule on the skills an outcome counted for."""
        self.store, self.judge = store, judge

    def record(self, repo: str, report: OutcomeReport) -> OutcomeRecorded:
        names = {n: normalize_name(n, strict=False) for n in [*report.served, *report.withheld]}
        if not all(names.values()):
            bad = [n for n, v in names.items() if not v][:5]
            raise APIError(400, "invalid_report", f"not skill names: {bad}: a skill's name has letters or digits",
                           details={"param": "served/withheld"})
        report.served = [names[n] for n in report.served]
        report.withheld = [names[n] for n in report.withheld]
        both = set(report.served) & set(report.withheld)
        if both:
            raise APIError(400, "invalid_report", f"skills both served and withheld: {sorted(both)[:5]}: a skill "
                                                  "is in one arm of a task", details={"param": "withheld"})
        try:
            repo_id = self.store.get_repo(repo, count=False).id
        except RepoNotFound:
            raise APIError(404, "repo_not_found", f"repo {repo!r} does not exist") from None
        with self.store.engine.begin() as conn:   # no repo lock: an outcome is no write of the repo's skills
            n = sql.record(conn, repo_id, report, now())
        changed: list[SkillStateEntry] = []
        if n:
            for arm, names in (("served", report.served), ("withheld", report.withheld)):
                if names:
                    OUTCOMES.labels(arm, str(report.success).lower(), report.source).inc(len(set(names)))
        # on a retry too: the rule is idempotent, and a retry is how a decision lost to an error is taken
        if self.judge is not None and report.served:
            try:
                changed = self.judge(repo, repo_id, report.served)
            except Exception as e:  # noqa: BLE001 - the outcome is recorded; the next report decides again
                log.warning("utility_rule_failed", repo=repo, error=f"{type(e).__name__}: {e}"[:300])
        return OutcomeRecorded(recorded=n, changed=changed)

    def report(self, repo: str, sources: list[str] | None, skill: str | None = None) -> UtilityReport:
        try:
            repo_id = self.store.get_repo(repo, count=False).id
        except RepoNotFound:
            raise APIError(404, "repo_not_found", f"repo {repo!r} does not exist") from None
        chosen = sorted(set(sources or ALL_SOURCES), key=ALL_SOURCES.index)
        with self.store.engine.connect() as conn:
            counted = sql.counts(conn, repo_id, chosen, skill)
        # the most-served first: the skills whose numbers say most
        skills = sorted((utility_of(n, a) for n, a in counted.items()), key=lambda u: (-u.served - u.withheld, u.name))
        return UtilityReport(repo=repo, sources=chosen, skills=skills)
