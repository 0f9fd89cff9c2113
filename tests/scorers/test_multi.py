"""Issue 23: several metrics a run (``scorers:``), one of them primary.

On the bundled two-metric example every row records both metrics, the primary
reproduces the GSM8K authors' labels and is the run's score, the second metric equals
its function called directly; the summary lists each; ``gate --metric`` gates the
second; a spec with one ``scorer:`` keeps its hashes; malformed lists are refused with
one line saying what to fix.
"""

from __future__ import annotations

import importlib
import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml
from paths import EXAMPLES

import gradetrail
from gradetrail.errors import SpecError
from gradetrail.rundir.manifest import identity_hash, spec_hash
from gradetrail.spec import load_spec, parse_spec

SPEC = EXAMPLES / "gsm8k-metrics.yaml"
SOLUTIONS = EXAMPLES / "data/gsm8k/example_model_solutions.jsonl"
AUTHOR_LABELS = {"175b_finetuning": 458, "175b_verification": 742}


def _run(cli, model: str) -> dict:
    out = cli("run", str(SPEC), "--set", f"model.name={model}", "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


@pytest.fixture(scope="module")
def arithmetic():  # noqa: ANN201
    """The example's second metric, imported as the run imports it."""
    sys.path.insert(0, str(EXAMPLES))
    try:
        return importlib.import_module("grading.gsm8k").arithmetic
    finally:
        sys.path.remove(str(EXAMPLES))


@pytest.mark.parametrize("model", sorted(AUTHOR_LABELS))
def test_every_row_records_both_metrics(cli, arithmetic, model: str) -> None:
    """accuracy (primary) is the row's score and matches every is_correct label;
    arithmetic equals the function on the same solution; the manifest has both."""
    manifest = _run(cli, model)
    rows = gradetrail.read_results(manifest["run_dir"])
    labels = [json.loads(line)[model]["is_correct"] for line in SOLUTIONS.open()]
    assert [r["metrics"]["accuracy"] == 1.0 for r in rows] == labels
    assert [r["score"] for r in rows] == [r["metrics"]["accuracy"] for r in rows]
    for r in rows[:200]:
        direct = arithmetic(type("S", (), {"response": r["response"]})())
        assert r["metrics"]["arithmetic"] == direct.value
        assert (
            r["scorer"]["metrics"]["arithmetic"]["detail"]["calculations"]
            == (direct.detail["calculations"])
        )
    assert manifest["metrics"]["accuracy"] == manifest["score"]
    assert manifest["score"]["mean"] == pytest.approx(AUTHOR_LABELS[model] / 1319, abs=1e-12)
    mean = sum(r["metrics"]["arithmetic"] for r in rows) / len(rows)
    assert manifest["metrics"]["arithmetic"]["mean"] == pytest.approx(mean, abs=1e-12)
    assert 0.9 < mean < 1.0  # some recorded calculations are wrong


def test_the_summary_shows_each_metric(cli) -> None:
    """The run summary lists the primary and the other metric."""
    out = cli("run", str(SPEC), "--set", "model.name=175b_finetuning")
    lines = [ln for ln in out.stdout.splitlines() if ln.strip().startswith("metric")]
    assert len(lines) == 2
    assert "accuracy (primary): 0.3472" in lines[0] and "arithmetic: 0.99" in lines[1]


def test_gate_metric_gates_the_second_metric(cli, tmp_path: Path) -> None:
    """--metric arithmetic gates arithmetic's per-sample values; the primary by default;
    an unknown metric cannot be compared (exit 2) and names the metrics there are."""
    base = _run(cli, "175b_finetuning")["run_dir"]
    cand = _run(cli, "175b_verification")["run_dir"]
    primary = json.loads(cli("gate", base, cand, "--test", "superiority", "--json").stdout)
    assert primary["metric"] is None and primary["passed"]
    assert primary["delta"] == pytest.approx((742 - 458) / 1319, abs=1e-12)
    second = cli("gate", base, cand, "--metric", "arithmetic", "--json")
    result = json.loads(second.stdout)
    rows_b, rows_c = gradetrail.read_results(base), gradetrail.read_results(cand)
    delta = (
        sum(r["metrics"]["arithmetic"] for r in rows_c) / 1319
        - sum(r["metrics"]["arithmetic"] for r in rows_b) / 1319
    )
    assert result["metric"] == "arithmetic" and result["delta"] == pytest.approx(delta)
    assert result["method"] == "t"  # shares of calculations: not binary
    bad = cli("gate", base, cand, "--metric", "fluency")
    assert bad.exit_code == 2
    assert "no metric 'fluency' (its metrics: accuracy, arithmetic)" in bad.stderr


def test_a_one_scorer_spec_keeps_its_hashes() -> None:
    """The bundled one-scorer specs hash as before scorers: existed (values computed by
    the commit before it), so older runs stay comparable."""
    # the example's recordings.match_fields (added since) is a check: without it, it is
    # the spec those values were computed from
    gsm8k = load_spec(EXAMPLES / "gsm8k.yaml", ["model.recordings.match_fields=[]"])
    mcq = load_spec(EXAMPLES / "mcq.yaml")
    assert identity_hash(gsm8k, {"dataset": "d"}) == identity_hash(
        load_spec(EXAMPLES / "gsm8k.yaml"), {"dataset": "d"}
    )
    assert "scorers" not in gsm8k.model_dump(mode="json")
    assert spec_hash(gsm8k).startswith("9d7e5911a471043edd3e4791be62bd0b")
    assert identity_hash(gsm8k, {"dataset": "d"}).startswith("b9de6938cde7fd3f94de3fb50736f3bb")
    assert spec_hash(mcq).startswith("2553c3d30a62f5719c304d7a4e27488d")
    assert identity_hash(mcq, {"dataset": "d"}).startswith("6ea5238570564837099de7905d6d9140")


BASE = """
name: m
dataset: {path: data.jsonl}
prompt: "{{ q }}"
target: "{{ a }}"
model: {provider: python, name: app, function: "app:answer"}
"""


@pytest.mark.parametrize(
    ("section", "message"),
    [
        ("", "scorer: required field is missing; add it (or scorers:)"),
        ("scorers: []", "scorers is empty"),
        (
            "scorers: [{name: a, type: exact}, {name: a, type: numeric}]",
            "the name 'a' is used twice",
        ),
        (
            "scorers: [{name: a, primary: true, type: exact}, "
            "{name: b, primary: true, type: numeric}]",
            "a, b are all primary; mark one with primary: true",
        ),
        (
            "scorer: {type: exact}\nscorers: [{name: a, type: numeric}]",
            "not both",
        ),
        ("scorers: [{name: 'two words', type: exact}]", "name"),
        ("scorers: [{name: a, type: nope}]", "type"),
    ],
)
def test_malformed_scorer_lists_say_what_to_fix(section: str, message: str) -> None:
    """Each is refused with one line."""
    with pytest.raises(SpecError) as caught:
        parse_spec(yaml.safe_load(BASE + section), "m.yaml")
    assert message in str(caught.value)


def test_the_primary_defaults_to_the_first_and_reads_as_the_scorer() -> None:
    """Without primary: true the first metric is primary; spec.scorer is its section."""
    spec = parse_spec(
        yaml.safe_load(BASE + "scorers: [{name: a, type: exact}, {name: b, type: numeric}]")
    )
    assert spec.primary_metric == "a" and spec.scorer.type == "exact"
    again = parse_spec(spec.model_dump(mode="json"))
    assert again == spec  # the manifest's form reads back


def test_a_metric_failing_on_a_row_leaves_the_row_scored(cli, tmp_path: Path) -> None:
    """The primary scores every row; a second metric raising on one row is null there
    with its error recorded, and its statistics leave that row out."""
    (tmp_path / "data.jsonl").write_text(
        "".join(json.dumps({"q": f"say {i}", "a": str(i)}) + "\n" for i in range(4))
    )
    (tmp_path / "app_m.py").write_text(
        "def answer(request):\n    return request.prompt.split()[-1]\n"
    )
    (tmp_path / "grading_m.py").write_text(
        textwrap.dedent(
            """
            def picky(s):
                if s.target == "3":
                    raise RuntimeError("no opinion on 3")
                return 0.5
            """
        )
    )
    spec = BASE.replace("app:answer", "app_m:answer") + textwrap.dedent(
        """
        scorers:
          - {name: exact, type: exact}
          - {name: picky, type: python, function: "grading_m:picky"}
        """
    )
    (tmp_path / "m.yaml").write_text(spec)
    manifest = json.loads(cli("run", str(tmp_path / "m.yaml"), "--json").stdout)
    assert manifest["counts"] == {"scored": 4}
    assert manifest["metrics"]["exact"]["mean"] == 1.0
    assert manifest["metrics"]["picky"]["n"] == 3 and manifest["metrics"]["picky"]["mean"] == 0.5
    row = gradetrail.read_results(manifest["run_dir"])[3]
    assert row["metrics"] == {"exact": 1.0, "picky": None}
    error = row["scorer"]["metrics"]["picky"]["error"]
    assert "grading_m:picky raised RuntimeError: no opinion on 3" in error["message"]
    # the summary says so (the row counts cannot: the row is scored by the primary);
    # before, `over 3 scored samples` was the only sign
    out = cli("run", str(tmp_path / "m.yaml")).stdout
    (picky,) = [line for line in out.splitlines() if "picky:" in line]
    assert picky.endswith(
        "over 3 scored samples (1 of the 4 samples the primary scored not scored by it: "
        "each row's scorer.metrics.picky.error)"
    ), picky
    (exact,) = [line for line in out.splitlines() if "exact (primary):" in line]
    assert exact.endswith("over 4 scored samples"), exact


def test_diff_and_junit_show_each_metric(cli, tmp_path: Path) -> None:
    """diff lists each metric's mean in both runs and compares --metric's values; the
    gate's JUnit names the metric it gated."""
    base = _run(cli, "175b_finetuning")["run_dir"]
    cand = _run(cli, "175b_verification")["run_dir"]
    out = json.loads(cli("diff", base, cand, "--json").stdout)
    assert out["metrics"]["accuracy"]["baseline"] == pytest.approx(458 / 1319, abs=1e-12)
    assert out["metrics"]["accuracy"]["candidate"] == pytest.approx(742 / 1319, abs=1e-12)
    assert set(out["metrics"]) == {"accuracy", "arithmetic"} and out["metric"] is None
    text = cli("diff", base, cand).stdout
    assert "accuracy: 0.3472 -> 0.5625 (+0.2153)" in text
    by_metric = json.loads(cli("diff", base, cand, "--metric", "arithmetic", "--json").stdout)
    assert by_metric["metric"] == "arithmetic" and by_metric["gate"]["metric"] == "arithmetic"
    rows_b = {r["sample_id"]: r for r in gradetrail.read_results(base)}
    rows_c = {r["sample_id"]: r for r in gradetrail.read_results(cand)}
    worse = {
        sid
        for sid in rows_b
        if rows_c[sid]["metrics"]["arithmetic"] < rows_b[sid]["metrics"]["arithmetic"]
    }
    assert by_metric["counts"]["regressed"] == len(worse) > 0
    junit = tmp_path / "gate.xml"
    cli("gate", base, cand, "--metric", "arithmetic", "--junit", str(junit))
    xml = junit.read_text()
    assert 'name="non-inferiority (arithmetic)"' in xml
    assert '<property name="metric" value="arithmetic"' in xml


def test_the_viewer_and_export_show_each_metric(cli, tmp_path: Path) -> None:
    """The viewer's run summary carries a line per metric; export has a column each."""
    from gradetrail.rundir.manifest import Manifest
    from gradetrail.rundir.results import read_manifest
    from gradetrail.view.render import summary_of as _summary

    run_dir = Path(_run(cli, "175b_finetuning")["run_dir"])
    lines = _summary(Manifest.model_validate(read_manifest(run_dir)), run_dir)["lines"]
    metrics = [text for label, text in lines if label == "metric"]
    assert metrics[0].startswith("accuracy (primary): 0.3472") and metrics[1].startswith(
        "arithmetic: 0.99"
    )
    out = tmp_path / "rows.csv"
    assert cli("export", str(run_dir), "--out", str(out)).exit_code == 0
    import csv

    rows = list(csv.DictReader(out.open()))
    assert len(rows) == 1319 and float(rows[0]["metrics.arithmetic"]) == 1.0
    assert sum(float(r["metrics.accuracy"]) for r in rows) == 458


def test_a_row_whose_metrics_is_not_an_object_is_a_metric_error(tmp_path: Path) -> None:
    """An edited row holding "metrics": [1]: gradetrail diff --metric and gate --metric
    ended in AttributeError ('list' object has no attribute 'get'); that row has no
    metric (an error sample of it), as a row whose metric is null."""
    import shutil

    from cli_support import run_cli

    spec = gradetrail.load_spec(EXAMPLES / "gsm8k-metrics.yaml")
    base = gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False).run_dir
    edited = Path(shutil.copytree(base, tmp_path / "edited"))
    results = edited / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    lines[0] = json.dumps(json.loads(lines[0]) | {"metrics": [1]}) + "\n"
    results.write_text("".join(lines))
    manifest = json.loads((edited / "manifest.json").read_text())
    del manifest["results_sha256"], manifest["figures_sha256"]  # rows held against it
    (edited / "manifest.json").write_text(json.dumps(manifest))
    diff = run_cli("diff", str(base), str(edited), "--metric", "arithmetic", "--json")
    assert diff.code == 0, diff.err
    assert json.loads(diff.out)["counts"]["error"] == 1
    gate = run_cli("gate", str(base), str(edited), "--metric", "arithmetic", "--allow-partial")
    assert gate.code == 2
    assert gate.err_lines == [
        "error: candidate has 1 metric_error: re-run to complete them, or pass --errors "
        "as-fail (the candidate's score 0) or --errors exclude (drop those samples from both runs)"
    ]


