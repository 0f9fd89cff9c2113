"""The ``numeric`` scorer: extract the answer number and compare it numerically.

Extraction (:mod:`gradetrail.scorers.numbers`): a ``\\boxed{...}`` / ``\\fbox{...}``
answer first, else the first number after the last ``marker`` (an expression's result
when one follows it: ``A: 6 * 3 = 18`` is 18), else the last number; two different
numbers offered as alternatives (``18 or 19``) are no answer. Fractions (``3/4``,
``\\frac{3}{4}``), scientific notation (``1e3``, ``3×10^5``), powers (``10^6``), scale
words (``2.5 million``), percentages under the spec's ``percent`` policy, thousands
separators, currency signs, digits of any script, numbers touching non-ASCII letters are
read; a number past the float range is ±inf, never an error. The target is read the same
way. Comparison: ``math.isclose`` with the spec's ``abs_tol`` and ``rel_tol`` (both 0 by
default: exact numeric equality); when both numbers are integers a float may not hold
exactly (16 or more digits: ``9007199254740993`` is not ``9007199254740992``), their
exact integers are compared instead (with a tolerance, in exact rational arithmetic),
and the detail keeps the float values. Two numbers both past the float range (±inf, such
as ``1e400`` and ``2e400``) cannot be told apart: the row scores 0 and says so. Every
row records what was extracted and by which rule; a later row whose target has no number
is a scorer error row (the dataset's fault, left out of the mean), never a 0.
"""

from __future__ import annotations

import math
import sys
from fractions import Fraction
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.numbers import Extraction, PercentPolicy, find_answer
from gradetrail.spec import NumericScorerSpec

__all__ = ["NumericScorer", "extract_number"]


def extract_number(
    text: str, marker: str | None = None, percent: PercentPolicy = "as_number"
) -> tuple[float | None, str | None, bool]:
    """``(value, matched_text, marker_found)`` of :func:`~gradetrail.scorers.numbers.
    find_answer`; value and text are None when there is no number."""
    found = find_answer(text, marker, percent)
    return found.value, found.text, bool(found.marker_found)


class NumericScorer(Scorer):
    """1.0 when the extracted number equals the target's number within tolerance."""

    reads_target = True

    def __init__(self, spec: NumericScorerSpec) -> None:
        self.spec = spec

    def check(self, first: ScoreInput) -> None:
        """The first sample's target must hold a number.

        Raises:
            SpecError: no target template, or a first target with no number in it.
        """
        if first.target is None:
            raise SpecError("scorer: the numeric scorer needs a target; add target: '{{ ... }}'")
        if find_answer(first.target, percent=self.spec.percent).value is None:
            raise SpecError(
                f"target: the first sample's target {first.target[:80]!r} has no number; the "
                "numeric scorer compares numbers (use exact or regex for text targets)"
            )

    def score(self, item: ScoreInput) -> Score:
        """Extract and compare; the detail records both numbers, their text, the rule that
        found the response's (``boxed``, ``marker``, ``last``) and whether each was a
        percentage."""
        target = find_answer(item.target or "", percent=self.spec.percent)
        got = find_answer(item.response, self.spec.marker, self.spec.percent)
        detail: dict[str, Any] = {
            "extracted": got.text,
            "extracted_value": got.value,
            "rule": got.rule,
            "target": target.text if target.text is not None else item.target,
            "target_value": target.value,
            "marker_found": got.marker_found,
        }
        if got.percent or target.percent:
            detail["percent"] = {"response": got.percent, "target": target.percent}
        if target.value is None:  # the dataset's fault, not the model's: no score
            message = (
                f"the target {(item.target or '')[:80]!r} has no number ({target.reason}): fix "
                "the dataset row, or score text targets with exact or regex"
            )
            return scorer_error(detail, "target_without_number", message)
        if got.value is None:
            detail["reason"] = got.reason
            return Score(0.0, detail)
        if self.spec.percent == "strict" and got.percent != target.percent:
            detail["reason"] = _strict_reason(got, target)
            return Score(0.0, detail)
        a = got.exact if got.exact is not None else got.value
        b = target.exact if target.exact is not None else target.value
        if _past_float(a) and _past_float(b) and not (isinstance(a, int) and isinstance(b, int)):
            detail["reason"] = (
                "both numbers are past the float range (±inf): they cannot be compared"
            )
            return Score(0.0, detail)
        if isinstance(a, int) and isinstance(b, int):
            detail["compared"] = "exact integers"
        return Score(float(_close(a, b, self.spec.rel_tol, self.spec.abs_tol)), detail)


def _past_float(x: float | int) -> bool:
    """Past the float range: an infinite float, or an integer beyond the largest float."""
    return math.isinf(x) if isinstance(x, float) else abs(x) > sys.float_info.max


def _close(a: float | int, b: float | int, rel_tol: float, abs_tol: float) -> bool:
    """``math.isclose(a, b)``, exact for integers (an int is compared with a float by
    value, as Python compares them; with a tolerance, in exact rational arithmetic).
    Without a tolerance (the default) that is ``a == b``, which is what ``math.isclose``
    gives two floats then."""
    if rel_tol == 0 and abs_tol == 0:
        return a == b
    if isinstance(a, float) and isinstance(b, float):
        return math.isclose(a, b, rel_tol=rel_tol, abs_tol=abs_tol)
    if any(isinstance(x, float) and not math.isfinite(x) for x in (a, b)):
        return False  # an integer is never within a tolerance of ±inf
    fa, fb = Fraction(a), Fraction(b)
    return abs(fa - fb) <= max(Fraction(rel_tol) * max(abs(fa), abs(fb)), Fraction(abs_tol))


def _strict_reason(got: Extraction, target: Extraction) -> str:
    if got.percent:
        return "percent: strict: the response gives a percentage, the target a plain number"
    return "percent: strict: the target is a percentage, the response a plain number"
