"""Whether single-turn answers follow their skills: the usage measure of a reasoning run, read off its records.

A reasoning answer takes no action a skill could spell out and rarely names a skill, so the live "used" measure
of runs recorded before `skillos.stream.step.echoed_steps` existed reads 0 there. This reads it again from the
records: the skill texts each answer was shown (a curated stream's, replayed from its curator's calls in order;
gold's, from its files), and the steps of them the answer echoes. The control is the No Memory answer to the
same problem, measured against the same skills: what the wording of the problem and of a plain answer echo by
chance.
"""

from __future__ import annotations

from collections.abc import Iterable

from skillos.curation.parse import parse_curator_output
from skillos.methods.gold import GOLD_DIRS, gold_skills
from skillos.skills import parse
from skillos.stream.step import ECHO_MIN, echoed_steps


def curated_texts(records: Iterable[dict]) -> dict[tuple[str, str, int], str]:
    """(repo, skill, version) -> body, for every version a curated stream's applied ops wrote.

    A record's ops are its curator's parsed calls judged in order, so the k-th applied op on a skill is the k-th
    call that names it (calls the parser could not read never became ops)."""
    out: dict[tuple[str, str, int], str] = {}
    for r in sorted(records, key=lambda r: r["position"]):
        calls = parse_curator_output(r.get("curator_completion") or "", None)
        pending: dict[tuple[str, str], list[dict]] = {}
        for call in calls:
            pending.setdefault((call.name or "", str(call.arguments.get("skill_name") or "")), []).append(
                call.arguments)
        for op in r.get("ops") or []:
            queue = pending.get((op.get("name") or "", op.get("skill_name") or ""))
            args = queue.pop(0) if queue else None
            if not op.get("applied") or args is None or op.get("version") is None:
                continue
            content = args.get("content") or args.get("new_content")
            if content:
                out[(str(r.get("repo")), op["skill_name"], int(op["version"]))] = parse(content).body
    return out


def _answer(record: dict) -> str:
    turns = record.get("turns") or []
    return "\n".join(f"{t.get('thought') or ''}\n{t.get('action') or ''}" for t in turns)


def _bodies(record: dict, curated: dict, gold: dict[str, str]) -> list[str]:
    bodies = []
    for skill in record.get("retrieved") or []:
        body = gold.get(skill["name"]) if record.get("method") == "gold" else \
            curated.get((str(record.get("repo")), skill["name"], int(skill.get("version") or 0)))
        if body:
            bodies.append(body)
    return bodies


def _echoes(record: dict, bodies: list[str]) -> int:
    return max(echoed_steps(_answer(record), body, record.get("instruction") or "") for body in bodies)


def _pct(part: int, whole: int) -> str:
    return f"{100 * part / whole:.1f}" if whole else "–"


def echo_line(method: str, control: str, pairs: list[tuple[dict, dict]], env: str = "reasoning") -> str:
    """One sentence: how often ``method``'s answers echo ECHO_MIN steps of a skill they were shown, against the
    ``control`` answers to the same problems measured on the same skills; success when echoed or not."""
    curated = curated_texts(a for a, _ in pairs) if method != "gold" else {}
    gold = {d.name: d.body for d in gold_skills(GOLD_DIRS[env])} if method == "gold" and env in GOLD_DIRS else {}
    measured, followed, chance, missing = [], [], 0, 0
    for a, b in pairs:
        if not a.get("retrieved"):
            continue
        bodies = _bodies(a, curated, gold)
        if len(bodies) < len(a["retrieved"]):
            missing += 1
        if not bodies:
            continue
        measured.append(a)
        if _echoes(a, bodies) >= ECHO_MIN:
            followed.append(a)
        chance += _echoes(b, bodies) >= ECHO_MIN
    shown = len(measured)
    if not shown:
        return f"{method}: no answer whose skills' texts the records hold."
    won = sum(bool(r["success"]) for r in followed)
    rest = [a for a in measured if a not in followed]
    return (f"{method}: the answer repeats {ECHO_MIN}+ steps of a skill it was shown (4 words in a row, the "
            f"problem's own wording not counted) in {len(followed)} of {shown} problems ({_pct(len(followed), shown)} %); "
            f"{control}'s answer to the same problem does so for the same skills in {chance} ({_pct(chance, shown)} %: "
            f"chance wording); success when it repeats them {_pct(won, len(followed))} % vs "
            f"{_pct(sum(bool(r['success']) for r in rest), len(rest))} % when not"
            + (f" ({missing} problems shown a skill version the records do not hold)." if missing else "."))
