"""Error bars, paired intervals and power for eval scores.

Everything here works on plain sequences: one score per sample (epochs already averaged,
see `sample_means`), no file I/O. Importing this module does not import scipy; the few
functions that need it (`paired_t`, `tango_interval`, `mcnemar_exact`) import it when
called, so the run summary (`summarize`) stays pure Python.

Sources, cited by equation in each docstring:

- Miller, "Adding Error Bars to Evals: A Statistical Approach to Language Model
  Evaluations", arXiv 2411.00640 (2024). Eq. 1-2: the mean and its standard error over
  samples; eq. 4: the clustered standard error; eq. 7-8: the paired difference and its
  standard error; eq. 9-10: power (sample size and minimum detectable effect).
- Hanley & Lippman-Hand, "If nothing goes wrong, is everything all right? Interpreting
  zero numerators", JAMA 249(13):1743-1745 (1983): with 0 events in n independent trials
  the exact one-sided upper bound of the event rate at level alpha is 1 - alpha^(1/n)
  (about 3/n at alpha 0.05, "the rule of three"; Clopper-Pearson's bound for 0/n).
- Tango, "Equivalence test and confidence interval for the difference in proportions for
  the paired-sample design", Statistics in Medicine 17:891-908 (1998): the score interval
  for the difference of paired binary proportions.

Words: a *baseline* and a *candidate* score the same samples; the paired difference is
d_i = candidate_i - baseline_i, so a positive mean difference means the candidate is better.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass, replace
from statistics import NormalDist

__all__ = [
    "Interval",
    "PowerPlan",
    "RunMean",
    "ScoreSummary",
    "clip_interval",
    "clustered_standard_error",
    "correlation",
    "design_effect",
    "difference_variance",
    "discordant_counts",
    "is_binary",
    "mcnemar_exact",
    "mean_bounds",
    "mcnemar_exact_greater",
    "fisher_exact_greater",
    "newcombe_interval",
    "minimum_detectable_effect",
    "normal_quantile",
    "paired_differences",
    "paired_t",
    "paired_z",
    "plan_power",
    "sample_means",
    "sample_size",
    "sample_size_for_half_width",
    "standard_error",
    "summarize",
    "t_quantile",
    "tango_interval",
    "unpaired_bound_interval",
    "welch_interval",
    "wilson_interval",
    "zero_failure_interval",
]

_NORMAL = NormalDist()


@dataclass(frozen=True)
class ScoreSummary:
    """The mean score over samples with its standard error and confidence interval.

    `n` counts samples (not rows: epochs are reduced first). `n_clusters` is None when no
    clusters were given. `method` names the interval: "wilson" (binary scores) or "t".
    With n == 0 every float is NaN; with n == 1 the mean is defined but the standard error
    (and a t interval) are NaN.
    """

    n: int
    mean: float
    se: float
    ci_low: float
    ci_high: float
    n_clusters: int | None = None
    method: str = "t"


@dataclass(frozen=True)
class Interval:
    """A confidence interval for the mean paired difference (candidate - baseline).

    `method` is "z", "t", "tango" (paired), "welch" or "newcombe" (unpaired); `df` is the
    t distribution's degrees of freedom (None for z, tango and newcombe); `n_clusters` is
    None when the interval ignores clusters. For tango and newcombe `se` is the Wald
    standard error of the difference, for reference only: the interval does not use it.
    `unclipped` is (lo, hi) before :func:`clip_interval` cut them to the possible range,
    or None when they lay inside it.
    """

    delta: float
    lo: float
    hi: float
    se: float
    method: str
    df: float | None = None
    n_clusters: int | None = None
    unclipped: tuple[float, float] | None = None

    @property
    def raw(self) -> tuple[float, float]:
        """(lo, hi) as the method computed them, before any clipping: what a test that
        also reports this method's p-value must decide on."""
        return self.unclipped or (self.lo, self.hi)


def clip_interval(interval: Interval, low: float = -1.0, high: float = 1.0) -> Interval:
    """``interval`` cut to the possible range [low, high] of the difference it estimates.

    Scores lie in [0, 1], so a difference of two of them (or of two means) lies in
    [-1, 1]; a t or z interval (mean +- q * SE) knows nothing of that and reaches past
    it at small n: two paired differences 0.5 and 0 give a 95% t interval of
    [-2.93, +3.43]. The intersection of a confidence set with the parameter space covers
    the true value whenever the set does (the value is always in the space), so it keeps
    at least the nominal coverage (Mandelkern, "Setting confidence intervals for bounded
    parameters", Statistical Science 17:149-172, 2002). Score intervals (Wilson, Tango,
    Newcombe) lie inside by construction and come back unchanged.

    Returns:
        The interval with lo = max(lo, low) and hi = min(hi, high), and ``unclipped``
        holding the original (lo, hi) when either bound moved by more than 1e-12
        (rounding is not clipping); the interval itself when neither did.
    """
    lo, hi = interval.raw
    if lo >= low - 1e-12 and hi <= high + 1e-12:
        return interval
    return replace(interval, lo=max(lo, low), hi=min(hi, high), unclipped=(lo, hi))


def normal_quantile(confidence: float) -> float:
    """Two-sided standard normal quantile: z with P(|Z| <= z) = confidence (1.96 at 0.95)."""
    _check_open_unit(confidence, "confidence")
    return _NORMAL.inv_cdf(0.5 + confidence / 2)


