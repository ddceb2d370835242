"""The curator's prompt and tool definitions (our own wording of the paper's §3.1 / App. A.1 design).

Plain functions with no I/O: the trainer imports `build_curator_messages` and `CURATOR_TOOLS` to
sample completions from its in-process policy with exactly the prompt the service uses.
"""

from __future__ import annotations

import json
import re
from typing import Any

SKILL_NAME_PATTERN = "^[a-z0-9]+(-[a-z0-9]+)*$"

_SKILL_NAME = {"type": "string", "description": "lowercase words joined by hyphens, e.g. heat-then-place",
               "maxLength": 64}
_CONTENT = {"type": "string", "description": (
    "the whole skill as Markdown: optional YAML frontmatter (name, description) then numbered steps, "
    "when to use it and how to recover from failure")}

CURATOR_TOOLS: list[dict[str, Any]] = [
    {"type": "function", "function": {
        "name": "new_skill_insert",
        "description": "Add a new reusable skill to the repository.",
        "parameters": {"type": "object", "properties": {"skill_name": _SKILL_NAME, "content": _CONTENT},
                       "required": ["skill_name", "content"]}}},
    {"type": "function", "function": {
        "name": "skill_update",
        "description": "Rewrite and/or rename an existing skill. Give new_content, new_name or both.",
        "parameters": {"type": "object", "properties": {
            "skill_name": {**_SKILL_NAME, "description": "the existing skill's name"},
            "new_name": {**_SKILL_NAME, "description": "optional new name"},
            "new_content": {**_CONTENT, "description": "optional replacement for the whole skill"}},
            "required": ["skill_name"]}}},
    {"type": "function", "function": {
        "name": "skill_delete",
        "description": "Remove a skill that is wrong, redundant or harmful.",
        "parameters": {"type": "object", "properties": {"skill_name": {**_SKILL_NAME,
                                                                       "description": "the skill to remove"}},
                       "required": ["skill_name"]}}},
]

# For backends without a tools API but with grammar-constrained JSON (llama.cpp, vLLM guided decoding):
# the same calls as one JSON object, every required argument enforced and names in skill-name syntax.
# A skill is written as fields — a description and 3 to 6 steps — which the parser renders as the
# SKILL.md content (`parsing.content_from_fields`): asked for one Markdown string, a 1.5B model writes
# a one-line "skill"; asked for steps, it writes steps. In this mode skill_update always rewrites the
# skill (renaming needs the tools API).
_NAME_PATTERN = "^[a-z0-9]+(-[a-z0-9]+){0,5}$"


def _call_schema(name: str, args: dict[str, Any]) -> dict[str, Any]:
    return {"type": "object", "properties": {
        "name": {"const": name},
        "arguments": {"type": "object", "properties": args, "required": list(args)}},
        "required": ["name", "arguments"]}


def curator_json_schema(min_calls: int = 0, max_calls: int = 2,
                        existing: list[str] | None = None) -> dict[str, Any]:
    """The JSON-mode schema with bounds on the number of calls.

    ``existing``: the names of the skills the curator was shown. When given, skill_update and
    skill_delete may only name one of them (with none, only new_skill_insert is offered): an edit of
    a skill the curator has not seen is refused by the repo anyway, and a small model asked to
    "improve the library" of an empty repo otherwise picks skill_update about half the time.
    """
    schema = json.loads(json.dumps(CURATOR_JSON_SCHEMA))
    calls = schema["properties"]["calls"]
    calls["minItems"] = min_calls
    calls["maxItems"] = max_calls
    if existing is not None:
        names = sorted({n for n in existing if re.fullmatch(_NAME_PATTERN[1:-1], n)})
        options = calls["items"]["anyOf"]
        if not names:
            calls["items"]["anyOf"] = [o for o in options if o["properties"]["name"]["const"] == "new_skill_insert"]
        else:
            for o in options:
                if o["properties"]["name"]["const"] != "new_skill_insert":
                    o["properties"]["arguments"]["properties"]["skill_name"] = {"enum": names}
    return schema


MIN_STEPS, MAX_STEPS = 3, 6
# Non-empty text (an empty description and empty steps make an empty skill, which the repo refuses),
# and bounded: a small model that starts repeating itself inside a string otherwise runs to max_tokens
# and leaves an unfinished call; cut at 200 chars it closes the string and finishes the object.
MAX_TEXT = 200
_SKILL_FIELDS = {"description": {"type": "string", "minLength": 8, "maxLength": MAX_TEXT},
                 "steps": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": MAX_TEXT},
                           "minItems": MIN_STEPS,
                           "maxItems": MAX_STEPS}}

CURATOR_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"calls": {"type": "array", "maxItems": 2, "items": {"anyOf": [
        _call_schema("new_skill_insert", {"skill_name": {"type": "string", "pattern": _NAME_PATTERN},
                                          **_SKILL_FIELDS}),
        _call_schema("skill_update", {"skill_name": {"type": "string", "pattern": _NAME_PATTERN},
                                      **_SKILL_FIELDS}),
        _call_schema("skill_delete", {"skill_name": {"type": "string", "pattern": _NAME_PATTERN}}),
    ]}}},
    "required": ["calls"],
}

