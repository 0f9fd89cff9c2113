"""The gate's tests beyond non-inferiority, its refusals, its explanation and its families.

Reference values come from independent implementations, cited at each test: scipy's
``ttest_1samp`` / ``ttest_ind``, statsmodels' ``ttost_paired``, Newcombe (1998) Table II,
R's ``p.adjust(..., "holm")``, and standard normal quantiles.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from gate_support import passes, write_run
from typer.testing import CliRunner

from gradetrail.analysis.gate import GateError, gate_family, regression_gate
from gradetrail.cli import app
from gradetrail.stats import hypotheses
from gradetrail.stats import intervals as stats

BASE = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0, 0.6, 0.3, 0.8, 0.5, 0.7, 0.6]
CAND = [0.3, 0.8, 0.5, 0.4, 0.9, 0.1, 0.6, 0.4, 0.8, 0.5, 0.6, 0.7]


def with_reducer(run_dir: Path, reducer: str, pass_k: int | None = None) -> Path:
    """Record `run.reducer` in a written run's manifest, as `gradetrail run` does."""
    path = run_dir / "manifest.json"
    manifest: dict[str, Any] = json.loads(path.read_text())
    manifest["spec"] = {"run": {"reducer": reducer, "pass_k": pass_k}}
    path.write_text(json.dumps(manifest))
    return run_dir


# --- tests: superiority, non-inferiority, equivalence (TOST) ------------------------------


def test_paired_t_p_values_match_scipy_and_statsmodels(tmp_path: Path) -> None:
    """One-sided p-values of each test equal scipy's / statsmodels' on the same data.

    scipy 1.x ``ttest_1samp(d + 0.02, 0, alternative="greater").pvalue`` =
    0.07818108821332125 (non-inferiority, margin 0.02); ``ttest_1samp(d, 0,
    alternative="greater")`` = 0.25177295291459106 (superiority, margin 0); statsmodels
    0.15.0 ``ttost_paired(c, b, -0.1, 0.1)[0]`` = 0.002676848043478764 (TOST).
    """
    b, c = write_run(tmp_path / "b", BASE), write_run(tmp_path / "c", CAND)
    ni = regression_gate(b, c, margin=0.02)
    assert ni.method == "t" and ni.test == "non-inferiority"
    assert ni.p_value == pytest.approx(0.07818108821332125, rel=1e-9)
    assert ni.lo == pytest.approx(-0.036376988054271635) and not ni.passed
    sup = regression_gate(b, c, test="superiority")
    assert sup.margin == 0 and sup.p_value == pytest.approx(0.25177295291459106, rel=1e-9)
    assert not sup.passed
    eq = regression_gate(b, c, test="equivalence", margin=0.1)
    assert eq.p_value == pytest.approx(0.002676848043478764, rel=1e-9)
    assert eq.passed and eq.bounds == (-0.1, 0.1)
    assert not regression_gate(b, c, test="equivalence", margin=0.05).passed


def test_superiority_passes_only_above_its_margin(tmp_path: Path) -> None:
    """A clearly better candidate is superior at margin 0 but not at a margin above it."""
    b, c = write_run(tmp_path / "b", passes(60)), write_run(tmp_path / "c", passes(90))
    sup = regression_gate(b, c, test="superiority")
    assert sup.passed and sup.lo > 0 and sup.p_value < 0.025
    assert not regression_gate(b, c, test="superiority", margin=0.3).passed


def test_interval_and_p_value_agree_for_tango(tmp_path: Path) -> None:
    """Tango's interval inverts its score test: at the lower bound the one-sided p-value
    is alpha, and the pass rule (bound vs margin) equals p <= alpha."""
    above, _ = hypotheses.tango_tails(3, 9, 120)
    lo, _ = stats.tango_interval(3, 9, 120)
    assert above(lo) == pytest.approx(0.025, abs=1e-9)
    for n_pass in (95, 97, 99):
        b = write_run(tmp_path / f"b{n_pass}", passes(100))
        c = write_run(tmp_path / f"c{n_pass}", passes(n_pass))
        r = regression_gate(b, c, margin=0.05)
        assert r.passed == (r.p_value <= 0.025)


# --- unpaired (Miller eq. 5-6) -------------------------------------------------------------


