"""Issue 23: the gate on degenerate and thin evidence. A near-zero standard error (equal
differences up to rounding, R's t.test's "essentially constant" data) gets the zero-failure
bound, not a t interval;
with few discordant pairs (paired) or few samples (unpaired) the verdict is never more
liberal than the exact one-sided test (McNemar's exact conditional test, Fisher's exact
test); kappa at perfect agreement has an interval that is not a point.

Reference p-values are R's: ``binom.test(k, n, alternative = "greater")$p.value`` and
``fisher.test(matrix(c(xc, nc - xc, xb, nb - xb), 2, byrow = TRUE), alternative =
"greater")$p.value``; each is also a closed form (1/32, 1/6, 1/252, 11/1024), written
beside it (6446/184756 = sum over k >= 8 of C(11, k) C(9, 10 - k) / C(20, 10)).
"""

from __future__ import annotations

from pathlib import Path

import pytest
from gate_support import passes, write_run

from gradetrail.analysis.gate import regression_gate
from gradetrail.stats import intervals as stats
from gradetrail.stats.agreement import measure_agreement


@pytest.mark.parametrize(
    ("only_baseline", "only_candidate", "p"),
    [(0, 5, 1 / 32), (1, 9, 11 / 1024), (0, 8, 1 / 256), (3, 3, 0.65625), (0, 0, 1.0)],
)
def test_mcnemar_one_sided_matches_r_binom_test(
    only_baseline: int, only_candidate: int, p: float
) -> None:
    """P(X >= c), X ~ Bin(b + c, 1/2), to 1e-12."""
    assert stats.mcnemar_exact_greater(only_baseline, only_candidate) == pytest.approx(p, abs=1e-12)


@pytest.mark.parametrize(
    ("xb", "nb", "xc", "nc", "p"),
    [(0, 2, 2, 2, 1 / 6), (0, 5, 5, 5, 1 / 252), (3, 10, 8, 10, 6446 / 184756), (2, 2, 0, 2, 1.0)],
)
def test_fisher_one_sided_matches_r_fisher_test(
    xb: int, nb: int, xc: int, nc: int, p: float
) -> None:
    """The hypergeometric upper tail, as R's fisher.test(alternative = "greater")."""
    assert stats.fisher_exact_greater(xb, nb, xc, nc) == pytest.approx(p, abs=1e-9)


def test_paired_zero_of_five_against_five_of_five_is_not_superior(tmp_path: Path) -> None:
    """5 discordant pairs all for the candidate: Tango's interval excludes 0, but McNemar's
    exact one-sided p is 1/32 > 0.025: the gate fails and says why."""
    base = write_run(tmp_path / "b", passes(0, 5))
    cand = write_run(tmp_path / "c", passes(5, 5))
    r = regression_gate(base, cand, test="superiority")
    assert r.lo > 0  # the interval alone would pass
    assert not r.passed and r.exact_p == pytest.approx(1 / 32)
    assert r.p_value >= 1 / 32 and "McNemar's exact one-sided p 0.0312" in r.reason
    assert any("too few" in w for w in r.warnings)


def test_paired_eight_discordant_pairs_are_enough(tmp_path: Path) -> None:
    """8 of 8 discordant pairs for the candidate: exact p 1/256 <= 0.025, the gate passes."""
    r = regression_gate(
        write_run(tmp_path / "b", passes(0, 8)),
        write_run(tmp_path / "c", passes(8, 8)),
        test="superiority",
    )
    assert r.passed and r.exact_p == pytest.approx(1 / 256)


def test_unpaired_two_of_two_is_not_superior(tmp_path: Path) -> None:
    """0/2 vs 2/2 on different samples: Fisher's one-sided p is 1/6; the gate fails."""
    r = regression_gate(
        write_run(tmp_path / "b", passes(0, 2), ids=["a1", "a2"]),
        write_run(tmp_path / "c", passes(2, 2), ids=["b1", "b2"], dataset_hash="other"),
        test="superiority",
        unpaired=True,
    )
    assert not r.passed and r.exact_p == pytest.approx(1 / 6)
    assert "Fisher's exact one-sided p" in r.reason


