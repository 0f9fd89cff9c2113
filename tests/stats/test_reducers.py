"""Per-sample reducers on known scores, and pass@k against the closed-form estimator."""

from __future__ import annotations

import math
from itertools import combinations

import pytest

from gradetrail.stats.reducers import pass_at_k, reduce_scores


def _closed_form(n: int, c: int, k: int) -> float:
    """Chen et al. 2021 eq. 1 with exact binomials: 1 - C(n-c, k) / C(n, k)."""
    return 1 - math.comb(n - c, k) / math.comb(n, k)


@pytest.mark.parametrize("n", range(1, 21))
def test_pass_at_k_equals_closed_form_for_every_c_and_k(n: int) -> None:
    """The stable product equals 1 - C(n-c,k)/C(n,k) for all 0<=c<=n, 1<=k<=n."""
    for c in range(n + 1):
        for k in range(1, n + 1):
            assert pass_at_k(n, c, k) == pytest.approx(_closed_form(n, c, k), abs=1e-12)


def test_pass_at_k_is_the_chance_a_random_k_subset_holds_a_correct_one() -> None:
    """pass@k is the fraction of k-subsets of the n epochs with at least one correct."""
    outcomes = [1, 0, 0, 1, 0, 0, 0]  # n = 7, c = 2
    for k in range(1, 8):
        subsets = list(combinations(outcomes, k))
        exact = sum(any(s) for s in subsets) / len(subsets)
        assert pass_at_k(7, 2, k) == pytest.approx(exact, abs=1e-12)


def test_pass_at_k_known_values() -> None:
    """Hand-computed values: pass@1 is c/n, pass@k is 1 once n-c < k, 0 when c = 0."""
    assert pass_at_k(10, 3, 1) == pytest.approx(0.3)
    assert pass_at_k(5, 2, 2) == pytest.approx(1 - 3 / 10)  # 1 - C(3,2)/C(5,2)
    assert pass_at_k(4, 2, 3) == 1.0
    assert pass_at_k(6, 0, 3) == 0.0


@pytest.mark.parametrize(("n", "c", "k"), [(0, 0, 1), (3, 4, 1), (3, 1, 0), (3, 1, 4)])
def test_pass_at_k_rejects_out_of_range_arguments(n: int, c: int, k: int) -> None:
    """n >= 1, 0 <= c <= n and 1 <= k <= n, else ValueError."""
    with pytest.raises(ValueError, match="pass@k needs"):
        pass_at_k(n, c, k)


def test_mean_max_majority_on_known_scores() -> None:
    """mean averages, max takes the best, majority the most frequent score."""
    scores = [1.0, 0.0, 1.0, 0.5, 1.0]
    assert reduce_scores(scores, "mean") == pytest.approx(3.5 / 5)
    assert reduce_scores(scores, "max") == 1.0
    assert reduce_scores(scores, "majority") == 1.0
    assert reduce_scores([0.0, 0.0, 1.0], "majority") == 0.0


def test_majority_tie_goes_to_the_lowest_score() -> None:
    """A tie (one correct, one wrong) is not a majority: the lowest tied score wins."""
    assert reduce_scores([1.0, 0.0], "majority") == 0.0
    assert reduce_scores([1.0, 0.5, 0.5, 1.0, 0.0], "majority") == 0.5


def test_pass_at_k_reducer_counts_full_marks_as_correct() -> None:
    """The reducer's c counts scores of 1; partial credit is not a pass."""
    assert reduce_scores([1.0, 0.5, 0.0, 1.0], "pass_at_k", k=2) == pytest.approx(
        _closed_form(4, 2, 2)
    )
    assert reduce_scores([0.9, 0.5], "pass_at_k", k=1) == 0.0


def test_nothing_to_reduce_gives_none() -> None:
    """No scored epoch gives None; pass_at_k with fewer than k scored epochs too."""
    for reducer in ("mean", "max", "majority", "pass_at_k"):
        assert reduce_scores([], reducer) is None
    assert reduce_scores([1.0, 0.0], "pass_at_k", k=3) is None


def test_unknown_reducer_raises() -> None:
    """An unknown reducer name is a ValueError naming the valid ones."""
    with pytest.raises(ValueError, match="use one of mean, max, majority, pass_at_k"):
        reduce_scores([1.0], "median")  # type: ignore[arg-type]