def test_unpaired_welch_matches_scipy(tmp_path: Path) -> None:
    """Runs on different samples: Welch interval = scipy ``ttest_ind(c, b,
    equal_var=False).confidence_interval()`` = (-0.2938941402867949, 0.46056080695346163);
    non-inferiority p = ``ttest_ind(c + 0.02, b, equal_var=False, alternative="greater")``
    = 0.2811489199810235."""
    a = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0, 0.6]
    bb = [0.3, 0.7, 0.5, 0.1, 1.0, 0.2, 0.9, 0.8, 0.75]
    b = write_run(tmp_path / "b", a, ids=[f"x{i}" for i in range(7)])
    c = write_run(tmp_path / "c", bb, ids=[f"y{i}" for i in range(9)])
    with pytest.raises(GateError, match="share no sample ids.*--unpaired"):
        regression_gate(b, c)
    r = regression_gate(b, c, unpaired=True)
    assert r.method == "welch" and r.unpaired and r.paired == ()
    assert (r.n_baseline, r.n_candidate, r.n) == (7, 9, 16)
    assert (r.lo, r.hi) == pytest.approx((-0.2938941402867949, 0.46056080695346163))
    assert r.p_value == pytest.approx(0.2811489199810235, rel=1e-9)


def test_unpaired_runs_of_different_datasets_are_compared(tmp_path: Path) -> None:
    """Runs on different samples have different dataset hashes: --unpaired compares
    them without --allow-different-data (the paired gate still refuses them), with the
    Welch interval of scipy ``ttest_ind(c, b, equal_var=False)`` as above."""
    a = [0.2, 0.9, 0.4, 0.4, 1.0, 0.0, 0.6]
    bb = [0.3, 0.7, 0.5, 0.1, 1.0, 0.2, 0.9, 0.8, 0.75]
    b = write_run(tmp_path / "b", a, ids=[f"x{i}" for i in range(7)], dataset_hash="d-1")
    c = write_run(tmp_path / "c", bb, ids=[f"y{i}" for i in range(9)], dataset_hash="d-2")
    with pytest.raises(GateError, match="different datasets"):
        regression_gate(b, c)
    r = regression_gate(b, c, unpaired=True)
    assert (r.lo, r.hi) == pytest.approx((-0.2938941402867949, 0.46056080695346163))


@pytest.mark.parametrize(
    ("counts", "expected"),
    [
        # Newcombe, Statistics in Medicine 17:873-890 (1998), Table II, method 10; the same
        # values from statsmodels 0.15.0 confint_proportions_2indep(method="newcomb")
        ((56, 70, 48, 80), (0.0524, 0.3339)),
        ((9, 10, 3, 10), (0.1705, 0.8090)),
        ((6, 7, 2, 7), (0.0582, 0.8062)),
        ((5, 56, 0, 29), (-0.0381, 0.1926)),
        ((0, 10, 0, 20), (-0.1611, 0.2775)),
        ((0, 10, 0, 10), (-0.2775, 0.2775)),
        ((10, 10, 0, 20), (0.6791, 1.0000)),
        ((10, 10, 0, 10), (0.6075, 1.0000)),
    ],
)
def test_newcombe_interval_matches_the_paper(
    counts: tuple[int, int, int, int], expected: tuple[float, float]
) -> None:
    """Newcombe's hybrid score interval reproduces Table II of his paper (p1 - p2)."""
    x1, n1, x2, n2 = counts
    assert stats.newcombe_interval(x2, n2, x1, n1) == pytest.approx(expected, abs=5e-5)


def test_unpaired_binary_uses_newcombe_and_stays_open_at_100_percent(tmp_path: Path) -> None:
    """Two 10/10 runs on different samples: Newcombe gives +-0.2775 (Table II case f with
    the roles swapped), not the Wald [0, 0]; the gate fails at margin 0.02 and says why."""
    b = write_run(tmp_path / "b", passes(10, 10), ids=[f"x{i}" for i in range(10)])
    c = write_run(tmp_path / "c", passes(10, 10), ids=[f"y{i}" for i in range(10)])
    r = regression_gate(b, c, unpaired=True)
    assert r.method == "newcombe"
    assert (r.lo, r.hi) == pytest.approx((-0.2775, 0.2775), abs=5e-5)
    assert not r.passed and "half-width 0.2775" in r.reason


# --- zero variance is not certainty -------------------------------------------------------


