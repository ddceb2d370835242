"""Which worked examples a skill keeps: a few, the shortest, one per kind of task where kinds exist.

`merge(kept, new)` is the skill repo's rule when a success leaves an example on a skill:

- the same example again (same task and actions: same id) changes nothing;
- an example of a kind the skill already has an example of replaces it when it ranks before it, else
  it is not kept;
- otherwise it is added while the skill has fewer than ``limit``, else it replaces the last-ranked one
  when it ranks before it.

Rank: the environment's verdict first, then a caller's report (untrusted: any caller of the gateway can say
"success"), then a self-judged one, so that neither of the latter two ever displaces an example the environment
verified; then fewer kept steps, then fewer actions taken in all (a tie keeps what is there).
"""

from __future__ import annotations

from collections.abc import Sequence

from skillos.worked_examples.model import MAX_PER_SKILL, WorkedExample

SOURCE_RANK = {"env": 0, "caller": 1, "judge": 2}


def rank(example: WorkedExample) -> tuple[int, int, int]:
    return (SOURCE_RANK.get(example.source, 3), len(example.steps), example.taken)


def merge(kept: Sequence[WorkedExample], new: WorkedExample,
          limit: int = MAX_PER_SKILL) -> tuple[list[WorkedExample], str]:
    """(the examples the skill keeps now, what became of ``new``: ``added``, ``replaced <id>``, ``unchanged``
    or ``not kept: <why>``)."""
    kept = list(kept)
    if any(e.id == new.id for e in kept):
        return kept, "unchanged"
    if new.kind:
        for i, e in enumerate(kept):
            if e.kind == new.kind:
                if rank(new) < rank(e):
                    kept[i] = new
                    return kept, f"replaced {e.id}"
                return kept, f"not kept: example {e.id} of this kind ranks first (shorter or verified)"
    if len(kept) < limit:
        return [*kept, new], "added"
    worst = max(range(len(kept)), key=lambda i: rank(kept[i]))
    if rank(new) < rank(kept[worst]):
        old = kept[worst].id
        kept[worst] = new
        return kept, f"replaced {old}"
    return kept, f"not kept: the skill keeps {limit} examples that rank first"
