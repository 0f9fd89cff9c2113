"""Tests for gradetrail.stats.intervals: error bars, paired intervals, McNemar and power."""

from __future__ import annotations

import math
import statistics
import subprocess
import sys
from pathlib import Path

import pytest

from gradetrail.stats import intervals as stats

ROOT = Path(__file__).resolve().parents[2]


# --- error bars over samples (Miller eq. 1-2, 4) ---------------------------------------------


def test_summarize_uses_n_minus_1_standard_error() -> None:
    """The mean's standard error is the sample standard deviation (n - 1) over sqrt(n); at
    n = 5 the interval uses Student's t on 4 degrees of freedom (2.776445), not 1.96."""
    scores = [0.0, 0.5, 1.0, 1.0, 0.25]
    summary = stats.summarize(scores)
    expected_se = statistics.stdev(scores) / math.sqrt(len(scores))
    assert summary.n == 5
    assert summary.mean == pytest.approx(0.55)
    assert summary.se == pytest.approx(expected_se)
    assert summary.ci_low == pytest.approx(0.55 - 2.776445 * expected_se, abs=1e-6)
    assert summary.ci_high == pytest.approx(0.55 + 2.776445 * expected_se, abs=1e-6)
    assert summary.n_clusters is None


def test_summarize_interval_quantile_by_degrees_of_freedom() -> None:
    """Clusters set the degrees of freedom (G - 1: t_2 = 4.302653 for 3 clusters); from
    1,000 degrees of freedom on, the normal quantile 1.959964 is used (non-binary scores:
    binary ones get Wilson's interval)."""
    clustered = stats.summarize([1, 0.5, 1, 1, 0, 0.25], ["a", "a", "b", "b", "c", "c"])
    assert clustered.ci_high - clustered.mean == pytest.approx(4.302653 * clustered.se, abs=1e-6)
    scores = [0.75, 0.25] * 501
    large = stats.summarize(scores)
    assert large.ci_high - large.mean == pytest.approx(1.959964 * large.se, abs=1e-6)


def test_clustered_standard_error_is_cr1_as_statsmodels() -> None:
    """The clustered SE is CR1: Miller's eq. 4 sandwich times G / (G - 1).

    References from statsmodels 0.15.0,
    ``OLS(y, ones).fit(cov_type="cluster", cov_kwds={"groups": g}).bse[0]`` (its default
    small-sample correction G/(G-1) * (N-1)/(N-K), K = 1):
    y = 1, 0 | 1, 1 | 0, 0 -> 0.28867513459481303 (CR0 would be 0.235702);
    y = .2 .9 .4 | .4 1 | 0 .6 .3 .8 | .1 -> 0.0720185161376341.
    """
    summary = stats.summarize([1, 0, 1, 1, 0, 0], ["a", "a", "b", "b", "c", "c"])
    assert summary.se == pytest.approx(0.28867513459481303, rel=1e-12)
    assert summary.n_clusters == 3
    y = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0, 0.6, 0.3, 0.8, 0.1]
    g = ["a", "a", "a", "b", "b", "c", "c", "c", "c", "d"]
    se, n_clusters = stats.clustered_standard_error(y, g)
    assert se == pytest.approx(0.0720185161376341, rel=1e-12) and n_clusters == 4


def test_one_cluster_has_no_standard_error() -> None:
    """A single cluster gives no clustered standard error (G - 1 = 0), never 0."""
    se, n_clusters = stats.clustered_standard_error([0.1, 0.5, 0.9], ["a", "a", "a"])
    assert math.isnan(se) and n_clusters == 1


# --- binary run summaries: Wilson ------------------------------------------------------------


@pytest.mark.parametrize(
    ("successes", "n", "expected"),
    [
        # statsmodels 0.15.0 proportion_confint(x, n, alpha=0.05, method="wilson")
        (100, 100, (0.9630065017930143, 1.0)),
        (0, 100, (0.0, 0.03699349820698569)),
        (0, 1, (0.0, 0.7934506856227627)),
        (1, 1, (0.2065493143772374, 1.0)),
        (19, 20, (0.7638688065532577, 0.9911185511992044)),
        (742, 1319, (0.5356326528399583, 0.5890988475978164)),
        (3, 10, (0.10779126740630104, 0.6032218525388546)),
    ],
)
def test_wilson_interval_matches_statsmodels(
    successes: int, n: int, expected: tuple[float, float]
) -> None:
    """The Wilson interval equals statsmodels' at the bounds (0%, 100%) and inside."""
    assert stats.wilson_interval(successes, n) == pytest.approx(expected, abs=1e-12)


