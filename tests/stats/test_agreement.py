"""Agreement with human labels: Cohen's kappa and its standard error against published
and independently computed values, label reading, and the figures a run reports."""

from __future__ import annotations

import json
import math
from collections import Counter
from pathlib import Path

import fake_judges
import pytest
from judge_evals import run, write_eval
from paths import EXAMPLES, GSM8K_DATA

import gradetrail
from gradetrail.datasets.labels import LabelReader
from gradetrail.errors import DatasetError, SpecError
from gradetrail.report.run import summary_lines
from gradetrail.stats.agreement import cohen_kappa, measure_agreement

#: (table, kappa, standard error) from statsmodels 0.15.0
#: ``inter_rater.cohens_kappa(table, return_results=True)`` (``kappa``, ``std_kappa``), an
#: independent implementation of Cohen (1960) and Fleiss, Cohen & Everitt (1969)
STATSMODELS = [
    ([[75, 1, 4], [5, 4, 1], [0, 0, 10]], 0.676470588235294, 0.08770295347521254),
    ([[4, 1], [1, 4]], 0.6000000000000001, 0.2529822128134703),
    ([[40, 9], [6, 45]], 0.6995192307692307, 0.07139360269998822),
    ([[700, 42], [20, 557]], 0.9048980227887493, 0.011783405455944536),
    ([[10, 0, 3], [2, 0, 0], [0, 0, 5]], 0.5098039215686274, 0.1723684103918485),
    ([[577, 0], [5, 737]], 0.992305385763272, 0.0034345059836226512),
]


@pytest.mark.parametrize(("table", "kappa", "se"), STATSMODELS)
def test_kappa_and_its_standard_error_match_statsmodels(table, kappa, se) -> None:
    """cohen_kappa gives statsmodels' kappa and non-null standard error to 1e-12."""
    result = cohen_kappa(table)
    assert result.kappa == pytest.approx(kappa, abs=1e-12)
    assert result.se == pytest.approx(se, abs=1e-12)


def test_kappa_of_the_fleiss_diagnosis_example() -> None:
    """Fleiss (1981) three-category example (proportions x 100): p_o 0.89, p_e 0.66,
    kappa 0.23 / 0.34 = 0.676."""
    result = cohen_kappa([[75, 1, 4], [5, 4, 1], [0, 0, 10]])
    assert (result.p_observed, result.p_expected) == pytest.approx((0.89, 0.66))
    assert result.kappa == pytest.approx(0.23 / 0.34, abs=1e-12)


def test_kappa_by_hand_on_a_symmetric_table() -> None:
    """[[4,1],[1,4]]: p_o 0.8, p_e 0.5, kappa 0.6; variance (0.288 + 0.032 - 0.16) / 2.5."""
    result = cohen_kappa([[4, 1], [1, 4]])
    assert result.kappa == pytest.approx(0.6)
    assert result.se == pytest.approx(math.sqrt(0.16 / 2.5))


def test_kappa_is_undefined_when_both_raters_use_one_category() -> None:
    """Chance agreement 1 leaves kappa undefined (NaN), not 0 or 1."""
    result = cohen_kappa([[5, 0], [0, 0]])
    assert math.isnan(result.kappa) and result.p_observed == 1.0


def test_kappa_rejects_bad_tables() -> None:
    """A non-square, negative or empty table is a ValueError."""
    for table in ([[1, 2]], [[1, -1], [0, 1]], [[0, 0], [0, 0]]):
        with pytest.raises(ValueError):
            cohen_kappa(table)


def test_measure_agreement_counts_categories_both_raters_used() -> None:
    """A judge's partial grade (0.5) is its own category: it counts against accuracy and
    enters kappa's table as a column the labels never use."""
    pairs = [(1.0, 1.0)] * 3 + [(1.0, 0.5)] + [(0.0, 0.0)] * 3 + [(0.0, 1.0)]
    stats = measure_agreement(pairs, "is_correct", unlabelled=2, not_scored=1)
    assert stats.n == 8 and stats.accuracy == 0.75
    assert stats.categories == [0.0, 0.5, 1.0]
    assert stats.confusion == {"0": {"0": 3, "1": 1}, "1": {"0.5": 1, "1": 3}}
    expected = cohen_kappa([[3, 0, 1], [0, 0, 0], [0, 1, 3]])
    assert stats.kappa == pytest.approx(expected.kappa)
    assert (stats.unlabelled, stats.not_scored) == (2, 1)


