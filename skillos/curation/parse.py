"""Reading the curator's function calls out of a completion. No I/O; never raises.

A call it cannot read comes back as a `ParsedCall` with ``error`` set, so it becomes a refused op
with a reason (and counts against r_fc) instead of a crash. Order of preference: the backend's
structured ``tool_calls``; else ``<tool_call>`` tags; else JSON (fenced blocks or bare objects, in
the shapes small models tend to print); else Python-style calls such as ``skill_delete(skill_name="x")``.

Parsing only reads; whether a call is a valid op is `validate.validate`'s job.
"""

from __future__ import annotations

import ast
import json
import re
from typing import Any, Literal

import yaml
from pydantic import BaseModel, Field

from skillos.curation.ops import OP_NAMES, parameters


class ParsedCall(BaseModel):
    """One function call read from a completion: a name and arguments, or why it could not be read."""

    name: str | None = None
    arguments: dict[str, Any] = Field(default_factory=dict)
    source: Literal["tools", "json", "tag", "text"] = "tools"
    error: str | None = None
    raw: str = ""

    @property
    def ok(self) -> bool:
        return self.error is None


_THINK = re.compile(r"<think>.*?(</think>|$)", re.DOTALL)
_TAG = re.compile(r"<tool_call>(.*?)(?:</tool_call>|$)", re.DOTALL)
_FENCE = re.compile(r"```(?:json|JSON)?\s*(.*?)```", re.DOTALL)
_PYCALL = re.compile(r"\b(" + "|".join(OP_NAMES) + r")\s*\(")
# names the small models use for the same tools (the paper's figure uses insert_skill etc.)
_ALIASES = {"insert_skill": "new_skill_insert", "skill_insert": "new_skill_insert",
            "new_skill": "new_skill_insert", "add_skill": "new_skill_insert",
            "update_skill": "skill_update", "delete_skill": "skill_delete", "remove_skill": "skill_delete"}
_ARG_ALIASES = {"name": "skill_name", "skill": "skill_name", "body": "content", "text": "content"}

MAX_CALLS = 8  # more than this in one decision is runaway generation: the rest are refused


def _canonical_name(name: Any) -> str | None:
    if not isinstance(name, str):
        return None
    name = name.strip()
    return _ALIASES.get(name, name)


def _from_obj(obj: Any, source: str, raw: str) -> list[ParsedCall]:
    """One decoded JSON value → calls. Accepts {"calls": [...]}, a list, {"name", "arguments"},
    {"function": {...}} and {"new_skill_insert": {...}}."""
    if isinstance(obj, list):
        out: list[ParsedCall] = []
        for item in obj:
            out.extend(_from_obj(item, source, json.dumps(item, ensure_ascii=False)))
        return out
    if not isinstance(obj, dict):
        return [ParsedCall(source=source, raw=raw, error="expected a JSON object describing a call")]
    for key in ("calls", "tool_calls", "function_calls"):
        if isinstance(obj.get(key), list):
            return _from_obj(obj[key], source, raw)
    if isinstance(obj.get("function"), dict):
        obj = obj["function"]
    name = _canonical_name(obj.get("name"))
    if name is None and len(obj) == 1:
        (only_key, value), = obj.items()
        if _canonical_name(only_key) in OP_NAMES and isinstance(value, dict):
            name, obj = _canonical_name(only_key), {"arguments": value}
    if name is None:
        return [ParsedCall(source=source, raw=raw, error="call has no function name")]
    args = obj.get("arguments", obj.get("parameters", obj.get("args")))
    if isinstance(args, str):
        try:
            args = json.loads(args)
        except json.JSONDecodeError as e:
            return [ParsedCall(name=name, source=source, raw=raw, error=f"arguments are not valid JSON: {e.msg}")]
    if args is None:
        # flat form {"name": "skill_delete", "skill_name": "x"}
        args = {k: v for k, v in obj.items() if k not in ("name", "type", "id")}
    if not isinstance(args, dict):
        return [ParsedCall(name=name, source=source, raw=raw, error="arguments must be a JSON object")]
    return [ParsedCall(name=name, arguments=args, source=source, raw=raw)]


def decode_json_values(text: str) -> tuple[list[Any], str | None]:
    """Every top-level JSON object or array in ``text``, scanning left to right.
    Returns the values and, if an object started but never closed, a note that it was cut off."""
    decoder = json.JSONDecoder()
    values: list[Any] = []
    cut_off = None
    i = 0
    while i < len(text):
        if text[i] not in "{[":
            i += 1
            continue
        try:
            value, end = decoder.raw_decode(text, i)
        except json.JSONDecodeError:
            i += 1
            continue
        if isinstance(value, (dict, list)) and value:
            values.append(value)
        i = end
    if not values and "{" in text and not text.rstrip().endswith(("}", "]")):
        cut_off = "the completion ended before the JSON call was complete (raise max_tokens or shorten skills)"
    return values, cut_off


def _lenient_json(text: str) -> Any:
    """Strict JSON, else YAML flow syntax (single quotes, trailing commas are common in small models)."""
    try:
        return json.loads(text)
    except json.JSONDecodeError:
        pass
    if not text.lstrip().startswith(("{", "[")):
        return None
    try:
        value = yaml.safe_load(text)
    except yaml.YAMLError:
        return None
    return value if isinstance(value, (dict, list)) else None