def test_binary_summary_is_never_zero_width() -> None:
    """A 100/100 or 0/100 run gets Wilson's interval, not [1, 1]; the SE is kept (0)."""
    full = stats.summarize([1.0] * 100)
    assert full.method == "wilson" and full.se == 0
    assert (full.ci_low, full.ci_high) == pytest.approx((0.9630065017930143, 1.0))
    empty = stats.summarize([0.0] * 100)
    assert (empty.ci_low, empty.ci_high) == pytest.approx((0.0, 0.03699349820698569))
    one = stats.summarize([1.0])
    assert (one.ci_low, one.ci_high) == pytest.approx((0.2065493143772374, 1.0))


def test_clustered_binary_summary_uses_the_effective_sample_size() -> None:
    """Clustered binary scores: Wilson on Korn & Graubard's n* (never wider n than given).

    y = 1, 0 | 1, 1 | 0, 0: p = .5, CR1 SE^2 = 1/12, p(1-p)/SE^2 = 3, df factor
    (t_{5,.975} / t_{2,.975})^2 = (2.570582 / 4.302653)^2 = 0.356936, n* = 1.070808;
    Wilson from statsmodels 0.15.0 proportion_confint(0.5 * n*, n*, method="wilson")
    (it accepts the fractional count): [0.057842364407010016, 0.9421576355929899].
    """
    s = stats.summarize([1, 0, 1, 1, 0, 0], ["a", "a", "b", "b", "c", "c"])
    plain = stats.summarize([1, 0, 1, 1, 0, 0])
    assert s.method == "wilson"
    assert (s.ci_low, s.ci_high) == pytest.approx((0.057842364407010016, 0.9421576355929899))
    assert s.ci_high - s.ci_low > plain.ci_high - plain.ci_low
    all_pass = stats.summarize([1.0] * 6, ["a", "a", "b", "b", "c", "c"])
    assert all_pass.ci_low < 1.0 and all_pass.ci_high == 1.0


def test_constant_continuous_scores_have_no_interval() -> None:
    """Non-binary scores that do not vary get an undefined interval, never a point."""
    s = stats.summarize([0.5, 0.5, 0.5])
    assert s.se == 0 and math.isnan(s.ci_low) and math.isnan(s.ci_high)


def test_singleton_clusters_reduce_to_the_plain_standard_error() -> None:
    """Every sample in its own cluster (or None) gives exactly Miller eq. 2."""
    scores = [0.1, 0.9, 0.4, 0.7]
    plain = stats.summarize(scores).se
    assert stats.summarize(scores, ["w", "x", "y", "z"]).se == pytest.approx(plain)
    summary = stats.summarize(scores, [None, None, None, None])
    assert summary.se == pytest.approx(plain)
    assert summary.n_clusters == 4


def test_summarize_degenerate_sizes_are_nan_not_errors() -> None:
    """No samples gives NaN everywhere; one sample has a mean but no standard error."""
    empty = stats.summarize([])
    assert empty.n == 0 and math.isnan(empty.mean) and math.isnan(empty.se)
    one = stats.summarize([0.5])
    assert one.mean == 0.5 and math.isnan(one.se) and math.isnan(one.ci_low)


def test_importing_stats_and_summarizing_does_not_import_scipy() -> None:
    """The run summary path stays pure Python, small runs (Student t) included: scipy is
    imported lazily by the gate's functions, never by summarize."""
    code = (
        "import sys; from gradetrail.stats import intervals as stats; "
        "stats.summarize([1.0, 0.0, 1.0] * 440, ['c'] * 1320); "
        "stats.summarize([1.0, 0.0, 1.0] * 40); "
        "assert 'scipy' not in sys.modules, 'scipy imported'"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True)


@pytest.mark.parametrize("df", [1, 2, 3, 4, 5, 9, 10, 29, 30, 120, 499, 998, 999])
def test_t_quantile_matches_scipy(df: int) -> None:
    """The pure-Python two-sided t quantile equals scipy's stdtrit (odd and even df, one to
    999, central and tail confidences) to 1e-9 relative."""
    from scipy.special import stdtrit

    for confidence in (0.01, 0.5, 0.9, 0.95, 0.99, 0.999):
        expected = float(stdtrit(df, 0.5 + confidence / 2))
        assert stats.t_quantile(confidence, df) == pytest.approx(expected, rel=1e-9)