def test_unpaired_five_of_five_is_superior(tmp_path: Path) -> None:
    """0/5 vs 5/5: Fisher's p is 1/252, and the interval agrees: the gate passes."""
    r = regression_gate(
        write_run(tmp_path / "b", passes(0, 5), ids=[f"a{i}" for i in range(5)]),
        write_run(tmp_path / "c", passes(5, 5), ids=[f"b{i}" for i in range(5)]),
        test="superiority",
        unpaired=True,
    )
    assert r.passed and r.exact_p == pytest.approx(1 / 252)


def test_non_inferiority_at_a_positive_margin_has_no_exact_override(tmp_path: Path) -> None:
    """The exact tests test a boundary of 0; at margin 0.02 the interval decides alone."""
    r = regression_gate(
        write_run(tmp_path / "b", passes(90)), write_run(tmp_path / "c", passes(90))
    )
    assert r.exact_p is None


@pytest.mark.parametrize(
    "baseline",
    [[0.1 * i for i in range(1, 9)], [0.15, 0.35, 0.55, 0.75]],
)
def test_a_near_zero_standard_error_is_not_evidence(tmp_path: Path, baseline: list[float]) -> None:
    """Differences equal up to floating-point rounding (SE ~1e-17) are never passed with
    p = 1e-49 (R: "data are essentially constant"): they get the zero-failure bound on
    their n samples around +0.1, which on 4 or 8 samples passes neither test."""
    candidate = [x + 0.1 for x in baseline]
    diffs = stats.paired_differences(baseline, candidate)
    assert 0 < stats.standard_error(diffs) < 1e-16
    base = write_run(tmp_path / "b", baseline)
    cand = write_run(tmp_path / "c", candidate)
    q = 1 - 0.025 ** (1 / len(baseline))
    for test in ("non-inferiority", "superiority"):
        r = regression_gate(base, cand, test=test)
        assert r.method == "zero-failure" and not r.passed
        assert r.lo == pytest.approx(min(diffs) - q * (1 + min(diffs)))


def test_differences_of_rounding_around_zero_are_not_a_t_interval(tmp_path: Path) -> None:
    """0.1 + 0.2 against 0.3 on some samples: differences of 5.6e-17, whose t interval
    (SE ~1e-17 against a mean difference of the same size) passed margin 0.02 on 10
    samples with a half-width of 4e-17 (before); now the zero-failure bound on 10
    samples, +-0.3084, which does not."""
    baseline = [0.3] * 10
    candidate = [0.1 + 0.2 if i % 2 else 0.3 for i in range(10)]
    r = regression_gate(write_run(tmp_path / "b", baseline), write_run(tmp_path / "c", candidate))
    assert r.method == "zero-failure" and not r.passed
    assert r.lo == pytest.approx(-(1 - 0.025**0.1))


def test_a_small_real_spread_is_still_gated(tmp_path: Path) -> None:
    """A standard error far above rounding (1e-6) is evidence, and is gated."""
    baseline = [0.1 * i for i in range(1, 9)]
    candidate = [x + 0.1 + (1e-6 if i % 2 else -1e-6) for i, x in enumerate(baseline)]
    r = regression_gate(
        write_run(tmp_path / "b", baseline),
        write_run(tmp_path / "c", candidate),
        test="superiority",
    )
    assert r.passed and r.method == "t"


def test_kappa_at_perfect_agreement_has_an_interval_that_is_not_a_point() -> None:
    """20 rows, all agreeing: kappa 1, SE 0, but the interval is not [1, 1]; its lower
    bound is Wilson's lower bound of p_o (0.8389) mapped through p_e = 0.5."""
    pairs = [(1.0, 1.0)] * 10 + [(0.0, 0.0)] * 10
    a = measure_agreement(pairs, "label")
    assert a.kappa == 1.0 and a.kappa_ci_high == 1.0
    wilson_lo, _ = stats.wilson_interval(20, 20)
    assert a.kappa_ci_low == pytest.approx((wilson_lo - 0.5) / 0.5, abs=1e-12)
    assert a.kappa_ci_low < 0.7
    more = measure_agreement([(1.0, 1.0)] * 200 + [(0.0, 0.0)] * 200, "label")
    assert a.kappa_ci_low < more.kappa_ci_low < 1.0  # narrows with n, never a point


