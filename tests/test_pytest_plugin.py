"""The pytest plugin: spec files collected as test items, run through the normal runner and
cache, passing on ci.min_score or a gate against a stored baseline; and assert_eval."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import pytest
import scipy.stats  # noqa: F401  (see below)
import yaml
from paths import GSM8K_DATA, GSM8K_SPEC

from gradetrail.testing import EvalAssertionError, assert_eval

# pytester's inline runs drop from sys.modules every module first imported inside them,
# and numpy (which the gate imports through scipy) cannot be imported twice in a process:
# without the import above, any later test of this session that uses numpy fails.


def _eval_file(directory: Path, name: str, model: str = "175b_verification", **ci) -> Path:
    """A copy of the bundled GSM8K eval as ``name`` in ``directory`` with a ``ci:`` section."""
    data = directory / "data" / "gsm8k"
    if not data.exists():
        shutil.copytree(GSM8K_DATA, data)
    spec = yaml.safe_load(GSM8K_SPEC.read_text())
    spec["model"]["name"] = model
    if ci:
        spec["ci"] = ci
    path = directory / name
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def _manifests(root: Path) -> list[dict]:
    return [json.loads(p.read_text()) for p in sorted(root.glob("*/manifest.json"))]


def test_specs_become_items_that_pass_or_fail_on_min_score(pytester: pytest.Pytester) -> None:
    """eval_*.yaml files are items: 175b_verification (0.5625) meets min_score 0.5;
    175b_finetuning (mean 0.3472) misses 0.33 because its CI's lower bound is under it, and
    its failure prints the summary; a second session is all cache hits."""
    _eval_file(pytester.path, "eval_meets.yaml", min_score=0.5)
    _eval_file(pytester.path, "eval_misses.yaml", "175b_finetuning", min_score=0.33)
    (pytester.path / "not_an_eval.yaml").write_text("name: x\n")
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    runs = {m["requested_model"]: m for m in _manifests(pytester.path / "results")}
    low = runs["175b_finetuning"]["score"]["ci_low"]
    assert low < 0.33 < runs["175b_finetuning"]["score"]["mean"]
    assert "FAILED eval_misses.yaml::eval_misses" in out
    assert f"min score FAIL: 95% CI lower bound {low:.4f} < min score 0.33" in out
    assert "mean score  0.3472 ±" in out and "status      complete" in out
    assert "Traceback" not in out
    assert [m["cache_hits"] for m in runs.values()] == [0, 0]
    again = pytester.runpytest("-p", "no:cacheprovider")
    again.assert_outcomes(passed=1, failed=1)
    assert [m["cache_hits"] for m in _manifests(pytester.path / "results")] == [1319, 1319]


def test_gate_against_a_stored_baseline(pytester: pytest.Pytester, cli) -> None:
    """ci.baseline gates the run: 175b_finetuning against a stored 175b_verification run
    fails and names the regressed samples; the verification model against it passes."""
    baseline_spec = _eval_file(pytester.path / "baseline", "gsm8k.yaml")
    out = cli("run", str(baseline_spec), "--results-root", str(pytester.path / "stored"))
    stored = next((pytester.path / "stored").iterdir())
    assert out.exit_code == 0
    relative = Path("stored") / stored.name
    _eval_file(pytester.path, "eval_same.yaml", baseline=str(relative))
    _eval_file(pytester.path, "eval_worse.yaml", "175b_finetuning", baseline=str(relative))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1, failed=1)
    out = result.stdout.str()
    assert "not non-inferior to" in out
    assert "gate        FAIL: 95% interval [-0.2442, -0.1866] against margin 0.02" in out
    assert "regressed   360: 1, 2, 8, 11, 12, 22, 29, 31, 34, 36, ... 350 more" in out


def test_pytest_options_override_the_spec(pytester: pytest.Pytester) -> None:
    """--gradetrail-min-score overrides ci.min_score; a spec that cannot run fails with one
    line naming the problem."""
    _eval_file(pytester.path, "eval_a.yaml", min_score=0.1)
    bad = _eval_file(pytester.path, "eval_bad.yaml")
    bad.write_text(bad.read_text().replace("marker:", "markr:"))
    result = pytester.runpytest("-p", "no:cacheprovider", "--gradetrail-min-score", "0.9")
    result.assert_outcomes(failed=2)
    out = result.stdout.str()
    assert "min score FAIL: 95% CI lower bound 0.5" in out and "< min score 0.9" in out
    assert "eval eval_bad.yaml cannot run:" in out and "did you mean 'marker'" in out


def test_a_sweep_file_is_one_item(pytester: pytest.Pytester) -> None:
    """sweep_*.yaml is one item: with baseline 175b_finetuning it passes (175b_verification
    is superior); --gradetrail-candidate 6b_finetuning fails it, printing the table."""
    spec = _eval_file(pytester.path, "gsm8k.yaml")
    sweep = {
        "name": "ci",
        "spec": spec.name,
        "axes": {"model.name": ["175b_verification", "175b_finetuning", "6b_finetuning"]},
        "baseline": "175b_finetuning",
    }
    (pytester.path / "sweep_models.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    result = pytester.runpytest("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)
    assert len(_manifests(pytester.path / "results")) == 3
    named = pytester.runpytest("-p", "no:cacheprovider", "--gradetrail-candidate", "6b_finetuning")
    named.assert_outcomes(failed=1)
    out = named.stdout.str()
    assert "sweep ci: cell 6b_finetuning did not pass" in out
    assert "FAIL inferior" in out and "best passing cell: 175b_verification" in out
    assert "Traceback" not in out


def test_a_session_without_evals_imports_no_gradetrail(pytester: pytest.Pytester) -> None:
    """The plugin loads in every pytest session but imports gradetrail only for evals."""
    pytester.makepyfile(
        """
        import sys

        def test_plain():
            loaded = [m for m in sys.modules if m == "gradetrail" or m.startswith("gradetrail.")]
            assert "pytest_gradetrail" in sys.modules
            assert loaded == []
        """
    )
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider")
    result.assert_outcomes(passed=1)


def test_assert_eval(tmp_path: Path) -> None:
    """assert_eval returns the passing check, and raises with the summary on a miss."""
    spec = _eval_file(tmp_path, "gsm8k.yaml")
    check = assert_eval(spec, min_score=0.5, results_root=tmp_path / "results")
    assert check.passed and 0.5 < check.threshold.ci_low < 742 / 1319
    with pytest.raises(EvalAssertionError) as caught:
        assert_eval(spec, min_score=0.6, results_root=tmp_path / "results")
    assert "min score FAIL" in str(caught.value)
    assert caught.value.check.run.tally.cache_hits == 1319