def test_measure_agreement_without_pairs_has_no_figures() -> None:
    """No labelled row: every figure is None, nothing is invented."""
    stats = measure_agreement([], "label")
    assert (stats.n, stats.accuracy, stats.kappa, stats.confusion) == (0, None, None, {})


def test_label_reader_defaults_map_and_errors() -> None:
    """Booleans and numbers in [0, 1] read as scores; label_map maps text; a missing
    label is None; an unmapped label is a DatasetError; a first row without it a
    SpecError."""
    reader = LabelReader("{model}.ok", "m1", None, "spec.yaml")
    assert reader.read({"m1": {"ok": True}}, "a") == 1.0
    assert reader.read({"m1": {"ok": 0}}, "a") == 0.0
    assert reader.read({"m1": {}}, "a") is None
    assert reader.read({"m1": {"ok": None}}, "a") is None
    with pytest.raises(DatasetError, match="label 'yes' has no score; map it with"):
        reader.read({"m1": {"ok": "yes"}}, "a")
    with pytest.raises(SpecError, match=r"dataset\.label_field: the first row has no 'm1\.ok'"):
        reader.check({"m2": {"ok": True}})
    mapped = LabelReader("grade", "m", {"good": 1.0, "meh": 0.5, "true": 1.0}, "spec.yaml")
    assert mapped.read({"grade": "meh"}, "a") == 0.5
    assert mapped.read({"grade": True}, "a") == 1.0
    # NaN is a missing label (pandas, Python's json): None, not "label nan has no score"
    assert reader.read({"m1": {"ok": float("nan")}}, "a") is None
    assert mapped.read({"grade": float("nan")}, "a") is None
    assert LabelReader("g", "m", {"null": 0.0}, "s").read({"g": float("nan")}, "a") == 0.0
    with pytest.raises(DatasetError, match=r"label 'bad' is not in dataset\.label_map"):
        mapped.read({"grade": "bad"}, "x")


def test_run_reports_agreement_of_a_scripted_judge_with_known_verdicts(tmp_path: Path) -> None:
    """Ten samples, the judge right on 8 (4 correct, 4 incorrect) and wrong on 2: the
    manifest and summary report accuracy 0.8, kappa 0.6 with its SE, and the confusion."""
    labels = [True] * 5 + [False] * 5
    grades = ["C", "C", "C", "C", "I", "I", "I", "I", "I", "C"]
    rows = [
        {"id": f"s{i}", "answer": "x", "human": {"ok": label}, "script": [f"GRADE: {g}"]}
        for i, (label, g) in enumerate(zip(labels, grades, strict=True))
    ]
    rows.append({"id": "unlabelled", "answer": "x", "human": {}, "script": ["GRADE: C"]})
    rows.append({"id": "broken", "answer": "x", "human": {"ok": True}, "script": ["?"]})
    spec = write_eval(tmp_path, rows, dataset={"label_field": "human.ok"})
    result, out = run(spec, tmp_path / "results")
    assert [r["label"] for r in out] == [1.0] * 5 + [0.0] * 5 + [None, 1.0]
    a = result.manifest.agreement
    assert (a.n, a.unlabelled, a.not_scored) == (10, 1, 1)
    assert a.accuracy == pytest.approx(0.8)
    assert a.kappa == pytest.approx(0.6)
    assert a.kappa_se == pytest.approx(0.2529822128134703, abs=1e-12)
    assert a.kappa_ci_low == pytest.approx(0.6 - 1.959963984540054 * 0.2529822128134703)
    assert a.confusion == {"0": {"0": 4, "1": 1}, "1": {"0": 1, "1": 4}}
    on_disk = json.loads((result.run_dir / "manifest.json").read_text())["agreement"]
    assert on_disk["kappa"] == pytest.approx(0.6) and on_disk["label_field"] == "human.ok"
    lines = dict(summary_lines(result))
    assert lines["agreement"] == (
        "accuracy 0.8000 ± 0.1333 SE, 95% CI [0.4902, 0.9433]; Cohen's kappa 0.6000 ± "
        "0.2530 SE, 95% CI [0.1042, 1.0000]; over 10 labelled rows (human.ok); left out: "
        "1 unlabelled, 1 labelled but not scored"
    )
    assert lines["confusion"] == "label 1: score 0 x1, score 1 x4; label 0: score 0 x4, score 1 x1"