def test_t_quantile_known_values_and_refusals() -> None:
    """Table values (t_{0.975}: 12.706205 at df 1, 2.262157 at df 9); df must be a positive
    integer and the confidence inside (0, 1)."""
    assert stats.t_quantile(0.95, 1) == pytest.approx(12.706205, abs=1e-6)
    assert stats.t_quantile(0.95, 9) == pytest.approx(2.262157, abs=1e-6)
    for bad in ((0.95, 0), (0.95, 2.5), (1.0, 3), (0.0, 3)):
        with pytest.raises(ValueError):
            stats.t_quantile(*bad)


def test_sample_means_average_epochs_per_sample_first() -> None:
    """Epochs are averaged within a sample, in first-seen order, never pooled as samples."""
    rows = [("a", 1, 1.0), ("b", 1, 0.0), ("a", 2, 0.0), ("b", 2, 0.0), ("a", 3, 1.0)]
    assert stats.sample_means(rows) == {"a": pytest.approx(2 / 3), "b": 0.0}
    assert list(stats.sample_means(rows)) == ["a", "b"]


def test_sample_means_refuse_a_repeated_epoch() -> None:
    """The same (sample, epoch) twice is an error, not a silently double-counted score."""
    with pytest.raises(ValueError, match="epoch 1 twice"):
        stats.sample_means([("a", 1, 1.0), ("a", 1, 0.0)])


# --- paired intervals (Miller eq. 7-8) -----------------------------------------------------

BASELINE_100 = [1.0] * 100
CANDIDATE_99 = [1.0] * 99 + [0.0]


def test_paired_z_seed_vector() -> None:
    """Baseline 100/100, candidate 99/100: delta -0.01, SE 0.01, lower bound -0.0296."""
    interval = stats.paired_z(BASELINE_100, CANDIDATE_99)
    assert interval.delta == pytest.approx(-0.01)
    assert interval.se == pytest.approx(0.01)
    assert interval.lo == pytest.approx(-0.0296, abs=5e-5)
    assert interval.method == "z"


def test_paired_z_equals_miller_eq8_covariance_form() -> None:
    """sqrt(Var(d)/n) equals sqrt(SE_A^2 + SE_B^2 - 2 Cov(A, B) / n) (Miller eq. 8)."""
    a = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0]
    b = [0.3, 0.7, 0.5, 0.1, 1.0, 0.2]
    n = len(a)
    cov = statistics.covariance(a, b)
    eq8 = math.sqrt(stats.standard_error(a) ** 2 + stats.standard_error(b) ** 2 - 2 * cov / n)
    assert stats.paired_z(a, b).se == pytest.approx(eq8)


def test_paired_t_matches_scipy_ttest_rel() -> None:
    """The paired t interval equals scipy's ttest_rel confidence interval."""
    from scipy.stats import ttest_rel

    a = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0, 0.6]
    b = [0.3, 0.7, 0.5, 0.1, 1.0, 0.2, 0.9]
    interval = stats.paired_t(a, b, confidence=0.9)
    ci = ttest_rel(b, a).confidence_interval(0.9)
    assert (interval.lo, interval.hi) == pytest.approx((ci.low, ci.high))
    assert interval.df == 6


def test_clustered_paired_t_uses_clustered_se_and_cluster_df() -> None:
    """With clusters the paired t uses the CR1 SE of the differences and G - 1 degrees of
    freedom.

    Differences d = c - b = 1, 0 | 1, 1 | 0, 0 (the statsmodels case above): SE 0.288675;
    three clusters -> df 2, t_{0.975, 2} = 4.302653; half-width 1.242069.
    """
    base = [0.0] * 6
    cand = [1.0, 0.0, 1.0, 1.0, 0.0, 0.0]
    interval = stats.paired_t(base, cand, ["a", "a", "b", "b", "c", "c"])
    assert interval.se == pytest.approx(0.28867513459481303, abs=1e-9)
    assert interval.df == 2 and interval.n_clusters == 3
    assert interval.hi - interval.delta == pytest.approx(4.302653 * 0.288675, abs=1e-5)


# --- Tango score interval (Tango 1998) -----------------------------------------------------


