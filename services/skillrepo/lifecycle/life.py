"""The op batch's side of a skill's life (`services.skillrepo.ops.Life`), in the batch's own transaction."""

from __future__ import annotations

from services.skillrepo.lifecycle import store as sql
from services.skillrepo.store import WriteTx
from skillos.protocol.skillrepo import RepoPolicy


class OpsLife:
    """What a policy with `candidates` on changes in one op batch (`services.skillrepo.ops.apply_ops`): the skills
    it writes get ``state`` (candidate; active for a trusted writer's or an approved batch), a delete retires,
    and only skills written from traffic may be changed. Everything goes through ``tx`` (savepoints undo it)."""

    def __init__(self, tx: WriteTx, state: str, by: str | None):
        self.tx, self.state, self.by = tx, state, by

    def refusal(self, name: str) -> tuple[str, str] | None:
        """(code, message) when an op batch may not change skill ``name``; None when it may."""
        r = sql.row(self.tx.conn, self.tx.repo.id, name)
        if r is None or not r.traffic:
            return "person_written", (f"skill {name!r} was written by a person (or before the repo's policy "
                                      "had `candidates` on): op batches change only skills written from traffic")
        if r.state == "retired":
            return "retired", f"skill {name!r} is retired: a reviewer restores it (POST .../skills/{name}/state)"
        return None

    def wrote(self, name: str) -> None:
        sql.mark(self.tx.conn, self.tx.repo.id, name, self.state, True, self.by, "written by an op batch",
                 self.tx.now, new_text=True)

    def retire(self, name: str) -> None:
        sql.mark(self.tx.conn, self.tx.repo.id, name, "retired", True, self.by, "skill_delete", self.tx.now)

    def gone(self, name: str) -> None:
        sql.clear(self.tx.conn, self.tx.repo.id, [name])


def clear_rewritten(tx: WriteTx) -> None:
    """No state any more for the skills this write changed (a new version): a person's REST write, or an op
    batch where candidates are off. A write that changes nothing (the same text put back, the repo's own
    archive imported) keeps them."""
    sql.clear(tx.conn, tx.repo.id, sorted({c.name for c in tx.changes}))


def ops_life(tx: WriteTx, policy: RepoPolicy | None, by: str | None, approved: bool = False) -> OpsLife | None:
    """The `OpsLife` of a batch ``by`` writes under ``policy`` (None: candidates off, plain ops); ``approved``:
    a reviewer applies it."""
    if policy is None or not policy.candidates:
        return None
    trusted = approved or by in policy.trusted_writers
    return OpsLife(tx, "active" if trusted else "candidate", by)
