"""Reasoning grouping by family (App. B.2, Table 4): random groups of Random(5, 12) related tasks.

When the reasoning tasks come from reasoning-gym, each task's family (its `type`: gsm_symbolic,
chain_sum, ...) already says which tasks need the same skills, as ALFWorld's task types do for
agentic grouping: the family stands in for the annotated attributes of Stage 1, and a group is a
random draw of one family's tasks. Its size is drawn per group from Random(size_min, size_max), the
paper's rule for reasoning. A family's tasks are shuffled and cut into groups; a task is in at most one
group, and the last few tasks of a family that do not fill a group of size_min are left out.
Families are interleaved (a prefix of the file is a mix) before the cap on the number of groups.
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable

from services.trainer.grouping.agentic import TaskLike
from services.trainer.grouping.io import GroupTask, TaskGroup


def group_by_family(tasks: Iterable[TaskLike], env: str = "reasoning", size_min: int = 5, size_max: int = 12,
                    num_groups: int | None = None, seed: int = 0) -> tuple[list[TaskGroup], dict]:
    if size_min < 2:
        raise ValueError("group size must be at least 2 (r_task averages tasks 2..|G|)")
    if size_max < size_min:
        raise ValueError(f"size_max ({size_max}) is below size_min ({size_min})")
    rng = random.Random(seed)
    by_family: dict[str, list[TaskLike]] = defaultdict(list)
    for t in tasks:
        by_family[t.type].append(t)
    usable = {k: v for k, v in sorted(by_family.items()) if len(v) >= size_min}
    skipped = {k: len(v) for k, v in sorted(by_family.items()) if len(v) < size_min}
    if not usable:
        raise ValueError(f"no family has at least {size_min} tasks (families: "
                         f"{ {k: len(v) for k, v in by_family.items()} }); list more tasks or lower --size-min")

    per_family: dict[str, list[list[TaskLike]]] = {}
    left_out = 0
    for family, items in usable.items():
        items = items[:]
        rng.shuffle(items)
        groups, start = [], 0
        while len(items) - start >= size_min:
            size = min(rng.randint(size_min, size_max), len(items) - start)
            groups.append(items[start:start + size])
            start += size
        left_out += len(items) - start
        per_family[family] = groups

    order = []
    for i in range(max(len(v) for v in per_family.values())):
        for family, groups in per_family.items():
            if i < len(groups):
                order.append((family, groups[i]))
    available = len(order)
    if num_groups is not None:
        order = order[:num_groups]
    groups = [
        TaskGroup(id=f"{env}-{family}-{n:04d}", env=env,
                  tasks=[GroupTask(id=t.id, type=t.type, instruction=t.instruction) for t in members],
                  meta={"type": family, "grouping": "family", "size_rule": f"random({size_min},{size_max})"})
        for n, (family, members) in enumerate(order)
    ]
    extra = {"env": env, "grouping": "family", "size_min": size_min, "size_max": size_max, "seed": seed,
             "groups_available": available, "families_skipped_too_few_tasks": skipped,
             "tasks_left_out": left_out}
    return groups, extra
