"""The ``numeric`` scorer: extract the answer number and compare it numerically.

Extraction: the first number after the last occurrence of ``marker`` when one is given
and present, else the last number in the response. Tolerated: a leading ``$``, thousands
separators (``1,234``), a trailing period (``18.``), ``18.0`` vs ``18``, a sign (``-``,
``+`` or the Unicode minus). Comparison: ``math.isclose`` with the spec's ``abs_tol`` and
``rel_tol`` (both 0 by default: exact numeric equality).
"""

from __future__ import annotations

import math
import re

from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.spec import NumericScorerSpec

__all__ = ["NumericScorer", "extract_number", "parse_number"]

_NUMBER = re.compile(
    r"(?<![\w.])(?P<sign>[-+\u2212])?\s?\$?\s?"
    r"(?P<num>\d{1,3}(?:,\d{3})+(?:\.\d+)?|\d+(?:\.\d+)?|\.\d+)"
)


def parse_number(match: re.Match[str]) -> float:
    """The value of a :data:`_NUMBER` match (commas dropped, sign kept)."""
    value = float(match.group("num").replace(",", ""))
    return -value if match.group("sign") in ("-", "\u2212") else value


def extract_number(text: str, marker: str | None = None) -> tuple[float | None, str | None, bool]:
    """Find the answer number in ``text``.

    Returns:
        ``(value, matched_text, marker_found)``; value and matched text are None when
        there is no number.
    """
    marker_found = False
    if marker:
        pos = text.rfind(marker)
        if pos >= 0:
            marker_found = True
            m = _NUMBER.search(text, pos + len(marker))
            if m:
                return parse_number(m), m.group(0).strip(), True
    last = None
    for last in _NUMBER.finditer(text):  # noqa: B007 - we want the final match
        pass
    if last is None:
        return None, None, marker_found
    return parse_number(last), last.group(0).strip(), marker_found


class NumericScorer(Scorer):
    """1.0 when the extracted number equals the target's number within tolerance."""

    def __init__(self, spec: NumericScorerSpec) -> None:
        self.spec = spec

    def check(self, first: ScoreInput) -> None:
        """The first sample's target must hold a number.

        Raises:
            SpecError: no target template, or a first target with no number in it.
        """
        if first.target is None:
            raise SpecError("scorer: the numeric scorer needs a target; add target: '{{ ... }}'")
        if extract_number(first.target)[0] is None:
            raise SpecError(
                f"target: the first sample's target {first.target[:80]!r} has no number; the "
                "numeric scorer compares numbers (use exact or regex for text targets)"
            )

    def score(self, item: ScoreInput) -> Score:
        """Extract and compare; the detail records both extracted numbers and their text."""
        target_value, target_text, _ = extract_number(item.target or "")
        value, text, marker_found = extract_number(item.response, self.spec.marker)
        detail = {
            "extracted": text,
            "extracted_value": value,
            "target": target_text if target_text is not None else item.target,
            "target_value": target_value,
            "marker_found": marker_found if self.spec.marker else None,
        }
        if target_value is None:
            detail["error"] = "the target has no number"
            return Score(0.0, detail)
        if value is None:
            return Score(0.0, detail)
        ok = math.isclose(value, target_value, rel_tol=self.spec.rel_tol, abs_tol=self.spec.abs_tol)
        return Score(float(ok), detail)
