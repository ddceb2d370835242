"""Agentic grouping (App. B.2): the benchmark's own task types are the attribute partition.

ALFWorld has 6 task types, WebShop's tasks carry product categories. A group is `size` tasks of
one type in random order. `natural` keeps the data's type frequencies (each type yields
len(tasks_of_type) // size groups); `uniform` gives every type the same number of groups, reusing
a type's tasks across groups when it has too few (never twice within one group).
"""

from __future__ import annotations

import random
from collections import defaultdict
from collections.abc import Iterable
from typing import Literal, Protocol

from services.trainer.grouping.io import GroupTask, TaskGroup


class TaskLike(Protocol):
    id: str
    type: str
    instruction: str


def group_by_type(tasks: Iterable[TaskLike], env: str, size: int = 10,
                  distribution: Literal["natural", "uniform"] = "natural",
                  num_groups: int | None = None, seed: int = 0) -> tuple[list[TaskGroup], dict]:
    if size < 2:
        raise ValueError("group size must be at least 2 (r_task averages tasks 2..|G|)")
    rng = random.Random(seed)
    by_type: dict[str, list[TaskLike]] = defaultdict(list)
    for t in tasks:
        by_type[t.type].append(t)
    usable = {k: v for k, v in sorted(by_type.items()) if len(v) >= size}
    skipped = {k: len(v) for k, v in by_type.items() if len(v) < size}
    if not usable:
        raise ValueError(f"no task type has at least {size} tasks (types: "
                         f"{ {k: len(v) for k, v in by_type.items()} }); lower the group size")

    per_type: dict[str, list[list[TaskLike]]] = {}
    reused = 0
    if distribution == "natural":
        for typ, items in usable.items():
            items = items[:]
            rng.shuffle(items)
            per_type[typ] = [items[i:i + size] for i in range(0, len(items) - size + 1, size)]
    elif distribution == "uniform":
        natural_total = sum(len(v) // size for v in usable.values())
        target = num_groups if num_groups is not None else natural_total
        each = max(1, -(-target // len(usable)))  # ceil
        for typ, items in usable.items():
            groups, pool = [], []
            for _ in range(each):
                if len(pool) < size:                     # refill: a type's tasks are reused
                    reused += len(pool) > 0 or bool(groups)
                    fresh = items[:]
                    rng.shuffle(fresh)
                    pool = [t for t in fresh if t not in pool] + pool
                groups.append(pool[:size])
                pool = pool[size:]
            per_type[typ] = groups
    else:
        raise ValueError(f"distribution must be natural or uniform, not {distribution!r}")

    # interleave types so that a prefix of the file is a mix, then cap
    order = []
    depth = max(len(v) for v in per_type.values())
    for i in range(depth):
        for typ, groups in per_type.items():
            if i < len(groups):
                order.append((typ, groups[i]))
    if num_groups is not None:
        order = order[:num_groups]
    groups = [
        TaskGroup(id=f"{env}-{typ}-{n:04d}", env=env,
                  tasks=[GroupTask(id=t.id, type=t.type, instruction=t.instruction) for t in members],
                  meta={"type": typ, "distribution": distribution})
        for n, (typ, members) in enumerate(order)
    ]
    extra = {"env": env, "distribution": distribution, "group_size": size, "seed": seed,
             "types_skipped_too_few_tasks": skipped, "uniform_refills": reused}
    return groups, extra
