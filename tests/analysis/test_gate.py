"""Tests for gradetrail.analysis.gate: pairing two runs, the non-inferiority verdict,
cannot-compare."""

from __future__ import annotations

import dataclasses
import json
import math
from pathlib import Path

import pytest
from gate_support import passes, write_run

from gradetrail.analysis.gate import GateError, regression_gate

ROOT = Path(__file__).resolve().parents[2]
GSM8K_SOLUTIONS = ROOT / "examples/data/gsm8k/example_model_solutions.jsonl"


@pytest.fixture
def seed_runs(tmp_path: Path) -> tuple[Path, Path]:
    """The issue's seed: baseline 100/100, candidate 99/100."""
    return (
        write_run(tmp_path / "baseline", passes(100)),
        write_run(tmp_path / "candidate", passes(99)),
    )


# --- the seed vectors ----------------------------------------------------------------------


def test_z_seed_vector_fails_at_002_and_passes_at_005(seed_runs: tuple[Path, Path]) -> None:
    """z method, 100/100 vs 99/100: delta -0.01, lower bound -0.0296; fail 0.02, pass 0.05."""
    strict = regression_gate(*seed_runs, margin=0.02, method="z")
    assert strict.delta == pytest.approx(-0.01)
    assert strict.lo == pytest.approx(-0.0296, abs=5e-5)
    assert strict.method == "z" and not strict.passed
    assert regression_gate(*seed_runs, margin=0.05, method="z").passed


def test_z_twenty_failures_fail_at_005(tmp_path: Path) -> None:
    """A candidate with 20 failures (80/100) against 100/100 fails even at margin 0.05."""
    base = write_run(tmp_path / "b", passes(100))
    cand = write_run(tmp_path / "c", passes(80))
    result = regression_gate(base, cand, margin=0.05, method="z")
    assert result.delta == pytest.approx(-0.2) and not result.passed


def test_z_better_candidate_passes(tmp_path: Path) -> None:
    """A candidate better than its baseline (90 -> 100) passes."""
    base = write_run(tmp_path / "b", passes(90))
    cand = write_run(tmp_path / "c", passes(100))
    result = regression_gate(base, cand, method="z")
    assert result.delta == pytest.approx(0.1) and result.passed


def test_auto_uses_tango_for_binary_single_epoch(seed_runs: tuple[Path, Path]) -> None:
    """Binary scores, one epoch, no clusters: Tango's interval (-0.054486, 0.027363)."""
    result = regression_gate(*seed_runs)
    assert result.method == "tango"
    assert (result.lo, result.hi) == pytest.approx((-0.054486, 0.027363), abs=1e-6)
    assert (result.only_baseline, result.only_candidate) == (1, 0)
    assert result.mcnemar_p == 1.0
    assert not result.passed


def test_tango_twenty_samples_one_failure(tmp_path: Path) -> None:
    """n = 20 with one candidate failure: Tango (-0.2361, 0.1192)."""
    base = write_run(tmp_path / "b", passes(20, 20))
    cand = write_run(tmp_path / "c", passes(19, 20))
    result = regression_gate(base, cand, method="tango")
    assert (result.lo, result.hi) == pytest.approx((-0.2361, 0.1192), abs=1e-4)


def test_tango_does_not_collapse_when_both_runs_pass_everything(tmp_path: Path) -> None:
    """100/100 in both runs: (-0.037, 0.037), so 100 samples cannot show a 0.02 margin."""
    base = write_run(tmp_path / "b", passes(100))
    cand = write_run(tmp_path / "c", passes(100))
    result = regression_gate(base, cand)
    assert (result.lo, result.hi) == pytest.approx((-0.037, 0.037), abs=5e-4)
    assert not result.passed
    assert regression_gate(base, cand, margin=0.05).passed


# --- real data: GSM8K labels of two 175B models --------------------------------------------


