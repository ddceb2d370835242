"""A won episode as a worked example: the actions that mattered, with what came back, nothing else.

`compress(env, task, turns, ...)` takes the episode's turns (each: the observation before the action,
the action, whether the env took it, the thought) and keeps, per environment:

- ALFWorld (also a gateway agent whose actions are ALFWorld's): drops refused and no-progress actions
  (look, examine, inventory, close), a take undone by putting the object back where it was, and every
  visit to a place where nothing was taken, put, changed or used: those places become a note on the next
  kept step ("searched first: cabinet 1, drawer 2"). What stays is the path an expert would walk, plus
  the fact that the object had to be searched for.
- WebShop: the last search and what followed it (earlier searches led nowhere), without refused actions.
- single-turn reasoning: the answer with its reasoning, clipped.
- anything else (gateway traffic): the steps without refused ones and exact repeats.

Observations keep their first line, clipped. Pure functions; the caller decides whether the episode
was a success and says where that came from (``source``).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from skillos.acting.state import NO_PROGRESS as _NO_PROGRESS
from skillos.textguard import without_lone_surrogates
from skillos.worked_examples.kinds import task_kind
from skillos.worked_examples.model import (
    MAX_ACTION,
    MAX_NOTE,
    MAX_OBSERVATION,
    MAX_STEPS,
    MAX_TASK,
    MAX_THOUGHT,
    ExampleStep,
    OutcomeSource,
    WorkedExample,
)

DONE = "(task done)"
_REFUSED = ("nothing happens", "invalid action", "invalid")
_ALFWORLD_ACTION = re.compile(
    r"^(go to|open|close|take|move|put|heat|cool|clean|use|slice|examine|look|inventory|toggle)\b")
# the actions that change the world (the rest move the agent or only show it something)
_PRODUCTIVE = re.compile(r"^(take|move|put|heat|cool|clean|use|slice|toggle)\b")
_TAKE = re.compile(r"^take (.+?) from (.+)$")
_MOVE = re.compile(r"^(?:move|put) (.+?) (?:to|in|on|into|onto) (.+)$")
_WITH = re.compile(r"^(?:heat|cool|clean|slice) .+? with (.+)$")


def _get(turn: Any, name: str, default: Any = "") -> Any:
    return turn.get(name, default) if isinstance(turn, dict) else getattr(turn, name, default)


def _clip(text: str, limit: int) -> str:
    # untrusted text (an agent's messages through the gateway): no NUL or lone surrogate reaches the repo
    text = " ".join(without_lone_surrogates((text or "").replace("\x00", " ")).split())
    return text if len(text) <= limit else text[:limit - 2] + " …"


def _first_line(text: str) -> str:
    """What came back, as a reader needs it: its first non-empty line (an agent's observation message may
    go on with the list of actions), clipped."""
    for line in (text or "").splitlines():
        if line.strip():
            return _clip(line, MAX_OBSERVATION)
    return ""


def _refused(observation: str) -> bool:
    return observation.strip().lower().startswith(_REFUSED)


def _pairs(turns: Sequence[Any]) -> list[tuple[str, str, str, bool]]:
    """(action, what came back, thought, taken) per turn: what came back is the next turn's observation,
    the last action's is `DONE` (the episode was won by it). A last turn without an action (the gateway's
    report of the outcome) is not one: the action before it won."""
    turns = list(turns)
    while turns and not str(_get(turns[-1], "action") or "").strip():
        turns.pop()
    out = []
    for i, t in enumerate(turns):
        answer = _get(turns[i + 1], "observation") if i + 1 < len(turns) else DONE
        valid = _get(t, "valid", True)
        action = str(_get(t, "action") or "").strip()
        if action:
            out.append((action, str(answer or ""), str(_get(t, "thought") or ""), valid is not False))
    return out


def looks_like_alfworld(actions: Sequence[str]) -> bool:
    """Every action is one of ALFWorld's (a gateway agent playing it)."""
    return bool(actions) and all(_ALFWORLD_ACTION.match(a.strip().lower()) for a in actions)


def _place_of(action: str, at: str | None) -> str | None:
    """Where a productive action happens: the place it names, else (use, toggle) where the agent stands."""
    low = action.lower()
    for pattern, group in ((_TAKE, 2), (_MOVE, 2), (_WITH, 1)):
        if m := pattern.match(low):
            return m.group(group).strip()
    return at


