"""Epochs: k distinct calls per sample, reused on a re-run, every epoch scored, reduced per
sample by run.reducer, with the summary's standard error over samples."""

from __future__ import annotations

import math
from pathlib import Path

import pytest
from run_support import app_env, read_calls, write_eval

import gradetrail
from gradetrail.cache.store import ResponseCache
from gradetrail.errors import SpecError
from gradetrail.stats.intervals import summarize

#: sample id -> epochs answered wrongly (3 epochs): scores q0 [0,0,1], q1 [1,1,0],
#: q2 [1,1,1], q3 [0,0,0]
WRONG = {"q0": [1, 2], "q1": [3], "q3": [1, 2, 3]}
EXPECTED = {
    "mean": [1 / 3, 2 / 3, 1.0, 0.0],
    "max": [1.0, 1.0, 1.0, 0.0],
    "majority": [0.0, 1.0, 1.0, 0.0],
    "pass_at_k": [2 / 3, 1.0, 1.0, 0.0],  # k = 2 of n = 3: 1 - C(3-c, 2) / C(3, 2)
}


@pytest.fixture
def app(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recording application's environment, in this process; returns the calls file."""
    calls = tmp_path / "calls"
    for key, value in app_env(calls, wrong=WRONG).items():
        if key.startswith("GT_"):
            monkeypatch.setenv(key, value)
    return calls


def _run(spec_path: Path, tmp_path: Path) -> tuple[gradetrail.RunResult, list[dict]]:
    result = gradetrail.run_eval(gradetrail.load_spec(spec_path), results_root=tmp_path / "results")
    return result, gradetrail.read_samples(result.run_dir)


def test_k_epochs_are_k_distinct_calls_and_a_rerun_makes_none(
    tmp_path: Path, app: Path, cache_path: Path
) -> None:
    """epochs: 3 calls the model 3 times per sample (distinct cache keys), scores every
    epoch, and a re-run reads all of them from the cache."""
    spec = write_eval(tmp_path / "eval", samples=5, epochs=3)
    result, _ = _run(spec, tmp_path)

    calls = read_calls(app)
    assert calls == {(f"q{i}", e): 1 for i in range(5) for e in (1, 2, 3)}
    plan = gradetrail.plan_run(gradetrail.load_spec(spec))
    assert len({p.key for p in plan.prepared}) == 15
    cache = ResponseCache(cache_path)
    assert cache.stats().entries == 15
    cache.close()
    rows = gradetrail.read_results(result.run_dir)
    assert [(r["sample_id"], r["epoch"]) for r in rows] == [
        (f"q{i}", e) for i in range(5) for e in (1, 2, 3)
    ]
    assert all(r["state"] == "scored" for r in rows)

    again, _ = _run(spec, tmp_path)
    assert read_calls(app) == calls
    assert again.manifest.cache_hits == 15 and again.manifest.status == "complete"


@pytest.mark.parametrize("reducer", sorted(EXPECTED))
def test_reducers_on_known_scores(tmp_path: Path, app: Path, reducer: str) -> None:
    """Each reducer turns the known epoch scores into the expected per-sample scores in
    samples.jsonl, and the manifest's mean and standard error are over those 4 samples."""
    run = {"reducer": reducer, **({"pass_k": 2} if reducer == "pass_at_k" else {})}
    spec = write_eval(tmp_path / "eval", samples=4, epochs=3, run=run)
    result, samples = _run(spec, tmp_path)

    assert [s["sample_id"] for s in samples] == ["q0", "q1", "q2", "q3"]
    assert [s["score"] for s in samples] == pytest.approx(EXPECTED[reducer], abs=1e-12)
    assert [s["scores"] for s in samples] == [
        [0.0, 0.0, 1.0],
        [1.0, 1.0, 0.0],
        [1.0, 1.0, 1.0],
        [0.0, 0.0, 0.0],
    ]
    assert all(s["epochs"] == 3 and s["scored"] == 3 for s in samples)
    expected = summarize(EXPECTED[reducer])
    score = result.manifest.score
    assert score.n == 4
    assert score.mean == pytest.approx(expected.mean, abs=1e-12)
    assert score.se == pytest.approx(expected.se, abs=1e-12)
    assert len(gradetrail.read_results(result.run_dir)) == 12  # one row per (sample, epoch)
    assert result.manifest.spec["run"]["reducer"] == reducer


def test_standard_error_is_over_samples_not_rows(tmp_path: Path, app: Path) -> None:
    """With 3 epochs the SE uses n = 4 samples; treating the 12 rows as samples would
    give a smaller, wrong SE."""
    spec = write_eval(tmp_path / "eval", samples=4, epochs=3)
    result, _ = _run(spec, tmp_path)
    rows = [r["score"] for r in gradetrail.read_results(result.run_dir)]
    assert result.manifest.score.se == pytest.approx(summarize(EXPECTED["mean"]).se)
    assert result.manifest.score.se > summarize(rows).se


def test_pass_at_k_matches_the_closed_form_over_many_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """With 6 epochs and c correct of them, each sample's pass@3 equals
    1 - C(6-c, 3) / C(6, 3) (Chen et al. 2021, eq. 1)."""
    wrong = {f"q{c}": list(range(1, 7 - c)) for c in range(7)}  # q<c> has c correct epochs
    for key, value in app_env(tmp_path / "calls", wrong=wrong).items():
        if key.startswith("GT_"):
            monkeypatch.setenv(key, value)
    spec = write_eval(
        tmp_path / "eval", samples=7, epochs=6, run={"reducer": "pass_at_k", "pass_k": 3}
    )
    _, samples = _run(spec, tmp_path)
    for c, line in enumerate(samples):
        assert sum(v == 1.0 for v in line["scores"]) == c
        assert line["score"] == pytest.approx(1 - math.comb(6 - c, 3) / math.comb(6, 3))


def test_error_epochs_are_left_out_of_n(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """An epoch in provider_error has no score: the reducer uses the scored epochs only,
    and pass@k with fewer than k scored epochs leaves the sample without a score."""
    fail = {"q0": [2], "q1": [1, 2]}
    for key, value in app_env(tmp_path / "calls", fail=fail).items():
        if key.startswith("GT_"):
            monkeypatch.setenv(key, value)
    spec = write_eval(
        tmp_path / "eval", samples=3, epochs=3, run={"reducer": "pass_at_k", "pass_k": 2}
    )
    result, samples = _run(spec, tmp_path)
    assert [s["scores"] for s in samples] == [[1.0, None, 1.0], [None, None, 1.0], [1.0] * 3]
    assert [s["scored"] for s in samples] == [2, 1, 3]
    assert [s["score"] for s in samples] == [1.0, None, 1.0]
    assert result.manifest.score.n == 2
    assert result.manifest.counts == {"scored": 6, "provider_error": 3}


def test_mean_reducer_over_partly_failed_epochs(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The default mean averages the scored epochs only (an error is not a zero)."""
    for key, value in app_env(tmp_path / "c", wrong={"q0": [1]}, fail={"q0": [3]}).items():
        if key.startswith("GT_"):
            monkeypatch.setenv(key, value)
    spec = write_eval(tmp_path / "eval", samples=1, epochs=3)
    _, samples = _run(spec, tmp_path)
    assert samples == [
        {
            "sample_id": "q0",
            "score": 0.5,
            "epochs": 3,
            "scored": 2,
            "scores": [0.0, 1.0, None],
            "cluster": None,
        }
    ]


@pytest.mark.parametrize(
    ("run", "message"),
    [
        ({"epochs": 2, "reducer": "pass_at_k", "pass_k": 3}, "pass_k 3 is more than epochs 2"),
        ({"epochs": 2, "pass_k": 2}, "pass_k applies only to reducer: pass_at_k"),
        ({"reducer": "median"}, "run.reducer: use 'mean', 'max', 'majority' or 'pass_at_k'"),
        ({"epochs": 2, "reducer": "pass_at_k", "pass_k": 0}, "run.pass_k"),
    ],
)
def test_reducer_settings_are_checked_before_any_call(
    tmp_path: Path, run: dict, message: str
) -> None:
    """Bad reducer settings are a one-line SpecError naming the field and the fix."""
    spec = write_eval(tmp_path / "eval", samples=2, run=run)
    with pytest.raises(SpecError, match=message.replace("(", r"\(")) as info:
        gradetrail.load_spec(spec)
    assert "\n" not in str(info.value)


def test_reducer_is_part_of_the_run_identity(tmp_path: Path) -> None:
    """Changing the reducer changes the identity hash (the numbers differ); changing
    concurrency does not."""
    base = write_eval(tmp_path / "a", samples=2, epochs=3)
    other = write_eval(tmp_path / "b", samples=2, epochs=3, run={"reducer": "max"})
    faster = write_eval(tmp_path / "c", samples=2, epochs=3, concurrency=64)
    ids = [
        gradetrail.plan_run(gradetrail.load_spec(p)).identity_hash for p in (base, other, faster)
    ]
    assert ids[0] != ids[1] and ids[0] == ids[2]


def test_summary_names_the_reducer(tmp_path: Path, app: Path, cli) -> None:  # noqa: ANN001
    """The printed summary says how epochs were reduced (pass@k with its k)."""
    run = {"reducer": "pass_at_k", "pass_k": 2}
    spec = write_eval(tmp_path / "eval", samples=4, epochs=3, run=run)
    out = cli("run", str(spec))
    assert out.exit_code == 0, out.stderr
    assert "over 4 scored samples (epochs reduced by pass@2)" in out.stdout
    assert "12 (4 samples x 3 epochs)" in out.stdout
