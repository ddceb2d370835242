"""Paired statistics for comparing two methods on the same tasks (pure functions, no I/O).

Two methods played the same tasks with the same seed: each task gives a pair of outcomes. The
difference in success rate is judged by

- McNemar's exact test: only the discordant pairs count (b = A won where B lost, c = the reverse);
  under "no difference" b ~ Binomial(b + c, 1/2); two-sided p = min(1, 2·P(X ≤ min(b, c)));
- a paired bootstrap: resample the task pairs with replacement, the 2.5th and 97.5th percentiles of
  the mean difference give a 95 % interval (also for graded outcomes such as WebShop's score).

Pooled over seeds, pairs are (seed, task): seeds are further samples of the same tasks.
"""

from __future__ import annotations

import math
import random
from collections.abc import Sequence
from dataclasses import dataclass


@dataclass(frozen=True)
class PairedResult:
    n: int                  # pairs
    mean_a: float
    mean_b: float
    diff: float             # mean(a - b)
    ci_low: float
    ci_high: float
    b: int | None = None    # McNemar: a succeeded, b failed (binary outcomes only)
    c: int | None = None    # a failed, b succeeded
    p_value: float | None = None

    def describe(self, pct: bool = True) -> str:
        k = 100 if pct else 1
        text = (f"{self.mean_a * k:.1f} vs {self.mean_b * k:.1f}: Δ = {self.diff * k:+.1f} "
                f"[{self.ci_low * k:+.1f}, {self.ci_high * k:+.1f}] (n = {self.n}")
        if self.p_value is not None:
            text += f", discordant {self.b}/{self.c}, McNemar p = {self.p_value:.3g}"
        return text + ")"


def mcnemar_exact(b: int, c: int) -> float:
    """Two-sided exact McNemar p-value from the discordant counts."""
    n = b + c
    if n == 0:
        return 1.0
    k = min(b, c)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2 ** n
    return min(1.0, 2 * tail)


def bootstrap_ci(diffs: Sequence[float], *, iterations: int = 10_000, seed: int = 0,
                 level: float = 0.95) -> tuple[float, float]:
    if not diffs:
        return (math.nan, math.nan)
    rng = random.Random(seed)
    n = len(diffs)
    means = sorted(sum(diffs[rng.randrange(n)] for _ in range(n)) / n for _ in range(iterations))
    lo = means[int((1 - level) / 2 * iterations)]
    hi = means[min(iterations - 1, int((1 + level) / 2 * iterations))]
    return lo, hi


def paired(a: Sequence[float], b: Sequence[float], *, iterations: int = 10_000, seed: int = 0) -> PairedResult:
    """Compare outcomes ``a`` and ``b`` of the same tasks (same order). Binary outcomes get McNemar too."""
    if len(a) != len(b):
        raise ValueError(f"paired outcomes need equal lengths, got {len(a)} and {len(b)}")
    n = len(a)
    if n == 0:
        raise ValueError("no pairs to compare")
    diffs = [float(x) - float(y) for x, y in zip(a, b, strict=True)]
    lo, hi = bootstrap_ci(diffs, iterations=iterations, seed=seed)
    result = PairedResult(n=n, mean_a=sum(map(float, a)) / n, mean_b=sum(map(float, b)) / n,
                          diff=sum(diffs) / n, ci_low=lo, ci_high=hi)
    if all(float(x) in (0.0, 1.0) for x in (*a, *b)):
        bb = sum(1 for x, y in zip(a, b, strict=True) if x and not y)
        cc = sum(1 for x, y in zip(a, b, strict=True) if y and not x)
        result = PairedResult(**{**result.__dict__, "b": bb, "c": cc, "p_value": mcnemar_exact(bb, cc)})
    return result
