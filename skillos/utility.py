"""A skill's measured utility: success when it was served against success when it matched and was withheld.

Withholding is the experiment: on a random share of tasks whose search matched a skill, the skill is not
shown, so the two arms differ only in the skill. The difference of the two success rates comes with Newcombe's
hybrid score interval (his method 10: Wilson intervals per arm, combined), which stays inside [-1, 1] and
keeps sensible coverage at the small counts a skill has for a long time, unlike the Wald interval.
"""

from __future__ import annotations

import math

Z95 = 1.959963984540054
Z99 = 2.5758293035489004


def wilson(wins: int, n: int, z: float = Z95) -> tuple[float, float]:
    """Wilson score interval of a proportion; (0, 1) with no trials."""
    if n <= 0:
        return 0.0, 1.0
    p = wins / n
    centre = (p + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(p * (1 - p) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return max(0.0, centre - half), min(1.0, centre + half)


def difference_interval(wins_a: int, n_a: int, wins_b: int, n_b: int,
                        z: float = Z95) -> tuple[float, float] | None:
    """Newcombe's interval for rate(a) - rate(b); None while either arm has no trials."""
    if n_a <= 0 or n_b <= 0:
        return None
    p_a, p_b = wins_a / n_a, wins_b / n_b
    (l_a, u_a), (l_b, u_b) = wilson(wins_a, n_a, z), wilson(wins_b, n_b, z)
    d = p_a - p_b
    low = d - math.sqrt((p_a - l_a) ** 2 + (u_b - p_b) ** 2)
    high = d + math.sqrt((u_a - p_a) ** 2 + (p_b - l_b) ** 2)
    return max(-1.0, low), min(1.0, high)
