"""Reading the thought and the action out of a model's completion.

A completion in the JSON action format (``{"thought": ..., "action": ...}``, asked for with a JSON schema
whose action is one of the admissible actions) is read as such. Otherwise the rule (documented in docs/llm-backends.md and the executor's OpenAPI description):

1. The thought is the text inside ``<think>...</think>``; without those tags, everything before
   ``<action>``.
2. The action is the text inside the LAST ``<action>...</action>`` (an unclosed ``<action>`` runs to the
   end of its line). Without tags, a line starting ``Action:`` is used, else the last non-empty line.
3. With a list of admissible actions:
   - a case/space-insensitive exact match is sent as that admissible action (``parse="exact"``);
   - else the closest admissible action by fuzzy matching, if it scores at least ``FUZZY_MIN`` and
     names the same numbers (``parse="fuzzy"``): small models write ``go to the countertop 1`` for
     ``go to countertop 1``, but ``cabinet 9`` must never become ``cabinet 2``;
   - else free-form actions the env accepts by pattern (WebShop ``search[...]``) go as written
     (``parse="free"``);
   - else the action is sent to the environment AS WRITTEN and the turn is marked invalid
     (``parse="unmatched"``): the env answers "Nothing happens." and the step counts, as in GiGPO.
4. An empty action (empty completion, or empty tags) sends the placeholder ``NO_ACTION``, which no
   environment accepts, and the turn is invalid (``parse="empty"``).
Without an admissible list (``/v1/act`` may omit it) the action goes as written (``parse="free"``).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass

from thefuzz import fuzz, process

FUZZY_MIN = 85
MAX_ACTION_CHARS = 300
NO_ACTION = "(no action)"

_THINK = re.compile(r"<think>(.*?)(?:</think>|$)", re.DOTALL | re.IGNORECASE)
_ACTION_CLOSED = re.compile(r"<action>(.*?)</action>", re.DOTALL | re.IGNORECASE)
_ACTION_OPEN = re.compile(r"<action>([^\n<]*)", re.IGNORECASE)
_ACTION_LINE = re.compile(r"^\s*(?:\*\*)?action(?:\*\*)?\s*[:：]\s*(.+)$", re.IGNORECASE | re.MULTILINE)
_FREEFORM = re.compile(r"^(search)\[.+\]$", re.IGNORECASE)
_SPACES = re.compile(r"\s+")
_NUMBERS = re.compile(r"\d+")


@dataclass
class ParsedAction:
    action: str  # what is sent to the environment
    raw_action: str  # what the model wrote
    thought: str
    valid: bool | None  # None: no admissible list to check against
    parse: str  # exact | fuzzy | free | unmatched | empty


def normalize(action: str) -> str:
    a = _SPACES.sub(" ", action.strip().strip("`\"'").strip())
    return a.rstrip(".").strip().lower()


def _json_decision(text: str) -> tuple[str, str] | None:
    """(thought, action) of a JSON decision ``{"thought": ..., "action": ...}`` (the executor's JSON
    action format), or None when the completion is not one."""
    stripped = text.strip()
    if not stripped.startswith("{"):
        return None
    try:
        data = json.loads(stripped)
    except ValueError:
        return None
    if not isinstance(data, dict) or not isinstance(data.get("action"), str):
        return None
    thought = data.get("thought")
    return (thought if isinstance(thought, str) else "").strip(), data["action"].strip()[:MAX_ACTION_CHARS]


def split_completion(text: str) -> tuple[str, str]:
    """(thought, raw action) from a completion; either may be empty."""
    text = text or ""
    decision = _json_decision(text)
    if decision is not None:
        return decision
    closed = _ACTION_CLOSED.findall(text)
    if closed:
        action = closed[-1]
    else:
        opened = _ACTION_OPEN.findall(text)
        if opened and opened[-1].strip():
            action = opened[-1]
        else:
            lines = _ACTION_LINE.findall(text)
            if lines:
                action = lines[-1]
            else:
                rest = [ln for ln in _THINK.sub("", text).splitlines() if ln.strip()]
                action = rest[-1] if rest else ""
    think = _THINK.search(text)
    if think:
        thought = think.group(1)
    else:
        cut = text.lower().find("<action>")
        thought = text[:cut] if cut >= 0 else ""
    action = re.sub(r"</?(think|action)>", "", action, flags=re.IGNORECASE)
    return thought.strip(), action.strip()[:MAX_ACTION_CHARS]


def match_admissible(raw: str, admissible: list[str] | None) -> tuple[str, bool | None, str]:
    """(action to send, valid, parse kind) for a raw action against the admissible list."""
    norm = normalize(raw)
    if not norm:
        return NO_ACTION, False, "empty"
    if admissible is None:
        return _SPACES.sub(" ", raw.strip()), None, "free"
    by_norm = {normalize(a): a for a in admissible}
    if norm in by_norm:
        return by_norm[norm], True, "exact"
    if _FREEFORM.match(norm) and any(normalize(a).startswith("search[") for a in admissible):
        return _SPACES.sub(" ", raw.strip()), True, "free"
    # fuzzy candidates must name the same numbered objects: "cabinet 9" is never "cabinet 2"
    numbers = _NUMBERS.findall(norm)
    candidates = [a for a in by_norm if _NUMBERS.findall(a) == numbers]
    if candidates:
        best = process.extractOne(norm, candidates, scorer=fuzz.ratio)
        if best and best[1] >= FUZZY_MIN:
            return by_norm[best[0]], True, "fuzzy"
    return _SPACES.sub(" ", raw.strip()), False, "unmatched"


def parse_action(completion: str, admissible: list[str] | None) -> ParsedAction:
    thought, raw = split_completion(completion)
    action, valid, kind = match_admissible(raw, admissible)
    return ParsedAction(action=action, raw_action=raw, thought=thought, valid=valid, parse=kind)