def _alfworld(pairs: list[tuple[str, str, str, bool]]) -> list[ExampleStep]:
    last = len(pairs) - 1
    # 1. refused actions and those that only show what was seen
    kept = [(i, a, o) for i, (a, o, _, ok) in enumerate(pairs)
            if i == last or (ok and not _refused(o) and not a.lower().startswith(_NO_PROGRESS))]
    # 2. a take undone: the same object put back where it was taken from, nothing done with it between
    undone: set[int] = set()
    for n, (i, a, _) in enumerate(kept):
        if (m := _TAKE.match(a.lower())) and i != last:
            obj, place = m.group(1), m.group(2)
            for j, b, _ in kept[n + 1:]:
                if obj in b.lower():
                    mv = _MOVE.match(b.lower())
                    if mv and mv.group(1) == obj and mv.group(2) == place and j != last:
                        undone |= {i, j}
                    break
    kept = [k for k in kept if k[0] not in undone]
    # 3. the places that mattered: where something was taken, put, changed or used
    at: str | None = None
    useful: set[int] = set()
    for n, (i, a, _) in enumerate(kept):
        low = a.lower()
        if low.startswith("go to "):
            at = low.removeprefix("go to ").strip()
            if i != last:   # a look task can be won by arriving where the lamp is, the object in hand
                continue
            useful.add(i)
            continue
        if _PRODUCTIVE.match(low) or i == last:
            useful.add(i)
            place = _place_of(a, at)
            # the visit that led here: the last "go to" this place (and an "open" of it) before the action
            for j, b, _ in reversed(kept[:n]):
                bl = b.lower()
                if bl == f"open {place}":
                    useful.add(j)
                elif bl.startswith("go to "):
                    if bl.removeprefix("go to ").strip() == place:
                        useful.add(j)
                    break
    steps: list[ExampleStep] = []
    searched: list[str] = []
    for i, a, o in kept:
        if i not in useful:
            if a.lower().startswith("go to "):
                place = a[6:].strip()
                if place not in searched:
                    searched.append(place)
            continue
        note = _clip("searched first: " + ", ".join(searched), MAX_NOTE) if searched else ""
        searched = []
        steps.append(ExampleStep(action=_clip(a, MAX_ACTION), observation=_first_line(o), note=note))
    return steps


def _webshop(pairs: list[tuple[str, str, str, bool]]) -> list[ExampleStep]:
    searches = [i for i, (a, *_) in enumerate(pairs) if a.lower().startswith("search[")]
    start = searches[-1] if searches else 0
    return [ExampleStep(action=_clip(a, MAX_ACTION), observation=_first_line(o))
            for i, (a, o, _, ok) in enumerate(pairs)
            if i >= start and (i == len(pairs) - 1 or (ok and not _refused(o)))]


def _generic(pairs: list[tuple[str, str, str, bool]]) -> list[ExampleStep]:
    steps: list[ExampleStep] = []
    seen: set[tuple[str, str]] = set()
    for i, (a, o, _, ok) in enumerate(pairs):
        final = i == len(pairs) - 1
        key = (a.strip(), o.strip())
        if not final and (not ok or _refused(o) or key in seen):
            continue
        seen.add(key)
        steps.append(ExampleStep(action=_clip(a, MAX_ACTION), observation=_first_line(o)))
    return steps


def compress(env: str, task: str, turns: Sequence[Any], *, final_answer: str = "", source: OutcomeSource = "env",
             trajectory: str = "") -> WorkedExample | None:
    """The worked example of a won episode (None when nothing is left to show: no action at all).

    ``turns``: objects or dicts with ``observation`` (before the action), ``action``, ``valid`` and
    ``thought``; the last one's action won the episode. ``final_answer``: a single-turn task's answer."""
    task = _clip(task, MAX_TASK)
    if not task:
        return None
    pairs = _pairs(turns)
    if env == "reasoning" or (not pairs and final_answer):
        answer = final_answer or (pairs[-1][0] if pairs else "")
        if not answer.strip():
            return None
        thought = pairs[-1][2] if pairs else ""
        steps = [ExampleStep(action=_clip(answer, MAX_ACTION), observation="(correct)",
                             thought=_clip(thought, MAX_THOUGHT))]
    elif not pairs:
        return None
    elif env == "alfworld" or looks_like_alfworld([a for a, *_ in pairs]):
        steps = _alfworld(pairs)
        env = env if env != "gateway" else "alfworld"
    elif env == "webshop":
        steps = _webshop(pairs)
    else:
        steps = _generic(pairs)
    if not steps:
        return None
    if len(steps) > MAX_STEPS:   # the start and the end: where the search began and how the task was done
        head = MAX_STEPS // 3
        skipped = len(steps) - MAX_STEPS
        tail = steps[-(MAX_STEPS - head):]
        note = "; ".join(x for x in (f"{skipped} more actions", tail[0].note) if x)
        tail[0] = tail[0].model_copy(update={"note": _clip(note, MAX_NOTE)})
        steps = steps[:head] + tail
    return WorkedExample(task=task, env=env[:32], kind=task_kind(env, task), steps=steps, taken=len(pairs),
                         source=source, trajectory=trajectory[:200]).finish(stamp=False)
