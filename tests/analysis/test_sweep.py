"""The sweep's table on real runs: the four GSM8K models of the authors' recordings as
cells (replay provider), gated against a baseline cell exactly as ``gradetrail gate`` gates
them pair by pair; and slices on a dataset built so that the overall mean hides a
regression."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import run_cli
from paths import EXAMPLES, GSM8K_SPEC

from gradetrail.analysis.gate import GateError, regression_gate
from gradetrail.analysis.sweep import sweep_table
from gradetrail.engine.sweep import run_sweep
from gradetrail.report.sweep import sweep_lines
from gradetrail.spec.sweep import load_sweep
from gradetrail.stats.hypotheses import holm_adjust

MODELS = ["175b_verification", "175b_finetuning", "6b_verification", "6b_finetuning"]


@pytest.fixture(scope="module")
def gsm8k(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """The bundled example sweep over the four GSM8K recordings, run once for the module."""
    root = tmp_path_factory.mktemp("gsm8k-sweep")
    sweep = EXAMPLES / "gsm8k-sweep.yaml"  # the bundled example: four models, Holm
    done = run_sweep(load_sweep(sweep), results_root=root / "results", cache_path=root / "c.db")
    assert [c.outcome for c in done.record.cells] == ["ran"] * 4
    return {"sweep": sweep, "dir": done.directory, "root": root}


def test_gsm8k_table_scores_and_verdicts(gsm8k: dict[str, Path]) -> None:
    """Scores match the authors' labels (742, 458, 515, 286 of 1,319 correct); against
    175b_finetuning, 175b_verification and 6b_verification pass, 6b_finetuning is inferior
    (its inferiority test Holm-corrected too); the best passing cell is 175b_verification.
    The two that pass are non-inferior, not superior: while 6b_finetuning fails the family,
    a superiority claim would spend alpha the family has not got, so none is tested (the
    label said superior before, from each one's unadjusted interval)."""
    table = sweep_table(gsm8k["dir"])
    assert [c.name for c in table.cells] == MODELS
    means = [c.mean for c in table.cells]
    assert means == pytest.approx([742 / 1319, 458 / 1319, 515 / 1319, 286 / 1319])
    verdicts = [c.verdict for c in table.cells]
    assert verdicts == ["non-inferior", "baseline", "non-inferior", "inferior"]
    assert [c.label_gate for c in table.cells[:3]] == [None, None, None]
    worse = table.cell("6b_finetuning").label_gate
    assert (worse.test, worse.margin, worse.family) == (
        "superiority",
        0.02,
        "Holm over 3 comparisons",
    )
    assert worse.delta == pytest.approx((742 - 286) / 1319 - (742 - 458) / 1319)  # base - cand
    assert worse.passed and worse.p_adjusted < 1e-12
    assert "superior not tested while 6b_finetuning fails the family" in table.labels
    assert [c.passed for c in table.cells] == [True, None, True, False]
    assert table.best == "175b_verification"
    assert table.family_size == 3 and table.correction == "holm"
    assert all(c.n == 1319 and c.rows == 1319 and c.errors == {} for c in table.cells)
    assert table.passed() and table.passed("6b_verification")
    assert not table.passed("6b_finetuning")


def test_gsm8k_equals_gate_pair_by_pair(gsm8k: dict[str, Path]) -> None:
    """Each cell's interval, p-value and Holm-adjusted p equal ``gradetrail gate``'s family
    over the same three pairs; each raw comparison equals a lone regression_gate."""
    table = sweep_table(gsm8k["dir"])
    base = next(c for c in table.cells if c.is_baseline).run_dir
    args = []
    for c in table.candidates:
        args += [base, c.run_dir]
    out = run_cli("gate", *args, "--json")
    assert out.code == 1, out.err  # 6b_finetuning fails, so the family does not pass
    family = json.loads(out.out)
    for cell, gate in zip(table.candidates, family["results"], strict=True):
        ours = cell.gate.to_dict()
        for key in ("delta", "lo", "hi", "p_value", "p_adjusted", "method", "n", "passed"):
            assert ours[key] == gate[key], (cell.name, key)
        lone = regression_gate(base, cell.run_dir)
        assert (lone.lo, lone.hi, lone.p_value) == (cell.gate.lo, cell.gate.hi, cell.gate.p_value)


def test_gsm8k_holm_against_independent_values(gsm8k: dict[str, Path]) -> None:
    """Holm's adjusted p-values equal statsmodels 0.15's ``multipletests(p, method="holm")``
    on the same p-values (recorded here: statsmodels is not a dependency), and Bonferroni's
    ``method="bonferroni"``."""
    holm = sweep_table(gsm8k["dir"])
    raw = [c.gate.p_value for c in holm.candidates]
    assert raw == pytest.approx([0.0, 6.3469231121882075e-06, 0.9999999999999987], rel=1e-9)
    adjusted = [c.gate.p_adjusted for c in holm.candidates]
    assert adjusted == pytest.approx([0.0, 1.2693846224376415e-05, 0.9999999999999987], rel=1e-9)
    bonf = sweep_table(gsm8k["dir"], correction="bonferroni")
    adjusted = [c.gate.p_adjusted for c in bonf.candidates]
    assert adjusted == pytest.approx([0.0, 1.9040769336564622e-05, 1.0], rel=1e-9)
    none = sweep_table(gsm8k["dir"], correction="none")
    assert [c.gate.p_adjusted for c in none.candidates] == [None] * 3


def test_gsm8k_superior_once_the_whole_family_passes(gsm8k: dict[str, Path]) -> None:
    """--baseline 6b_finetuning (21.7%): every candidate passes, so superiority is tested,
    Holm-corrected over the three: all three are superior, each superiority p adjusted."""
    table = sweep_table(gsm8k["dir"], baseline="6b_finetuning")
    assert [c.verdict for c in table.candidates] == ["superior"] * 3
    for c in table.candidates:
        sup = c.label_gate
        assert (sup.test, sup.margin, sup.family) == ("superiority", 0.0, "Holm over 3 comparisons")
        assert sup.delta == pytest.approx(c.gate.delta) and sup.p_adjusted <= 0.025
    raw = [c.label_gate.p_value for c in table.candidates]
    assert [c.label_gate.p_adjusted for c in table.candidates] == pytest.approx(holm_adjust(raw))
    assert "not tested" not in table.labels


def test_gsm8k_other_baseline_is_inconclusive(gsm8k: dict[str, Path]) -> None:
    """--baseline 6b_verification: 175b_finetuning (34.7% vs 39.0%) is neither shown
    non-inferior nor worse by more than the margin (its inferiority test's Holm-adjusted
    p 0.106): inconclusive; 175b_verification passes, non-inferior while the family fails."""
    table = sweep_table(gsm8k["dir"], baseline="6b_verification")
    verdicts = {c.name: c.verdict for c in table.candidates}
    assert table.cell("175b_finetuning").label_gate.p_adjusted == pytest.approx(0.106, abs=5e-4)
    assert verdicts == {
        "175b_verification": "non-inferior",
        "175b_finetuning": "inconclusive",
        "6b_finetuning": "inferior",
    }
    lo, hi = table.cell("175b_finetuning").gate.lo, table.cell("175b_finetuning").gate.hi
    assert lo < -0.02 < hi


def test_gsm8k_rerun_pays_nothing_and_adding_a_model_runs_only_it(
    gsm8k: dict[str, Path], tmp_path: Path
) -> None:
    """A second sweep finds every cell complete; a sweep with one model added runs that
    model alone (the others are the same run directories)."""
    sweep = load_sweep(gsm8k["sweep"])
    again = run_sweep(sweep, results_root=gsm8k["root"] / "results", cache_path=tmp_path / "x.db")
    assert [c.outcome for c in again.record.cells] == ["existing"] * 4
    raw = yaml.safe_load(gsm8k["sweep"].read_text())
    raw["axes"]["model.name"] = [*MODELS[:2], MODELS[3]]  # a three-model sweep first
    raw["name"] = "three"
    raw["spec"] = str(GSM8K_SPEC)
    three = tmp_path / "three.yaml"
    three.write_text(yaml.safe_dump(raw))
    root = tmp_path / "results"
    first = run_sweep(load_sweep(three), results_root=root, cache_path=tmp_path / "c.db")
    assert [c.outcome for c in first.record.cells] == ["ran"] * 3
    raw["axes"]["model.name"] = MODELS
    three.write_text(yaml.safe_dump(raw))
    second = run_sweep(load_sweep(three), results_root=root, cache_path=tmp_path / "c.db")
    outcomes = {c.name: c.outcome for c in second.record.cells}
    assert outcomes == {
        "175b_verification": "existing",
        "175b_finetuning": "existing",
        "6b_verification": "ran",
        "6b_finetuning": "existing",
    }


def test_holm_helper_matches_an_independent_step_down() -> None:
    """The shared Holm helper against a step-down written out here, and statsmodels' values
    for p = [0.1, 0.012, 0.03, 0.5] (0.2, 0.048, 0.09, 0.5)."""
    p = [0.1, 0.012, 0.03, 0.5]
    assert holm_adjust(p) == pytest.approx([0.2, 0.048, 0.09, 0.5])


# --- slices: a regression the overall mean hides -------------------------------------

APP = """\
def answer(request, row):
    i = int(row["i"])
    if request.model == "base":  # 70% right on both slices
        right = i % 10 < 7
    elif row["level"] == "hard":  # the candidate: 20% on the hard slice ...
        right = i % 10 < 2
    else:  # ... and 80% on the easy one
        right = i % 10 < 8
    return "A: " + (row["a"] if right else "-1")
"""


def write_python_sweep(
    directory: Path,
    names: tuple[str, str, str],
    app: str,
    rows: list[dict],
    models: list[str],
    **sweep: Any,
) -> Path:
    """A sweep over ``model.name`` (``models``, the first the baseline) of a numeric eval
    of ``rows`` ({"q", "a"} and more) answered by the python provider module ``app``;
    ``names``: the spec's, the sweep's and the module's; ``sweep``: more fields of the
    sweep file. Returns its path."""
    spec_name, sweep_name, module = names
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / f"{module}.py").write_text(app)
    spec = {
        "name": spec_name,
        "dataset": {"path": "data.jsonl"},
        "prompt": "What is {{ q }}?",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": models[0], "function": f"{module}:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
    }
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec))
    fields = {"name": sweep_name, "spec": "spec.yaml", "axes": {"model.name": models}}
    (directory / "sweep.yaml").write_text(
        yaml.safe_dump({**fields, "baseline": models[0], **sweep})
    )
    return directory / "sweep.yaml"


