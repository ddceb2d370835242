"""Turning untrusted skill content into safe HTML: Markdown bodies, frontmatter fields, diffs.

Skill names, descriptions and bodies are LLM output. Bodies go through markdown-it-py with raw HTML
off (a ``<script>`` or an ``onerror=`` attribute in a body comes out as visible text), its link
validation (no ``javascript:``/``vbscript:``/``file:``/``data:`` URLs except images) and external
links marked ``rel="nofollow noopener noreferrer"``. Everything else goes through Jinja's
autoescaping. The console's Content-Security-Policy forbids inline script as a second line.
"""

from __future__ import annotations

import difflib
import json
import time
from dataclasses import dataclass
from datetime import datetime
from typing import Any
from urllib.parse import quote

from markdown_it import MarkdownIt
from markupsafe import Markup

from skillos.skills import SkillFormatError, split_frontmatter

_md = MarkdownIt("commonmark", {"html": False, "linkify": False, "typographer": False}).enable("table")
_default_link_open = _md.renderer.rules.get("link_open")


def _link_open(tokens, idx, options, env):
    tokens[idx].attrSet("rel", "nofollow noopener noreferrer")
    if _default_link_open is not None:
        return _default_link_open(tokens, idx, options, env)
    return _md.renderer.renderToken(tokens, idx, options, env)


_md.add_render_rule("link_open", _link_open)


def seg(value: Any) -> str:
    """A value as one URL path segment (skill and repo names come from the skill repo, untrusted)."""
    return quote(str(value), safe="")


def markdown(text: str) -> Markup:
    """Markdown to HTML with raw HTML escaped (markdown-it-py's output is safe to mark up as is)."""
    return Markup(_md.render(text or ""))


@dataclass
class SkillView:
    """A skill document split into its frontmatter fields and body, for display."""
    name: str
    description: str
    fields: list[tuple[str, str]]   # further frontmatter keys, as text
    body: str
    parsed: bool                    # False: the document could not be split; ``body`` is the raw text


def field_text(value: Any) -> str:
    if isinstance(value, str):
        return value
    return json.dumps(value, ensure_ascii=False, default=str)


def skill_view(content: str) -> SkillView:
    try:
        front, body = split_frontmatter(content or "")
    except SkillFormatError:
        return SkillView("", "", [], content or "", False)
    front = front or {}
    fields = [(str(k), field_text(v)) for k, v in front.items() if k not in ("name", "description")]
    return SkillView(field_text(front.get("name", "")), field_text(front.get("description", "")), fields,
                     body, True)


@dataclass
class DiffLine:
    kind: str               # equal | delete | insert | skip
    left_no: int | None
    right_no: int | None
    text: str


def diff_lines(a: str, b: str, context: int = 3) -> tuple[list[DiffLine], int, int]:
    """A unified diff of two documents as rows (hunks separated by ``skip`` rows); (+lines, -lines)."""
    left, right = (a or "").splitlines(), (b or "").splitlines()
    matcher = difflib.SequenceMatcher(None, left, right, autojunk=False)
    rows: list[DiffLine] = []
    added = removed = 0
    for gi, group in enumerate(matcher.get_grouped_opcodes(context)):
        if gi > 0 or (group and (group[0][1] > 0 or group[0][3] > 0)):
            rows.append(DiffLine("skip", None, None, "⋯"))
        for tag, i1, i2, j1, j2 in group:
            if tag == "equal":
                rows += [DiffLine("equal", i + 1, j1 + (i - i1) + 1, left[i]) for i in range(i1, i2)]
                continue
            if tag in ("replace", "delete"):
                rows += [DiffLine("delete", i + 1, None, left[i]) for i in range(i1, i2)]
                removed += i2 - i1
            if tag in ("replace", "insert"):
                rows += [DiffLine("insert", None, j + 1, right[j]) for j in range(j1, j2)]
                added += j2 - j1
    return rows, added, removed


def ago(ts: datetime | float | None) -> str:
    """'3 min ago' style, for people; the exact time goes in the title attribute."""
    if ts is None:
        return "–"
    seconds = max(0.0, time.time() - (ts.timestamp() if isinstance(ts, datetime) else float(ts)))
    for unit, size in (("d", 86400), ("h", 3600), ("min", 60)):
        if seconds >= size:
            return f"{int(seconds // size)} {unit} ago"
    return f"{int(seconds)} s ago"


def exact(ts: datetime | float | None) -> str:
    if ts is None:
        return ""
    dt = ts if isinstance(ts, datetime) else datetime.fromtimestamp(float(ts)).astimezone()
    return dt.isoformat(timespec="seconds")


def pct(x: Any) -> str:
    if isinstance(x, dict):
        if x.get("mean") is None:
            return "–"
        return f"{100 * x['mean']:.1f} ± {100 * (x.get('std') or 0):.1f}"
    if x is None:
        return "–"
    return f"{100 * float(x):.1f}"


def num(x: Any, digits: int = 2) -> str:
    if isinstance(x, dict):
        if x.get("mean") is None:
            return "–"
        return f"{x['mean']:.{digits}f} ± {(x.get('std') or 0):.{digits}f}"
    if x is None:
        return "–"
    if isinstance(x, float):
        return f"{x:.{digits}f}"
    return str(x)
