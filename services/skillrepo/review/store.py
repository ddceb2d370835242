"""SQL of the review gate: policies and proposals, inside the skill repo's own transactions."""

from __future__ import annotations

import json
from datetime import UTC, datetime

from sqlalchemy import insert, select, update

from services.skillrepo.tables import proposals, repo_policies
from skillos.protocol.skillrepo import Proposal, RepoPolicy


def _utc(ts: datetime | None) -> datetime | None:
    return ts.replace(tzinfo=UTC) if ts is not None and ts.tzinfo is None else ts


def policy_of(conn, repo_id: int, default: RepoPolicy | None) -> RepoPolicy | None:
    """The repo's own policy, or ``default`` when it never set one."""
    raw = conn.execute(select(repo_policies.c.policy).where(repo_policies.c.repo_id == repo_id)).scalar()
    return RepoPolicy.model_validate_json(raw) if raw else default


def set_policy(conn, repo_id: int, policy: RepoPolicy, by: str | None, now: datetime) -> None:
    values = {"policy": policy.model_dump_json(), "updated_at": now, "updated_by": by}
    done = conn.execute(update(repo_policies).where(repo_policies.c.repo_id == repo_id).values(**values))
    if done.rowcount == 0:
        conn.execute(insert(repo_policies).values(repo_id=repo_id, **values))


def add(conn, repo_id: int, seq: int, batch: dict, verdicts: str, reasons: list[str], writer: str | None,
        now: datetime) -> int:
    r = conn.execute(insert(proposals).values(
        repo_id=repo_id, status="pending", seq=seq, batch=json.dumps(batch, ensure_ascii=False), verdicts=verdicts,
        reasons=json.dumps(reasons, ensure_ascii=False), writer=writer, created_at=now).returning(proposals.c.id))
    return int(r.scalar_one())


def _out(r) -> Proposal:
    batch = json.loads(r.batch)
    return Proposal(id=r.id, status=r.status, created_at=_utc(r.created_at), writer=r.writer,
                    origin=batch.get("origin"), provenance=batch.get("provenance"), reasons=json.loads(r.reasons), seq=r.seq, ops=batch["ops"],
                    atomic=batch.get("atomic", True), example=batch.get("example"),
                    verdicts=json.loads(r.verdicts), decided_at=_utc(r.decided_at), decided_by=r.decided_by,
                    note=r.note, result=json.loads(r.result) if r.result else None)


def get(conn, repo_id: int, pid: int, lock: bool = False) -> Proposal | None:
    q = select(proposals).where(proposals.c.repo_id == repo_id, proposals.c.id == pid)
    r = conn.execute(q.with_for_update() if lock and conn.dialect.name != "sqlite" else q).first()
    return _out(r) if r else None


def listed(conn, repo_id: int, status: str | None, before: int | None, limit: int) -> list[Proposal]:
    q = select(proposals).where(proposals.c.repo_id == repo_id)
    if status:
        q = q.where(proposals.c.status == status)
    if before is not None:
        q = q.where(proposals.c.id < before)
    return [_out(r) for r in conn.execute(q.order_by(proposals.c.id.desc()).limit(limit)).all()]


def decide(conn, repo_id: int, pid: int, status: str, by: str | None, note: str | None, result: str | None,
           now: datetime) -> bool:
    """Mark a pending proposal decided; False when it was not pending any more (decided meanwhile)."""
    done = conn.execute(update(proposals).where(
        proposals.c.repo_id == repo_id, proposals.c.id == pid, proposals.c.status == "pending").values(
        status=status, decided_at=now, decided_by=by, note=note, result=result))
    return done.rowcount == 1