def write_slice_sweep(directory: Path, must_not_regress: list[str]) -> Path:
    """400 rows, 360 easy and 40 hard; models base and new (see APP)."""
    rows = [
        {"i": i, "q": f"{i} + 1", "a": str(i + 1), "level": "hard" if i >= 360 else "easy"}
        for i in range(400)
    ]
    slices = {"field": "level", "must_not_regress": must_not_regress}
    names = ("slices", "slice-sweep", "slice_app")
    return write_python_sweep(directory, names, APP, rows, ["base", "new"], slices=slices)


def test_slice_regression_hidden_by_the_mean_is_caught(tmp_path: Path) -> None:
    """The candidate gains on the 360 easy rows and loses 50 points on the 40 hard ones:
    non-inferior overall, flagged on the hard slice; with hard marked must-not-regress it
    fails, its slice gate in the Holm family."""
    sweep = load_sweep(write_slice_sweep(tmp_path / "a", []))
    done = run_sweep(sweep, results_root=tmp_path / "results", cache_path=tmp_path / "c.db")
    table = sweep_table(done.directory)
    new = table.cell("new")
    slices = {s.name: s for s in new.slices}
    assert (slices["easy"].n, slices["hard"].n) == (360, 40)
    assert slices["hard"].mean == pytest.approx(8 / 40)
    assert table.cell("base").slices[1].mean == pytest.approx(28 / 40)
    assert new.mean > table.cell("base").mean  # the overall mean improves
    assert new.passed and new.verdict in ("non-inferior", "superior")
    assert slices["hard"].hidden_regression and not slices["easy"].hidden_regression
    assert slices["hard"].gate.hi < 0 and slices["hard"].gate.p_adjusted is None
    assert table.family_size == 1

    marked = load_sweep(write_slice_sweep(tmp_path / "b", ["hard"]))
    done = run_sweep(marked, results_root=tmp_path / "results", cache_path=tmp_path / "c.db")
    assert [c.outcome for c in done.record.cells] == ["existing", "existing"]  # same runs
    table = sweep_table(done.directory)
    new = table.cell("new")
    assert table.family_size == 2
    assert new.passed is False and new.failed_slices == ("hard",)
    assert not table.passed() and table.best is None
    text = "\n".join(sweep_lines(table))
    assert f"FAIL: {new.verdict} overall, fails slice hard" in text
    assert "hard *  40   0.2000 [0.1050, 0.3476]  -0.5000 [-0.6480, -0.3520]  FAIL" in text
    assert "REGRESSION hidden by the mean" in text and "passed: none" in text
    overall, hard = new.gate, new.slices[1].gate
    assert [overall.p_adjusted, hard.p_adjusted] == pytest.approx(
        holm_adjust([overall.p_value, hard.p_value])
    )
    lone = regression_gate(table.cell("base").run_dir, new.run_dir, samples=sweep_ids(done, "hard"))
    assert (lone.lo, lone.hi, lone.p_value) == (hard.lo, hard.hi, hard.p_value)
    assert lone.n == 40


