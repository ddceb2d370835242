"""The review gate's logic: which op batches wait, and a reviewer's approve and reject.

`gate` runs inside the op batch's own write transaction (the repo's lock held): it checks the batch as it
would apply (savepoints, undone) and, when the repo's policy makes it wait, keeps it as a proposal. A
decision takes the same lock, so an approval applies to the repo as it is then; a batch that no longer
applies (its skill changed or went meanwhile) is answered 409 and stays pending, for rejection or a
newer proposal.
"""

from __future__ import annotations

import difflib
import json
from typing import TYPE_CHECKING, Any, Protocol

from pydantic import TypeAdapter
from sqlalchemy import func, select

from services.skillrepo import examples as worked
from services.skillrepo.errors import answers_api_errors
from services.skillrepo.lifecycle.life import OpsLife, clear_rewritten, ops_life
from services.skillrepo.ops import apply_ops
from services.skillrepo.review import store as sql
from services.skillrepo.store import RepoNotFound, SkillNotFound, WriteTx
from services.skillrepo.tables import skill_versions
from skillos.auth import Grant, current_caller
from skillos.errors import APIError
from skillos.protocol.skillrepo import (
    OpOutcome,
    OpsRequest,
    OpsResult,
    Proposal,
    ProposedChange,
    RepoPolicy,
)
from skillos.skills import SkillFormatError, normalize_name, serialize, skill_from_call

if TYPE_CHECKING:
    from services.skillrepo.settings import SkillRepoSettings
    from services.skillrepo.store import Store


class SkillRepoService(Protocol):
    """What the review gate uses of the skill repo service (`services.skillrepo.serving.SkillRepoService`)."""
    store: Store
    settings: SkillRepoSettings

    def _committed(self, repo: Any, changes: Any) -> None: ...

_VERDICTS = TypeAdapter(list[OpOutcome])


def writer_label() -> str | None:
    caller = current_caller()
    return caller.token_label if caller is not None else None


def require_operator(grant: Grant, what: str) -> None:
    if not grant.operator:
        raise APIError(403, "operator_only", f"{what} needs an operator's token (rw, no repo prefix): a repo's "
                                             "callers do not set the rules their own traffic is held to")


def default_policy(svc: SkillRepoService) -> RepoPolicy:
    s = svc.settings
    return RepoPolicy(review=s.review_default,
                      trusted_writers=[w.strip() for w in s.review_trusted_writers.split(",") if w.strip()])


def gate(svc: SkillRepoService, tx: WriteTx, req: OpsRequest, example, policy: RepoPolicy,
         life: OpsLife | None = None) -> OpsResult | None:
    """The batch's answer when ``policy`` makes it wait (a proposal) or refuses all of it; None: apply it."""
    if not policy.review:
        return None
    s, pinned, writer = svc.settings, frozenset(policy.pinned), writer_label()
    reasons: list[str] = []
    if s.ops_content_scan:
        with tx.savepoint() as undo:
            _, scanned = apply_ops(tx, req.ops, False, s.max_body_bytes, example, True, pinned, life)
            undo()
        reasons += [f"flagged: {v.skill_name or v.index}: {v.message}" for v in scanned if v.code == "flagged_content"]
    if writer not in policy.trusted_writers:
        reasons.insert(0, f"review: the repo's policy reviews op batches of writer {writer!r}")
    if not reasons:
        return None
    with tx.savepoint() as undo:   # the checks as the batch would apply now, the scan left to the reviewer
        _, verdicts = apply_ops(tx, req.ops, req.atomic, s.max_body_bytes, example, False, pinned, life)
        undo()
    if not any(v.status == "applied" for v in verdicts):
        return OpsResult(applied=False, verdicts=verdicts, seq=tx.repo.seq)
    # the proposal keeps the ops that would apply (a non-atomic batch's refused ones are answered now, and
    # would only make its approval stale); the verdicts keep every op's check, by the batch's own indexes
    batch = req.model_dump(mode="json", include={"atomic", "example", "origin", "provenance"}, exclude_none=True)
    batch["ops"] = [req.ops[v.index].model_dump(mode="json") for v in verdicts if v.status == "applied"]
    pid = sql.add(tx.conn, tx.repo.id, tx.repo.seq, batch, _VERDICTS.dump_json(verdicts, exclude_none=True).decode(),
                  reasons, writer, tx.now)
    for v in verdicts:
        if v.status == "applied":
            v.status, v.code, v.version, v.example = "pending", "review", None, None
            v.message = f"valid; waits for review in proposal {pid} ({reasons[0].split(':')[0]})"
    return OpsResult(applied=False, verdicts=verdicts, seq=tx.repo.seq, proposal=pid)