@pytest.mark.parametrize(
    ("only_baseline", "only_candidate", "n", "expected", "tol"),
    [
        # The seed: baseline 100/100, candidate 99/100.
        (1, 0, 100, (-0.054486, 0.027363), 1e-6),
        # n = 20 with one failure.
        (1, 0, 20, (-0.2361, 0.1192), 1e-4),
        # 100 samples all passing in both runs: +-z^2 / (n + z^2), not (0, 0).
        (0, 0, 100, (-0.037, 0.037), 5e-4),
        # Published: Fagerland, Lydersen & Laake 2014 (Stat Med 33:2850), Table II (airway
        # hyper-responsiveness, a=1 b=1 c=7 d=12), Tango interval as printed by R
        # ratesci::pairbinci(skew = FALSE, bcf = FALSE): (-0.517232, -0.026003).
        (7, 1, 21, (-0.517232, -0.026003), 1e-6),
    ],
)
def test_tango_interval_hits_known_values(
    only_baseline: int, only_candidate: int, n: int, expected: tuple[float, float], tol: float
) -> None:
    """The Tango interval reproduces the issue's values and a published example."""
    assert stats.tango_interval(only_baseline, only_candidate, n) == pytest.approx(
        expected, abs=tol
    )


def test_tango_bounds_solve_the_score_equation() -> None:
    """At each bound the score statistic equals -+z (the interval's definition)."""
    lo, hi = stats.tango_interval(360, 76, 1319)
    z = stats.normal_quantile(0.95)
    assert stats._tango_score(lo, 360, 76, 1319) == pytest.approx(z, abs=1e-8)
    assert stats._tango_score(hi, 360, 76, 1319) == pytest.approx(-z, abs=1e-8)


def test_tango_interval_is_antisymmetric_and_reaches_the_edges() -> None:
    """Swapping the runs negates the interval; all-discordant tables reach -1 or 1."""
    lo, hi = stats.tango_interval(3, 11, 40)
    assert stats.tango_interval(11, 3, 40) == pytest.approx((-hi, -lo))
    assert stats.tango_interval(10, 0, 10)[0] == -1.0
    assert stats.tango_interval(0, 10, 10)[1] == 1.0


def test_tango_interval_refuses_impossible_counts() -> None:
    """Discordant counts larger than n are a caller error."""
    with pytest.raises(ValueError):
        stats.tango_interval(5, 6, 10)


# --- McNemar, discordance, correlation -----------------------------------------------------


def test_mcnemar_exact_is_a_binomial_test_of_discordant_pairs() -> None:
    """Exact McNemar p: 1 discordant pair gives 1.0; 0 of 6 gives 2 / 2^6."""
    assert stats.mcnemar_exact(1, 0) == 1.0
    assert stats.mcnemar_exact(0, 0) == 1.0
    assert stats.mcnemar_exact(6, 0) == pytest.approx(2 / 2**6)


def test_discordant_counts_and_binary_detection() -> None:
    """Discordant counts are (only baseline passed, only candidate passed)."""
    assert stats.discordant_counts([1, 1, 0, 0, 1], [1, 0, 1, 0, 0]) == (2, 1)
    assert stats.is_binary([0.0, 1.0, 1]) and not stats.is_binary([0.0, 0.5])
    with pytest.raises(ValueError):
        stats.discordant_counts([0.5], [1.0])


def test_correlation_matches_statistics_and_is_none_when_constant() -> None:
    """Pearson correlation of paired scores; undefined (None) when one run is constant."""
    a, b = [0.1, 0.5, 0.9, 0.3], [0.2, 0.4, 1.0, 0.1]
    assert stats.correlation(a, b) == pytest.approx(statistics.correlation(a, b))
    assert stats.correlation([1, 1, 1], [0, 1, 0]) is None


# --- power (Miller eq. 9-10) ---------------------------------------------------------------


def test_sample_size_reproduces_millers_example() -> None:
    """omega^2 = 1/9, delta 0.03, alpha 0.05, power 0.8 -> n = 969 (Miller's example)."""
    assert stats.sample_size(0.03, 1 / 9, alpha=0.05, power=0.8) == 969


def test_minimum_detectable_effect_inverts_sample_size() -> None:
    """At Miller's n = 969 the minimum detectable effect is 0.03."""
    assert stats.minimum_detectable_effect(969, 1 / 9) == pytest.approx(0.03, abs=1e-6)


def test_power_accounts_for_correlation_epochs_and_clusters() -> None:
    """Correlation shrinks omega^2; epochs shrink the within-sample term; clusters inflate."""
    assert stats.difference_variance(1 / 9, correlation=0.5) == pytest.approx(1 / 9)
    assert stats.difference_variance(0.25, correlation=0.0) == pytest.approx(0.5)
    noisy = stats.sample_size(0.03, 1 / 9, within_variance=0.1, epochs=1)
    resampled = stats.sample_size(0.03, 1 / 9, within_variance=0.1, epochs=10)
    assert noisy > resampled > 969
    deff = stats.design_effect(cluster_size=5, icc=0.25)
    assert deff == 2.0
    assert stats.sample_size(0.03, 1 / 9, design_effect=deff) == 1938


