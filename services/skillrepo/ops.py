"""The curator's function calls, applied to a repo inside one write transaction.

The ops and their arguments are defined once, in `skillos.curation.ops`; this module adds what
only the repo can decide (does the skill exist?) and the writes. Ops run in order and each sees the
effect of the ones before it. Semantics (the paper's tool names):
  * ``new_skill_insert(skill_name, content)``: refused when the (normalized) name already exists.
  * ``skill_update(skill_name, new_name?, new_content?)``: the skill must exist; ``new_content`` replaces
    the document (same rules as insert), ``new_name`` renames it (the old name gets a delete version).
    Giving neither is refused. Content equal to the current one is applied without a new version.
  * ``skill_delete(skill_name)``: the skill must exist.
A batch's worked example (``example``) is merged (`skillos.worked_examples.merge`) into the examples of
every skill an applied insert or update writes, in that op's own write (one version); an update keeps
the skill's examples, also across a rename, and a delete drops them. Content can never set examples
(`skillos.skills.EXAMPLES_KEY` is refused).
``skill_name`` of update/delete is looked up as given, then normalized ("Clean Object" finds
"clean-object"). Extra argument keys are ignored. Atomic batches (the endpoint's default): when one op
is refused none is applied and the valid ops say ``batch_aborted``; non-atomic batches apply every
valid op. The curator sends its decisions non-atomically (`skillos.curation.ATOMIC`, and why there).

An insert's or update's content carrying what no procedure needs (`skillos.curation.scan`: URLs, hosts,
requests for credentials or the conversation, instructions about instructions) is refused
(``flagged_content``; a repo under review keeps the batch as a proposal, the flag shown to the reviewer),
and such a worked example is not kept: ops are the curator's path from traffic to
skills every caller is served (SKILLOS_OPS_CONTENT_SCAN=false turns it off; REST writes are not scanned).

A skill the repo's policy pins is refused to every op (``pinned``): insert, update, rename to or from it,
delete. Whether a batch applies at once or waits for review is the review gate's (`services.skillrepo.review`).
Under a policy with `candidates` on (``life``, `services.skillrepo.lifecycle`), an update or delete may name
only skills written from traffic (else ``person_written``; a retired one: ``retired``), a delete retires the
skill instead of deleting it, and every skill written gets its state (a candidate, unless trusted).

Invariant: an op is refused before it writes anything (every check precedes the first write), so a
refused op leaves the transaction as it found it; `apply_ops` of a lone op needs no savepoint.
"""

from __future__ import annotations

import json
from typing import Any, Protocol

from services.skillrepo.examples import merged
from services.skillrepo.store import WriteTx
from skillos.curation.ops import OP_NAMES, required
from skillos.curation.scan import flags
from skillos.protocol.skillrepo import Op, OpOutcome
from skillos.skills import SkillDoc, SkillFormatError, normalize_name, skill_from_call
from skillos.textguard import MAX_JSON_DEPTH as _MAX_ARGS_DEPTH
from skillos.textguard import check_value
from skillos.worked_examples import WorkedExample, render


class Life(Protocol):
    """A policy's skill states in one batch (`services.skillrepo.lifecycle.life.OpsLife`)."""
    state: str
    def refusal(self, name: str) -> tuple[str, str] | None: ...
    def wrote(self, name: str) -> None: ...
    def retire(self, name: str) -> None: ...
    def gone(self, name: str) -> None: ...


class Refused(Exception):
    def __init__(self, code: str, message: str, skill_name: str | None = None):
        super().__init__(message)
        self.code, self.message, self.skill_name = code, message, skill_name


def _arguments(op: Op) -> dict[str, Any]:
    args = op.arguments
    if isinstance(args, str):
        try:
            args = json.loads(args) if args.strip() else {}
        except json.JSONDecodeError as e:
            raise Refused("invalid_arguments", f"arguments are not valid JSON: {e}") from None
        except RecursionError:
            raise Refused("invalid_arguments", f"arguments are nested deeper than {_MAX_ARGS_DEPTH} levels") from None
        # a JSON string is decoded here, past the service door's checks of the request body: the same checks
        if (problem := check_value(args, max_depth=_MAX_ARGS_DEPTH, what="arguments")) is not None:
            raise Refused("invalid_arguments", problem.message)
    if not isinstance(args, dict):
        raise Refused("invalid_arguments", "arguments must be a JSON object of named arguments")
    return args