def test_zero_variance_paired_gets_the_zero_failure_bound_not_a_point(tmp_path: Path) -> None:
    """Two identical multi-epoch runs on 2 samples (means 0.5 and 1.0): the paired t
    interval would be [0, 0] and pass (before: refused, exit 2). Now the zero-failure
    bound on 2 samples, +-(1 - 0.025^(1/2)) = +-0.8419, a verdict: FAIL (exit 1), for z too."""
    scores = [[1.0, 0.0], [1.0, 1.0]]
    b, c = write_run(tmp_path / "b", scores), write_run(tmp_path / "c", scores)
    for method in ("auto", "t", "z"):
        r = regression_gate(b, c, method=method)
        assert r.method == "zero-failure"
        assert (r.lo, r.hi) == pytest.approx((-(1 - 0.025**0.5), 1 - 0.025**0.5))
        assert not r.passed and r.outcome == "inconclusive"
        assert r.p_value == pytest.approx(0.98**2)
    out = CliRunner().invoke(app, ["gate", str(b), str(c)])
    assert out.exit_code == 1 and "zero-failure bound" in out.output


def test_identical_runs_pass_exactly_when_one_minus_margin_to_the_n_is_below_alpha(
    tmp_path: Path,
) -> None:
    """Identical non-binary runs pass non-inferiority at margin m iff (1 - m)^n <= alpha:
    0.98^182 = 0.02530 > 0.025 fails, 0.98^183 = 0.02480 passes (exit 0; before: exit 2
    at any n); the failing one says n needed 183."""
    for n, passed in ((182, False), (183, True)):
        scores = [[0.5, 0.25]] * n
        b = write_run(tmp_path / f"b{n}", scores)
        c = write_run(tmp_path / f"c{n}", scores)
        r = regression_gate(b, c)
        assert r.method == "zero-failure" and r.passed is passed
        assert r.p_value == pytest.approx(0.98**n)
        assert r.lo == pytest.approx(-(1 - 0.025 ** (1 / n)))
        assert r.n_needed == 183
        out = CliRunner().invoke(app, ["gate", str(b), str(c)])
        assert out.exit_code == (0 if passed else 1), out.output
    sup = regression_gate(b, c, test="superiority")
    assert not sup.passed and sup.method == "zero-failure"
    eq = regression_gate(b, c, test="equivalence", margin=0.02)
    assert eq.passed and eq.p_value == pytest.approx(0.98**183)


def test_identical_clustered_runs_count_their_clusters_as_trials(tmp_path: Path) -> None:
    """200 identical non-binary samples in 100 clusters of 2: the bound is on G = 100
    (+-0.0362), not on the 200 samples (+-0.0183), and fails at margin 0.02."""
    scores = [[0.5, 0.25]] * 200
    clusters = [f"k{i // 2}" for i in range(200)]
    b = write_run(tmp_path / "b", scores, clusters=clusters)
    c = write_run(tmp_path / "c", scores, clusters=clusters)
    r = regression_gate(b, c)
    assert r.method == "zero-failure" and r.n_clusters == 100
    assert r.lo == pytest.approx(-(1 - 0.025 ** (1 / 100)))
    assert not r.passed and r.n_needed == 183


def test_equal_nonzero_differences_get_the_bound_around_them(tmp_path: Path) -> None:
    """Every difference +0.25 on 50 samples: q = 1 - 0.025^(1/50) = 0.07113; the mean is at
    least 0.25 - q (1 + 0.25) = 0.1611 and at most 0.25 + q (1 - 0.25) = 0.3033, so the
    candidate passes superiority (before: refused, exit 2)."""
    b = write_run(tmp_path / "b", [[0.5, 0.0]] * 50)
    c = write_run(tmp_path / "c", [[0.5, 0.5]] * 50)
    r = regression_gate(b, c, test="superiority")
    q = 1 - 0.025 ** (1 / 50)
    assert r.method == "zero-failure"
    assert (r.lo, r.hi) == pytest.approx((0.25 - 1.25 * q, 0.25 + 0.75 * q))
    assert r.passed and r.p_value == pytest.approx((1 / 1.25) ** 50)


def test_zero_failure_bound_matches_the_rule_of_three() -> None:
    """0 of n at one-sided alpha 0.05 (confidence 0.90): q = 1 - 0.05^(1/n) ~ 3/n
    (Hanley & Lippman-Hand 1983): 0.029513 at n = 100; the tails give alpha at the bound."""
    r = stats.zero_failure_interval(0.0, 0.0, 100, confidence=0.90)
    assert r.hi == pytest.approx(0.029513, abs=1e-6) and r.lo == -r.hi
    above, below = hypotheses.zero_failure_tails(0.0, 0.0, 100)
    assert above(r.lo) == pytest.approx(0.05) and below(r.hi) == pytest.approx(0.05)
    assert above(0.0) == 1.0 and below(0.0) == 1.0
    with pytest.raises(ValueError):
        stats.zero_failure_interval(0.1, 0.0, 10)


