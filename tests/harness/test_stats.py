"""Paired statistics against hand-computed cases."""

from __future__ import annotations

import math

import pytest

from harness.stats import bootstrap_ci, mcnemar_exact, paired


def test_mcnemar_exact_by_hand():
    # b=6, c=1: P(X<=1) for Bin(7, 1/2) = (1 + 7) / 128; two-sided 16/128
    assert mcnemar_exact(6, 1) == pytest.approx(16 / 128)
    assert mcnemar_exact(0, 0) == 1.0
    assert mcnemar_exact(3, 3) == 1.0  # P(X<=3) of Bin(6,.5) = 42/64 > 1/2 -> capped at 1
    assert mcnemar_exact(10, 0) == pytest.approx(2 / 1024)


def test_paired_binary_outcomes():
    a = [1, 1, 1, 0, 1, 0, 1, 1]
    b = [0, 1, 0, 0, 0, 0, 1, 0]
    r = paired(a, b, iterations=2000)
    assert (r.n, r.b, r.c) == (8, 4, 0)
    assert r.mean_a == pytest.approx(6 / 8) and r.mean_b == pytest.approx(2 / 8) and r.diff == pytest.approx(0.5)
    assert r.p_value == pytest.approx(2 / 16)
    assert 0.0 <= r.ci_low <= r.diff <= r.ci_high <= 1.0
    assert "McNemar p = 0.125" in r.describe()


def test_paired_graded_outcomes_have_no_mcnemar():
    r = paired([0.5, 0.75, 1.0], [0.25, 0.75, 0.5], iterations=500)
    assert r.p_value is None and r.diff == pytest.approx(0.25)


def test_bootstrap_of_a_constant_difference_is_that_constant():
    assert bootstrap_ci([0.2] * 10, iterations=200) == (pytest.approx(0.2), pytest.approx(0.2))
    assert all(math.isnan(x) for x in bootstrap_ci([]))


def test_bad_input():
    with pytest.raises(ValueError, match="equal lengths"):
        paired([1, 0], [1])
    with pytest.raises(ValueError, match="no pairs"):
        paired([], [])