def sweep_ids(done, name: str) -> list[str]:  # noqa: ANN001
    """The sample ids of slice ``name`` in a sweep's record."""
    return done.record.slices[name]


# --- labels: every claim is a corrected decision ---------------------------------------

TWO_GAINS = """\
def answer(request, row):
    i = int(row["i"])  # base: right on 0..279 (70%)
    if request.model == "a":  # 12 of base's right answers lost, 26 others gained
        right = 12 <= i < 306
    elif request.model == "b":  # the same counts on other samples
        right = (i < 280 and not 24 <= i < 36) or 306 <= i < 332
    else:
        right = i < 280
    return "A: " + (row["a"] if right else "-1")
"""


def write_two_gains(directory: Path) -> Path:
    """400 rows; base and two candidates that each lose 12 and gain 26 samples."""
    rows = [{"i": i, "q": f"{i} + 1", "a": str(i + 1)} for i in range(400)]
    names = ("gains", "gains", "gains_app")
    return write_python_sweep(directory, names, TWO_GAINS, rows, ["base", "a", "b"])


def test_superior_needs_the_corrected_superiority_test(tmp_path: Path) -> None:
    """Each candidate's own 95% interval lies above 0 (Tango [+0.0050, ...], McNemar's
    exact one-sided p 0.0168 on 26 vs 12 discordant pairs), but over the two candidates
    Holm adjusts that p to 0.0336 > 0.025: both pass as non-inferior, and neither is
    labelled superior (before, both were, from the unadjusted interval). Uncorrected
    (--correction none) they are superior; the output says which correction decided."""
    sweep = write_two_gains(tmp_path)
    done = run_sweep(load_sweep(sweep), results_root=tmp_path / "r", cache_path=tmp_path / "c.db")
    table = sweep_table(done.directory)
    for name in ("a", "b"):
        cell = table.cell(name)
        assert (cell.gate.only_baseline, cell.gate.only_candidate, cell.gate.n) == (12, 26, 400)
        assert cell.gate.lo == pytest.approx(0.0050, abs=5e-5) and cell.gate.lo > 0
        assert cell.passed and cell.gate.p_adjusted < 0.025
        assert cell.verdict == "non-inferior"
        sup = cell.label_gate
        assert (sup.test, sup.margin, sup.exact_p) == (
            "superiority",
            0.0,
            pytest.approx(0.0168, abs=5e-5),
        )
        assert sup.p_adjusted == pytest.approx(2 * sup.exact_p) and not sup.passed
    text = "\n".join(sweep_lines(table))
    assert text.count("PASS non-inferior") == 2 and "PASS superior" not in text
    rule = (
        "labels: superior and inferior each by its own test, Holm-corrected over the 2 candidates"
    )
    assert rule in text
    out = run_cli("sweep", str(sweep), "--results-root", str(tmp_path / "r"), "--json")
    assert out.code == 0, out.err
    cells = {c["name"]: c for c in json.loads(out.out)["cells"]}
    assert [cells[n]["verdict"] for n in ("a", "b")] == ["non-inferior"] * 2
    assert cells["a"]["label_gate"]["family"] == "Holm over 2 comparisons"
    none = sweep_table(done.directory, correction="none")
    assert [c.verdict for c in none.candidates] == ["superior", "superior"]
    assert (
        none.labels
        == "labels: superior and inferior each by its own test, uncorrected over the 2 candidates"
    )