@pytest.fixture(scope="module")
def gsm8k_runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Run directories built from the GSM8K authors' is_correct labels (1,319 problems)."""
    problems = [json.loads(line) for line in GSM8K_SOLUTIONS.read_text().splitlines()]
    ids = [f"gsm8k-{i}" for i in range(len(problems))]
    root = tmp_path_factory.mktemp("gsm8k")
    return {
        model: write_run(
            root / model,
            [1.0 if p[model]["is_correct"] else 0.0 for p in problems],
            ids=ids,
        )
        for model in ("175b_verification", "175b_finetuning")
    }


def test_gsm8k_finetuning_candidate_fails_against_verification(
    gsm8k_runs: dict[str, Path],
) -> None:
    """175b_verification baseline vs 175b_finetuning candidate (360 vs 76 discordant) fails."""
    result = regression_gate(gsm8k_runs["175b_verification"], gsm8k_runs["175b_finetuning"])
    assert result.n == 1319 and result.method == "tango"
    assert (result.only_baseline, result.only_candidate) == (360, 76)
    problems = [json.loads(line) for line in GSM8K_SOLUTIONS.read_text().splitlines()]
    regressed = [
        f"gsm8k-{i}"
        for i, p in enumerate(problems)
        if p["175b_verification"]["is_correct"] and not p["175b_finetuning"]["is_correct"]
    ]
    improved = [
        f"gsm8k-{i}"
        for i, p in enumerate(problems)
        if p["175b_finetuning"]["is_correct"] and not p["175b_verification"]["is_correct"]
    ]
    assert list(result.regressed) == regressed and len(regressed) == 360
    assert list(result.improved) == improved and len(improved) == 76
    assert result.baseline_mean == pytest.approx(742 / 1319)
    assert result.candidate_mean == pytest.approx(458 / 1319)
    assert result.delta == pytest.approx(-284 / 1319)
    assert (result.lo, result.hi) == pytest.approx((-0.244225, -0.186615), abs=1e-6)
    assert result.mcnemar_p < 1e-40
    assert not result.passed


def test_gsm8k_reverse_passes(gsm8k_runs: dict[str, Path]) -> None:
    """The reverse comparison (finetuning baseline, verification candidate) passes."""
    result = regression_gate(gsm8k_runs["175b_finetuning"], gsm8k_runs["175b_verification"])
    assert (result.lo, result.hi) == pytest.approx((0.186615, 0.244225), abs=1e-6)
    assert result.passed


def test_gsm8k_run_against_itself_passes(gsm8k_runs: dict[str, Path]) -> None:
    """A run gated against itself passes: Tango gives +-0.0029 at n = 1319."""
    run = gsm8k_runs["175b_verification"]
    result = regression_gate(run, run)
    assert result.delta == 0 and result.correlation == pytest.approx(1.0)
    assert result.lo == pytest.approx(-0.002904, abs=1e-6)
    assert result.passed


# --- epochs and clusters -------------------------------------------------------------------


def test_epochs_are_averaged_per_sample_and_use_paired_t(tmp_path: Path) -> None:
    """Several epochs: per-sample means are paired (n counts samples) and auto picks t."""
    base = write_run(tmp_path / "b", [[1.0, 1.0], [0.0, 1.0], [1.0, 0.0], [0.0, 0.0]])
    cand = write_run(tmp_path / "c", [[1.0, 0.0], [1.0, 1.0], [1.0, 1.0], [0.0, 1.0]])
    result = regression_gate(base, cand)
    assert result.n == 4 and result.epochs == (2, 2)
    assert result.method == "t"
    assert result.baseline_mean == pytest.approx(0.5)
    assert result.candidate_mean == pytest.approx(0.75)
    assert result.delta == pytest.approx(0.25)
    assert result.only_baseline is None and result.mcnemar_p is None