def sample_means(rows: Iterable[tuple[str, int, float]]) -> dict[str, float]:
    """Average each sample's epochs: (sample_id, epoch, score) rows -> {sample_id: mean}.

    Epochs are repeats of one sample, not new samples, so they are averaged per sample
    before any standard error is taken (Miller, on resampling: it reduces the within-sample
    variance; it never multiplies n). Order follows each sample's first row. A repeated
    (sample_id, epoch) pair raises ValueError rather than being counted twice.
    """
    totals: dict[str, list[float]] = {}
    seen: set[tuple[str, int]] = set()
    for sample_id, epoch, score in rows:
        if (sample_id, epoch) in seen:
            raise ValueError(f"sample {sample_id!r} has epoch {epoch} twice")
        seen.add((sample_id, epoch))
        totals.setdefault(sample_id, []).append(float(score))
    return {sample_id: math.fsum(scores) / len(scores) for sample_id, scores in totals.items()}


def standard_error(values: Sequence[float]) -> float:
    """Standard error of the mean, Miller eq. 2: sqrt(sum((s_i - mean)^2) / (n - 1) / n).

    `values` holds one score per sample. NaN when n < 2.
    """
    n = len(values)
    if n < 2:
        return math.nan
    mean = math.fsum(values) / n
    ss = math.fsum((v - mean) ** 2 for v in values)
    return math.sqrt(ss / (n - 1) / n)


def clustered_standard_error(
    values: Sequence[float], clusters: Sequence[Hashable | None]
) -> tuple[float, int]:
    """Clustered (CR1) standard error of the mean, and the number of clusters G.

    SE^2 = G / (G - 1) * (1 / n^2) * sum_c (sum_{i in c} e_i)^2, e = s - mean: Miller's
    eq. 4 sandwich (its cross terms are the off-diagonal part of each (sum_c e)^2) with the
    small-sample factor G / (G - 1), the CR1 estimator and statsmodels' default for
    ``OLS(...).fit(cov_type="cluster")`` of a mean. Without the factor (CR0) the interval
    under-covers with few clusters (93.9% for a nominal 95% at G = 10). A None cluster is
    a cluster of its own sample, so with every cluster a singleton (G = n) the result
    equals eq. 2 exactly. `values` and `clusters` are parallel, one entry per sample.
    Returns (NaN, G) when n < 2 or G < 2.
    """
    if len(values) != len(clusters):
        raise ValueError(f"{len(values)} values but {len(clusters)} clusters")
    n = len(values)
    keys = [(0, c) if c is not None else (1, i) for i, c in enumerate(clusters)]
    n_clusters = len(set(keys))
    if n < 2 or n_clusters < 2:
        return math.nan, n_clusters
    mean = math.fsum(values) / n
    sums: dict[tuple[int, Hashable], float] = {}
    for key, v in zip(keys, values, strict=True):
        sums[key] = sums.get(key, 0.0) + (v - mean)
    meat = math.fsum(s * s for s in sums.values())
    return math.sqrt(n_clusters / (n_clusters - 1) * meat / n**2), n_clusters


def wilson_interval(successes: int, n: int, confidence: float = 0.95) -> tuple[float, float]:
    """Wilson score interval of a binomial proportion (Wilson 1927, JASA 22:209-212).

    (x + z^2/2) / (n + z^2) +- z / (n + z^2) * sqrt(x (n - x) / n + z^2 / 4), z the
    two-sided normal quantile. Chosen for binary run summaries over Clopper-Pearson: its
    coverage stays close to nominal across p (Brown, Cai & DasGupta 2001, Statistical
    Science 16:101-133, recommend it), where Clopper-Pearson is conservative (3/10 gives
    [0.067, 0.652] against Wilson's [0.108, 0.603]); like the gate's Tango interval it
    inverts a score test, and it never collapses: 100/100 gives [0.9630, 1]. Pure Python.

    Raises:
        ValueError: n < 1 or successes outside [0, n].
    """
    if n < 1 or not 0 <= successes <= n:
        raise ValueError(f"need 0 <= successes <= n and n >= 1, got {successes}/{n}")
    return _wilson(float(successes), float(n), confidence)


def _wilson(x: float, n: float, confidence: float) -> tuple[float, float]:
    """Wilson's interval for x successes in n trials, both possibly fractional (an
    effective sample size)."""
    z = normal_quantile(confidence)
    z2 = z * z
    center = (x + z2 / 2) / (n + z2)
    half = z / (n + z2) * math.sqrt(max(0.0, x * (n - x) / n) + z2 / 4)
    lo = 0.0 if x <= 0 else max(0.0, center - half)
    hi = 1.0 if x >= n else min(1.0, center + half)
    return lo, hi