def test_sample_size_for_half_width() -> None:
    """n for a half-width h is z^2 omega^2 / h^2: 1/9 at h = 0.02 needs 1068 samples."""
    n = stats.sample_size_for_half_width(0.02, 1 / 9)
    assert n == math.ceil(1.959964**2 / 9 / 0.02**2)
    assert n == 1068


def test_power_rejects_nonsense_inputs() -> None:
    """Zero delta, alpha outside (0, 1) and epochs < 1 are errors."""
    with pytest.raises(ValueError):
        stats.sample_size(0.0, 0.1)
    with pytest.raises(ValueError):
        stats.sample_size(0.03, 0.1, alpha=1.5)
    with pytest.raises(ValueError):
        stats.minimum_detectable_effect(100, 0.1, epochs=0)


def test_a_small_paired_t_interval_is_clipped_to_the_possible_range() -> None:
    """Two paired differences 0.5 and 0 give t on 1 df: 0.25 +- 12.706 * 0.25 =
    [-2.9266, +3.4266]; a difference of [0, 1] scores lies in [-1, 1], so the clipped
    interval is [-1, 1] and keeps the original bounds in ``unclipped`` and ``raw``."""
    raw = stats.paired_t([0.2, 0.5], [0.7, 0.5])
    assert (raw.lo, raw.hi) == pytest.approx((-2.926551, 3.426551), abs=1e-6)
    clipped = stats.clip_interval(raw)
    assert (clipped.lo, clipped.hi) == (-1.0, 1.0)
    assert clipped.unclipped == pytest.approx((-2.926551, 3.426551), abs=1e-6)
    assert clipped.raw == clipped.unclipped and clipped.delta == raw.delta
    one_sided = stats.clip_interval(stats.paired_t([0.0, 0.0, 0.0], [1.0, 0.9, 0.2]))
    assert one_sided.hi == 1.0 and one_sided.unclipped is not None
    assert one_sided.lo == one_sided.unclipped[0] > -1  # only the bound past the range moves


def test_intervals_inside_the_range_are_not_clipped() -> None:
    """A t interval inside [-1, 1], and the score intervals at their extremes (Tango with
    every pair discordant, Newcombe 0/2 vs 2/2, Wilson 0/1 and 1/1), come back as they
    are: those methods respect the range by construction."""
    inside = stats.paired_t([0.1, 0.5, 0.3], [0.2, 0.4, 0.5])
    assert stats.clip_interval(inside) is inside and inside.unclipped is None
    lo, hi = stats.tango_interval(0, 5, 5)
    assert -1 <= lo <= hi <= 1
    lo, hi = stats.newcombe_interval(0, 2, 2, 2)
    assert -1 <= lo <= hi <= 1
    for x, n in ((0, 1), (1, 1)):
        lo, hi = stats.wilson_interval(x, n)
        assert 0 <= lo <= hi <= 1


@pytest.mark.parametrize("n", [1, 5, 40, 1000])
def test_a_constant_runs_mean_bound_is_the_exact_binomial_bound(n: int) -> None:
    """n scores all 1.0: the lower bound on the mean is Clopper-Pearson's for n of n
    (scipy's binomtest, exact), alpha^(1/n); all 0.0: the upper bound, 1 - alpha^(1/n)."""
    from scipy.stats import binomtest

    from gradetrail.stats.intervals import RunMean, mean_bounds

    exact = binomtest(n, n).proportion_ci(confidence_level=1 - 2 * 0.0125, method="exact")
    assert mean_bounds(RunMean(1.0, 0.0, None, n), 0.0125)[0] == pytest.approx(exact.low, abs=1e-12)
    assert mean_bounds(RunMean(0.0, 0.0, None, n), 0.0125)[1] == pytest.approx(
        1 - exact.low, abs=1e-12
    )


def test_the_unpaired_bound_tails_invert_its_interval() -> None:
    """p_above at the interval's lower bound, and p_below at its upper, are alpha."""
    from gradetrail.stats.hypotheses import unpaired_bound_tails
    from gradetrail.stats.intervals import RunMean, unpaired_bound_interval

    runs = (RunMean(0.5, 0.0, None, 30), RunMean(0.6, 0.02, 99, 100))
    interval = unpaired_bound_interval(*runs, confidence=0.95)
    above, below = unpaired_bound_tails(*runs)
    assert above(interval.lo) == pytest.approx(0.025, rel=1e-6)
    assert below(interval.hi) == pytest.approx(0.025, rel=1e-6)
    assert above(interval.delta) == 1.0 and above(-1.0) < 1e-12