def test_clusters_give_a_clustered_paired_t(tmp_path: Path) -> None:
    """With a cluster per row, auto picks the clustered t and reports the cluster count.

    d = 1, 0 | 1, 1 | 0, 0 over clusters a | b | c: CR1 clustered SE 0.288675 (statsmodels; see
    test_stats).
    """
    clusters = ["a", "a", "b", "b", "c", "c"]
    base = write_run(tmp_path / "b", [0.0] * 6, clusters=clusters)
    cand = write_run(tmp_path / "c", [1.0, 0.0, 1.0, 1.0, 0.0, 0.0], clusters=clusters)
    result = regression_gate(base, cand)
    assert result.method == "t" and result.n_clusters == 3
    assert result.se == pytest.approx(0.28867513459481303, abs=1e-9)


def test_tango_on_request_refuses_clusters(tmp_path: Path) -> None:
    """--method tango with clusters cannot compare (Tango assumes independent pairs)."""
    base = write_run(tmp_path / "b", passes(4, 4), clusters=["a", "a", "b", "b"])
    cand = write_run(tmp_path / "c", passes(3, 4), clusters=["a", "a", "b", "b"])
    with pytest.raises(GateError, match="clusters"):
        regression_gate(base, cand, method="tango")


# --- samples present in one run, errors ----------------------------------------------------


def test_samples_in_only_one_run_are_counted_and_named(tmp_path: Path) -> None:
    """Unpaired samples refuse the gate, naming them; with allow_partial they are excluded
    from n but listed by id, never dropped silently."""
    base = write_run(tmp_path / "b", [1.0, 1.0, 0.0, 1.0], ids=["a", "b", "c", "d"])
    cand = write_run(tmp_path / "c", [1.0, 0.0, 1.0, 1.0], ids=["b", "c", "d", "e"])
    with pytest.raises(
        GateError, match=r"1 samples are only in the baseline \(a\).*--allow-partial"
    ):
        regression_gate(base, cand)
    result = regression_gate(base, cand, allow_partial=True)
    assert result.n == 3
    assert result.missing_in_candidate == ("a",)
    assert result.missing_in_baseline == ("e",)


def test_error_rows_refuse_by_default(tmp_path: Path) -> None:
    """An error row in either run stops the gate with a message naming the fix."""
    base = write_run(tmp_path / "b", passes(3, 4))
    cand = write_run(tmp_path / "c", passes(4, 4), states={("s1", 1): "provider_error"})
    with pytest.raises(GateError) as info:
        regression_gate(base, cand)
    message = str(info.value)
    assert "candidate has 1 provider_error" in message and "--errors as-fail" in message
    assert "\n" not in message and info.value.exit_code == 2


def test_errors_as_fail_score_zero_and_are_counted(tmp_path: Path) -> None:
    """--errors as-fail scores the errored epoch 0 and counts the sample."""
    base = write_run(tmp_path / "b", passes(4, 4))
    cand = write_run(tmp_path / "c", passes(4, 4), states={("s1", 1): "judge_error"})
    result = regression_gate(base, cand, errors="as-fail", method="z")
    assert result.candidate_mean == pytest.approx(0.75)
    assert result.n == 4 and result.n_errors_handled == 1
    assert result.errored_samples == ("s1",)


def test_errors_exclude_drops_the_sample_from_both_runs(tmp_path: Path) -> None:
    """--errors exclude removes an errored sample from both runs and counts it."""
    base = write_run(tmp_path / "b", passes(4, 4), states={("s0", 1): "provider_error"})
    cand = write_run(tmp_path / "c", passes(3, 4))
    result = regression_gate(base, cand, errors="exclude", method="z")
    assert result.n == 3 and result.n_errors_handled == 1
    assert result.errored_samples == ("s0",)
    assert result.missing_in_baseline == () and result.missing_in_candidate == ()


# --- cannot compare ------------------------------------------------------------------------


def test_different_datasets_cannot_compare_unless_allowed(tmp_path: Path) -> None:
    """Different dataset content hashes refuse, unless allow_different_data is set."""
    base = write_run(tmp_path / "b", passes(4, 4), dataset_hash="aaa")
    cand = write_run(tmp_path / "c", passes(4, 4), dataset_hash="bbb")
    with pytest.raises(GateError, match="--allow-different-data"):
        regression_gate(base, cand)
    assert regression_gate(base, cand, allow_different_data=True, margin=0.5).passed