def summarize(
    scores: Sequence[float],
    clusters: Sequence[Hashable | None] | None = None,
    confidence: float = 0.95,
) -> ScoreSummary:
    """Mean, standard error and confidence interval of per-sample scores.

    `scores` holds one score per sample (reduce epochs first). The mean is Miller eq. 1,
    the standard error eq. 2, or the clustered CR1 one (`clustered_standard_error`) when
    `clusters` (parallel to `scores`) is given. The interval:

    - binary (0/1) scores: the Wilson score interval (`wilson_interval`), valid at 0% and
      100% where mean +- q * SE has zero width; with clusters, Wilson on Korn &
      Graubard's (1998, Survey Methodology 24:193-201) effective sample size
      n* = p (1 - p) / SE^2 * (t_{n-1} / t_{G-1})^2, at most n, and on G instead of
      p (1 - p) / SE^2 when every score is equal (the clustering cannot be estimated);
    - otherwise mean +- q * SE, with q Student's t quantile on n - 1 degrees of freedom
      (G - 1 with G clusters) as Miller advises for small samples, and the normal quantile
      once there are 1,000 degrees of freedom or more. When the scores do not vary the
      interval is NaN (undefined), never a point.

    O(n) and pure Python (:func:`t_quantile`): the run summary calls it for every run,
    so it imports no scipy.
    """
    n = len(scores)
    if n == 0:
        return ScoreSummary(0, math.nan, math.nan, math.nan, math.nan, None)
    mean = math.fsum(scores) / n
    n_clusters = None
    if clusters is None:
        se = standard_error(scores)
        df = n - 1
    else:
        se, n_clusters = clustered_standard_error(scores, clusters)
        df = n_clusters - 1
    if is_binary(scores):
        n_eff = _effective_n(n, mean, se, n_clusters, confidence)
        lo, hi = _wilson(mean * n_eff, n_eff, confidence) if n_eff > 0 else (math.nan,) * 2
        return ScoreSummary(n, mean, se, lo, hi, n_clusters, "wilson")
    if se == 0:
        return ScoreSummary(n, mean, se, math.nan, math.nan, n_clusters, "t")
    q = _t_quantile(confidence, df)
    return ScoreSummary(n, mean, se, mean - q * se, mean + q * se, n_clusters, "t")


def _effective_n(
    n: int, mean: float, se: float, n_clusters: int | None, confidence: float
) -> float:
    """The sample size a Wilson interval may use: n, or Korn & Graubard's n* with clusters
    (0 when it is undefined: fewer than 2 clusters)."""
    if n_clusters is None:
        return float(n)
    if n_clusters < 2:
        return 0.0
    size = mean * (1 - mean) / se**2 if se > 0 else float(n_clusters)
    df_factor = (_t_quantile(confidence, n - 1) / _t_quantile(confidence, n_clusters - 1)) ** 2
    return min(float(n), size * df_factor)


def _t_quantile(confidence: float, df: int) -> float:
    """Two-sided Student t quantile (normal at df >= 1000; NaN at df < 1)."""
    if df >= 1000:
        return normal_quantile(confidence)
    _check_open_unit(confidence, "confidence")
    if df < 1:
        return math.nan
    return t_quantile(confidence, df)


def t_quantile(confidence: float, df: int) -> float:
    """Two-sided Student t quantile: q with P(|T| <= q) = ``confidence`` for T on ``df``
    (a positive integer) degrees of freedom; 12.706 at 0.95 and df = 1, 2.262 at df = 9.

    Pure Python, so the run summary of a small run imports no scipy: P(|T| <= t) is the
    finite series of Abramowitz & Stegun, Handbook of Mathematical Functions (1964),
    26.7.3 (odd df) and 26.7.4 (even df) in theta = arctan(t / sqrt(df)), inverted by
    bisection on theta in [0, pi/2) to double precision (it agrees with scipy's
    ``stdtrit`` to 1e-9 relative). O(df) a step, 64 steps.

    Raises:
        ValueError: ``confidence`` outside (0, 1) or ``df`` < 1.
    """
    _check_open_unit(confidence, "confidence")
    if df < 1 or int(df) != df:
        raise ValueError(f"df must be a positive integer, got {df!r}")
    df = int(df)
    low, high = 0.0, math.pi / 2
    for _ in range(64):
        mid = (low + high) / 2
        if _t_central(mid, df) < confidence:
            low = mid
        else:
            high = mid
    return math.sqrt(df) * math.tan((low + high) / 2)


