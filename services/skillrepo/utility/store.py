"""SQL of measured utility: one row per (repo, trajectory, skill) with the arm it was in and the outcome."""

from __future__ import annotations

from datetime import datetime

from sqlalchemy import case, func, insert, select
from sqlalchemy.exc import IntegrityError

from services.skillrepo.tables import skill_outcomes
from skillos.protocol.skillrepo import OutcomeReport


def record(conn, repo_id: int, report: OutcomeReport, now: datetime) -> int:
    """Rows for the report's skills; 0 when its trajectory was reported before (a retry)."""
    seen = conn.execute(select(skill_outcomes.c.skill).where(
        skill_outcomes.c.repo_id == repo_id, skill_outcomes.c.trajectory == report.trajectory).limit(1)).first()
    if seen is not None:
        return 0
    arms = {**{n: "withheld" for n in report.withheld}, **{n: "served" for n in report.served}}
    rows = [{"repo_id": repo_id, "trajectory": report.trajectory, "skill": name, "arm": arm,
             "success": report.success, "source": report.source, "created_at": now} for name, arm in arms.items()]
    if not rows:
        return 0
    try:
        with conn.begin_nested():   # a report of the same trajectory at the same moment: the other counts
            conn.execute(insert(skill_outcomes), rows)
    except IntegrityError:
        return 0
    return len(rows)


def counts(conn, repo_id: int, sources: list[str], skill: str | None = None,
           since: datetime | None = None) -> dict[str, dict[str, tuple[int, int]]]:
    """{skill: {arm: (tasks, successes)}} over outcomes of the given sources (recorded at or after ``since``)."""
    q = select(skill_outcomes.c.skill, skill_outcomes.c.arm, func.count(),
               func.sum(case((skill_outcomes.c.success, 1), else_=0))).where(
        skill_outcomes.c.repo_id == repo_id, skill_outcomes.c.source.in_(sources))
    if skill is not None:
        q = q.where(skill_outcomes.c.skill == skill)
    if since is not None:
        q = q.where(skill_outcomes.c.created_at >= since)
    out: dict[str, dict[str, tuple[int, int]]] = {}
    for name, arm, n, wins in conn.execute(q.group_by(skill_outcomes.c.skill, skill_outcomes.c.arm)).all():
        out.setdefault(name, {})[arm] = (int(n), int(wins or 0))
    return out
