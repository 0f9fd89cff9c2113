"""A python app hands back more than text: metadata, metrics, its own transcript and file
artifacts. Here the app answers 30 GSM8K questions with the recorded 175b_verification
solutions and reports each solution's words and lines, its two steps, and two files; the
scorer sees all of it, the rows store it (artifacts as files under the run directory, by
path and hash), the manifest averages the metrics, and a warm re-run restores it all from
the cache. Rows of runs without app fields keep their bytes (no ``app`` key)."""

from __future__ import annotations

import csv
import hashlib
import json
import os
from pathlib import Path

import pytest
import yaml
from paths import EXAMPLES
from starlette.testclient import TestClient

import gradetrail
from gradetrail import Score, ScoreInput
from gradetrail.analysis.export import export_run
from gradetrail.errors import RunError
from gradetrail.rundir.artifacts import Artifacts
from gradetrail.rundir.layout import RunDir
from gradetrail.view import create_app

GSM8K = EXAMPLES / "data" / "gsm8k"
N = 30

APP = f"""
import json
from gradetrail import Response

SOLUTIONS = {{}}
with open({str(GSM8K / "example_model_solutions.jsonl")!r}, encoding="utf-8") as f:
    for line in f:
        row = json.loads(line)
        SOLUTIONS[row["question"]] = row["175b_verification"]["solution"]


def answer(request, row):
    text = SOLUTIONS[row["question"]]
    bad = row.get("bad")
    return Response(
        text,
        served_model="recorded-app",
        metadata={{"source": "175b_verification", "question_chars": len(row["question"])}},
        metrics={{"words": len(text.split()), "lines": text.count("\\n") + 1}},
        transcript=[{{"step": "lookup", "found": True}}, {{"step": "answer", "chars": len(text)}}],
        artifacts={{"solution.txt": text, "question.bin": row["question"].encode()}}
        if not bad
        else {{bad: "x"}},
    )
"""


def _recorded() -> list[str]:
    rows = [json.loads(x) for x in (GSM8K / "example_model_solutions.jsonl").open()]
    return [r["175b_verification"]["solution"] for r in rows[:N]]