def test_no_shared_sample_ids_cannot_compare(tmp_path: Path) -> None:
    """Runs with disjoint sample ids cannot be compared."""
    base = write_run(tmp_path / "b", [1.0, 0.0], ids=["a", "b"])
    cand = write_run(tmp_path / "c", [1.0, 0.0], ids=["x", "y"])
    with pytest.raises(GateError, match="share no sample ids"):
        regression_gate(base, cand)


@pytest.mark.parametrize("missing", ["results.jsonl", "manifest.json"])
def test_run_directory_missing_a_file_cannot_compare(tmp_path: Path, missing: str) -> None:
    """A run directory without its results or manifest is a cannot-compare error."""
    base = write_run(tmp_path / "b", passes(2, 2))
    cand = write_run(tmp_path / "c", passes(2, 2))
    (cand / missing).unlink()
    with pytest.raises(GateError, match=f"candidate .*{missing}") as info:
        regression_gate(base, cand)
    assert info.value.exit_code == 2


def test_t_with_one_shared_sample_cannot_compare(tmp_path: Path) -> None:
    """A t interval from a single paired sample is refused, not reported as (nan, nan)."""
    base = write_run(tmp_path / "b", [0.5])
    cand = write_run(tmp_path / "c", [0.7])
    with pytest.raises(GateError, match="at least 2"):
        regression_gate(base, cand)


# --- the result ----------------------------------------------------------------------------