def _doc_text(op_name: str, args: dict[str, Any], max_body_bytes: int) -> tuple[str | None, str | None]:
    """(the skill the op names, the document it writes) for a reviewer's diff; (name, None) for a delete."""
    name = args.get("skill_name") if isinstance(args.get("skill_name"), str) else None
    content = args.get("content") if op_name == "new_skill_insert" else args.get("new_content")
    if op_name == "skill_delete" or not isinstance(content, str):
        return name, None
    target = args.get("new_name") if isinstance(args.get("new_name"), str) and args["new_name"].strip() else name
    try:
        return name, serialize(skill_from_call(target, content, max_body_bytes=max_body_bytes))
    except SkillFormatError as e:
        return name, f"(not a valid skill: {e.message})"


def _changed_since(tx: WriteTx, found: Proposal) -> list[str]:
    """The skills the proposal's ops name that were written after it was proposed (an update carries no version:
    without this an approval would overwrite a person's newer edit with text nobody reviewed against it)."""
    names: set[str] = set()
    for op in found.ops:
        try:
            args = json.loads(op.arguments) if isinstance(op.arguments, str) else op.arguments
        except json.JSONDecodeError:
            continue
        for key in ("skill_name", "new_name"):
            if isinstance(args, dict) and isinstance(args.get(key), str) and args[key].strip():
                names |= {args[key], normalize_name(args[key], strict=False) or args[key]}
    if not names:
        return []
    rows = tx.conn.execute(select(skill_versions.c.name, func.max(skill_versions.c.seq)).where(
        skill_versions.c.repo_id == tx.repo.id, skill_versions.c.name.in_(sorted(names)))
        .group_by(skill_versions.c.name)).all()
    return sorted(name for name, seq in rows if seq > found.seq)