def test_binary_reduced_scores_use_tango_even_with_epochs(tmp_path: Path) -> None:
    """With a majority reducer the per-sample scores are binary, so the gate uses Tango,
    valid with no discordant pair: 2 identical samples give [-0.6576, +0.6576]
    (z^2 / (n + z^2) with n = 2, z = 1.959964), a FAIL at margin 0.02."""
    scores = [[1.0, 1.0, 0.0], [0.0, 0.0, 1.0]]
    b = with_reducer(write_run(tmp_path / "b", scores), "majority")
    c = with_reducer(write_run(tmp_path / "c", scores), "majority")
    r = regression_gate(b, c)
    z2 = 1.959963984540054**2
    assert r.method == "tango" and r.reducer == "majority"
    assert (r.lo, r.hi) == pytest.approx((-z2 / (2 + z2), z2 / (2 + z2)))
    assert not r.passed
    # no discordant pair: n >= z^2 (1 - m) / m = 188.2 would pass at margin 0.02
    assert r.n_needed == 189


# --- the reducer ---------------------------------------------------------------------------


def test_gate_uses_the_runs_reducer(tmp_path: Path) -> None:
    """Gating a max (pass@n) run compares per-sample maxima, what its summary reports."""
    b_scores = [[0.0, 1.0], [0.0, 0.0], [1.0, 1.0], [0.0, 1.0]] * 10
    c_scores = [[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]] * 10
    b = with_reducer(write_run(tmp_path / "b", b_scores), "max")
    c = with_reducer(write_run(tmp_path / "c", c_scores), "max")
    r = regression_gate(b, c)
    assert r.reducer == "max" and r.method == "tango"
    assert r.baseline_mean == pytest.approx(0.75) and r.candidate_mean == pytest.approx(0.75)
    mean = regression_gate(b, c, reducer="mean")
    assert mean.baseline_mean == pytest.approx(0.5) and mean.candidate_mean == pytest.approx(0.5)
    assert mean.method == "t"


def test_pass_at_k_is_gated_on_the_estimator(tmp_path: Path) -> None:
    """pass@2 of 3 epochs with c correct: 1 - C(3-c, 2)/C(3, 2) (Chen et al. 2021 eq. 1):
    c = 1 -> 2/3, c = 0 -> 0, c = 3 -> 1."""
    b = with_reducer(
        write_run(tmp_path / "b", [[1.0, 0.0, 0.0], [0.0] * 3, [1.0] * 3]), "pass_at_k", 2
    )
    c = with_reducer(write_run(tmp_path / "c", [[1.0] * 3, [0.0] * 3, [1.0] * 3]), "pass_at_k", 2)
    r = regression_gate(b, c, test="superiority", method="t")
    assert r.reducer == "pass_at_k" and r.pass_k == 2
    assert r.baseline_mean == pytest.approx((2 / 3 + 0 + 1) / 3)
    assert r.candidate_mean == pytest.approx(2 / 3)


def test_reducers_that_make_the_test_invalid_are_refused(tmp_path: Path) -> None:
    """Different reducers, or max over different numbers of epochs, are different
    quantities: refused with the reason, unless --reducer gates both on one."""
    b = with_reducer(write_run(tmp_path / "b", [[1.0, 0.0]] * 4), "max")
    c = with_reducer(write_run(tmp_path / "c", [[1.0, 0.0]] * 4), "majority")
    with pytest.raises(GateError, match="reduce epochs differently.*--reducer"):
        regression_gate(b, c)
    assert regression_gate(b, c, reducer="max").reducer == "max"
    d = with_reducer(write_run(tmp_path / "d", [[1.0, 0.0, 1.0]] * 4), "max")
    with pytest.raises(GateError, match="max over 2 baseline vs 3 candidate epochs"):
        regression_gate(b, d)


# --- a failing gate explains itself ---------------------------------------------------------


