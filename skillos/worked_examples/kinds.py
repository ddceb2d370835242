"""The kind of a task, read off its text alone, where an environment has a fixed set of kinds.

ALFWorld's task sentences come from six templates, and the sentence names its kind ("put a clean ...",
"heat some ...", "look at ... under the desklamp", "put two ..."): the kind is what the task says, not the
game's hidden state, so the executor may match worked examples by it in production as in a run. The
names are the ALFWorld server's task types. Other environments have no kinds here (empty string): their
examples are matched by the words of the task.
"""

from __future__ import annotations

import re

_WORDS = re.compile(r"[a-z]+")
_CHANGE = (("clean", "clean"), ("heat", "heat"), ("hot", "heat"), ("cool", "cool"), ("cold", "cool"))


def alfworld_kind(task: str) -> str:
    text = task.strip().lower()
    words = set(_WORDS.findall(text))
    if text.startswith(("look at", "examine")) or "desklamp" in words or "lamp" in words:
        return "look"
    for word, kind in _CHANGE:
        if word in words:
            return kind
    if "two" in words:
        return "pick2"
    return "pick" if text.startswith(("put", "find")) else ""


def task_kind(env: str, task: str) -> str:
    """``alfworld``: one of look, clean, heat, cool, pick2, pick; elsewhere ``""``."""
    return alfworld_kind(task) if env == "alfworld" else ""