def _t_central(theta: float, df: int) -> float:
    """P(|T| <= sqrt(df) tan(theta)) for T on ``df`` degrees of freedom (A&S 26.7.3-4)."""
    c2 = math.cos(theta) ** 2
    if df % 2 == 0:  # sin(theta) (1 + 1/2 cos^2 + 1.3/2.4 cos^4 + ... up to cos^(df-2))
        term = total = 1.0
        for j in range(1, df // 2):
            term *= (2 * j - 1) / (2 * j) * c2
            total += term
        return math.sin(theta) * total
    # (2/pi) (theta + sin(theta) (cos + 2/3 cos^3 + ... up to cos^(df-2))); df = 1: 2 theta/pi
    total = 0.0
    if df > 1:
        term = total = math.cos(theta)
        for j in range(1, (df - 1) // 2):
            term *= (2 * j) / (2 * j + 1) * c2
            total += term
    return 2 / math.pi * (theta + math.sin(theta) * total)


def paired_differences(baseline: Sequence[float], candidate: Sequence[float]) -> list[float]:
    """Per-sample differences d_i = candidate_i - baseline_i (Miller eq. 7), same order."""
    if len(baseline) != len(candidate):
        raise ValueError(f"{len(baseline)} baseline scores but {len(candidate)} candidate scores")
    return [c - b for b, c in zip(baseline, candidate, strict=True)]


def _paired_se(
    diffs: Sequence[float], clusters: Sequence[Hashable | None] | None
) -> tuple[float, int | None]:
    if clusters is None:
        return standard_error(diffs), None
    return clustered_standard_error(diffs, clusters)


def paired_z(
    baseline: Sequence[float],
    candidate: Sequence[float],
    clusters: Sequence[Hashable | None] | None = None,
    confidence: float = 0.95,
) -> Interval:
    """Paired z interval for the mean difference, Miller eq. 7-8 (the seed formula).

    The mean of d_i = candidate_i - baseline_i, with the standard error of the paired
    difference sqrt(Var(d) / n) (Var with n - 1). This equals Miller eq. 8,
    sqrt(SE_A^2 + SE_B^2 - 2 Cov(s_A, s_B) / n), computed directly from the differences.
    With `clusters`, the standard error of d is clustered (eq. 4). Interval: delta +- z * SE.
    Inputs are parallel sequences of per-sample scores.
    """
    diffs = paired_differences(baseline, candidate)
    _require_samples(len(diffs), 2)
    delta = math.fsum(diffs) / len(diffs)
    se, n_clusters = _paired_se(diffs, clusters)
    z = normal_quantile(confidence)
    return Interval(delta, delta - z * se, delta + z * se, se, "z", None, n_clusters)


def paired_t(
    baseline: Sequence[float],
    candidate: Sequence[float],
    clusters: Sequence[Hashable | None] | None = None,
    confidence: float = 0.95,
) -> Interval:
    """Paired t interval for the mean difference: Miller eq. 7-8 with a t quantile.

    The standard error is that of `paired_z` (clustered, eq. 4, when `clusters` is given);
    the quantile is Student's t with n - 1 degrees of freedom, or G - 1 with G clusters,
    the usual small-sample reference for a clustered mean.
    """
    from scipy.stats import t as student_t

    diffs = paired_differences(baseline, candidate)
    _require_samples(len(diffs), 2)
    delta = math.fsum(diffs) / len(diffs)
    se, n_clusters = _paired_se(diffs, clusters)
    df = (n_clusters if n_clusters is not None else len(diffs)) - 1
    if df < 1:
        raise ValueError("a clustered t interval needs at least 2 clusters")
    q = float(student_t.ppf(0.5 + confidence / 2, df))
    return Interval(delta, delta - q * se, delta + q * se, se, "t", df, n_clusters)


def welch_interval(
    baseline: Sequence[float], candidate: Sequence[float], confidence: float = 0.95
) -> Interval:
    """Unpaired interval for mean(candidate) - mean(baseline), runs on different samples.

    Miller eq. 5-6: the difference of the two means with SE = sqrt(SE_A^2 + SE_B^2), each
    SE_X by eq. 2; the quantile is Student's t on the Welch-Satterthwaite degrees of
    freedom (SE_A^2 + SE_B^2)^2 / (SE_A^4 / (n_A - 1) + SE_B^4 / (n_B - 1)), which tends
    to Miller's normal quantile for large runs (scipy's ``ttest_ind(equal_var=False)``
    interval). ``df`` is the exact (fractional) Welch-Satterthwaite value.

    Raises:
        ValueError: fewer than 2 scores in either run.
    """
    from scipy.stats import t as student_t

    _require_samples(min(len(baseline), len(candidate)), 2)
    se_b, se_c = standard_error(baseline), standard_error(candidate)
    delta = math.fsum(candidate) / len(candidate) - math.fsum(baseline) / len(baseline)
    var = se_b**2 + se_c**2
    se = math.sqrt(var)
    if var == 0:
        return Interval(delta, delta, delta, 0.0, "welch", None)
    df = var**2 / (se_b**4 / (len(baseline) - 1) + se_c**4 / (len(candidate) - 1))
    q = float(student_t.ppf(0.5 + confidence / 2, df))
    return Interval(delta, delta - q * se, delta + q * se, se, "welch", df)


def newcombe_interval(
    baseline_passed: int,
    baseline_n: int,
    candidate_passed: int,
    candidate_n: int,
    confidence: float = 0.95,
) -> tuple[float, float]:
    """Newcombe's hybrid score interval for p_candidate - p_baseline, independent samples.

    Newcombe, "Interval estimation for the difference between independent proportions:
    comparison of eleven methods", Statistics in Medicine 17:873-890 (1998), method 10:
    with each run's Wilson interval [l, u] (`wilson_interval`) and d = p_c - p_b,
    [d - sqrt((p_c - l_c)^2 + (u_b - p_b)^2), d + sqrt((u_c - p_c)^2 + (p_b - l_b)^2)].
    Valid at 0% and 100% (0/10 vs 0/10 gives +-0.2775), where the unpaired Wald interval
    collapses to a point.
    """
    pb, pc = baseline_passed / baseline_n, candidate_passed / candidate_n
    lb, ub = wilson_interval(baseline_passed, baseline_n, confidence)
    lc, uc = wilson_interval(candidate_passed, candidate_n, confidence)
    d = pc - pb
    return d - math.hypot(pc - lc, ub - pb), d + math.hypot(uc - pc, pb - lb)


def is_binary(values: Iterable[float]) -> bool:
    """True when every value is exactly 0 or 1 (a pass/fail score)."""
    return all(v in (0.0, 1.0) for v in values)


def discordant_counts(baseline: Sequence[float], candidate: Sequence[float]) -> tuple[int, int]:
    """Counts of (only baseline passed, only candidate passed) over paired binary scores."""
    if not (is_binary(baseline) and is_binary(candidate)):
        raise ValueError("discordant counts need binary (0/1) scores")
    pairs = list(zip(baseline, candidate, strict=True))
    return sum(b > c for b, c in pairs), sum(c > b for b, c in pairs)


def _tango_score(delta: float, only_baseline: int, only_candidate: int, n: int) -> float:
    """Tango (1998) score statistic for H0: p_candidate - p_baseline = delta.

    With x12 = only_candidate and x21 = only_baseline, the constrained maximum-likelihood
    estimate of p21 is q = (sqrt(W^2 + 8 n x21 delta (1 - delta)) - W) / (4 n), where
    W = -x12 - x21 + (2 n - x12 + x21) delta, and
    Z(delta) = (x12 - x21 - n delta) / sqrt(n (2 q + delta (1 - delta))).
    """
    x12, x21 = only_candidate, only_baseline
    numerator = x12 - x21 - n * delta
    if numerator == 0:
        return 0.0
    w = -x12 - x21 + (2 * n - x12 + x21) * delta
    q = (math.sqrt(max(0.0, w * w + 8 * n * x21 * delta * (1 - delta))) - w) / (4 * n)
    variance = n * (2 * q + delta * (1 - delta))
    if variance <= 0:
        return math.copysign(math.inf, numerator)
    return numerator / math.sqrt(variance)


def tango_interval(
    only_baseline: int, only_candidate: int, n: int, confidence: float = 0.95
) -> tuple[float, float]:
    """Tango (1998) score interval for p_candidate - p_baseline over n paired binary samples.

    `only_baseline` and `only_candidate` are the discordant counts (samples only that run
    passed). The interval is {delta : |Z(delta)| <= z}, Z the score statistic of
    `_tango_score`; each bound is the root of Z(delta) = +-z, found by bisection between
    the point estimate and -1 or 1 (Z decreases in delta) to 1e-12, in pure Python so the
    gate and the diff import no scipy for binary scores. Unlike the Wald interval
    it does not collapse to a point when there are no discordant pairs: with n = 100 and
    none, it is +-z^2 / (n + z^2) = +-0.037.
    """
    if not 0 <= only_baseline + only_candidate <= n or min(only_baseline, only_candidate) < 0:
        raise ValueError(f"discordant counts {only_baseline}, {only_candidate} do not fit n={n}")
    _require_samples(n, 1)
    z = normal_quantile(confidence)
    estimate = (only_candidate - only_baseline) / n
    edge = 1e-12

    def score(delta: float) -> float:
        return _tango_score(delta, only_baseline, only_candidate, n)

    lo, hi = -1.0, 1.0
    if estimate > -1 and score(-1 + edge) > z:
        lo = _bisect(lambda d: score(d) - z, -1 + edge, estimate)
    if estimate < 1 and score(1 - edge) < -z:
        hi = _bisect(lambda d: score(d) + z, estimate, 1 - edge)
    return lo, hi


def _bisect(f: Callable[[float], float], a: float, b: float, xtol: float = 1e-12) -> float:
    """The root of ``f`` in [a, b], where f(a) and f(b) differ in sign (or one is 0)."""
    fa = f(a)
    if fa == 0:
        return a
    for _ in range(200):
        mid = (a + b) / 2
        fm = f(mid)
        if fm == 0:
            return mid
        if (fm > 0) == (fa > 0):
            a, fa = mid, fm
        else:
            b = mid
        if b - a <= xtol:
            break
    return (a + b) / 2


def mcnemar_exact(only_baseline: int, only_candidate: int) -> float:
    """Exact two-sided McNemar p-value: a binomial test of the discordant pairs at p = 1/2.

    At p = 1/2 the distribution is symmetric, so the two-sided p-value (scipy's
    ``binomtest``) is twice the smaller tail, at most 1: 2 P(X <= min(b, c)) with X
    binomial(b + c, 1/2), summed in log space (pure Python: no scipy import). 1.0 when
    there are no discordant pairs.
    """
    discordant = only_baseline + only_candidate
    if discordant == 0:
        return 1.0
    k = min(only_baseline, only_candidate)
    if 2 * k >= discordant:
        return 1.0
    n = discordant
    log_terms = [
        math.lgamma(n + 1) - math.lgamma(i + 1) - math.lgamma(n - i + 1) for i in range(k + 1)
    ]
    top = max(log_terms)
    tail = math.exp(top - n * math.log(2)) * math.fsum(math.exp(t - top) for t in log_terms)
    return min(1.0, 2 * tail)


def mcnemar_exact_greater(only_baseline: int, only_candidate: int) -> float:
    """Exact one-sided McNemar p-value that the candidate is better: P(X >= only_candidate)
    for X ~ Binomial(only_baseline + only_candidate, 1/2), the exact conditional test of
    the discordant pairs (McNemar 1947; as R's ``binom.test(c, b + c, alternative =
    "greater")``). Not mid-p: the gate must never be more liberal than the exact test.
    1.0 when there are no discordant pairs."""
    from scipy.stats import binom

    discordant = only_baseline + only_candidate
    if discordant == 0:
        return 1.0
    return float(min(1.0, binom.sf(only_candidate - 1, discordant, 0.5)))


def fisher_exact_greater(
    x_baseline: int, n_baseline: int, x_candidate: int, n_candidate: int
) -> float:
    """Fisher's exact one-sided p-value that the candidate's success rate is higher
    (Fisher 1935; R's ``fisher.test(matrix(c(xc, nc - xc, xb, nb - xb), 2, byrow = TRUE),
    alternative = "greater")``): the hypergeometric upper tail of the candidate's
    successes given both margins.

    Raises:
        ValueError: a count outside [0, n].
    """
    from scipy.stats import fisher_exact

    if not (0 <= x_baseline <= n_baseline and 0 <= x_candidate <= n_candidate):
        raise ValueError("successes must lie in [0, n] for each run")
    table = [[x_candidate, n_candidate - x_candidate], [x_baseline, n_baseline - x_baseline]]
    return float(fisher_exact(table, alternative="greater").pvalue)


def correlation(x: Sequence[float], y: Sequence[float]) -> float | None:
    """Pearson correlation of paired per-sample scores; None when either is constant or n < 2."""
    n = len(x)
    if n != len(y):
        raise ValueError(f"{n} and {len(y)} scores are not paired")
    if n < 2:
        return None
    mx, my = math.fsum(x) / n, math.fsum(y) / n
    sxy = math.fsum((a - mx) * (b - my) for a, b in zip(x, y, strict=True))
    sxx = math.fsum((a - mx) ** 2 for a in x)
    syy = math.fsum((b - my) ** 2 for b in y)
    if sxx == 0 or syy == 0:
        return None
    return sxy / math.sqrt(sxx * syy)


# --- power (Miller eq. 9-10) -------------------------------------------------------------


def difference_variance(
    variance: float, correlation: float = 0.0, candidate_variance: float | None = None
) -> float:
    """omega^2, the variance of the per-sample difference, from each model's score variance.

    omega^2 = Var(x_A) + Var(x_B) - 2 rho sd(x_A) sd(x_B), the quantity Miller's eq. 9-10
    take as input: a correlated pair of models (rho > 0) needs fewer samples. `variance` is
    the baseline's variance of per-sample scores (p (1 - p) for a pass rate p);
    `candidate_variance` defaults to the same.
    """
    other = variance if candidate_variance is None else candidate_variance
    if variance < 0 or other < 0:
        raise ValueError("variances must be >= 0")
    if not -1 <= correlation <= 1:
        raise ValueError("correlation must be in [-1, 1]")
    return max(0.0, variance + other - 2 * correlation * math.sqrt(variance * other))


def design_effect(cluster_size: float, icc: float) -> float:
    """Variance inflation from clustering, 1 + (m - 1) * icc (Kish's design effect).

    `cluster_size` is the mean number of samples per cluster, `icc` the intra-cluster
    correlation of the per-sample differences. It multiplies omega^2 in the power formulas,
    which is the power-analysis counterpart of Miller's clustered standard error (eq. 4).
    """
    if cluster_size < 1:
        raise ValueError("cluster_size must be >= 1")
    if not -1 <= icc <= 1:
        raise ValueError("icc must be in [-1, 1]")
    return 1 + (cluster_size - 1) * icc


def _comparison_variance(omega2: float, within_variance: float, epochs: int, deff: float) -> float:
    """Variance of one sample's paired difference: deff * omega^2 + 2 sigma^2 / K (eq. 9).
    ValueError when it is 0: no test plans on a difference with no variance."""
    if omega2 < 0 or within_variance < 0:
        raise ValueError("omega2 and within_variance must be >= 0")
    if epochs < 1:
        raise ValueError("epochs must be >= 1")
    if deff <= 0:
        raise ValueError("design_effect must be > 0")
    variance = deff * omega2 + 2 * within_variance / epochs
    if variance == 0:  # eq. 9 gave n = 1 and eq. 10 an MDE of 0: a plan of no sample
        raise ValueError(
            "a variance of 0 (every paired difference equal) has no plan: the gate then "
            "takes the zero-failure bound, n >= ln(alpha) / ln(1 - margin) (183 at margin "
            "0.02); give the variance you expect (p (1 - p) for a pass rate p)"
        )
    return variance


def _z_alpha_beta(alpha: float, power: float) -> float:
    """z_{alpha/2} + z_beta. A power at or below alpha has no answer: a two-sided test at
    level alpha rejects with probability alpha when there is no difference at all (below
    alpha / 2 the sum turns negative, and squared it gave a size again: power 0.001 asked
    as many samples as power 0.2; statsmodels' solver finds no root there either)."""
    _check_open_unit(alpha, "alpha")
    _check_open_unit(power, "power")
    if power <= alpha:
        raise ValueError(
            f"power {power:g} must exceed alpha {alpha:g}: a test at level alpha already "
            "rejects with probability alpha when there is no difference"
        )
    return _NORMAL.inv_cdf(1 - alpha / 2) + _NORMAL.inv_cdf(power)


def _ceil(x: float) -> int:
    if not math.isfinite(x):
        raise ValueError(
            "more samples than can be counted: the difference or half-width is too small "
            "for that variance"
        )
    # Rounding noise must not add a sample: 968.9999999 means 969, not 970.
    return max(1, math.ceil(x - 1e-9))


def _over_squared(numerator: float, size: float) -> float:
    """``numerator / size**2``, infinite where ``size**2`` underflows to 0 (a delta of
    1e-200 raised ZeroDivisionError)."""
    squared = size**2
    return numerator / squared if squared else math.inf


def sample_size(
    delta: float,
    omega2: float,
    *,
    within_variance: float = 0.0,
    epochs: int = 1,
    design_effect: float = 1.0,
    alpha: float = 0.05,
    power: float = 0.8,
) -> int:
    """Samples needed to detect a mean difference `delta`, Miller eq. 9.

    n = (z_{alpha/2} + z_beta)^2 * (deff * omega^2 + 2 sigma^2 / K) / delta^2, rounded up:
    omega^2 is the variance of the per-sample difference in expected scores (see
    `difference_variance`), sigma^2 = `within_variance` each model's expected variance of
    one epoch's score around its per-sample mean, K = `epochs`, deff the clustering
    `design_effect`. A two-sided test at `alpha` with the given `power`. Miller's example:
    omega^2 = 1/9, delta = 0.03 -> 969. For the gate, delta is margin + the true difference.

    Raises:
        ValueError: delta 0; a total variance of 0 (omega^2 and sigma^2 both 0: every
            difference equal, no plan); a negative variance, epochs < 1, a design effect
            <= 0; alpha or power outside (0, 1), or power <= alpha; an n past counting.
    """
    if delta == 0:
        raise ValueError("delta must be non-zero")
    variance = _comparison_variance(omega2, within_variance, epochs, design_effect)
    return _ceil(_over_squared(_z_alpha_beta(alpha, power) ** 2 * variance, delta))


def minimum_detectable_effect(
    n: int,
    omega2: float,
    *,
    within_variance: float = 0.0,
    epochs: int = 1,
    design_effect: float = 1.0,
    alpha: float = 0.05,
    power: float = 0.8,
) -> float:
    """Smallest mean difference n samples detect, Miller eq. 10 (eq. 9 solved for delta).

    MDE = (z_{alpha/2} + z_beta) * sqrt((deff * omega^2 + 2 sigma^2 / K) / n); parameters
    and errors as in `sample_size` (and n < 1). It knows nothing of the range: at small n
    it can exceed 1, the largest difference of [0, 1] scores.
    """
    _require_samples(n, 1)
    variance = _comparison_variance(omega2, within_variance, epochs, design_effect)
    return _z_alpha_beta(alpha, power) * math.sqrt(variance / n)


def sample_size_for_half_width(
    half_width: float,
    omega2: float,
    *,
    within_variance: float = 0.0,
    epochs: int = 1,
    design_effect: float = 1.0,
    confidence: float = 0.95,
) -> int:
    """Samples needed for the paired interval's half-width to be at most `half_width`.

    n = z^2 * (deff * omega^2 + 2 sigma^2 / K) / h^2, rounded up: the half-width of Miller's
    paired interval (eq. 8) is z * sqrt(variance / n); parameters as in `sample_size`.
    """
    if half_width <= 0:
        raise ValueError("half_width must be > 0")
    variance = _comparison_variance(omega2, within_variance, epochs, design_effect)
    return _ceil(_over_squared(normal_quantile(confidence) ** 2 * variance, half_width))


@dataclass(frozen=True)
class PowerPlan:
    """One answer of `plan_power`, with the assumptions it was computed from.

    `solved_for` is "n" (samples needed to detect `delta`, or to reach `half_width`) or
    "delta" (the minimum detectable effect of `n` samples). `power` is None for half-width
    planning, which involves no test.
    """

    solved_for: str
    n: int
    delta: float | None
    half_width: float | None
    omega2: float
    within_variance: float
    epochs: int
    design_effect: float
    alpha: float
    power: float | None


def plan_power(
    omega2: float,
    *,
    delta: float | None = None,
    n: int | None = None,
    half_width: float | None = None,
    within_variance: float = 0.0,
    epochs: int = 1,
    design_effect: float = 1.0,
    alpha: float = 0.05,
    power: float = 0.8,
) -> PowerPlan:
    """Answer one planning question (exactly one of `delta`, `n`, `half_width` given).

    `delta` -> `sample_size` (eq. 9); `n` -> `minimum_detectable_effect` (eq. 10);
    `half_width` -> `sample_size_for_half_width` at confidence 1 - alpha.
    """
    if sum(v is not None for v in (delta, n, half_width)) != 1:
        raise ValueError("give exactly one of delta, n or half_width")
    common = {"within_variance": within_variance, "epochs": epochs, "design_effect": design_effect}
    plan = PowerPlan(
        "n", 0, delta, half_width, omega2, within_variance, epochs, design_effect, alpha, power
    )
    if delta is not None:
        size = sample_size(delta, omega2, alpha=alpha, power=power, **common)
        return replace(plan, n=size)
    if n is not None:
        mde = minimum_detectable_effect(n, omega2, alpha=alpha, power=power, **common)
        return replace(plan, solved_for="delta", n=n, delta=mde)
    assert half_width is not None
    size = sample_size_for_half_width(half_width, omega2, confidence=1 - alpha, **common)
    return replace(plan, n=size, power=None)


def _check_open_unit(value: float, name: str) -> None:
    if not 0 < value < 1:
        raise ValueError(f"{name} must be strictly between 0 and 1, got {value}")


def _require_samples(n: int, minimum: int) -> None:
    if n < minimum:
        raise ValueError(f"need at least {minimum} paired samples, got {n}")


def zero_failure_interval(d_lo: float, d_hi: float, n: int, confidence: float = 0.95) -> Interval:
    """The interval of the mean paired difference when every one of ``n`` differences
    lies in [d_lo, d_hi], a span of rounding only (identical runs: d_lo = d_hi = 0), where
    a t or z interval has zero width and proves nothing.

    A difference of two [0, 1] scores lies in [-1, 1]. No difference outside [d_lo, d_hi]
    in n independent samples bounds the share q of the population's samples outside it,
    one-sided at alpha = (1 - confidence) / 2, by q <= 1 - alpha^(1/n) (the zero-failure
    bound, Hanley & Lippman-Hand 1983, JAMA 249:1743; "the rule of three" q <= 3/n at
    alpha 0.05). The mean difference is then at least d_lo - q (1 + d_lo) (those samples
    at -1) and at most d_hi + q (1 - d_hi). For identical runs the interval is [-q, +q],
    and non-inferiority at margin m is shown exactly when (1 - m)^n <= alpha: n >= 183 at
    m = 0.02, confidence 0.95. The bound is distribution-free and never below nominal
    coverage; :func:`gradetrail.stats.hypotheses.zero_failure_tails` is its test.

    Args:
        d_lo, d_hi: the smallest and largest observed difference, in [-1, 1].
        n: the number of independent differences (clusters, when samples are clustered).
        confidence: two-sided, strictly between 0 and 1.

    Returns:
        An :class:`Interval` with method "zero-failure", se 0 and n_clusters None.

    Raises:
        ValueError: n < 1, d_lo > d_hi, or a bound outside [-1, 1].
    """
    if n < 1:
        raise ValueError(f"n must be >= 1, got {n}")
    if not -1.0 <= d_lo <= d_hi <= 1.0:
        raise ValueError(f"need -1 <= d_lo <= d_hi <= 1, got {d_lo}, {d_hi}")
    alpha = (1 - confidence) / 2
    q = -math.expm1(math.log(alpha) / n)  # 1 - alpha^(1/n), exact for large n too
    lo, hi = d_lo - q * (1 + d_lo), d_hi + q * (1 - d_hi)
    return Interval((d_lo + d_hi) / 2, lo, hi, 0.0, "zero-failure")


@dataclass(frozen=True)
class RunMean:
    """One run's mean score, as :func:`unpaired_bound_interval` bounds it.

    Attributes:
        mean: the run's mean score, in [0, 1].
        se: its standard error (CR1 when clustered); 0 when every score is equal (up to
            rounding), and the mean is then bounded by the zero-failure bound instead.
        df: degrees of freedom of its t quantile (n - 1, or G - 1 clustered); None for
            the normal quantile.
        trials: its independent samples, or clusters when clustered.
    """

    mean: float
    se: float
    df: float | None
    trials: int


def mean_bounds(run: RunMean, alpha: float) -> tuple[float, float]:
    """(lower, upper) one-sided bounds, each at level ``alpha``, on the population mean of
    a run of [0, 1] scores.

    A constant run (``se`` 0: all n scores equal v) has its mean bounded distribution-free
    by the zero-failure bound (Hanley & Lippman-Hand 1983, JAMA 249:1743): no score other
    than v in n independent samples bounds the share q of the population's scores that
    are not v by q <= 1 - alpha^(1/n) (the exact Clopper-Pearson bound for 0 of n, scipy's
    ``binomtest(0, n).proportion_ci(method="exact")``), so the mean is at least
    v (1 - q) = v alpha^(1/n) (those scores at 0) and at most 1 - (1 - v) alpha^(1/n)
    (at 1). Otherwise mean -+ t_(1 - alpha, df) se, cut to [0, 1] (Mandelkern 2002).

    Raises:
        ValueError: alpha outside (0, 1), trials < 1, or a mean outside [0, 1].
    """
    _check_open_unit(alpha, "alpha")
    if run.trials < 1:
        raise ValueError(f"trials must be >= 1, got {run.trials}")
    if not 0.0 <= run.mean <= 1.0:
        raise ValueError(f"a mean of [0, 1] scores lies in [0, 1], got {run.mean}")
    if run.se == 0:
        keep = math.exp(math.log(alpha) / run.trials)  # alpha^(1/n) = 1 - q
        return run.mean * keep, 1.0 - (1.0 - run.mean) * keep
    if run.df is None:
        q = NormalDist().inv_cdf(1 - alpha)
    else:
        from scipy.stats import t as student_t

        q = float(student_t.ppf(1 - alpha, run.df))
    return max(0.0, run.mean - q * run.se), min(1.0, run.mean + q * run.se)


def unpaired_bound_interval(
    baseline: RunMean, candidate: RunMean, confidence: float = 0.95
) -> Interval:
    """The interval of mean(candidate) - mean(baseline), runs on different samples, when
    either run is constant (:class:`RunMean` with se 0), where a Welch or z interval
    treats that run's mean as known exactly (both constant: the interval has zero width;
    one: a baseline of 3 samples all 0.5 counts as certain as one of 3000).

    Each run's mean is bounded one-sided at alpha / 2 (:func:`mean_bounds`: the
    zero-failure bound for a constant run, t for the other), alpha = (1 - confidence) / 2,
    and the bounds are combined by Bonferroni's inequality: the lower bound is the
    candidate's lower minus the baseline's upper, the upper bound vice versa; each fails
    with probability at most alpha / 2, so each side covers with at least 1 - alpha
    (distribution-free for the constant runs; as the t interval for the other). Two
    constant runs of n samples each equal pass non-inferiority at margin m exactly when
    (1 - m)^n <= alpha / 2, whatever the value: n >= 217 at m = 0.02, confidence 0.95.

    Returns:
        An :class:`Interval`, method "zero-failure", se sqrt(se_b^2 + se_c^2), df None.

    Raises:
        ValueError: confidence outside (0, 1), or as :func:`mean_bounds`.
    """
    _check_open_unit(confidence, "confidence")
    alpha = (1 - confidence) / 2
    lo_b, hi_b = mean_bounds(baseline, alpha / 2)
    lo_c, hi_c = mean_bounds(candidate, alpha / 2)
    delta = candidate.mean - baseline.mean
    se = math.hypot(baseline.se, candidate.se)
    return Interval(delta, lo_c - hi_b, hi_c - lo_b, se, "zero-failure")