def _required(args: dict[str, Any], key: str) -> Any:
    value = args.get(key)
    if value is None or (isinstance(value, str) and not value.strip()):
        raise Refused("missing_argument", f"argument {key!r} is missing")
    if not isinstance(value, str):
        raise Refused("invalid_arguments", f"argument {key!r} must be a string")
    return value


def _existing(tx: WriteTx, raw: str) -> str:
    if tx.exists(raw):
        return raw
    name = normalize_name(raw, strict=False)
    if name and tx.exists(name):
        return name
    raise Refused("skill_not_found", f"skill {raw!r} does not exist in this repo: insert it with "
                                     "new_skill_insert or use an existing name", name or raw)


def _with_example(doc: SkillDoc, kept: list[dict[str, Any]], example: WorkedExample | None,
                  scan: bool = True) -> str | None:
    """Set ``doc``'s examples: ``kept`` with ``example`` merged in; merge's verdict (None: no example). An
    example carrying what no procedure needs (`skillos.curation.scan`) is not kept: it would be served to
    every later caller of the repo."""
    doc.examples = kept
    if example is None:
        return None
    if scan and (found := flags(render(example))):
        return f"not kept: flagged ({', '.join(found)})"
    doc.examples, verdict = merged(kept, example)
    return verdict


def _scanned(doc: SkillDoc, scan: bool) -> SkillDoc:
    """``doc``, or `Refused` ``flagged_content`` when ``scan`` and it carries what no procedure needs."""
    # the whole document as it is stored and served (front matter included), not only its body
    served = f"{doc.name}\n{doc.description}\n{json.dumps(doc.metadata, default=str)}\n{doc.body}"
    if scan and (found := flags(served)):
        raise Refused("flagged_content", f"the skill carries {', '.join(found)}, which no procedure needs: a skill "
                                         "written from traffic is served to every caller of the repo, so it is "
                                         "not written (write it by hand through the REST API if it is meant)",
                      doc.name)
    return doc


def _unpinned(name: str, pinned: frozenset[str]) -> str:
    if name in pinned:
        raise Refused("pinned", f"skill {name!r} is pinned by the repo's policy: op batches cannot change it "
                                "(a person changes it through the REST API)", name)
    return name


def _changeable(name: str, life: Life | None) -> str:
    if life is not None and (why := life.refusal(name)) is not None:
        raise Refused(why[0], why[1], name)
    return name


