"""What the LLM is asked to produce: the tools definition and the JSON-mode schema, both from `ops`.

Two output surfaces for the same three ops:
  * tools mode: `CURATOR_TOOLS`, the OpenAI ``tools`` definition, generated field by field from the
    op classes (names, descriptions, required arguments);
  * JSON mode, for backends with grammar-constrained JSON but no tools API (llama.cpp, vLLM guided
    decoding): `curator_json_schema`, one object ``{"calls": [{"name", "arguments"}, ...]}``.

The generated JSON is pinned byte for byte by tests/curator/data/golden_*.json: the trainer compiles
the JSON-mode schema into token masks, and a changed schema is a changed policy.
"""

from __future__ import annotations

import copy
import re
from typing import Any

from skillos.curation.ops import OP_NAMES, OP_TYPES, description, parameters, required


def _tool(name: str) -> dict[str, Any]:
    fields = OP_TYPES[name].model_fields
    properties = {p: {"type": "string", "description": fields[p].description, **(fields[p].json_schema_extra or {})}
                  for p in parameters(name)}
    return {"type": "function", "function": {
        "name": name, "description": description(name),
        "parameters": {"type": "object", "properties": properties, "required": required(name)}}}


CURATOR_TOOLS: list[dict[str, Any]] = [_tool(name) for name in OP_NAMES]

# ---- JSON mode ----------------------------------------------------------------------------------
# A skill is written as fields — a description and 3 to 6 steps — which the parser renders as the
# SKILL.md content (`parse.content_from_fields`): asked for one Markdown string, a 1.5B model writes
# a one-line "skill"; asked for steps, it writes steps. In this mode skill_update always rewrites the
# skill (renaming needs the tools API).
#
# The name pattern is the skill-name syntax (`skillos.skills.NAME_RE`) bounded to six words: under a
# grammar, an unbounded repetition lets a small model run on inside the name until max_tokens.
_NAME_PATTERN = "^[a-z0-9]+(-[a-z0-9]+){0,5}$"

MIN_STEPS, MAX_STEPS = 3, 6
# Non-empty text (an empty description and empty steps make an empty skill, which the repo refuses),
# and bounded: a small model that starts repeating itself inside a string otherwise runs to max_tokens
# and leaves an unfinished call; cut at 200 chars it closes the string and finishes the object.
MAX_TEXT = 200
_SKILL_FIELDS = {"description": {"type": "string", "minLength": 8, "maxLength": MAX_TEXT},
                 "steps": {"type": "array", "items": {"type": "string", "minLength": 3, "maxLength": MAX_TEXT},
                           "minItems": MIN_STEPS,
                           "maxItems": MAX_STEPS}}


def writes_content(name: str) -> bool:
    """Whether the op carries a skill's text (insert, update): in JSON mode as description + steps."""
    return any(p in ("content", "new_content") for p in parameters(name))


def _call_schema(name: str) -> dict[str, Any]:
    args: dict[str, Any] = {"skill_name": {"type": "string", "pattern": _NAME_PATTERN}}
    if writes_content(name):
        args.update(_SKILL_FIELDS)
    return {"type": "object", "properties": {
        "name": {"const": name},
        "arguments": {"type": "object", "properties": args, "required": list(args)}},
        "required": ["name", "arguments"]}


CURATOR_JSON_SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {"calls": {"type": "array", "maxItems": 2,
                             "items": {"anyOf": [_call_schema(name) for name in OP_NAMES]}}},
    "required": ["calls"],
}


def curator_json_schema(min_calls: int = 0, max_calls: int = 2,
                        existing: list[str] | None = None) -> dict[str, Any]:
    """The JSON-mode schema with bounds on the number of calls.

    ``existing``: the names of the skills the curator was shown. When given, skill_update and
    skill_delete may only name one of them (with none, only new_skill_insert is offered): an edit of
    a skill the curator has not seen is refused by the repo anyway, and a small model asked to
    "improve the library" of an empty repo otherwise picks skill_update about half the time.
    """
    schema = copy.deepcopy(CURATOR_JSON_SCHEMA)
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