SYSTEM_PROMPT = """You maintain a library of skills for an agent that solves tasks one after another in the same \
environment. A skill is a short Markdown procedure for one KIND of task: when it applies, the steps in \
the environment's own actions, and what to do when a step fails.

Good skills help the next tasks of the same kind:
- general: write OBJECT and PLACE (or the kind of thing) instead of this task's numbered items such as \
"apple 1" or "cabinet 3"; never paste the trajectory;
- concrete: every step is an action of the environment (for example "go to PLACE", "open PLACE", \
"take OBJECT from PLACE"), with where to look first;
- short: a first line saying when to use it, then 3 to 6 numbered steps (under 80 words);
- corrective: when the agent failed, write the step it missed or the mistake to avoid.

After each task you see what the agent did, whether it believes it succeeded, and the skills it was \
given. Then you edit the library with function calls:
- new_skill_insert(skill_name, content): add a skill for a kind of task the library does not cover yet;
- skill_update(skill_name, new_name?, new_content?): fix or improve a retrieved skill, e.g. add a \
missing step or a recovery for a failure you saw;
- skill_delete(skill_name): remove a retrieved skill that misled the agent or duplicates another.

Rules: skill_name is lowercase words joined by hyphens naming the kind of task (like \
clean-then-place). Only update or delete skills listed under "Retrieved skills". Make at most 2 calls, \
and none if the task taught nothing new.

Example of a good skill's content:
---
name: place-object
description: Put an object in or on a place.
---
Use when the task says "put OBJECT in/on PLACE".
1. Go to where OBJECT usually is (countertop, table, cabinet); open closed places to see inside.
2. take OBJECT from PLACE where you found it (the object the task names, not another).
3. go to the target PLACE.
4. move OBJECT to the target PLACE.
If an action gives "Nothing happens", check you hold OBJECT and stand at the right place."""

JSON_FORMAT_HINT = """Answer with one JSON object and nothing else. A skill is written as its description \
(when to use it) and its steps; skill_update gives the whole new skill the same way:
{"calls": [{"name": "new_skill_insert", "arguments": {"skill_name": "place-object", "description": \
"Put an object in or on a place.", "steps": ["Go to where OBJECT usually is; open closed places to see \
inside.", "take OBJECT from PLACE where you found it.", "go to the target PLACE.", "move OBJECT to the \
target PLACE."]}}]}"""

TEXT_FORMAT_HINT = """Write each call as <tool_call>{"name": "...", "arguments": {...}}</tool_call>."""

# Bounds on what goes into the prompt: the trajectory keeps its start and its end, where the
# useful signal (setup, then success or the failure loop) usually is.
MAX_TURNS_SHOWN = 20
MAX_FIELD_CHARS = 240
MAX_THOUGHT_CHARS = 160
MAX_SKILL_CHARS = 1500


def _clip(text: str, limit: int) -> str:
    text = (text or "").strip()
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _field(obj: Any, name: str, default: Any = "") -> Any:
    if isinstance(obj, dict):
        return obj.get(name, default)
    return getattr(obj, name, default)


def format_trajectory(trajectory: Any) -> str:
    turns = list(_field(trajectory, "turns", []) or [])
    lines: list[str] = []
    numbered: list[tuple[int, Any]] = list(enumerate(turns, start=1))
    if len(turns) > MAX_TURNS_SHOWN:
        head = MAX_TURNS_SHOWN // 3
        numbered = numbered[:head] + [(0, None)] + numbered[-(MAX_TURNS_SHOWN - head):]
    for number, turn in numbered:
        if turn is None:
            lines.append(f"... ({len(turns) - MAX_TURNS_SHOWN} turns omitted) ...")
            continue
        obs = _clip(_field(turn, "observation"), MAX_FIELD_CHARS)
        thought = _clip(_field(turn, "thought"), MAX_THOUGHT_CHARS)
        action = _clip(_field(turn, "action"), 200)
        valid = _field(turn, "valid", None)
        lines.append(f"Step {number}:")
        if obs:
            lines.append(f"  Observation: {obs}")
        if thought:
            lines.append(f"  Thought: {thought}")
        if action:
            lines.append(f"  Action: {action}" + (" (not accepted by the environment)" if valid is False else ""))
    answer = _field(trajectory, "final_answer", "")
    if answer:
        lines.append(f"Final answer: {_clip(answer, 2000)}")
    return "\n".join(lines) if lines else "(the agent took no steps)"


def format_skills(retrieved_skills: list[Any]) -> str:
    if not retrieved_skills:
        return "(none: the library had nothing relevant)"
    parts = []
    for skill in retrieved_skills:
        name = _field(skill, "name")
        content = _field(skill, "content") or _field(skill, "description")
        parts.append(f"### {name}\n{_clip(content, MAX_SKILL_CHARS)}")
    return "\n\n".join(parts)


def build_curator_messages(trajectory: Any, self_judged_success: bool, retrieved_skills: list[Any],
                           *, output_format: str = "tools") -> list[dict[str, str]]:
    """The chat messages for one curation decision.

    ``trajectory`` and the skills may be pydantic models or plain dicts. ``output_format`` adds the
    instruction for how to write calls: "tools" (the backend's tools API; nothing added), "json"
    (one JSON object, for grammar-constrained decoding) or "text" (<tool_call> tags).
    """
    system = SYSTEM_PROMPT
    if output_format == "json":
        system += "\n\n" + JSON_FORMAT_HINT
    elif output_format == "text":
        system += "\n\n" + TEXT_FORMAT_HINT
    outcome = "SUCCEEDED" if self_judged_success else "FAILED"
    user = (f"Task: {_clip(_field(trajectory, 'task'), 2000)}\n\n"
            f"What the agent did:\n{format_trajectory(trajectory)}\n\n"
            f"The agent judges that it {outcome}.\n\n"
            f"Retrieved skills:\n{format_skills(retrieved_skills)}\n\n"
            "Now edit the skill library.")
    return [{"role": "system", "content": system}, {"role": "user", "content": user}]


def tool_names() -> list[str]:
    return [t["function"]["name"] for t in CURATOR_TOOLS]


def tools_json() -> str:
    return json.dumps(CURATOR_TOOLS)
