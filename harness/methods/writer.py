"""The methods' own LLM calls (distilling memory items and skills, writing search queries, reranking).

Small models answer loosely: every parser here takes what it can read and says when it read nothing,
so a method can record "unreadable" instead of storing noise or failing the stream.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from skillos.protocol.executor import EpisodeResponse

TRAJECTORY_CHARS = 6000  # of a trajectory shown to the writer: the last turns are kept


def trajectory_text(episode: EpisodeResponse, max_chars: int = TRAJECTORY_CHARS) -> str:
    """The episode as the writer reads it: numbered actions with what the environment answered."""
    lines = []
    for t in episode.turns:
        observation = " ".join(t.observation.split())[:300]
        lines.append(f"{t.index + 1}. observation: {observation}\n   action: {t.action}")
    if episode.final_answer:
        lines.append(f"final answer: {episode.final_answer[:500]}")
    text = "\n".join(lines) or "(no actions)"
    return text if len(text) <= max_chars else "…" + text[-max_chars:]


async def write(llm: Any, system: str, user: str, *, max_tokens: int, seed: int | None,
                temperature: float | None = None) -> tuple[str, int]:
    """One completion of the writer: (text, tokens used). LLM errors propagate (the method records them)."""
    result = await llm.chat([{"role": "system", "content": system}, {"role": "user", "content": user}],
                            max_tokens=max_tokens, seed=seed, temperature=temperature)
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


def parse_json_object(text: str) -> dict[str, Any] | None:
    """The first JSON object in ``text`` (fenced or not), or None."""
    start = text.find("{")
    while start != -1:
        depth = 0
        for i in range(start, len(text)):
            if text[i] == "{":
                depth += 1
            elif text[i] == "}":
                depth -= 1
                if depth == 0:
                    try:
                        value = json.loads(text[start:i + 1])
                    except ValueError:
                        break
                    if isinstance(value, dict):
                        return value
                    break
        start = text.find("{", start + 1)
    return None


def parse_json_list(text: str) -> list[dict[str, Any]]:
    """The objects of the first JSON array in ``text``, else the first JSON object alone, else []."""
    start = text.find("[")
    end = text.rfind("]")
    if start != -1 and end > start:
        try:
            value = json.loads(text[start:end + 1])
            if isinstance(value, list):
                return [v for v in value if isinstance(v, dict)]
        except ValueError:
            pass
    obj = parse_json_object(text)
    return [obj] if obj is not None else []


def tagged(text: str, tag: str) -> str | None:
    """The text inside <tag>…</tag> (the closing tag optional), or None."""
    m = re.search(rf"<{tag}>\s*(.*?)\s*(?:</{tag}>|$)", text, re.IGNORECASE | re.DOTALL)
    return m.group(1).strip() if m and m.group(1).strip() else None
