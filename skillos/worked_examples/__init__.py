"""Worked examples: the compressed actions of an episode that ended in success, kept with a skill.

- `model`: `WorkedExample` (and its bounds), the type the skill repo stores and the executor shows;
- `compress`: a won episode's turns -> an example (system-written: no LLM);
- `keep`: which examples a skill keeps (a few, the shortest, one per kind);
- `prompt`: which examples the executor is shown for a task, and in what words;
- `kinds`: a task's kind read off its text (ALFWorld's six).

Plain code, no I/O.
"""

from skillos.worked_examples.compress import compress
from skillos.worked_examples.keep import merge
from skillos.worked_examples.kinds import task_kind
from skillos.worked_examples.model import (
    MAX_PER_SKILL,
    OUTCOME_SOURCES,
    ExampleStep,
    OutcomeSource,
    WorkedExample,
)
from skillos.worked_examples.prompt import examples_block, render, select

__all__ = ["MAX_PER_SKILL", "OUTCOME_SOURCES", "ExampleStep", "OutcomeSource", "WorkedExample", "compress",
           "examples_block", "merge", "render", "select", "task_kind"]