def test_failing_gate_explains_itself(tmp_path: Path) -> None:
    """19/20 vs 20/20 fails; the result says why, with Miller eq. 10 and eq. 9 figures.

    d has one -1 in 20: omega^2 = (1 - 20 * 0.05^2) / 19 = 0.05. With z_0.975 = 1.959964
    and z_0.8 = 0.841621 (standard normal quantiles): MDE = 2.801585 * sqrt(0.05 / 20) =
    0.140079; n for margin 0.02 = 2.801585^2 * 0.05 / 0.02^2 = 981.1 -> 982.
    """
    b = write_run(tmp_path / "b", passes(20, 20))
    c = write_run(tmp_path / "c", passes(19, 20))
    r = regression_gate(b, c)
    assert not r.passed
    assert r.omega2 == pytest.approx(0.05)
    assert r.mde == pytest.approx(0.140079, abs=1e-6)
    assert r.n_needed == 982
    assert r.power_command == "gradetrail power --omega2 0.05 --delta 0.02 --alpha 0.05"
    assert r.regressed == ("s19",) and r.improved == ()
    assert r.half_width == pytest.approx((r.hi - r.lo) / 2)
    assert "half-width" in r.reason and "n needed: 982" in r.reason
    out = CliRunner().invoke(app, ["gate", str(b), str(c)], terminal_width=200)
    assert out.exit_code == 1
    for text in ("half-width vs margin", "detectable effect", "n needed", "regressed", "s19"):
        assert text in out.output
    power = CliRunner().invoke(app, r.power_command.split()[1:])
    assert "n = 982 samples" in power.output


def test_json_lists_every_flipped_sample(tmp_path: Path) -> None:
    """The text shows the first 10 flipped ids; --json lists all of them."""
    b = write_run(tmp_path / "b", passes(100, 100))
    c = write_run(tmp_path / "c", passes(70, 100))
    out = CliRunner().invoke(app, ["gate", str(b), str(c), "--json"])
    data = json.loads(out.output)
    assert len(data["regressed"]) == 30 and data["regressed"][0] == "s70"
    assert data["reason"].startswith("FAIL")
    text = CliRunner().invoke(app, ["gate", str(b), str(c)], terminal_width=200).output
    assert "30: s70" in text and "20 more (--json lists all)" in text


# --- several pairs: Holm --------------------------------------------------------------------


def test_holm_matches_r_p_adjust() -> None:
    """R: p.adjust(c(0.01, 0.04, 0.03, 0.005), "holm") = 0.03 0.06 0.06 0.02."""
    assert hypotheses.holm_adjust([0.01, 0.04, 0.03, 0.005]) == pytest.approx(
        [0.03, 0.06, 0.06, 0.02]
    )
    assert hypotheses.holm_adjust([0.5, 0.9]) == pytest.approx([1.0, 1.0])


def test_family_of_pairs_is_holm_corrected(tmp_path: Path) -> None:
    """Two pairs gated at once: each p-value is Holm-adjusted, the family is named, and a
    pair that passes alone (80/100 vs 80/100 at margin 0.04: p 0.0206) fails in the
    family (adjusted 2 x 0.0206 > 0.025); exit 1 when any fails."""
    runs = []
    for name, (nb, nc) in {"p1": (80, 80), "p2": (80, 78)}.items():
        runs.append(write_run(tmp_path / f"{name}b", passes(nb)))
        runs.append(write_run(tmp_path / f"{name}c", passes(nc)))
    pairs = [(runs[0], runs[1]), (runs[2], runs[3])]
    single = [regression_gate(b, c, margin=0.04) for b, c in pairs]
    assert single[0].passed
    family = gate_family(pairs, margin=0.04)
    assert family.correction == "holm" and len(family.results) == 2
    expected = hypotheses.holm_adjust([r.p_value for r in single])
    for r, p_adj in zip(family.results, expected, strict=True):
        assert r.p_adjusted == pytest.approx(p_adj)
        assert r.family == "Holm over 2 comparisons" and r.family_size == 2
        assert r.passed == (p_adj <= 0.025)
    assert not family.results[0].passed and "Holm-adjusted p" in family.results[0].reason
    out = CliRunner().invoke(app, ["gate", *map(str, runs), "--margin", "0.04", "--json"])
    data = json.loads(out.output)
    assert data["family"] == {"correction": "holm", "size": 2, "alpha": pytest.approx(0.025)}
    assert out.exit_code == 1 and data["passed"] is False
    odd = CliRunner().invoke(app, ["gate", *map(str, runs[:3])])
    assert odd.exit_code == 2 and "in pairs" in odd.output


def test_a_regression_past_the_margin_offers_no_n_needed(tmp_path: Path) -> None:
    """100/100 against 70/100: the whole interval is below -margin, so no number of
    samples would pass it and none is offered (it read 'n needed' beside the regression)."""
    b = write_run(tmp_path / "b", passes(100, 100))
    c = write_run(tmp_path / "c", passes(70, 100))
    r = regression_gate(b, c)
    assert not r.passed and r.hi < -r.margin
    assert r.n_needed is None and r.power_command is None
    assert "more samples would not pass" in r.reason and "n needed" not in r.reason
    out = CliRunner().invoke(app, ["gate", str(b), str(c)], terminal_width=200)
    assert out.exit_code == 1 and "n needed" not in out.output