def _parse_tagged(content: str) -> list[ParsedCall]:
    out: list[ParsedCall] = []
    for match in _TAG.finditer(content):
        body = match.group(1).strip()
        value = _lenient_json(body)
        if value is None:
            values, cut = decode_json_values(body)
            if not values:
                out.append(ParsedCall(source="tag", raw=body,
                                      error=cut or "<tool_call> does not contain a JSON object"))
                continue
            value = values
        out.extend(_from_obj(value, "tag", body))
    return out


def _parse_json(content: str) -> list[ParsedCall]:
    out: list[ParsedCall] = []
    blocks = [m.group(1) for m in _FENCE.finditer(content)] or [content]
    for block in blocks:
        whole = _lenient_json(block.strip())
        if whole is not None:
            out.extend(_from_obj(whole, "json", block.strip()))
            continue
        values, cut = decode_json_values(block)
        for value in values:
            if isinstance(value, dict) and not any(k in value for k in ("name", "function", "calls", *OP_NAMES,
                                                                          *_ALIASES)):
                continue  # a stray JSON object inside prose, not a call
            out.extend(_from_obj(value, "json", json.dumps(value, ensure_ascii=False)))
        if not values and cut:
            out.append(ParsedCall(source="json", raw=block[-500:], error=cut))
    return out


def _parse_python_calls(content: str) -> list[ParsedCall]:
    out: list[ParsedCall] = []
    for match in _PYCALL.finditer(content):
        name = match.group(1)
        start = match.start()
        # grow the candidate to each ")" until it parses as a call expression
        end = content.find(")", match.end())
        call = None
        while end != -1:
            snippet = content[start:end + 1]
            try:
                node = ast.parse(snippet, mode="eval").body
                call = node if isinstance(node, ast.Call) else None
                break
            except SyntaxError:
                end = content.find(")", end + 1)
        if call is None:
            out.append(ParsedCall(name=name, source="text", raw=content[start:start + 300],
                                  error=f"could not read the arguments of {name}(...)"))
            continue
        try:
            args = {kw.arg: ast.literal_eval(kw.value) for kw in call.keywords if kw.arg}
            positional = [ast.literal_eval(a) for a in call.args]
        except (ValueError, SyntaxError):
            out.append(ParsedCall(name=name, source="text", raw=snippet[:300],
                                  error=f"arguments of {name}(...) must be literal strings"))
            continue
        for key, value in zip(parameters(name), positional):   # positional: the signature's order
            args.setdefault(key, value)
        out.append(ParsedCall(name=name, arguments=args, source="text", raw=snippet[:300]))
    return out


_NUMBERING = re.compile(r"^\s*(?:\d+[.)]|[-*•])\s*")


def content_from_fields(name: str, description: Any, steps: Any) -> str:
    """The SKILL.md content of a skill given as fields (the JSON mode's description + steps)."""
    lines = [_NUMBERING.sub("", s).strip() for s in steps if isinstance(s, str)] if isinstance(steps, list) else []
    body = "\n".join(f"{i}. {line}" for i, line in enumerate((x for x in lines if x), 1))
    description = description.strip() if isinstance(description, str) else ""
    return f"---\nname: {name}\ndescription: {json.dumps(description)}\n---\n{body}\n" if description else body


def _fields_to_content(call: ParsedCall) -> None:
    """description + steps → content (new_skill_insert) or new_content (skill_update)."""
    args = call.arguments
    if "steps" not in args or call.name not in ("new_skill_insert", "skill_update"):
        return
    target = "content" if call.name == "new_skill_insert" else "new_content"
    if not args.get(target):
        args[target] = content_from_fields(str(args.get("skill_name") or ""), args.get("description"),
                                           args.get("steps"))
    args.pop("steps", None)
    args.pop("description", None)


def parse_curator_output(content: str | None, tool_calls: list[dict[str, Any]] | None) -> list[ParsedCall]:
    """All calls in one completion. Never raises; unreadable calls carry ``error``."""
    calls: list[ParsedCall] = []
    for tc in tool_calls or []:
        raw = json.dumps(tc, ensure_ascii=False) if not isinstance(tc, str) else tc
        calls.extend(_from_obj(tc, "tools", raw) if isinstance(tc, dict) else
                     [ParsedCall(source="tools", raw=raw, error="tool call is not an object")])
    if not calls:
        text = _THINK.sub("", content or "").strip()
        if text:
            calls = _parse_tagged(text) if "<tool_call>" in text else []
            if not calls:
                calls = _parse_json(text)
            if not calls:
                calls = _parse_python_calls(text)
            if not calls and any(name in text for name in (*OP_NAMES, *_ALIASES)):
                calls = [ParsedCall(source="text", raw=text[:500],
                                    error="the completion names a tool but no call could be read from it")]
    for call in calls:
        if call.name is not None:
            call.name = _canonical_name(call.name)
            if call.error is None and call.name not in OP_NAMES:
                call.error = f"unknown function {call.name!r}; use one of {', '.join(OP_NAMES)}"
        call.arguments = {_ARG_ALIASES.get(k, k): v for k, v in call.arguments.items()}
        _fields_to_content(call)
    for call in calls[MAX_CALLS:]:
        call.error = call.error or f"more than {MAX_CALLS} calls in one decision"
    return calls
