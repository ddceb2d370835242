"""`validate(call) -> OpVerdict`: is one parsed call an op the skill repo could apply? No I/O.

A call is refused here, before anything is sent, when
  * it could not be read (the parser's ``error``: no JSON, no function name, cut off, ...);
  * it names no op (`ops.OP_NAMES`; the parser already mapped aliases such as ``insert_skill``);
  * a required argument is missing, empty or not a string;
  * ``skill_update`` gives neither ``new_content`` nor ``new_name``;
  * a name has no letter or digit left after normalizing, or the content is not a well-formed
    skill (`skillos.skills.skill_from_call`: empty, bad frontmatter, too large, NUL, ...);
  * ``skill_update`` or ``skill_delete`` names a skill the curator was not shown (``shown``: the skills
    retrieved for the task): in every output mode, not only where json mode's schema enforces it. A
    trajectory is a caller's text; it must not steer an edit of any skill of the repo.
The checks are the skill repo's own rules, so a call that passes is refused by the repo only for
state reasons (the skill exists / does not exist); see `verdict.settle`.

Repairs, noted in ``OpVerdict.normalized`` instead of refused: unknown extra arguments are dropped
(small models add "reason" or "force"), empty optional ones are dropped, and a name that is not in
skill-name syntax is noted with what the repo will make of it ("Heat Food" -> "heat-food").
"""

from __future__ import annotations

from collections.abc import Collection
from typing import Any

from pydantic import ValidationError

from skillos.curation.ops import CURATOR_OP, OP_NAMES, parameters, required
from skillos.curation.parse import ParsedCall
from skillos.curation.verdict import OpVerdict
from skillos.skills import SkillFormatError, normalize_name, skill_from_call


def _check(call: ParsedCall, shown: Collection[str] | None) -> tuple[dict[str, Any] | None, str | None, list[str]]:
    """(clean arguments, None, notes) or (None, reason, notes)."""
    notes: list[str] = []
    if call.error:
        return None, call.error, notes
    name = call.name or ""
    if name not in OP_NAMES:   # the parser sets error for these; a hand-made ParsedCall may not
        return None, f"unknown function {call.name!r}; use one of {', '.join(OP_NAMES)}", notes
    args = dict(call.arguments)
    allowed = parameters(name)
    for key in [k for k in args if k not in allowed]:
        args.pop(key)
        notes.append(f"dropped unknown argument {key!r}")
    for key in [k for k in ("new_name", "new_content") if k in args and args[k] in (None, "")]:
        args.pop(key)
    for key in required(name):
        if not isinstance(args.get(key), str) or not args[key].strip():
            return None, f"{name} needs a non-empty string argument {key!r}", notes
    if name == "skill_update" and "new_name" not in args and "new_content" not in args:
        return None, "skill_update needs new_content, new_name or both", notes
    try:
        for key in ("skill_name", "new_name"):
            if key in args:
                fixed = normalize_name(args[key])
                if fixed != args[key]:
                    notes.append(f"{key} {args[key]!r} becomes {fixed!r}")
        for key in ("content", "new_content"):
            if key in args:
                skill_from_call(args.get("new_name") or args["skill_name"], args[key])
    except SkillFormatError as e:
        return None, f"{e.code}: {e.message}", notes
    if shown is not None and name in ("skill_update", "skill_delete"):
        known = {n for n in (normalize_name(s, strict=False) for s in shown) if n}
        if normalize_name(args["skill_name"]) not in known:
            listed = ", ".join(sorted(known)) or "none"
            return None, (f"not_shown: {name} may only change a skill retrieved for this task "
                          f"(shown: {listed}), not {args['skill_name']!r}"), notes
    return args, None, notes


def validate(call: ParsedCall, index: int = 0, shown: Collection[str] | None = None) -> OpVerdict:
    """The verdict on one call (``index``: its position in the decision; ``shown``: the names of the skills
    in the curator's prompt, None: not checked). Never raises.

    A valid verdict carries the cleaned arguments (what is sent to the repo) and the typed op
    (``verdict.op``); a refused one the arguments as read and the reason.
    """
    args, reason, notes = _check(call, shown)
    verdict = OpVerdict(index=index, name=call.name, arguments=args or call.arguments,
                        valid=reason is None, reason=reason, normalized=notes)
    if args is not None:
        try:
            verdict._op = CURATOR_OP.validate_python({"name": call.name, **args})
        except ValidationError as e:   # cannot happen after the checks above; refuse rather than crash
            verdict.valid, verdict.reason = False, f"invalid_arguments: {e.errors()[0]['msg']}"
    return verdict
