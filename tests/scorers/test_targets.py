"""A spec without ``target:``: every scorer that compares against the target (exact,
choice, numeric, math) or renders it (a regex pattern, a judge file) refuses the run
before any call; a scorer or template that does not read it runs as before. The refusal
corpus (one line, exit 2, nothing written) is in data/bad_input.yaml (``no-target-*``)."""

from __future__ import annotations

import json
from pathlib import Path

import fake_judges
import pytest
import yaml
from judge_evals import SCRIPTED_JUDGE, run, write_eval

import gradetrail
from gradetrail.datasets import Sample
from gradetrail.errors import SpecError
from gradetrail.prompts.templates import compile_template
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.targets import template_needs_target

APP = 'def answer(request):\n    return "A: " + request.prompt.rsplit("=", 1)[1].strip()\n'
ROWS = [{"id": f"q{i}", "q": f"{i}+{i}", "a": 2 * i} for i in (1, 2, 3)]


def _eval(root: Path, scorer: dict, target: str | None = None) -> Path:
    """An arithmetic eval whose app answers ``A: <a>``; no ``target:`` unless given."""
    (root / "app.py").write_text(APP)
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in ROWS))
    spec = {
        "name": "targets",
        "dataset": {"path": "data.jsonl"},
        "prompt": "What is {{ q }}? = {{ a }}",
        "model": {"provider": "python", "name": "app", "function": "app:answer"},
        "scorer": scorer,
    }
    if target is not None:
        spec["target"] = target
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.parametrize(
    ("source", "needs"),
    [
        ("{{ target }}", True),
        ("A: {{ target | trim }}", True),
        ("{{ target ~ '!' }}", True),
        ("{% if target %}a{% else %}{{ target }}{% endif %}", True),  # read when falsy
        ("{% if target %}{% elif x %}{{ target }}{% endif %}", True),
        ("{{ 'none' if target else target }}", True),
        ("{% if x %}{{ target }}{% endif %}", True),  # a test of another name guards nothing
        ("A: {{ a }}", False),
        ("{{ row.target }}", False),  # a row field, not the spec's target
        ("{% if target %}Reference: {{ target }}{% endif %}", False),
        ("{% if target is not none %}{{ target | trim }}{% endif %}", False),
        ("{{ target if target else 'no reference' }}", False),
        ("{% if x %}{% if target %}{{ target }}{% endif %}{% endif %}", False),
        ("{% set target = 'x' %}{{ target }}", False),
        ("{% for target in xs %}{{ target }}{% endfor %}", False),
    ],
)
def test_a_template_needs_the_target_when_it_reads_it_unguarded(source: str, needs: bool) -> None:
    """A read of target outside a test of it needs one; a guarded read does not."""
    assert template_needs_target(compile_template(source, "t")) is needs


@pytest.mark.parametrize(
    ("scorer", "message"),
    [
        ({"type": "exact"}, "scorer: the exact scorer needs a target"),
        ({"type": "numeric"}, "the numeric scorer needs a target"),
        ({"type": "regex", "pattern": "A: {{ target }}"}, "the pattern reads {{ target }}"),
        ({"type": "choice"}, "the choice scorer needs a target"),
    ],
)
def test_a_scorer_needing_a_target_refuses_a_spec_without_one(
    tmp_path: Path, scorer: dict, message: str
) -> None:
    """SpecError before any call, naming what to add; no run directory is made."""
    spec = gradetrail.load_spec(_eval(tmp_path, scorer))
    with pytest.raises(SpecError, match="add target: ") as info:
        gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    assert message in str(info.value) and "\n" not in str(info.value)
    assert not (tmp_path / "results").exists()


