"""How far an episode's actions follow a worked example it was shown: a descriptive measure, not a cause.

Only the example's key actions count (those that change the world: take, put, heat, cool, clean, use,
slice; in other environments every action but moves), matched in order (a subsequence), at two levels:

- ``pattern``: the verb, and for a change the appliance (``clean@sinkbasin``): the example's procedure;
- ``exact``: the action with numbers removed (``take apple from countertop``): the example's very steps.

The share of key actions matched is the measure. Any successful episode of the same kind matches its
pattern, so a share means something only next to the same measure for an episode that was not shown the
example (the paired No Memory episode: `bench.bench_learning analyze` reports both).
"""

from __future__ import annotations

import re
from collections.abc import Sequence

_NUM = re.compile(r"\s+\d+\b")
_WITH = re.compile(r"^(heat|cool|clean|slice) .+? with (.+)$")


def _plain(action: str) -> str:
    return _NUM.sub("", action.strip().lower())


def _key(action: str, level: str) -> str | None:
    """The action as matched at ``level``, or None for a move or a look (not a key action)."""
    a = _plain(action)
    if not a or a.startswith(("go to", "open ", "close ", "look", "examine", "inventory")):
        return None
    if level == "exact":
        return a
    if m := _WITH.match(a):
        return f"{m.group(1)}@{m.group(2).split()[-1]}"
    return a.split("[", 1)[0].split(" ", 1)[0]   # the verb: take, move, use, search, click, ...


def follow_share(actions: Sequence[str], example_actions: Sequence[str], level: str = "pattern") -> float | None:
    """The share of the example's key actions the episode took in the same order (None: the example has none)."""
    wanted = [k for a in example_actions if (k := _key(a, level)) is not None]
    if not wanted:
        return None
    took = [k for a in actions if (k := _key(a, level)) is not None]
    i = 0
    for k in took:
        if i < len(wanted) and k == wanted[i]:
            i += 1
    return i / len(wanted)