def test_label_map_maps_text_labels(tmp_path: Path) -> None:
    """dataset.label_map turns text labels into scores for agreement."""
    rows = [
        {"id": "a", "answer": "x", "verdict": "right", "script": ["GRADE: C"]},
        {"id": "b", "answer": "x", "verdict": "wrong", "script": ["GRADE: C"]},
    ]
    spec = write_eval(
        tmp_path, rows, dataset={"label_field": "verdict", "label_map": {"right": 1, "wrong": 0}}
    )
    result, _ = run(spec, tmp_path / "results")
    assert result.manifest.agreement.confusion == {"0": {"1": 1}, "1": {"1": 1}}
    assert result.manifest.agreement.accuracy == 0.5


def _final_answer_verdicts(model: str, lines: set[int] | None = None) -> Counter:
    """The scripted GSM8K judge's confusion, computed straight from the data file (only
    the given 1-based line numbers, when given)."""
    counts: Counter = Counter()
    for number, line in enumerate((GSM8K_DATA / "example_model_solutions.jsonl").open(), 1):
        if lines is not None and number not in lines:
            continue
        row = json.loads(line)
        reference = row["ground_truth"].split("\n")[-1]
        student = row[model]["solution"].split("\n")[-1]
        same = student.startswith("A: ") and student[3:].strip() == reference[3:].strip()
        counts[(row[model]["is_correct"], same)] += 1
    return counts


@pytest.mark.parametrize(
    ("model", "confusion"),
    [
        ("175b_verification", {"1": {"1": 737, "0": 5}, "0": {"0": 577}}),
        ("6b_finetuning", {"1": {"1": 284, "0": 2}, "0": {"0": 1033}}),
    ],
)
def test_gsm8k_judge_example_reports_agreement_with_author_labels(
    tmp_path: Path, model: str, confusion: dict
) -> None:
    """The shipped judge example, its judge swapped for a scripted one that grades C when
    the final answer lines are identical, reproduces the confusion counted from the data
    file against the authors' is_correct labels, and the kappa statsmodels gives."""
    spec = gradetrail.load_spec(
        EXAMPLES / "gsm8k-judge.yaml",
        [
            f"model.name={model}",
            "scorer.model.provider=python",
            "scorer.model.function=fake_judges:gsm8k_final_answer",
        ],
    )
    fake_judges.CALLS.clear()
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert len(fake_judges.CALLS) == 1319
    a = result.manifest.agreement
    assert a.label_field == f"{model}.is_correct"
    assert a.n == 1319 and a.confusion == confusion
    counted = _final_answer_verdicts(model)
    assert a.confusion["1"]["0"] == counted[(True, False)]
    assert a.confusion["0"]["0"] == counted[(False, False)]
    assert a.accuracy == pytest.approx((counted[(True, True)] + counted[(False, False)]) / 1319)
    if model == "175b_verification":
        assert a.kappa == pytest.approx(0.992305385763272, abs=1e-12)
        assert a.kappa_se == pytest.approx(0.0034345059836226512, abs=1e-12)
    assert result.manifest.counts == {"scored": 1319}


# --------------------------------------------------------------------------------------
# The shipped example as shipped, its judge reached over HTTP (the real SDK against the
# local protocol server, scripted); only the endpoint and the key differ.

from protocol_server import running_server  # noqa: E402

#: scripted GSM8K judge: C when the student's last line repeats the reference's
GSM8K_SCRIPT = {
    "rules": [
        {
            "regex": r"\nA: ([^\n]*)\n\nStudent solution:\n(?:.*\n)?A: \1\n\nDecide",
            "reply": "The final answers match.\nGRADE: C",
        },
        {"contains": "Student solution:", "reply": "The final answers differ.\nGRADE: I"},
    ],
    "models": ["claude-haiku-4-5"],
}


