"""The gate's hypothesis tests: superiority, non-inferiority, equivalence, and Holm.

The gate estimates delta = mean(candidate) - mean(baseline) with a two-sided interval at
``confidence`` (see :mod:`gradetrail.stats.intervals`); each test is a one-sided test at level
alpha = (1 - confidence) / 2, decided by where the interval lies (the interval is the
inversion of the test, so the two agree):

- ``non-inferiority``: H0 delta <= -margin; pass iff the lower bound >= -margin.
- ``superiority``: H0 delta <= margin (margin 0 by default: "better at all"); pass iff the
  lower bound > margin.
- ``equivalence``: two one-sided tests (TOST, Schuirmann 1987, J. Pharmacokinetics and
  Biopharmaceutics 15:657-680): H0 delta <= -margin and H0 delta >= margin, each at
  alpha; pass iff -margin < lower bound and upper bound < margin. Its p-value is the
  larger of the two.

Several comparisons at once (several benchmarks or metrics in one CI step) are one
family: :func:`holm_adjust` gives Holm's step-down adjusted p-values (Holm 1979,
"A simple sequentially rejective multiple test procedure", Scandinavian Journal of
Statistics 6:65-70), which keep the family-wise error rate at alpha; each comparison
passes iff its adjusted p-value <= alpha.

Everything here is pure computation on numbers; scipy is imported only by the functions
that need a distribution.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal

from gradetrail.stats import intervals as stats

__all__ = [
    "TESTS",
    "TailP",
    "TestKind",
    "Verdict",
    "bonferroni_adjust",
    "decide",
    "holm_adjust",
    "newcombe_tails",
    "normal_tails",
    "t_tails",
    "tango_tails",
    "unpaired_bound_tails",
    "zero_failure_tails",
]

TestKind = Literal["non-inferiority", "superiority", "equivalence"]

#: the test names the gate accepts
TESTS: tuple[str, ...] = ("non-inferiority", "superiority", "equivalence")

#: p_above(d0): the one-sided p-value of H0 delta <= d0 against delta > d0
TailP = Callable[[float], float]


@dataclass(frozen=True)
class Verdict:
    """One test's decision.

    Attributes:
        passed: the interval decides (see the module docstring).
        p_value: the one-sided p-value of the test (TOST: the larger of its two), in [0, 1].
        bounds: the null boundaries the interval is compared with: (-margin, None) for
            non-inferiority, (margin, None) for superiority, (-margin, margin) for
            equivalence.
    """

    passed: bool
    p_value: float
    bounds: tuple[float, float | None]


def decide(
    test: TestKind,
    lo: float,
    hi: float,
    margin: float,
    p_above: TailP,
    p_below: TailP,
) -> Verdict:
    """Decide ``test`` from the interval [lo, hi] and the margin.

    Args:
        test: ``non-inferiority``, ``superiority`` or ``equivalence``.
        lo, hi: the two-sided interval of delta at the gate's confidence.
        margin: >= 0, on the score scale.
        p_above: p_above(d0), the p-value of H0 delta <= d0 (see the ``*_tails`` helpers).
        p_below: p_below(d0), the p-value of H0 delta >= d0.

    Raises:
        ValueError: an unknown test, or a negative margin.
    """
    if margin < 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if test == "non-inferiority":
        return Verdict(lo >= -margin, _clip(p_above(-margin)), (-margin, None))
    if test == "superiority":
        return Verdict(lo > margin, _clip(p_above(margin)), (margin, None))
    if test == "equivalence":
        p = max(p_above(-margin), p_below(margin))
        return Verdict(-margin < lo and hi < margin, _clip(p), (-margin, margin))
    raise ValueError(f"test must be one of {', '.join(TESTS)}, got {test!r}")


def holm_adjust(p_values: Sequence[float]) -> list[float]:
    """Holm's (1979) step-down adjusted p-values, in the input order.

    With the m p-values sorted ascending p_(1) <= ... <= p_(m), the adjusted
    p_(j) = max_{i <= j} min(1, (m - i + 1) p_(i)); rejecting where adjusted <= alpha keeps
    the family-wise error rate at alpha under any dependence. Equals R's
    ``p.adjust(p, "holm")``.
    """
    m = len(p_values)
    order = sorted(range(m), key=lambda i: p_values[i])
    adjusted = [0.0] * m
    running = 0.0
    for rank, i in enumerate(order):
        running = max(running, min(1.0, (m - rank) * p_values[i]))
        adjusted[i] = running
    return adjusted


def bonferroni_adjust(p_values: Sequence[float]) -> list[float]:
    """Bonferroni-adjusted p-values, in the input order: min(1, m p). Equals R's
    ``p.adjust(p, "bonferroni")``; never smaller than Holm's."""
    m = len(p_values)
    return [min(1.0, m * p) for p in p_values]


def t_tails(delta: float, se: float, df: float | None) -> tuple[TailP, TailP]:
    """(p_above, p_below) of a t statistic (delta - d0) / se on df degrees of freedom
    (the normal distribution when df is None)."""
    if df is None:
        return normal_tails(delta, se)
    from scipy.stats import t as student_t

    def above(d0: float) -> float:
        return float(student_t.sf((delta - d0) / se, df))

    def below(d0: float) -> float:
        return float(student_t.cdf((delta - d0) / se, df))

    return above, below


