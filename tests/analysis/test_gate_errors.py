"""The gate's error policies on real runs (``gradetrail run`` on the python provider):
which run's error rows count as failures, and which samples are compared."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from gate_support import passes, write_run
from run_support import ROOT, app_env, only_run_dir, run_to_end, write_eval

from gradetrail.analysis.gate import GateError, regression_gate

N = 200
BASELINE_ERRORS = [f"q{i}" for i in range(150, 190)]  # 40 samples the baseline's calls failed
CANDIDATE_WRONG = [f"q{i}" for i in range(5)]  # 5 samples the candidate answers wrongly


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """A baseline whose calls failed on 40 of 200 samples (a provider outage: its summary
    reports 1.0 over the 160 scored) and a candidate with no error, wrong on 5."""
    tmp = tmp_path_factory.mktemp("errors")
    spec = write_eval(tmp / "eval", samples=N, concurrency=8)
    cache = tmp / "cache.db"
    failing = {sid: [1] for sid in BASELINE_ERRORS}
    wrong = {sid: [1] for sid in CANDIDATE_WRONG}
    for name, env in (
        ("base", app_env(tmp / "calls-b", fail=failing)),
        ("cand", app_env(tmp / "calls-c", wrong=wrong)),
    ):
        code, out, err = run_to_end(spec, cache, tmp / name, env, "--no-cache")
        assert code == 0, out + err
    return only_run_dir(tmp / "base"), only_run_dir(tmp / "cand")


def _gate(*args: str | Path) -> tuple[int, dict]:
    proc = subprocess.run(
        [sys.executable, "-m", "gradetrail", "gate", *map(str, args), "--json"],
        capture_output=True,
        text=True,
        cwd=ROOT,
        timeout=60,
    )
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def test_baseline_errors_as_fail_are_not_the_candidates_gains(runs: tuple[Path, Path]) -> None:
    """--errors as-fail scored the baseline's 40 failed calls 0 too: baseline 0.80 against
    the 1.0 its own summary reports, candidate 0.975, delta +0.175, so a candidate wrong
    on 5 of the 160 samples the baseline answered passed non-inferiority (exit 0) and even
    superiority. Now the baseline's error rows are left out as its summary leaves them
    out: 160 paired samples, delta -5/160, the same interval as --errors exclude, exit 1."""
    base, cand = runs
    code, result = _gate(base, cand, "--errors", "as-fail")
    assert code == 1 and not result["passed"]
    assert result["n"] == 160 and result["baseline_mean"] == 1.0
    assert result["delta"] == pytest.approx(-5 / 160)
    assert result["candidate_mean"] == pytest.approx(155 / 160)
    assert result["n_errors_handled"] == 40 and set(result["errored_samples"]) == set(
        BASELINE_ERRORS
    )
    assert set(result["regressed"]) == set(CANDIDATE_WRONG) and result["improved"] == []
    _, excluded = _gate(base, cand, "--errors", "exclude")
    assert (result["lo"], result["hi"]) == (excluded["lo"], excluded["hi"])
    superior, _ = _gate(base, cand, "--errors", "as-fail", "--test", "superiority")
    assert superior == 1


def test_candidate_errors_as_fail_still_count_against_it(runs: tuple[Path, Path]) -> None:
    """Swapped, the 40 failed calls are the candidate's: each scores 0 (a failure of the
    model under test), 200 samples paired, delta (5 - 40) / 200 = -0.175, exit 1."""
    base, cand = runs
    code, result = _gate(cand, base, "--errors", "as-fail")
    assert code == 1
    assert result["n"] == 200 and result["delta"] == pytest.approx(-35 / 200)
    assert result["candidate_mean"] == pytest.approx(160 / 200)


def test_a_baseline_sample_with_some_epochs_errored_keeps_its_scored_ones(
    tmp_path: Path,
) -> None:
    """With epochs, a baseline sample keeps the mean of its scored epochs (as its summary
    reduces it) and a sample none of whose baseline epochs scored is left out of both;
    the candidate's errored epoch scores 0. Per-sample means paired by hand: baseline
    s0 = 1 (one epoch errored), s1 = 0.5, s2 = 1, s3 dropped (both epochs errored);
    candidate s0 = 1, s1 = 0.5, s2 = 0.5 (one epoch errored), so delta = -0.5 / 3."""
    base = write_run(
        tmp_path / "b",
        [[1.0, 1.0], [1.0, 0.0], [1.0, 1.0], [1.0, 1.0]],
        states={("s0", 2): "provider_error", ("s3", 1): "provider_error", ("s3", 2): "judge_error"},
    )
    cand = write_run(
        tmp_path / "c",
        [[1.0, 1.0], [0.0, 1.0], [1.0, 1.0], [1.0, 1.0]],
        states={("s2", 2): "provider_error"},
    )
    result = regression_gate(base, cand, errors="as-fail", method="t")
    assert result.paired == ("s0", "s1", "s2")
    assert result.baseline_mean == pytest.approx(2.5 / 3)
    assert result.candidate_mean == pytest.approx(2 / 3)
    assert result.delta == pytest.approx(-0.5 / 3)
    assert set(result.errored_samples) == {"s0", "s2", "s3"}


def test_error_rows_of_both_runs_as_fail_in_an_unpaired_gate(tmp_path: Path) -> None:
    """Unpaired, the baseline's error rows are left out of its mean and the candidate's
    score 0: baseline 3/3 scored, candidate 2/4."""
    base = write_run(tmp_path / "b", passes(4, 4), states={("s3", 1): "provider_error"})
    cand = write_run(tmp_path / "c", passes(3, 4), states={("s0", 1): "provider_error"})
    result = regression_gate(base, cand, errors="as-fail", unpaired=True)
    assert (result.n_baseline, result.n_candidate) == (3, 4)
    assert result.baseline_mean == 1.0 and result.candidate_mean == 0.5


def test_exclude_warns_when_it_drops_more_of_the_candidates_samples(
    runs: tuple[Path, Path],
) -> None:
    """--errors exclude drops every sample with an error row from both runs: when most of
    them are the candidate's (its 40 failed calls, swapped), its failures leave the
    comparison silently (delta +5/160 on the 160 left); the gate says so and names
    as-fail. Excluding the baseline's errors says nothing."""
    base, cand = runs
    _, result = _gate(cand, base, "--errors", "exclude")
    assert result["n"] == 160 and result["delta"] == pytest.approx(5 / 160)
    assert (
        "--errors exclude dropped 40 samples the candidate has error rows on (the baseline 0): "
        "its failures there are not counted; --errors as-fail counts them as failures"
    ) in result["warnings"]
    _, result = _gate(base, cand, "--errors", "exclude")
    assert not any("--errors exclude" in w for w in result["warnings"])