def _spec(tmp_path: Path, data: Path | None = None) -> gradetrail.EvalSpec:
    (tmp_path / "recorded_app.py").write_text(APP)
    spec = {
        "name": "app-fields",
        "dataset": {"path": str(data or GSM8K / "test.jsonl"), "limit": N},
        "prompt": "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {"provider": "python", "function": "recorded_app:answer", "name": "app"},
        "scorer": {"type": "numeric", "marker": "A:"},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return gradetrail.load_spec(path)


def score(item: ScoreInput) -> Score:
    """Correct when the app's solution.txt artifact holds the answer it gave, and the
    number of words it reported is the response's."""
    app = item.app or {}
    same = app["artifacts"]["solution.txt"] == item.response
    words = app["metrics"]["words"] == len(item.response.split())
    return Score(float(same and words), {"steps": len(app["transcript"]), **app["metadata"]})


def test_the_app_fields_reach_the_scorer_the_rows_the_files_and_the_summary(
    tmp_path: Path,
) -> None:
    spec = _spec(tmp_path)
    cache = tmp_path / "cache.sqlite"
    result = gradetrail.run_eval(spec, results_root=tmp_path / "r", cache_path=cache, scorer=score)
    rows = gradetrail.read_results(result.run_dir)
    solutions = _recorded()
    assert [r["score"] for r in rows] == [1.0] * N  # the scorer saw every field
    question = json.loads((GSM8K / "test.jsonl").open().readline())["question"]
    assert rows[0]["scorer"] == {
        "steps": 2,
        "source": "175b_verification",
        "question_chars": len(question),
    }
    for row, text in zip(rows, solutions, strict=True):
        app = row["app"]
        assert app["metrics"] == {"words": len(text.split()), "lines": text.count("\n") + 1}
        assert app["transcript"][1] == {"step": "answer", "chars": len(text)}
        refs = {a["name"]: a for a in app["artifacts"]}
        written = result.run_dir / refs["solution.txt"]["path"]
        assert written.read_text() == text
        assert refs["solution.txt"]["sha256"] == hashlib.sha256(text.encode()).hexdigest()
        assert refs["solution.txt"]["bytes"] == len(text.encode())
        assert refs["solution.txt"]["path"].startswith(f"artifacts/{row['sample_id']}-")
        assert refs["solution.txt"]["path"].endswith("/1/solution.txt")
    words = [len(t.split()) for t in solutions]
    exported = export_run(result.run_dir, "csv", str(tmp_path / "rows.csv"))
    assert "app" not in exported.columns  # flattened, as scorer and judge are
    with (tmp_path / "rows.csv").open() as f:
        table = list(csv.DictReader(f))
    assert [int(r["app.metrics.words"]) for r in table] == words
    assert {r["app.metadata.source"] for r in table} == {"175b_verification"}
    assert result.manifest.app_metrics["words"] == {
        "rows": N,
        "mean": pytest.approx(sum(words) / N),
    }

    # the viewer's sample page shows them
    client = TestClient(create_app(tmp_path / "r"), base_url="http://127.0.0.1")
    page = client.get(f"/runs/{result.run_dir.name}/sample?id={rows[0]['sample_id']}").text
    assert "what the app handed back" in page
    assert "question_chars" in page and rows[0]["app"]["artifacts"][0]["path"] in page

    # warm: every field from the cache, the files written again
    first = (result.run_dir / "results.jsonl").read_bytes()
    for path in (result.run_dir / "artifacts").rglob("*.txt"):
        path.unlink()
    warm = gradetrail.run_eval(spec, results_root=tmp_path / "r", cache_path=cache, scorer=score)
    warm_rows = gradetrail.read_results(warm.run_dir)
    assert all(r["cached"] for r in warm_rows)
    assert [r["app"] for r in warm_rows] == [r["app"] for r in rows]
    assert len(list((warm.run_dir / "artifacts").rglob("solution.txt"))) == N
    assert first.replace(b'"cached":false', b"").count(b'"app"') == N


def test_rows_without_app_fields_have_no_app_key(tmp_path: Path) -> None:
    spec = gradetrail.load_spec(EXAMPLES / "gsm8k.yaml", ["dataset.limit=20"])
    result = gradetrail.run_eval(spec, results_root=tmp_path, use_cache=False)
    assert b'"app"' not in (result.run_dir / "results.jsonl").read_bytes()
    assert result.manifest.app_metrics is None
    assert not (result.run_dir / "artifacts").exists()


@pytest.mark.parametrize("bad", ["../escape.txt", ".hidden", "a/b"])
def test_an_artifact_name_that_is_not_a_plain_file_name_is_an_error_row(
    tmp_path: Path, bad: str
) -> None:
    rows = [json.loads(x) for x in (GSM8K / "test.jsonl").open()][:N]
    rows[2]["bad"] = bad
    data = tmp_path / "data.jsonl"
    data.write_text("".join(json.dumps(r) + "\n" for r in rows))
    result = gradetrail.run_eval(
        _spec(tmp_path, data), results_root=tmp_path / "r", use_cache=False
    )
    out = gradetrail.read_results(result.run_dir)
    assert [r["state"] for r in out].count("provider_error") == 1
    assert out[2]["error"]["error_type"] == "function_error"
    assert "must be a plain file name" in out[2]["error"]["message"]
    assert not (tmp_path / "escape.txt").exists() and not (result.run_dir / "escape.txt").exists()


def test_artifacts_refuse_a_planted_symlink(tmp_path: Path) -> None:
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with RunDir.create(tmp_path / "run") as run_dir:
        os.symlink(elsewhere, tmp_path / "run" / "artifacts")
        with pytest.raises(RunError, match="is a symlink or not a directory"):
            Artifacts(run_dir).save("q1", 1, {"a.txt": "x"})
    assert list(elsewhere.iterdir()) == []


GRADING = """
from gradetrail import Score


def score(sample):
    words = sample.app["metrics"]["words"]
    return Score(float(words == len(sample.response.split())), {"words": words})
"""


def test_a_python_scorer_named_in_the_spec_sees_the_app_fields(tmp_path: Path) -> None:
    """`scorer: {type: python}` reads what the app handed back as `sample.app`, as a scorer
    passed to run_eval does (before: ScoredSample had no `app`, every row a scorer error
    "AttributeError: 'ScoredSample' object has no attribute 'app'")."""
    spec = _spec(tmp_path)
    (tmp_path / "app_grading.py").write_text(GRADING)
    raw = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    raw["dataset"]["limit"] = 3
    raw["scorer"] = {"type": "python", "function": "app_grading:score"}
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(raw))
    spec = gradetrail.load_spec(tmp_path / "spec.yaml")
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "r", cache_path=tmp_path / "cache.sqlite"
    )
    rows = gradetrail.read_results(result.run_dir)
    words = [len(text.split()) for text in _recorded()[:3]]
    assert [r["score"] for r in rows] == [1.0, 1.0, 1.0]
    assert [r["scorer"]["words"] for r in rows] == words
