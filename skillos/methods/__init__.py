"""The methods of `skillos run`, one strategy each over the same services (`skillos.methods.base`).

    none           No Memory: the frozen executor alone
    skillos        SkillOS: the curator service edits the repo after each task (the paper)
    reasoningbank  memory items distilled from successes and failures, retrieved by meaning
    memp           procedural memory built, retrieved, consolidated and forgotten by rules
    skillrl        SkillRL's two-tier bank with distillation by outcome and recursive evolution
    sapo           SAPO: candidates validated by split rollouts, promoted from a temporary bank
    skill1         Skill1: query, rerank, act with the top skill, utility trend, admission, retirement
    gold           one hand-written procedure per ALFWorld task type (from the expert's plans), never curated
    skillos-expert SkillOS whose curator first reads the handcoded expert's valid_train games (a cold start)
    expert-demos   No Memory shown the handcoded expert's games of the task's type: the ceiling arm (ALFWorld)

Each method's parameters are a pydantic model (`Method.Params`); `method_params` checks what a user
gives (``--param KEY=VALUE``) before anything runs.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from typing import Any

from pydantic import ValidationError

from skillos.methods.base import Method, StreamContext
from skillos.methods.baseline import NoMemory
from skillos.methods.curated import SkillOS
from skillos.methods.expert_demos import ExpertDemos
from skillos.methods.expert_seeded import ExpertSeededSkillOS
from skillos.methods.gold import Gold
from skillos.methods.memp import MemP
from skillos.methods.reasoningbank import ReasoningBank
from skillos.methods.sapo import SAPO
from skillos.methods.skill1 import Skill1
from skillos.methods.skillrl import SkillRL

METHODS: dict[str, type[Method]] = {m.name: m for m in (NoMemory, SkillOS, SkillRL, SAPO, Skill1, ReasoningBank, MemP,
                                                         Gold, ExpertSeededSkillOS, ExpertDemos)}


class MethodConfigError(ValueError):
    """A method or a parameter the user gave cannot be used (the message says what to fix)."""


def method_class(name: str) -> type[Method]:
    if name not in METHODS:
        raise MethodConfigError(f"unknown method {name!r}: use one of {', '.join(METHODS)}")
    return METHODS[name]


def build_method(name: str, params: dict[str, Any] | None = None) -> Method:
    cls = method_class(name)
    try:
        return cls(cls.Params(**(params or {})))
    except ValidationError as e:
        problems = "; ".join(f"{'.'.join(str(x) for x in err['loc'])}: {err['msg']}" for err in e.errors())
        raise MethodConfigError(f"bad parameters for method {name!r}: {problems}") from None


def method_params(methods: Iterable[str], given: Iterable[str]) -> dict[str, dict[str, Any]]:
    """``KEY=VALUE`` (to every chosen method that has KEY) or ``METHOD.KEY=VALUE`` → params per method,
    each set checked by building the method. Values are read as JSON when they parse (numbers, true),
    else kept as text."""
    methods = list(methods)
    for m in methods:
        method_class(m)
    out: dict[str, dict[str, Any]] = {m: {} for m in methods}
    for item in given:
        key, sep, raw = item.partition("=")
        if not sep or not key.strip():
            raise MethodConfigError(f"--param {item!r}: write KEY=VALUE or METHOD.KEY=VALUE")
        try:
            value = json.loads(raw)
        except ValueError:
            value = raw
        target, dot, field = key.strip().rpartition(".")
        targets = [target] if dot else [m for m in methods if field in METHODS[m].Params.model_fields]
        if dot and target not in methods:
            raise MethodConfigError(f"--param {item!r}: method {target!r} is not among those played "
                                    f"({', '.join(methods)})")
        if not targets:
            raise MethodConfigError(f"--param {item!r}: no method played ({', '.join(methods)}) has a parameter "
                                    f"{field!r}; theirs: " + "; ".join(
                                        f"{m}: {', '.join(METHODS[m].Params.model_fields) or '-'}" for m in methods))
        for m in targets:
            out[m][field] = value
    for m, params in out.items():
        build_method(m, params)
    return out


__all__ = ["METHODS", "Method", "MethodConfigError", "StreamContext", "build_method", "method_class",
           "method_params"]
