"""The math scorer: math-verify decides equivalence; gradetrail records its parses, turns
a response without an answer into a recorded reason and a timeout into a scorer error."""

from __future__ import annotations

import threading

import pytest

from gradetrail.datasets import Sample
from gradetrail.errors import SpecError
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.math import MathScorer
from gradetrail.spec import MathScorerSpec


def math_score(response: str, target: str, **kw: object):  # noqa: ANN201
    item = ScoreInput(Sample(0, "s1", {}, 1), 1, "prompt", None, target, response)
    return MathScorer(MathScorerSpec(type="math", **kw)).score(item)


@pytest.mark.parametrize(
    ("response", "target"),
    [
        ("The answer is $\\frac{1}{2}$", "0.5"),
        ("So $\\boxed{0.5}$.", "\\frac{1}{2}"),
        ("$\\frac{\\sqrt{2}}{2}$", "\\frac{1}{\\sqrt{2}}"),
        ("We get $\\boxed{(1,2]}$", "(1,2]"),
        ("The set is $\\{3,2,1\\}$", "\\{1,2,3\\}"),
        ("$x = 3$", "3"),
        ("$\\boxed{2\\pi}$", "2\\pi"),
    ],
)
def test_equivalent_answers_score_1(response: str, target: str) -> None:
    """Equivalent forms of one value (fractions, roots, intervals, sets) are equal."""
    s = math_score(response, target)
    assert s.value == 1.0 and s.error is None
    assert s.detail["parsed_response"] and s.detail["parsed_target"]


@pytest.mark.parametrize(
    ("response", "target"),
    [
        ("$\\boxed{(1,2)}$", "(1,2]"),  # open vs half-open interval
        ("$\\frac{1}{3}$", "0.33"),
        ("$\\{1,2\\}$", "\\{1,2,3\\}"),
        ("$\\sqrt{3}/2$", "\\frac{1}{\\sqrt{2}}"),
    ],
)
def test_different_answers_score_0(response: str, target: str) -> None:
    """Different values are not equal, and the parses show why."""
    s = math_score(response, target)
    assert s.value == 0.0 and s.detail["parsed_response"]


def test_no_parsable_answer_is_a_recorded_reason() -> None:
    """A response with no mathematics scores 0 with the reason, never silently."""
    s = math_score("I could not solve it.", "\\frac{1}{2}")
    assert s.value == 0.0 and s.detail["parsed_response"] is None
    assert s.detail["reason"] == "no parsable answer in the response"


def test_unparsable_first_target_stops_the_run() -> None:
    """check(): a first target without an expression is a SpecError before any call."""
    scorer = MathScorer(MathScorerSpec(type="math"))
    item = ScoreInput(Sample(0, "s1", {}, 1), 1, "p", None, "", "x")
    with pytest.raises(SpecError, match="finds no expression"):
        scorer.check(item)


def test_timeout_is_a_scorer_error() -> None:
    """A parse that runs past timeout_s is a scorer error row with its reason (math-verify's
    own alarm, in the main thread)."""
    huge = "$" + "+".join(f"x^{{{i}}}" for i in range(20000)) + "$"  # takes far over 1 s
    s = math_score(huge, "1", timeout_s=1)
    assert s.value is None and s.error["kind"] == "scorer_error"
    assert s.error["reason"] == "timeout" and s.detail["timeout_applied"] is True
    assert len(s.error["message"]) <= 200


def test_scoring_off_the_main_thread_works_without_the_alarm() -> None:
    """In a worker thread math-verify's signal alarm cannot be set: the scorer still
    scores, and records that the library's timeout was not applied."""
    out = {}
    thread = threading.Thread(target=lambda: out.update(s=math_score("$\\frac{2}{4}$", "0.5")))
    thread.start()
    thread.join(30)
    assert out["s"].value == 1.0 and out["s"].detail["timeout_applied"] is False
