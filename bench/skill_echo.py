"""Whether single-turn answers repeat their skills: the usage measure of a reasoning run, read off its records.

A reasoning answer takes no action a skill could spell out and rarely names a skill, so the live "used" measure
of runs recorded before `skillos.stream.step.echoed_steps` existed reads 0 there. This reads it again from the
records: the texts of the skills each answer was shown (a curated stream's, replayed from its curator's calls;
gold's, from its files) and how many of their steps the answer repeats. The control is the No Memory answer to
the same problem, measured against the same skills: what the problem's and a plain answer's wording repeat by
chance. What it detects is recitation of a skill's words, which is how this 1.5B follows one (it writes the
steps out, then answers); it cannot tell a recited step that was carried out from one that was not.
"""

from __future__ import annotations

from collections.abc import Iterable

from skillos.curation.parse import parse_curator_output
from skillos.methods.gold import GOLD_DIRS, gold_skills
from skillos.skills import SkillFormatError, normalize_name, skill_from_call
from skillos.stream.step import ECHO_MIN, echoed_steps

Shown = dict[tuple[str, int], dict[str, str]]   # (repo, position) -> {skill name: body} of the skills retrieved


def _text(name: str, args: dict) -> str | None:
    content = args.get("content") or args.get("new_content")
    if not content:
        return None
    try:
        return skill_from_call(name, content).body   # as the repo stored it: frontmatter optional
    except SkillFormatError:
        return None


def curated_texts(records: Iterable[dict]) -> tuple[Shown, int]:
    """The body of every skill each record was shown, replayed from its stream's applied ops in position order,
    and the number of records whose ops and parsed calls did not line up (skipped: their ops write nothing).

    Replayed by name, not by version: a version number starts again after a delete and a re-insert, and a
    resumed stream's repo restored from a snapshot numbers its versions afresh. Each decision's parsed calls
    become its ops one for one, in order (`skillos.curation.decision`), unreadable ones included; an applied
    op carries the name the repo stored (normalised), its call the name as written."""
    shown: Shown = {}
    repos: dict[str, dict[str, str]] = {}
    mismatched = 0
    for r in sorted(records, key=lambda r: r["position"]):
        repo = str(r.get("repo"))
        state = repos.setdefault(repo, {})
        retrieved = [s["name"] for s in r.get("retrieved") or []]
        shown[(repo, r["position"])] = {n: state[n] for n in retrieved if n in state}
        ops = r.get("ops") or []
        calls = parse_curator_output(r.get("curator_completion") or "", None) if ops else []
        if len(calls) != len(ops):
            mismatched += 1
            continue
        for call, op in zip(calls, ops, strict=True):
            name = op.get("skill_name")
            if not op.get("applied") or not name:
                continue
            args = call.arguments
            if op.get("name") == "skill_delete":
                state.pop(name, None)
                continue
            body = _text(name, args)
            if op.get("name") == "skill_update" and args.get("new_name"):
                # a rename (op's name: the new one): the old name is gone, its text kept unless rewritten too
                moved = state.pop(normalize_name(args.get("skill_name"), strict=False), None)
                body = body if body is not None else moved
            if body is not None:
                state[name] = body
    return shown, mismatched


def _answer(record: dict) -> str:
    return "\n".join(f"{t.get('thought') or ''}\n{t.get('action') or ''}" for t in record.get("turns") or [])


def _echoes(record: dict, bodies: list[str]) -> int:
    return max(echoed_steps(_answer(record), body, record.get("instruction") or "") for body in bodies)


def pct(part: float, whole: int) -> str:
    """A share in percent, one decimal; "–" of nothing (bench_learning's tables use it too)."""
    return f"{100 * part / whole:.1f}" if whole else "–"


def echo_line(method: str, control: str, pairs: list[tuple[dict, dict]], all_a: Iterable[dict] = (),
              env: str = "reasoning") -> str:
    """One sentence: how often ``method``'s answers repeat ECHO_MIN steps of a skill they were shown, against the
    ``control`` answers to the same problems measured on the same skills; success when they do or not.
    ``all_a``: every record of ``method``'s streams (a stream's skills are replayed from all of its records,
    paired or not; default: the paired ones)."""
    if method == "gold":
        texts = {d.name: d.body for d in gold_skills(GOLD_DIRS[env])} if env in GOLD_DIRS else {}
        shown = {(str(a.get("repo")), a["position"]): {s["name"]: texts[s["name"]] for s in a.get("retrieved") or []
                                                        if s["name"] in texts} for a, _ in pairs}
        mismatched = 0
    else:
        shown, mismatched = curated_texts(list(all_a) or [a for a, _ in pairs])
    measured: list[tuple[dict, bool]] = []
    chance = missing = 0
    for a, b in pairs:
        if not a.get("retrieved"):
            continue
        bodies = list(shown.get((str(a.get("repo")), a["position"]), {}).values())
        missing += len(bodies) < len(a["retrieved"])
        if not bodies:
            continue
        measured.append((a, _echoes(a, bodies) >= ECHO_MIN))
        chance += _echoes(b, bodies) >= ECHO_MIN
    if not measured:
        return f"{method}: no answer whose skills' texts the records hold."
    repeats = [a for a, hit in measured if hit]
    rest = [a for a, hit in measured if not hit]
    n = len(measured)
    who = "chance wording" if control == "none" else f"{control}'s wording"
    notes = []
    if missing:
        notes.append(f"{missing} problem{'s' if missing != 1 else ''} shown a skill whose text the records do not hold")
    if mismatched:
        notes.append(f"{mismatched} curator decision{'s' if mismatched != 1 else ''} whose ops and calls differ in "
                     "number, not replayed")
    return (f"{method}: the answer repeats {ECHO_MIN}+ steps of a skill it was shown (4 words in a row, the "
            f"problem's own wording not counted) in {len(repeats)} of {n} problems ({pct(len(repeats), n)} %); "
            f"{control}'s answer to the same problem does so for the same skills in {chance} ({pct(chance, n)} %: "
            f"{who}); success when it repeats them {pct(sum(bool(r['success']) for r in repeats), len(repeats))} % "
            f"vs {pct(sum(bool(r['success']) for r in rest), len(rest))} % when not"
            + (f" ({'; '.join(notes)})." if notes else "."))
