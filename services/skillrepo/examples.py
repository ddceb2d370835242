"""A skill's worked examples in the skill repo: what it accepts, how it stores them, their archive files.

The repo stores a skill's examples in its blob's metadata (`skillos.skills.EXAMPLES_KEY`, see
`store.blob_of`), each as ``WorkedExample.model_dump(mode="json")``, never in its SKILL.md text. In an
archive (export, import) they are the skill folder's ``examples/NN-<id>.md`` files: YAML frontmatter with
every field of the example (authoritative), then ``render(example)`` for a person.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from pydantic import ValidationError

from skillos.errors import APIError
from skillos.skills import SkillFormatError, split_frontmatter
from skillos.textguard import MAX_JSON_DEPTH, check_value
from skillos.worked_examples import MAX_PER_SKILL, WorkedExample, merge
from skillos.worked_examples.files import file_name, to_file  # noqa: F401  (the archive's, re-exported)
from skillos.worked_examples.model import (
    MAX_ACTION,
    MAX_NOTE,
    MAX_OBSERVATION,
    MAX_STEPS,
    MAX_TASK,
    MAX_THOUGHT,
)

# an id becomes a file name in an export: letters, digits, '-' and '_' only (`finish` makes hex ones)
ID_RE = re.compile(r"[A-Za-z0-9_-]{1,16}")
# the most characters an example holds (every field at its bound), and so the most bytes its file takes:
# YAML writes a character as at most 10 bytes ("\U0010FFFF"), UTF-8 as at most 4
MAX_CHARS = 16 + MAX_TASK + 32 + 32 + 200 + 40 + MAX_STEPS * (MAX_ACTION + MAX_OBSERVATION + MAX_THOUGHT + MAX_NOTE)
FRONTMATTER_MAX_BYTES = 10 * MAX_CHARS + 16 * 1024     # plus keys, quotes and indentation
FILE_MAX_BYTES = FRONTMATTER_MAX_BYTES + 4 * MAX_CHARS + 16 * 1024


def accept(example: WorkedExample) -> WorkedExample:
    """``example`` as the repo keeps it (id and time set), or a 400 ``invalid_example`` saying why not."""
    example = example.finish()
    if not ID_RE.fullmatch(example.id):
        raise APIError(400, "invalid_example", f"example id {example.id[:40]!r} is invalid: use 1-16 letters, "
                                               "digits, '-' or '_' (or leave it empty: the repo sets it)")
    if (problem := check_value(example.model_dump(mode="json"), max_depth=MAX_JSON_DEPTH,
                               what="the example")) is not None:
        raise APIError(400, "invalid_example", problem.message)
    return example


def loaded(stored: Sequence[dict[str, Any]]) -> list[WorkedExample]:
    """The stored examples that are examples: a blob written before examples existed whose metadata happened
    to use the key holds something else, which is skipped rather than failing every read of the skill."""
    out = []
    for e in stored:
        try:
            out.append(WorkedExample.model_validate(e))
        except ValidationError:
            continue
    return out


def stored(examples: Sequence[WorkedExample]) -> list[dict[str, Any]]:
    return [e.model_dump(mode="json") for e in examples]


def merged(kept: Sequence[dict[str, Any]], new: WorkedExample) -> tuple[list[dict[str, Any]], str]:
    """`skillos.worked_examples.merge` over stored examples: (the examples to store, its verdict)."""
    examples, verdict = merge(loaded(kept), new, MAX_PER_SKILL)
    return stored(examples), verdict


def from_file(text: str, where: str) -> WorkedExample:
    """An examples file's example (its frontmatter; the body is for people), or a 400 saying why not."""
    try:
        front, _ = split_frontmatter(text, max_bytes=FRONTMATTER_MAX_BYTES)
    except SkillFormatError as e:
        raise APIError(413 if e.code == "frontmatter_too_large" else 400, e.code, f"{where}: {e.message}") from None
    if front is None:
        raise APIError(400, "invalid_example", f"{where}: a worked example file starts with YAML frontmatter "
                                               "holding the example's fields (id, task, env, kind, source, "
                                               "trajectory, taken, created_at, steps)")
    try:
        example = WorkedExample.model_validate(front)
    except ValidationError as e:
        raise APIError(400, "invalid_example", f"{where}: not a worked example: "
                                               f"{e}".replace("\n", " ")[:2000]) from None
    try:
        return accept(example)
    except APIError as e:
        raise APIError(e.status, e.code, f"{where}: {e.message}") from None
