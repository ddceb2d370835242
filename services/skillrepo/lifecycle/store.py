"""SQL of skill states, inside the skill repo's own transactions. A row per skill written from traffic under
`candidates`, or retired by a person; every change bumps the repo's ``state_gen`` (what searches cache by)."""

from __future__ import annotations

from dataclasses import dataclass
from datetime import UTC, datetime

from sqlalchemy import delete, insert, select, update

from services.skillrepo.tables import repos, skill_states


@dataclass
class StateRow:
    name: str
    state: str
    traffic: bool
    updated_at: datetime | None = None
    updated_by: str | None = None
    reason: str | None = None
    since: datetime | None = None


def _utc(ts: datetime | None) -> datetime | None:
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts


def rows(conn, repo_id: int, state: str | None = None) -> list[StateRow]:
    q = select(skill_states).where(skill_states.c.repo_id == repo_id)
    if state is not None:
        q = q.where(skill_states.c.state == state)
    return [_row(r) for r in conn.execute(q.order_by(skill_states.c.name)).all()]


def _row(r) -> StateRow:
    return StateRow(r.name, r.state, bool(r.traffic), _utc(r.updated_at), r.updated_by, r.reason, _utc(r.since))


def row(conn, repo_id: int, name: str) -> StateRow | None:
    r = conn.execute(select(skill_states).where(skill_states.c.repo_id == repo_id,
                                                skill_states.c.name == name)).first()
    return _row(r) if r else None


def hidden(conn, repo_id: int) -> dict[str, str]:
    """{name: state} of the skills a plain search does not serve (candidates and retired ones)."""
    return dict(conn.execute(select(skill_states.c.name, skill_states.c.state).where(
        skill_states.c.repo_id == repo_id, skill_states.c.state != "active")).all())


def bump(conn, repo_id: int) -> None:
    conn.execute(update(repos).where(repos.c.id == repo_id).values(state_gen=repos.c.state_gen + 1))


def mark(conn, repo_id: int, name: str, state: str, traffic: bool, by: str | None, reason: str | None,
         now: datetime, new_text: bool = False) -> None:
    """Set ``name``'s state; ``new_text``: an op batch wrote its text now (its measured record starts again)."""
    values = {"state": state, "traffic": traffic, "updated_at": now, "updated_by": by,
              "reason": reason[:500] if reason else None, **({"since": now} if new_text else {})}
    done = conn.execute(update(skill_states).where(skill_states.c.repo_id == repo_id,
                                                   skill_states.c.name == name).values(**values))
    if done.rowcount == 0:
        conn.execute(insert(skill_states).values(repo_id=repo_id, name=name, **{"since": now, **values}))
    bump(conn, repo_id)


def clear(conn, repo_id: int, names: list[str]) -> None:
    """No state for ``names`` any more (a person wrote or deleted them); cheap where the repo never had one."""
    if not names:
        return
    gen = conn.execute(select(repos.c.state_gen).where(repos.c.id == repo_id)).scalar()
    if not gen:
        return
    gone = 0
    for i in range(0, len(names), 1000):
        gone += conn.execute(delete(skill_states).where(skill_states.c.repo_id == repo_id,
                                                        skill_states.c.name.in_(names[i:i + 1000]))).rowcount
    if gone:
        bump(conn, repo_id)


def copy(conn, source_id: int, target_id: int) -> None:
    """A fork keeps its source's states (a candidate stays one)."""
    cols = [c for c in skill_states.c if c.name != "repo_id"]
    sel = select(*cols).add_columns(repos.c.id.label("repo_id")).select_from(skill_states).join(
        repos, repos.c.id == target_id).where(skill_states.c.repo_id == source_id)
    n = conn.execute(insert(skill_states).from_select([c.name for c in cols] + ["repo_id"], sel)).rowcount
    if n:
        bump(conn, target_id)