def test_gsm8k_judge_example_over_http_reports_agreement(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """examples/gsm8k-judge.yaml with its anthropic judge pointed at the protocol server
    (300 problems drawn with seed 3, to stay fast): one judge call a sample through the
    anthropic SDK, the confusion exactly as counted from the data file for those samples,
    and a re-run that sends no request."""
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")
    with running_server(script=GSM8K_SCRIPT) as srv:
        spec = gradetrail.load_spec(
            EXAMPLES / "gsm8k-judge.yaml",
            [
                f"scorer.model.base_url={srv.anthropic_base_url}",
                "dataset.shuffle_seed=3",
                "dataset.limit=300",
            ],
        )
        result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
        ids = {int(r["sample_id"]) for r in gradetrail.read_results(result.run_dir)}
        assert srv.stats()["paths"] == {"/v1/messages": 300}
        srv.reset(config=False)
        again = gradetrail.run_eval(spec, results_root=tmp_path / "results")
        assert srv.stats()["total"] == 0
    a = result.manifest.agreement
    assert a.label_field == "175b_verification.is_correct"
    counted = _final_answer_verdicts("175b_verification", lines=ids)
    assert a.confusion == {
        "1": {"1": counted[(True, True)], "0": counted[(True, False)]},
        "0": {"0": counted[(False, False)]},
    }
    right, missed, wrong = counted[(True, True)], counted[(True, False)], counted[(False, False)]
    assert missed == 3 and right + missed + wrong == 300
    expected = cohen_kappa([[wrong, 0], [missed, right]])
    assert a.kappa == pytest.approx(expected.kappa, abs=1e-12)
    assert a.accuracy == pytest.approx(297 / 300)
    assert result.manifest.judge.calls == 300 and result.manifest.judge.output_tokens > 0
    assert again.manifest.agreement == a
    assert again.manifest.judge.cache_hits == 300


def test_kappa_with_epochs_is_clustered_by_sample() -> None:
    """Six samples x 3 epochs: kappa 0.444444 either way, but the standard error is the
    delete-one-sample jackknife, 0.22923292366367762 (each leave-one-sample-out kappa from
    statsmodels 0.15.0 ``inter_rater.cohens_kappa``: .473684, .285714, .324324, .594595,
    .473684, .444444; sqrt(5/6 * sum of squared deviations)), not the row-independent
    formula; accuracy's SE is clustered too, and the result says so."""
    data = {
        "a": [(1, 1), (1, 1), (1, 0)],
        "b": [(0, 0), (0, 0), (0, 0)],
        "c": [(1, 1), (1, 1), (1, 1)],
        "d": [(0, 1), (0, 1), (0, 0)],
        "e": [(1, 0), (1, 1), (1, 1)],
        "f": [(0, 0), (0, 1), (0, 0)],
    }
    pairs = [(float(lbl), float(s)) for rows in data.values() for lbl, s in rows]
    samples = [sid for sid, rows in data.items() for _ in rows]
    plain = measure_agreement(pairs, "label")
    clustered = measure_agreement(pairs, "label", samples=samples)
    assert clustered.kappa == pytest.approx(0.4444444444444444)
    assert clustered.kappa_se == pytest.approx(0.22923292366367762, rel=1e-9)
    assert clustered.clustered and not plain.clustered
    assert clustered.accuracy_se != plain.accuracy_se
    one_each = measure_agreement(pairs[:6], "label", samples=[str(i) for i in range(6)])
    assert not one_each.clustered


def test_kappa_interval_stays_inside_minus_one_to_one() -> None:
    """19 agreements and 1 disagreement: kappa 0.9 with a wide SE at n = 20; kappa +- z SE
    would reach past 1, so the upper bound is clipped to kappa's possible maximum, 1."""
    pairs = [(1.0, 1.0)] * 10 + [(0.0, 0.0)] * 9 + [(0.0, 1.0)]
    stats = measure_agreement(pairs, "label")
    assert stats.kappa == pytest.approx(0.9)
    assert stats.kappa_se is not None and stats.kappa + 1.96 * stats.kappa_se > 1
    assert stats.kappa_ci_high == 1.0 and stats.kappa_ci_low == pytest.approx(
        stats.kappa - 1.959964 * stats.kappa_se, abs=1e-5
    )