def test_result_is_frozen_and_serializes_to_json(seed_runs: tuple[Path, Path]) -> None:
    """GateResult cannot be mutated, and to_dict() is plain JSON."""
    result = regression_gate(*seed_runs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        result.passed = True  # type: ignore[misc]
    data = json.loads(json.dumps(result.to_dict()))
    assert data["passed"] is False and data["method"] == "tango"
    assert data["epochs"] == [1, 1] and data["missing_in_baseline"] == []


def test_incomplete_runs_are_flagged(tmp_path: Path) -> None:
    """An interrupted run refuses the gate (exit 2); with allow_partial it is compared on
    what it has, with a warning in the result."""
    base = write_run(tmp_path / "b", passes(3, 3))
    cand = write_run(tmp_path / "c", passes(2, 2), status="interrupted")
    with pytest.raises(GateError, match="candidate run is interrupted.*--allow-partial"):
        regression_gate(base, cand, margin=0.99)
    result = regression_gate(base, cand, margin=0.99, allow_partial=True)
    assert result.missing_in_candidate == ("s2",)
    assert any("interrupted" in w for w in result.warnings)


def test_a_two_sample_t_interval_is_shown_clipped_and_decided_unclipped(tmp_path: Path) -> None:
    """Differences 0.5 and 0: the paired t interval [-2.9266, +3.4266] is reported as
    [-1, +1] with the unclipped bounds, a note, and a verdict (and reason) from the
    unclipped bounds: at margin 0.99 the clipped -1 fails as the unclipped -2.93 does (as
    its p-value says); a margin of 1 or more, which any candidate would pass on the range
    alone, is refused."""
    base = write_run(tmp_path / "b", [0.2, 0.5])
    cand = write_run(tmp_path / "c", [0.7, 0.5])
    for margin in (1.0, 1.5):
        with pytest.raises(ValueError, match=f"margin {margin:g} is on the score scale"):
            regression_gate(base, cand, margin=margin)
    for margin in (0.02, 0.99):
        r = regression_gate(base, cand, margin=margin)
        assert (r.method, r.lo, r.hi) == ("t", -1.0, 1.0)
        assert r.unclipped == pytest.approx((-2.926551, 3.426551), abs=1e-6)
        assert r.half_width == pytest.approx(3.176551, abs=1e-6)
        assert not r.passed and r.p_value is not None and r.p_value > 0.025
        assert f"lower bound -2.9266 < {-margin:+.4f}" in r.reason
        assert any("shown clipped to [-1.0000, +1.0000]" in w for w in r.warnings)
    assert json.loads(json.dumps(dataclasses.asdict(r)))["unclipped"][0] == pytest.approx(
        -2.926551, abs=1e-6
    )


def test_unpaired_welch_interval_is_clipped_too(tmp_path: Path) -> None:
    """Two samples a run, unpaired: Welch's interval for 0.6 - 0.35 (SE 0.1803 on 1.74
    df) reaches past +1, so its upper bound is clipped and its lower bound kept; a run
    with enough spread and samples is not clipped."""
    base = write_run(tmp_path / "b", [0.2, 0.5])
    cand = write_run(tmp_path / "c", [0.7, 0.5], ids=["t0", "t1"])
    r = regression_gate(base, cand, unpaired=True)
    assert (r.method, r.delta, r.hi) == ("welch", pytest.approx(0.25), 1.0)
    assert r.unclipped is not None and r.unclipped[1] > 1 and r.lo == r.unclipped[0] > -1
    wide = [i / 20 for i in range(21)]
    r = regression_gate(
        write_run(tmp_path / "b2", wide), write_run(tmp_path / "c2", wide[::-1]), margin=0.5
    )
    assert r.unclipped is None and not any("clipped" in w for w in r.warnings)


@pytest.mark.parametrize("bad", [2.0, -1.0, float("nan"), float("inf")])
@pytest.mark.parametrize("status", ["complete", "interrupted"])
def test_a_score_outside_0_1_is_refused_whatever_the_manifest(
    tmp_path: Path, bad: object, status: str
) -> None:
    """Every scorer writes a number in [0, 1]; the rows-agree check held that only for a
    complete run whose manifest records a mean, so a hand-written manifest, or an
    interrupted run gated with allow_partial, went on with the rest: a candidate edited
    to 2.0 on every sample passed against a baseline at 0.9 (delta +1.1, 95% t lower
    bound +1.04, exit 0), and NaN was refused as "no variance". Now one line naming the
    row, exit 2."""
    base = write_run(tmp_path / "b", passes(90))
    cand = write_run(tmp_path / "c", [bad] * 100, status=status)
    with pytest.raises(GateError) as info:
        regression_gate(base, cand, allow_partial=True)
    message = str(info.value)
    assert f"candidate run {cand}: sample 's0' epoch 1 has score {bad!r}" in message
    assert "not a number in [0, 1]" in message and "\n" not in message
    assert info.value.exit_code == 2


def test_outcome_tells_a_regression_from_too_few_samples(tmp_path: Path) -> None:
    """Both failures exit 1; `outcome` tells them apart. Identical runs of 100 binary
    samples (no discordant pair): Tango's bound -z^2 / (100 + z^2) = -0.0370 < -0.02, so
    "inconclusive" with 189 samples needed (z^2 (1 - 0.02) / 0.02 = 188.2); of 400:
    -0.0095, "pass"; a candidate that lost 30 of 100: the whole interval below -0.02,
    "fail", no n offered."""
    from scipy.stats import norm

    z2 = norm.ppf(0.975) ** 2
    same = regression_gate(
        write_run(tmp_path / "b", passes(80)), write_run(tmp_path / "c", passes(80))
    )
    assert same.lo == pytest.approx(-z2 / (100 + z2)) and not same.passed
    assert (same.outcome, same.n_needed) == ("inconclusive", math.ceil(z2 * 0.98 / 0.02))
    big = regression_gate(
        write_run(tmp_path / "b4", passes(320, 400)), write_run(tmp_path / "c4", passes(320, 400))
    )
    assert big.lo == pytest.approx(-z2 / (400 + z2)) and big.outcome == "pass"
    lost = regression_gate(
        write_run(tmp_path / "b2", passes(100)), write_run(tmp_path / "c2", passes(70))
    )
    assert lost.hi < -0.02 and (lost.outcome, lost.n_needed) == ("fail", None)


def test_identical_clustered_binary_runs_get_tango_on_their_clusters(tmp_path: Path) -> None:
    """Binary scores on a clustered dataset take the clustered t, whose standard error is
    0 when every paired difference is equal: two identical runs (a change that moved no
    answer) were refused, exit 2, told to gate binary scores, which they were, while
    --method tango is refused with clusters. Now Tango's interval on the G clusters, one
    pair a cluster (the summary's rule for Wilson): with no discordant pair its bounds are
    +-z^2 / (G + z^2): -0.1611 on 20 clusters (inconclusive, 189 clusters needed),
    -0.0126 on 300 (pass); at margin 0 McNemar's exact p is 1 (fail)."""
    from scipy.stats import norm

    z2 = norm.ppf(0.975) ** 2
    few = [f"c{i % 20}" for i in range(400)]
    base = write_run(tmp_path / "b", passes(300, 400), clusters=few)
    cand = write_run(tmp_path / "c", passes(300, 400), clusters=few)
    r = regression_gate(base, cand)
    assert (r.method, r.n_clusters, r.n) == ("tango", 20, 400)
    assert (r.lo, r.hi) == pytest.approx((-z2 / (20 + z2), z2 / (20 + z2)))
    assert (r.outcome, r.n_needed) == ("inconclusive", 189)
    assert "Tango's interval on the 20 clusters, one pair a cluster" in r.warnings[0]
    many = [f"c{i % 300}" for i in range(600)]
    base = write_run(tmp_path / "b2", passes(300, 600), clusters=many)
    cand = write_run(tmp_path / "c2", passes(300, 600), clusters=many)
    r = regression_gate(base, cand)
    assert r.lo == pytest.approx(-z2 / (300 + z2)) and r.passed
    strict = regression_gate(base, cand, margin=0.0)
    assert not strict.passed and strict.exact_p == 1.0


def test_clustered_binary_runs_all_improved_are_one_discordant_pair_a_cluster(
    tmp_path: Path,
) -> None:
    """Every sample failed by the baseline and passed by the candidate, 10 clusters of 5:
    Tango's interval for 10 of 10 clusters discordant, McNemar's exact one-sided p at
    margin 0 is 0.5^10 (scipy binomtest(10, 10, 0.5, 'greater'))."""
    from scipy.stats import binomtest

    from gradetrail.stats.intervals import tango_interval

    clusters = [f"k{i // 5}" for i in range(50)]
    base = write_run(tmp_path / "b", passes(0, 50), clusters=clusters)
    cand = write_run(tmp_path / "c", passes(50, 50), clusters=clusters)
    r = regression_gate(base, cand, test="superiority")
    assert (r.method, r.delta) == ("tango", 1.0)
    assert (r.lo, r.hi) == pytest.approx(tango_interval(0, 10, 10))
    assert r.exact_p == pytest.approx(binomtest(10, 10, 0.5, alternative="greater").pvalue)
    assert r.passed and r.exact_p == pytest.approx(0.5**10)
    assert r.mcnemar_p == pytest.approx(binomtest(10, 10, 0.5).pvalue)  # not 2 * 0.5^50
    assert (r.only_baseline, r.only_candidate) == (0, 50)  # the samples, as counted


def test_a_clustered_gate_plans_its_n_with_the_design_effect(tmp_path: Path) -> None:
    """30 clusters of 10 whose differences share a cluster effect: the clustered (CR1)
    standard error is about 3.2 times the one that ignores them (design effect about 10),
    but the detectable effect and the n needed were planned on omega^2 alone, as if the
    samples were independent: 10 times too few. Now both use omega^2 times the measured
    design effect, which the power command carries: n = (z_.975 + z_.8)^2 deff omega^2 /
    margin^2 (scipy's norm), CR1 written out here with numpy."""
    import numpy as np
    from scipy.stats import norm

    rng = np.random.default_rng(3)
    clusters = [f"k{i // 10}" for i in range(300)]
    b = rng.uniform(0.3, 0.7, 300)
    c = np.clip(b + np.repeat(rng.normal(0, 0.15, 30), 10) + rng.normal(0, 0.02, 300), 0, 1)
    r = regression_gate(
        write_run(tmp_path / "b", list(b), clusters=clusters),
        write_run(tmp_path / "c", list(c), clusters=clusters),
    )
    d = c - b
    e = (d - d.mean()).reshape(30, 10).sum(axis=1)
    se_cr1 = np.sqrt(30 / 29 * (e**2).sum() / 300**2)
    omega2 = d.var(ddof=1)
    deff = se_cr1**2 / (omega2 / 300)
    assert (r.method, r.n_clusters, r.se) == ("t", 30, pytest.approx(se_cr1))
    assert r.omega2 == pytest.approx(omega2) and r.design_effect == pytest.approx(deff)
    assert deff > 9
    zsum = norm.ppf(0.975) + norm.ppf(0.8)
    assert r.mde == pytest.approx(zsum * np.sqrt(deff * omega2 / 300))
    assert r.n_needed == math.ceil(zsum**2 * deff * omega2 / 0.02**2)
    assert f"--omega2 {deff * omega2:.6g} --delta 0.02" in r.power_command


def test_constant_clustered_binary_runs_unpaired_get_newcombe_on_their_clusters(
    tmp_path: Path,
) -> None:
    """Unpaired, binary scores with clusters take Welch's t on CR1 standard errors, both 0
    when each run's scores are all equal: two runs at 100% (300 samples in 25 clusters,
    200 in 40) were refused, exit 2, told to gate binary scores. Now Newcombe's interval
    with each cluster one sample: 25/25 vs 40/40, statsmodels 0.15's
    confint_proportions_2indep(40, 40, 25, 25, method="newcomb") = (-0.0876216,
    0.1331923)."""
    base = write_run(tmp_path / "b", [1.0] * 300, clusters=[f"a{i % 25}" for i in range(300)])
    cand = write_run(
        tmp_path / "c",
        [1.0] * 200,
        ids=[f"t{i}" for i in range(200)],
        clusters=[f"b{i % 40}" for i in range(200)],
    )
    r = regression_gate(base, cand, unpaired=True)
    assert (r.method, r.n_clusters, r.delta) == ("newcombe", 65, 0.0)
    assert (r.lo, r.hi) == pytest.approx((-0.08762160119728657, 0.13319225093904852))
    assert r.outcome == "inconclusive" and "on the 25 and 40 clusters" in r.warnings[0]


def test_runs_clustered_differently_get_the_coarsest_grouping_in_either_order(
    tmp_path: Path,
) -> None:
    """The baseline clusters 60 samples into 30 (i % 30), the candidate into 3 (i % 3):
    the gate clusters on the grouping both imply (3: samples sharing a cluster in either
    run), whichever run is the baseline, and says so. Before, the baseline's labels won
    silently: 30 clusters one way (half-width 0.117), 3 the other (0.075)."""
    b_scores = [((7 * i) % 11) / 10 for i in range(60)]
    c_scores = [((5 * i) % 13) / 12 for i in range(60)]
    one = write_run(tmp_path / "a", b_scores, clusters=[f"k{i % 30}" for i in range(60)])
    two = write_run(tmp_path / "b", c_scores, clusters=[f"g{i % 3}" for i in range(60)])
    forward, backward = regression_gate(one, two), regression_gate(two, one)
    assert forward.n_clusters == backward.n_clusters == 3
    assert forward.half_width == pytest.approx(backward.half_width, rel=1e-12)
    assert any("cluster these samples differently (30 vs 3 clusters" in w for w in forward.warnings)
    same = write_run(tmp_path / "c", c_scores, clusters=[f"x{i % 30}" for i in range(60)])
    relabelled = regression_gate(one, same)  # the same groups under other names: no note
    assert relabelled.n_clusters == 30
    assert not any("differently" in w for w in relabelled.warnings)