def normal_tails(delta: float, se: float) -> tuple[TailP, TailP]:
    """(p_above, p_below) of the z statistic (delta - d0) / se."""
    from statistics import NormalDist

    normal = NormalDist()
    return (
        lambda d0: 1 - normal.cdf((delta - d0) / se),
        lambda d0: normal.cdf((delta - d0) / se),
    )


def tango_tails(only_baseline: int, only_candidate: int, n: int) -> tuple[TailP, TailP]:
    """(p_above, p_below) of Tango's (1998) score statistic Z(d0) for paired binary
    scores: p_above(d0) = 1 - Phi(Z(d0)), the test whose inversion is
    :func:`gradetrail.stats.intervals.tango_interval`."""
    from statistics import NormalDist

    normal = NormalDist()

    def z(d0: float) -> float:
        d0 = min(max(d0, -1 + 1e-12), 1 - 1e-12)
        return stats._tango_score(d0, only_baseline, only_candidate, n)

    return (lambda d0: 1 - _phi(normal, z(d0)), lambda d0: _phi(normal, z(d0)))


def zero_failure_tails(d_lo: float, d_hi: float, n: int) -> tuple[TailP, TailP]:
    """(p_above, p_below) of the zero-failure bound
    (:func:`gradetrail.stats.intervals.zero_failure_interval`): every one of n differences
    in [d_lo, d_hi], each difference in [-1, 1]. The mean is <= d0 < d_lo only if a share
    of at least (d_lo - d0) / (1 + d_lo) of the samples lies outside, which 0 of n shows
    with p = ((1 + d0) / (1 + d_lo))^n (Hanley & Lippman-Hand 1983); identical runs at
    margin m: p_above(-m) = (1 - m)^n. Symmetrically p_below(d0) = ((1 - d0) / (1 - d_hi))^n
    for d0 > d_hi; 1 on the other side."""

    def above(d0: float) -> float:
        if d0 >= d_lo:
            return 1.0
        return 0.0 if d0 <= -1 else ((1 + d0) / (1 + d_lo)) ** n

    def below(d0: float) -> float:
        if d0 <= d_hi:
            return 1.0
        return 0.0 if d0 >= 1 else ((1 - d0) / (1 - d_hi)) ** n

    return above, below


def unpaired_bound_tails(baseline: stats.RunMean, candidate: stats.RunMean) -> tuple[TailP, TailP]:
    """(p_above, p_below) of :func:`gradetrail.stats.intervals.unpaired_bound_interval`,
    by inverting it: p_above(d0) is the smallest one-sided level a at which its lower
    bound (each run's mean bounded at a / 2) reaches d0, found with scipy.optimize.brentq
    (the bound rises with a); 1 when no a <= 1 reaches it."""
    from scipy.optimize import brentq

    tiny = 1e-15

    def lower(a: float) -> float:
        return stats.mean_bounds(candidate, a / 2)[0] - stats.mean_bounds(baseline, a / 2)[1]

    def upper(a: float) -> float:
        return stats.mean_bounds(candidate, a / 2)[1] - stats.mean_bounds(baseline, a / 2)[0]

    def above(d0: float) -> float:
        if lower(1 - tiny) < d0:
            return 1.0
        if lower(tiny) >= d0:
            return tiny
        return float(brentq(lambda a: lower(a) - d0, tiny, 1 - tiny, xtol=1e-14))

    def below(d0: float) -> float:
        if upper(1 - tiny) > d0:
            return 1.0
        if upper(tiny) <= d0:
            return tiny
        return float(brentq(lambda a: upper(a) - d0, tiny, 1 - tiny, xtol=1e-14))

    return above, below


def newcombe_tails(
    baseline_passed: int, baseline_n: int, candidate_passed: int, candidate_n: int
) -> tuple[TailP, TailP]:
    """(p_above, p_below) for Newcombe's interval, by inverting it: p_above(d0) is the
    alpha at which the lower bound of the (1 - 2 alpha) interval reaches d0 (found with
    scipy.optimize.brentq)."""
    from scipy.optimize import brentq

    counts = (baseline_passed, baseline_n, candidate_passed, candidate_n)
    estimate = candidate_passed / candidate_n - baseline_passed / baseline_n
    tiny = 1e-12

    def bound(alpha: float, side: int) -> float:
        return stats.newcombe_interval(*counts, confidence=1 - 2 * alpha)[side]

    def above(d0: float) -> float:
        if d0 >= estimate:
            return 1 - below(d0) if d0 > estimate else 0.5
        if bound(tiny, 0) >= d0:
            return 0.0
        return float(brentq(lambda a: bound(a, 0) - d0, tiny, 0.5 - tiny, xtol=1e-14))

    def below(d0: float) -> float:
        if d0 <= estimate:
            return 1 - above(d0) if d0 < estimate else 0.5
        if bound(tiny, 1) <= d0:
            return 0.0
        return float(brentq(lambda a: bound(a, 1) - d0, tiny, 0.5 - tiny, xtol=1e-14))

    return above, below


def _phi(normal: object, z: float) -> float:
    if math.isinf(z):
        return 1.0 if z > 0 else 0.0
    return normal.cdf(z)  # type: ignore[attr-defined]


def _clip(p: float) -> float:
    return min(1.0, max(0.0, p))
