"""A worked example as a file of a skill folder: ``<name>/examples/NN-<id>.md``, YAML frontmatter with every
field of the example (what a reader of the file takes as the example), then `render(example)` for a person.
The skill repo's archives (export, import) and the run folders' ``repo/`` use it."""

from __future__ import annotations

import yaml

from skillos.worked_examples.model import WorkedExample
from skillos.worked_examples.prompt import render

# who and where first, the steps last
ORDER = ("id", "task", "env", "kind", "source", "trajectory", "taken", "created_at", "steps")
_Dumper = getattr(yaml, "CSafeDumper", yaml.SafeDumper)


def file_name(index: int, example: WorkedExample) -> str:
    return f"{index + 1:02d}-{example.id}.md"


def to_file(example: WorkedExample) -> str:
    data = example.model_dump(mode="json")
    front = yaml.dump({k: data[k] for k in ORDER}, Dumper=_Dumper, sort_keys=False, allow_unicode=True,
                      width=1 << 30)
    return f"---\n{front}---\n\n{render(example)}\n"