def test_the_math_scorer_refuses_a_missing_target_in_its_check() -> None:
    """math (whose library is an extra) refuses in check(), before it parses anything."""
    from gradetrail.scorers.math import MathScorer
    from gradetrail.spec import MathScorerSpec

    first = ScoreInput(Sample(0, "s", {"q": "x"}, 1), 1, "x", None, None, "")
    with pytest.raises(SpecError, match="the math scorer needs a target"):
        MathScorer(MathScorerSpec(type="math")).check(first)


@pytest.mark.parametrize(
    ("scorer", "target", "mean"),
    [
        ({"type": "regex", "pattern": "A: {{ a }}$"}, None, 1.0),  # no target read
        ({"type": "regex", "pattern": "A: {{ target }}$"}, "{{ a }}", 1.0),
        ({"type": "regex", "pattern": "A: {{ target }}$"}, "{{ a + 1 }}", 0.0),
        ({"type": "exact"}, "A: {{ a }}", 1.0),
        ({"type": "exact"}, "{{ a }}", 0.0),  # the response is "A: 2", never a substring
        ({"type": "numeric", "marker": "A:"}, "{{ a }}", 1.0),
    ],
)
def test_scorers_with_a_target_or_not_reading_one_run_unchanged(
    tmp_path: Path, scorer: dict, target: str | None, mean: float
) -> None:
    """What must not change: scorers given a target, and patterns that never read it."""
    spec = gradetrail.load_spec(_eval(tmp_path, scorer, target))
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results", use_cache=False)
    assert result.manifest.score.mean == pytest.approx(mean)
    assert result.manifest.score.n == 3


def test_a_judge_file_reading_target_refuses_a_spec_without_one(tmp_path: Path) -> None:
    """A judge file reading {{ target }} needs one; the judge is never called."""
    rows = [{"id": "s0", "answer": "a", "script": ["GRADE: C"]}]
    spec = write_eval(tmp_path, rows, judge_text="Reference: {{ target }}\n" + SCRIPTED_JUDGE)
    fake_judges.CALLS.clear()
    with pytest.raises(SpecError, match=r"the judge file reads \{\{ target \}\} and needs a"):
        run(spec, tmp_path / "results")
    assert fake_judges.CALLS == [] and not (tmp_path / "results").exists()


def test_a_judge_file_guarding_target_runs_with_or_without_one(tmp_path: Path) -> None:
    """``{% if target %}`` makes the reference optional: without a target the judge sees
    no reference line; with one it sees the rendered target."""
    text = "{% if target %}Reference: {{ target }}\n{% endif %}" + SCRIPTED_JUDGE
    rows = [{"id": "s0", "answer": "a", "script": ["GRADE: C"]}]
    spec = write_eval(tmp_path, rows, judge_text=text)
    result, out = run(spec, tmp_path / "r1")
    assert result.manifest.score.mean == 1.0
    assert not out[0]["scorer"]["prompt"].startswith("Reference:")
    _, out = run(spec, tmp_path / "r2", "target={{ answer }}!")
    assert out[0]["scorer"]["prompt"].startswith("Reference: a!\n")


def test_a_pairwise_judge_file_reading_target_refuses_a_spec_without_one(
    tmp_path: Path,
) -> None:
    """The pairwise judge file follows the same rule: {{ target }} needs a target."""
    from pairwise_support import ROWS as PAIR_ROWS
    from pairwise_support import baseline_run as _baseline
    from pairwise_support import pairwise_spec as _pairwise

    spec = _pairwise(tmp_path, PAIR_ROWS, _baseline(tmp_path, PAIR_ROWS))
    judge = spec.parent / "judge.j2"
    judge.write_text("Reference: {{ target }}\n" + judge.read_text())
    fake_judges.CALLS.clear()
    with pytest.raises(SpecError, match=r"the judge file reads \{\{ target \}\} and needs a"):
        run(spec, tmp_path / "pairwise-results")
    assert fake_judges.CALLS == []
    _, rows = run(spec, tmp_path / "pairwise-results", "target={{ cand }}")
    assert [r["score"] for r in rows] == [1.0, 0.0, 0.5, 0.5]
