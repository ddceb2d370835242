"""The methods' own LLM calls (distilling memory items and skills, writing search queries, reranking).

Small models answer loosely: every parser here takes what it can read and says when it read nothing,
so a method can record "unreadable" instead of storing noise or failing the stream.
"""

from __future__ import annotations

import re
from contextvars import ContextVar
from dataclasses import dataclass
from typing import Any

from skillos.curation.parse import decode_json_values
from skillos.curation.prompt import format_trajectory
from skillos.protocol.executor import EpisodeResponse

TRAJECTORY_CHARS = 6000  # of a trajectory shown to the writer: the last turns are kept

# What the LLM call under way is for ("act" outside `write`: an executor decision). A backend that is
# being trained (the trainer's in-process policy, `services.trainer.rollouts.base.PolicyLLM`) tags each of
# its completions with it, so that Skill1's query, rerank and distillation and SAPO's skill induction
# get their own credit; an HTTP backend ignores it.
PURPOSE: ContextVar[str] = ContextVar("skillos_llm_purpose", default="act")


def trajectory_text(episode: EpisodeResponse, max_chars: int = TRAJECTORY_CHARS) -> str:
    """The episode as the curator's prompt shows a trajectory, its end kept when it is too long."""
    text = format_trajectory(episode)
    return text if len(text) <= max_chars else "…" + text[-max_chars:]


async def write(llm: Any, system: str, user: str, *, max_tokens: int, seed: int | None,
                temperature: float | None = None, purpose: str = "write") -> tuple[str, int]:
    """One completion of the writer: (text, tokens used). LLM errors propagate (the method records them)."""
    token = PURPOSE.set(purpose)
    try:
        result = await llm.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                                max_tokens=max_tokens, seed=seed, temperature=temperature)
    finally:
        PURPOSE.reset(token)
    return result.content or "", result.usage.total_tokens


@dataclass
class Item:
    """A memory item or skill as a writer produced it."""
    title: str
    description: str
    content: str


_FIELD = re.compile(r"^\s*(?:#+\s*|\*\*|-\s*)?(title|description|content)\s*(?:\*\*)?\s*[:：]?\s*(?:\*\*)?\s*(.*)$",
                    re.IGNORECASE)


def parse_items(text: str, max_items: int) -> list[Item]:
    """Items written as ``Title: … / Description: … / Content: …`` blocks (Markdown headings or bold
    labels accepted). Text without any of the labels becomes one item (its first line the title), so a
    model that ignored the format still leaves its words, marked as such by an empty description."""
    items: list[dict[str, list[str]]] = []
    current: dict[str, list[str]] | None = None
    field = None
    for line in text.splitlines():
        m = _FIELD.match(line)
        if m:
            key = m.group(1).lower()
            if current is None or key == "title" or key in current:
                current = {}
                items.append(current)
            field = key
            current[field] = [m.group(2).strip()]
        elif current is not None and field is not None:
            current[field].append(line)
    out = []
    for d in items:
        title = " ".join(" ".join(d.get("title", [])).split()).strip("*# ")
        content = "\n".join(d.get("content", [])).strip()
        description = " ".join(" ".join(d.get("description", [])).split())
        if content or description:
            out.append(Item(title or description[:60] or content[:60], description, content or description))
    if not out and text.strip():
        lines = [ln for ln in text.strip().splitlines() if ln.strip()]
        out.append(Item(lines[0].strip("*# ")[:80], "", text.strip()))
    return out[:max_items]


def _json_values(text: str) -> list[Any]:
    """Every top-level JSON object or array in ``text`` (the curator's scanner: braces inside strings
    and prose before the JSON are fine)."""
    return decode_json_values(text)[0]


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (fenced or not), or None."""
    return next((v for v in _json_values(text) if isinstance(v, dict)), None)


def parse_json_list(text: str) -> list[dict[str, Any]]:
    """The objects of the first JSON array of objects in ``text``, else the first JSON object alone, else []."""
    values = _json_values(text)
    array = next((v for v in values if isinstance(v, list) and any(isinstance(x, dict) for x in v)), None)
    if array is not None:
        return [v for v in array if isinstance(v, dict)]
    return [v for v in values if isinstance(v, dict)][:1]


def tagged(text: str, tag: str) -> str | None:
    """The text inside <tag>…</tag> (the closing tag optional), or None."""
    m = re.search(rf"<{tag}>\s*(.*?)\s*(?:</{tag}>|$)", text, re.IGNORECASE | re.DOTALL)
    return m.group(1).strip() if m and m.group(1).strip() else None