def test_each_metric_reads_the_answer_after_its_own_reasoning_tags(cli, tmp_path: Path) -> None:
    """The run split ``<think>`` by the primary's reasoning_tags: with a python primary
    (which has none) a numeric metric beside it read the thinking (``the answer is 7``)
    instead of the answer (8) and scored 0; each metric now reads the answer its own tags
    give, and the python metric still sees the whole text, as it does alone."""
    (tmp_path / "data.jsonl").write_text(json.dumps({"q": "x", "a": "8"}) + "\n")
    reply = "<think>3 + 4 = 7, so the answer is 7. Hmm, maybe not.</think>\n\n**8**"
    (tmp_path / "app_t.py").write_text(f"def answer(request):\n    return {reply!r}\n")
    (tmp_path / "grading_t.py").write_text(
        "def thought(s):\n    return float(s.response.startswith('<think>'))\n"
    )
    spec = BASE.replace("app:answer", "app_t:answer") + textwrap.dedent(
        """
        scorers:
          - {name: whole, primary: true, type: python, function: "grading_t:thought"}
          - {name: acc, type: numeric}
        """
    )
    (tmp_path / "t.yaml").write_text(spec)
    manifest = json.loads(cli("run", str(tmp_path / "t.yaml"), "--json").stdout)
    (row,) = gradetrail.read_results(manifest["run_dir"])
    assert row["metrics"] == {"whole": 1.0, "acc": 1.0}, row["scorer"]
    assert row["scorer"]["metrics"]["acc"]["detail"]["extracted"] == "8"