MILD = """\
def answer(request, row):
    j = int(row["i"]) % 200  # base: right on j < 140 of each slice
    if request.model == "base":
        right = j < 140
    elif row["level"] == "z":  # the candidate gains 60 on z ...
        right = True
    else:  # ... and on x and y loses 26, gains 12
        right = 26 <= j < 152
    return "A: " + (row["a"] if right else "-1")
"""


def test_a_slice_regression_is_flagged_only_when_its_corrected_test_passes(
    tmp_path: Path,
) -> None:
    """Slices x and y each lose 26 and gain 12 samples (unadjusted interval below 0,
    McNemar's exact one-sided p 0.0168), z gains 60: the cell passes overall, and over its
    three slices' regression tests Holm adjusts 0.0168 to 0.0504 > 0.025, so no slice is
    flagged (before, x and y were, from the unadjusted intervals)."""
    directory = tmp_path / "mild"
    sweep_path = write_slice_sweep(directory, [])
    rows = [
        {"i": i, "q": f"{i} + 1", "a": str(i + 1), "level": "xyz"[i // 200]} for i in range(600)
    ]
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "mild_app.py").write_text(MILD)  # not slice_app: imported once a process
    spec = yaml.safe_load((directory / "spec.yaml").read_text())
    spec["model"]["function"] = "mild_app:answer"
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec))
    done = run_sweep(
        load_sweep(sweep_path), results_root=tmp_path / "r", cache_path=tmp_path / "c.db"
    )
    table = sweep_table(done.directory)
    new = table.cell("new")
    assert new.passed and new.gate.delta == pytest.approx(32 / 600)
    slices = {s.name: s for s in new.slices}
    for name in ("x", "y"):
        s = slices[name]
        assert (s.gate.only_baseline, s.gate.only_candidate) == (26, 12) and s.gate.hi < 0
        assert not s.hidden_regression
        assert s.regression.exact_p == pytest.approx(0.0168, abs=5e-5)
        assert s.regression.p_adjusted == pytest.approx(3 * s.regression.exact_p)
    assert not slices["z"].hidden_regression and slices["z"].regression.p_value > 0.5
    assert "REGRESSION" not in "\n".join(sweep_lines(table))