def _ids(prefix: str, n: int) -> list[str]:
    return [f"{prefix}{i}" for i in range(n)]


@pytest.mark.parametrize("n", [216, 217])
def test_unpaired_constant_runs_get_zero_failure_bounds_on_each(tmp_path: Path, n: int) -> None:
    """Two unpaired runs of n scores all 0.5 (non-binary): each mean bounded at alpha/2 by
    the zero-failure bound, so the lower bound is 0.0125^(1/n) - 1 and the runs pass
    non-inferiority at margin 0.02 from n = 217 each ((1 - m)^n <= alpha/2), p = 2 (0.98)^n.
    Before, the gate refused any such pair (exit 2, 'no variance')."""
    base = write_run(tmp_path / "b", [0.5] * n, ids=_ids("a", n))
    cand = write_run(tmp_path / "c", [0.5] * n, ids=_ids("b", n), dataset_hash="other")
    r = regression_gate(base, cand, unpaired=True)
    assert r.method == "zero-failure" and r.unpaired
    assert r.lo == pytest.approx(0.0125 ** (1 / n) - 1, abs=1e-12)
    assert r.hi == pytest.approx(1 - 0.0125 ** (1 / n), abs=1e-12)
    assert r.p_value == pytest.approx(2 * 0.98**n, rel=1e-9)
    assert r.passed is (n == 217)
    assert r.n_needed == 217 and r.mde is None
    assert any("every baseline score is 0.5000 and every candidate" in w for w in r.warnings)


def test_one_constant_unpaired_run_is_not_taken_as_exact(tmp_path: Path) -> None:
    """A baseline of 3 scores all 0.5 against 200 candidate scores (0.5, 0.6 alternating):
    Welch took the baseline's mean as known (its SE 0) and passed with lower bound +0.043.
    Now its mean is bounded by the zero-failure bound, the candidate's by t, each at
    alpha/2 (scipy's exact binomial bound for 0 of 3 and t quantile): the gate fails."""
    from scipy.stats import binomtest, sem
    from scipy.stats import t as student_t

    cand_scores = [0.5, 0.6] * 100
    base = write_run(tmp_path / "b", [0.5] * 3, ids=_ids("a", 3))
    cand = write_run(tmp_path / "c", cand_scores, ids=_ids("b", 200), dataset_hash="other")
    r = regression_gate(base, cand, unpaired=True)
    # a share q of the baseline's population not 0.5: q <= Clopper-Pearson's upper bound
    q = binomtest(0, 3).proportion_ci(confidence_level=1 - 2 * 0.0125, method="exact").high
    lower_c = 0.55 - student_t.ppf(1 - 0.0125, 199) * sem(cand_scores)
    upper_c = 0.55 + student_t.ppf(1 - 0.0125, 199) * sem(cand_scores)
    assert r.lo == pytest.approx(lower_c - (0.5 + q * 0.5), abs=1e-9)
    assert r.hi == pytest.approx(upper_c - 0.5 * (1 - q), abs=1e-9)
    assert r.method == "zero-failure" and not r.passed and r.n_needed is None
    assert r.p_value >= r.alpha


def test_unpaired_clustered_constant_run_counts_its_clusters(tmp_path: Path) -> None:
    """A constant clustered run's zero-failure bound is on its G clusters, not its n
    samples: 400 scores of 0.5 in 20 clusters bound like 20 samples."""
    clusters = [f"k{i % 20}" for i in range(400)]
    base = write_run(tmp_path / "b", [0.5] * 400, ids=_ids("a", 400), clusters=clusters)
    cand = write_run(tmp_path / "c", [0.5] * 400, ids=_ids("b", 400), clusters=clusters)
    r = regression_gate(base, cand, unpaired=True, allow_different_data=True)
    assert r.lo == pytest.approx(0.0125 ** (1 / 20) - 1, abs=1e-12)