def test_unpaired_exclude_drops_an_errored_sample_from_its_own_run_only(tmp_path: Path) -> None:
    """Unpaired runs on different datasets whose ids are both line numbers ("0".."19"):
    the baseline's error on "3" drops its own sample "3", not the candidate's "3", another
    question. Before, --errors exclude dropped it from both (19 candidate samples, the
    candidate's mean 0.7368 instead of 0.75)."""
    ids = [str(i) for i in range(20)]
    base = write_run(tmp_path / "b", passes(10, 20), ids=ids, states={("3", 1): "provider_error"})
    cand = write_run(tmp_path / "c", passes(15, 20), ids=ids, dataset_hash="other")
    r = regression_gate(base, cand, unpaired=True, errors="exclude")
    assert (r.n_baseline, r.n_candidate) == (19, 20)
    assert r.candidate_mean == pytest.approx(0.75)
    assert r.baseline_mean == pytest.approx(9 / 19)


def test_unpaired_gate_on_a_baseline_of_only_errors_says_why_nothing_is_left(
    tmp_path: Path,
) -> None:
    """A baseline whose every row is a provider error, gated unpaired under as-fail (which
    charges the candidate only): one line, exit 2, saying its samples have no scored epoch
    (before: '(0 baseline, 50 candidate)' and no reason)."""
    ids = [f"s{i}" for i in range(50)]
    states = {(sid, 1): "provider_error" for sid in ids}
    base = write_run(tmp_path / "b", [None] * 50, ids=ids, states=states)
    cand = write_run(tmp_path / "c", passes(40, 50), ids=[f"t{i}" for i in range(50)])
    with pytest.raises(GateError) as info:
        regression_gate(base, cand, unpaired=True, errors="as-fail")
    assert str(info.value) == (
        "an unpaired comparison needs at least 2 scored samples in each run (0 baseline, "
        "50 candidate); the baseline's 50 samples with error rows have no scored epoch "
        "under errors as-fail: re-run to complete them"
    )
    assert info.value.exit_code == 2
