"""How the executor is shown worked examples: which ones (`select`) and in what words (`examples_block`).

One format for the skills' examples and the expert's demonstrations (`skillos.acting.demos` renders its
games through `render`): the task, then each action after ``>`` with what came back on the next line. The
block goes in the episode's opening message, which every later turn repeats word for word, so a server's
prompt cache keeps it for the whole episode.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from skillos.worked_examples.kinds import task_kind
from skillos.worked_examples.model import WorkedExample

HEADERS = {
    "alfworld": ("Solved examples of tasks like yours (each line after '>' is an action, the line after it what "
                 "the game answered; the places and objects of your room may differ):"),
    "webshop": ("Solved examples of requests like yours (each line after '>' is an action, the line after it "
                "what the store showed):"),
    "reasoning": "Solved examples of problems like yours:",
}
GENERIC_HEADER = ("Solved examples of tasks like yours (each line after '>' is an action, the line after it what "
                  "came back):")
_WORD = re.compile(r"[a-z]+")
# words every task of an env shares: they say nothing about which example fits
_COMMON = {"a", "an", "the", "some", "in", "on", "it", "and", "to", "of", "put", "your", "is", "with", "for", "i",
           "you", "them", "then", "find", "need", "want", "please", "under", "at"}


def render(example: WorkedExample) -> str:
    if example.env == "reasoning":
        step = example.steps[-1]
        lines = [f"Problem: {example.task}"]
        if step.thought:
            lines.append(f"Reasoning: {step.thought}")
        lines.append(f"Answer: {step.action}")
        return "\n".join(lines)
    lines = [f"Task: {example.task}"]
    for step in example.steps:
        if step.note:
            lines.append(f"({step.note})")
        lines.append(f"> {step.action}")
        if step.observation:
            lines.append(step.observation)
    return "\n".join(lines)


def examples_block(examples: Sequence[WorkedExample], env: str) -> str:
    """The examples as the executor reads them, or "" for none (ends with a blank line)."""
    if not examples:
        return ""
    head = HEADERS.get(env, GENERIC_HEADER)
    return head + "\n\n" + "\n\n".join(render(e) for e in examples) + "\n\n"


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower())) - _COMMON


def _examples_of(skill: Any) -> list[WorkedExample]:
    raw = skill.get("examples") if isinstance(skill, dict) else getattr(skill, "examples", None)
    return [e if isinstance(e, WorkedExample) else WorkedExample.model_validate(e) for e in (raw or [])]


def select(skills: Sequence[Any], task: str, env: str, n: int, budget_chars: int) -> list[WorkedExample]:
    """Up to ``n`` examples of the retrieved ``skills`` (in their rank order) for ``task``, whose rendered
    text fits ``budget_chars`` together.

    Where the env has kinds (ALFWorld) only examples of the task's own kind are shown: another kind's
    game shows steps this task must not take (a heat game in a cool task). Where ``env`` does not say (the
    gateway), the task is read as each example's env reads its tasks. Among those, the examples whose task
    shares the most words with this one come first, then those of the better-ranked skill, then the
    shorter."""
    if n <= 0 or budget_chars <= 0:
        return []
    mine = _words(task)
    seen: set[str] = set()
    candidates = []
    for rank, skill in enumerate(skills):
        for e in _examples_of(skill):
            kind = task_kind(env, task) or task_kind(e.env, task)
            if e.id in seen or (kind and e.kind and e.kind != kind):
                continue
            seen.add(e.id)
            candidates.append((-len(mine & _words(e.task)), rank, len(e.steps), e))
    candidates.sort(key=lambda c: c[:3])
    chosen: list[WorkedExample] = []
    used = len(HEADERS.get(env, GENERIC_HEADER))
    for *_, e in candidates:
        size = len(render(e)) + 2
        if used + size <= budget_chars:
            chosen.append(e)
            used += size
            if len(chosen) == n:
                break
    return chosen
