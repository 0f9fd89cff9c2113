"""Scorers of the user's own passed to run_eval: a function or a Scorer instance, with the
code in the identity hash, and what they return read as a score or a scorer error."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from paths import GSM8K_SPEC

import gradetrail
from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer


def _spec() -> gradetrail.EvalSpec:
    return gradetrail.load_spec(GSM8K_SPEC, ["dataset.limit=40"])


def ends_with_target(item: ScoreInput) -> bool:
    """Right when the response's last line names the target."""
    last = item.response.strip().splitlines()[-1]
    return re.sub(r"[^0-9.\-]", "", last.split(":")[-1]) == item.target


class AsyncLength(Scorer):
    """An async scorer: 1.0 when the response is under a length."""

    def __init__(self, limit: int) -> None:
        self.limit = limit

    async def ascore(self, item: ScoreInput) -> Score:
        return Score(float(len(item.response) < self.limit), {"length": len(item.response)})


def test_a_function_scores_every_row_and_enters_the_identity(tmp_path: Path) -> None:
    """Each row's score is the function's verdict on that row's response and target; the
    run's identity differs from the spec's own scorer's and names the function."""
    own = gradetrail.run_eval(_spec(), results_root=tmp_path / "own")
    mine = gradetrail.run_eval(_spec(), results_root=tmp_path / "mine", scorer=ends_with_target)
    assert own.manifest.identity_hash != mine.manifest.identity_hash
    rows = gradetrail.read_results(mine.run_dir)
    assert len(rows) == 40
    for row in rows:
        item = ScoreInput(None, 1, "", None, row["target"], row["response"])  # type: ignore[arg-type]
        assert row["score"] == float(ends_with_target(item))
    assert 0 < sum(r["score"] for r in rows) < 40  # some right, some wrong: a real verdict
    assert "test_function.ends_with_target@" in mine.manifest.file_hashes["custom_scorer"]


def test_an_async_scorer_instance_is_awaited(tmp_path: Path) -> None:
    """A Scorer subclass that defines ascore is awaited, its detail kept."""
    result = gradetrail.run_eval(_spec(), results_root=tmp_path, scorer=AsyncLength(300))
    for row in gradetrail.read_results(result.run_dir):
        assert row["scorer"]["length"] == len(row["response"])
        assert row["score"] == float(len(row["response"]) < 300)


def test_a_return_that_is_not_a_score_is_a_judge_error_row(tmp_path: Path) -> None:
    """A value outside [0, 1] (or None) is no score: the row says why and leaves the mean."""
    result = gradetrail.run_eval(_spec(), results_root=tmp_path, scorer=lambda item: 7)
    rows = gradetrail.read_results(result.run_dir)
    assert {r["state"] for r in rows} == {"judge_error"}
    assert rows[0]["error"]["reason"] == "bad_score" and "returned 7" in rows[0]["error"]["message"]


def test_a_scorer_class_instead_of_an_instance_is_refused() -> None:
    """Passing the class is a one-line error saying to pass an instance."""
    with pytest.raises(SpecError, match=r"pass an instance, AsyncLength\(\.\.\.\)"):
        gradetrail.plan_run(_spec(), scorer=AsyncLength)  # type: ignore[arg-type]


def test_a_detail_json_cannot_hold_is_kept_as_text_and_the_run_completes(
    tmp_path: Path,
) -> None:
    """A Score whose detail holds an object, NaN, bytes, a tuple or a non-string key is
    written with those as text or lists, the score kept; before, the run crashed writing
    the row."""

    def odd_detail(item: ScoreInput) -> Score:
        return Score(1.0, {"obj": object(), "nan": float("nan"), "raw": b"x", "pair": (1, 2), 3: 4})

    spec = gradetrail.load_spec(GSM8K_SPEC, ["dataset.limit=2"])
    result = gradetrail.run_eval(spec, scorer=odd_detail, results_root=tmp_path)
    rows = gradetrail.read_results(result.run_dir)
    assert [r["score"] for r in rows] == [1.0, 1.0]
    detail = rows[0]["scorer"]
    assert detail["obj"].startswith("<object object at ")
    assert (detail["nan"], detail["raw"], detail["pair"], detail["3"]) == ("nan", "b'x'", [1, 2], 4)