def _apply_one(tx: WriteTx, op: Op, max_body_bytes: int, example: WorkedExample | None,
               scan: bool = True, pinned: frozenset[str] = frozenset(),
               life: Life | None = None) -> tuple[str, int, str, str | None]:
    """(skill name, version, message, what became of ``example``) of an applied op; raises `Refused`."""
    if op.name not in OP_NAMES:
        raise Refused("unknown_op", f"unknown op {op.name!r}: use one of {', '.join(OP_NAMES)}")
    args = _arguments(op)
    for key in required(op.name):   # in signature order: skill_name is named first when both are missing
        _required(args, key)
    try:
        if op.name == "new_skill_insert":
            doc = skill_from_call(args["skill_name"], args["content"], max_body_bytes=max_body_bytes)
            doc = _scanned(doc, scan)
            _unpinned(doc.name, pinned)
            if tx.exists(doc.name):
                raise Refused("skill_exists", f"skill {doc.name!r} already exists: change it with skill_update",
                              doc.name)
            verdict = _with_example(doc, [], example, scan)
            version = tx.put(doc, "insert")
            if life is not None:
                life.wrote(doc.name)
            return doc.name, version, "inserted" if life is None else f"inserted as {life.state}", verdict
        if op.name == "skill_delete":
            name = _changeable(_unpinned(_existing(tx, args["skill_name"]), pinned), life)
            if life is not None:
                life.retire(name)
                return name, tx.head(name)[0], f"retired (restorable: POST .../skills/{name}/state)", None
            return name, tx.delete(name, "delete"), "deleted", None
        # skill_update
        name = _changeable(_unpinned(_existing(tx, args["skill_name"]), pinned), life)
        new_name, new_content = args.get("new_name"), args.get("new_content")
        if new_name is not None and not isinstance(new_name, str):
            raise Refused("invalid_arguments", "argument 'new_name' must be a string", name)
        if new_content is not None and not isinstance(new_content, str):
            raise Refused("invalid_arguments", "argument 'new_content' must be a string", name)
        new_name = new_name.strip() if new_name and new_name.strip() else None
        new_content = new_content if new_content and new_content.strip() else None
        if new_name is None and new_content is None:
            raise Refused("missing_argument", "skill_update needs 'new_content' or 'new_name' (or both)", name)
        target = _unpinned(normalize_name(new_name) if new_name else name, pinned)
        if target != name and tx.exists(target):
            raise Refused("skill_exists", f"cannot rename {name!r} to {target!r}: that skill already exists", name)
        text_changed = True
        if new_content is not None:
            doc = _scanned(skill_from_call(target, new_content, max_body_bytes=max_body_bytes), scan)
            kept = tx.examples(name)
            if life is not None:   # an update that only adds a worked example keeps the skill's state
                cur = tx.get(name)
                text_changed = (doc.description, doc.body, doc.metadata) != (cur.description, cur.body, cur.metadata)
        else:
            cur = tx.get(name)
            doc = _scanned(SkillDoc(target, cur.description, cur.body, cur.metadata), scan)   # the new name too
            kept = cur.examples
        verdict = _with_example(doc, kept, example, scan)
        if target != name:
            tx.delete(name, "rename")
            version = tx.put(doc, "update")
            if life is not None:
                life.gone(name)
                life.wrote(target)
            return target, version, f"renamed from {name!r}", verdict
        before = tx.head(name)[0]
        version = tx.put(doc, "update")
        if life is not None and version != before and text_changed:
            life.wrote(name)   # new text earns its place again
        return name, version, "updated" if version != before else "unchanged: same content", verdict
    except SkillFormatError as e:
        raise Refused(e.code, e.message, args.get("skill_name") if isinstance(args.get("skill_name"), str)
                      else None) from None


def apply_ops(tx: WriteTx, ops: list[Op], atomic: bool, max_body_bytes: int,
              example: WorkedExample | None = None, scan: bool = True,
              pinned: frozenset[str] = frozenset(), life: Life | None = None) -> tuple[bool, list[OpOutcome]]:
    """Apply ``ops`` in ``tx``, ``example`` kept with the skills they write; returns (every op applied,
    verdicts). ``scan``: refuse content that no procedure needs (`skillos.curation.scan`); ``pinned``: skills
    no op may write and ``life`` the skill states (the repo's policy). The caller rolls back on an atomic refusal."""
    verdicts: list[OpOutcome] = []
    for i, op in enumerate(ops):
        try:
            name, version, message, kept = _apply_one(tx, op, max_body_bytes, example, scan, pinned, life)
            verdicts.append(OpOutcome(index=i, name=op.name, status="applied", message=message,
                                      skill_name=name, version=version, example=kept))
        except Refused as r:
            verdicts.append(OpOutcome(index=i, name=op.name, status="refused", code=r.code, message=r.message,
                                      skill_name=r.skill_name))
    refused = [v for v in verdicts if v.status == "refused"]
    if refused and atomic:
        first = refused[0]
        for v in verdicts:
            if v.status == "applied":
                v.status, v.code, v.version, v.example = "refused", "batch_aborted", None, None
                v.message = f"valid, but not applied: op {first.index} was refused ({first.code})"
    return not refused, verdicts