def test_a_cell_whose_rows_disagree_is_refused_even_partial(tmp_path: Path) -> None:
    """The viewer's sweep page gates with allow_partial, which lets rows be missing, not
    re-scored: a cell whose rows were re-scored since is refused (its manifest's mean
    0.735 would be shown beside rows that give 1.0), naming the cell and the fix."""
    sweep = write_two_gains(tmp_path)
    done = run_sweep(load_sweep(sweep), results_root=tmp_path / "r", cache_path=tmp_path / "c.db")
    cell = sweep_table(done.directory).cell("a")
    assert cell.mean == pytest.approx(0.735)
    results = Path(cell.run_dir) / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps({**r, "score": 1.0}) + "\n" for r in rows))
    with pytest.raises(GateError) as refused:
        sweep_table(done.directory, allow_partial=True)
    assert str(refused.value) == (
        f"cell a: candidate run {cell.run_dir} is complete but its results.jsonl gives mean "
        "1.000000 over "
        "400 samples where its manifest records mean 0.735000 over 400: the file was "
        "edited or damaged since the run wrote it; run the same spec again to rewrite it "
        "from the cache"
    )


# --- error rows: the candidate's count against it in every test --------------------------

FLAKY = """\
def answer(request, row):
    i = int(row["i"])
    if request.model == "flaky" and i % 10 == 0:  # its calls fail on 40 of 400 samples
        raise RuntimeError("the candidate's endpoint failed")
    return "A: " + (row["a"] if i % 10 < 8 else "-1")  # both right on 80% otherwise
"""


def test_as_fail_charges_the_candidate_in_the_swapped_label_tests(tmp_path: Path) -> None:
    """gate.errors as-fail: the candidate's 40 failed calls are its failures in the
    non-inferiority test (delta -40/400 = -0.1) and also in the inferiority test that
    labels it, which gates the pair swapped (candidate as the gate's baseline): charged
    there to the gate's candidate, the errors were left out and the label read
    'inconclusive' (delta 0 on 360 samples); now 'inferior' (Tango's interval for
    0 vs 40 discordant pairs of 400 lies below -0.02)."""
    rows = [{"i": i, "q": f"{i} + 1", "a": str(i + 1)} for i in range(400)]
    names = ("flaky", "flaky", "flaky_app")
    sweep = write_python_sweep(
        tmp_path, names, FLAKY, rows, ["base", "flaky"], gate={"errors": "as-fail"}
    )
    done = run_sweep(load_sweep(sweep), results_root=tmp_path / "r", cache_path=tmp_path / "c.db")
    cell = sweep_table(done.directory).cell("flaky")
    assert cell.errors == {"provider_error": 40}
    assert cell.gate.delta == pytest.approx(-0.1) and cell.gate.n == 400
    assert not cell.passed and cell.verdict == "inferior"
    assert cell.label_gate.delta == pytest.approx(0.1) and cell.label_gate.n == 400