class Review:
    """Policy and proposal routes of one skill repo service."""

    def __init__(self, svc: SkillRepoService):
        self.svc = svc

    def _repo_id(self, repo: str) -> int:
        try:
            return self.svc.store.get_repo(repo, count=False).id
        except RepoNotFound:
            raise APIError(404, "repo_not_found", f"repo {repo!r} does not exist: create it with POST /v1/repos") \
                from None

    def policy(self, repo: str) -> RepoPolicy:
        repo_id = self._repo_id(repo)
        with self.svc.store.engine.connect() as conn:
            return sql.policy_of(conn, repo_id, default_policy(self.svc))

    @answers_api_errors
    def set_policy(self, repo: str, policy: RepoPolicy) -> RepoPolicy:
        policy.pinned = sorted({normalize_name(n, strict=False) or n for n in policy.pinned})
        with self.svc.store.write(repo) as tx:
            sql.set_policy(tx.conn, tx.repo.id, policy, writer_label(), tx.now)
            tx.log_as("policy", entries=json.dumps([{"index": 0, "name": "policy", "status": "applied",
                                                      "message": policy.model_dump_json()}]))
        return policy

    def list(self, repo: str, status: str | None, before: int | None, limit: int) -> list[Proposal]:
        repo_id = self._repo_id(repo)
        with self.svc.store.engine.connect() as conn:
            return sql.listed(conn, repo_id, status, before, limit)

    def get(self, repo: str, pid: int) -> Proposal:
        repo_id = self._repo_id(repo)
        with self.svc.store.engine.connect() as conn:
            found = sql.get(conn, repo_id, pid)
        if found is None:
            raise APIError(404, "proposal_not_found", f"repo {repo!r} has no proposal {pid}")
        found.changes = [self._change(repo, i, op.name, op.arguments) for i, op in enumerate(found.ops)]
        return found

    def _change(self, repo: str, index: int, op_name: str, arguments) -> ProposedChange:
        try:
            args = json.loads(arguments) if isinstance(arguments, str) else arguments
        except json.JSONDecodeError:
            args = {}
        args = args if isinstance(args, dict) else {}
        name, proposed = _doc_text(op_name, args, self.svc.settings.max_body_bytes)
        current = None
        if name and op_name != "new_skill_insert":
            for candidate in (name, normalize_name(name, strict=False)):
                try:
                    current = self.svc.store.get_skill(repo, candidate).content
                    name = candidate
                    break
                except SkillNotFound:
                    continue
        diff = "".join(difflib.unified_diff((current or "").splitlines(keepends=True),
                                            (proposed or "").splitlines(keepends=True),
                                            f"{name} (served)", f"{name} (proposed)"))
        new_name = args.get("new_name") if isinstance(args.get("new_name"), str) else None
        return ProposedChange(index=index, op=op_name, skill_name=name, new_name=new_name, current=current,
                              proposed=proposed, diff=diff)

    @answers_api_errors
    def decide(self, repo: str, pid: int, approve: bool, note: str | None, grant: Grant) -> Proposal:
        """Approve (apply the batch now, as the reviewer's write) or reject a pending proposal: an operator or
        one of the policy's reviewers, never the token that wrote it."""
        reviewer = grant.token_label
        svc = self.svc
        with svc.store.write(repo) as tx:
            policy = sql.policy_of(tx.conn, tx.repo.id, default_policy(svc))
            if not (grant.operator or reviewer in policy.reviewers):
                raise APIError(403, "not_a_reviewer", f"token {reviewer!r} may not decide proposals of {repo!r}: "
                                                      "an operator's token or one the repo's policy names in "
                                                      "`reviewers` decides them")
            found = sql.get(tx.conn, tx.repo.id, pid, lock=True)
            if found is None:
                raise APIError(404, "proposal_not_found", f"repo {repo!r} has no proposal {pid}")
            if found.status != "pending":
                raise APIError(409, "proposal_decided", f"proposal {pid} was {found.status} by "
                                                        f"{found.decided_by!r}: nothing left to decide")
            if reviewer != "open" and reviewer == found.writer:
                raise APIError(403, "own_proposal", f"proposal {pid} was written with this token ({reviewer!r}): "
                                                    "another reviewer decides it")
            result = None
            if approve:
                changed = _changed_since(tx, found)
                if changed:
                    raise APIError(409, "proposal_stale", f"proposal {pid} was made against the repo at seq "
                                   f"{found.seq}; since then {', '.join(changed[:5])} changed: what it would "
                                   "overwrite is not what was reviewed. Reject it; the curator proposes again")
                life = ops_life(tx, policy, reviewer, approved=True)
                with tx.savepoint() as undo:
                    example = worked.accept(found.example) if found.example is not None else None
                    ok, verdicts = apply_ops(tx, found.ops, found.atomic, svc.settings.max_body_bytes,
                                             example, False, frozenset(policy.pinned), life)
                    if not ok:
                        undo()
                if ok and life is None:   # candidates off: what it wrote is plain active
                    clear_rewritten(tx)
                if not ok:
                    refused = "; ".join(f"op {v.index}: {v.code}: {v.message}" for v in verdicts
                                        if v.status == "refused" and v.code != "batch_aborted")
                    raise APIError(409, "proposal_stale", f"proposal {pid} no longer applies to the repo as it "
                                   f"is ({refused}): reject it, or let the curator propose again")
                result = OpsResult(applied=True, verdicts=verdicts, seq=tx.repo.seq)
                origin = {**(found.origin.model_dump(exclude_none=True) if found.origin else {}),
                          "source": f"proposal {pid}"[:64]}
                tx.log_as("ops", origin=json.dumps(origin, ensure_ascii=False),
                          entries=_VERDICTS.dump_json(verdicts, exclude_none=True).decode(), applied=True,
                          provenance=found.provenance.model_dump_json(exclude_none=True) if found.provenance else None)
            else:   # the op log tells what happened to every batch: a rejection too, with the reviewer's note
                tx.log_as("proposal_rejected", applied=False, origin=json.dumps({"source": f"proposal {pid}"[:64]}),
                          entries=json.dumps([{"index": 0, "name": "reject", "status": "refused", "code": "rejected",
                                               "message": (note or "rejected")[:500]}], ensure_ascii=False),
                          provenance=found.provenance.model_dump_json(exclude_none=True) if found.provenance else None)
            sql.decide(tx.conn, tx.repo.id, pid, "approved" if approve else "rejected", reviewer, note,
                       result.model_dump_json() if result else None, tx.now)
        svc._committed(tx.repo, tx.changes)
        return self.get(repo, pid)
