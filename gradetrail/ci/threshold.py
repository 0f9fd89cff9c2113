"""A threshold without a baseline: does a run's confidence interval clear a minimum score?

The check uses the lower bound of the run's 95% confidence interval (``manifest.score``),
not the mean, so a small run cannot pass on a lucky mean: a 0.82 mean over 40 samples
with a lower bound of 0.70 does not meet ``min_score: 0.8``.
"""

from __future__ import annotations

import math
from dataclasses import asdict, dataclass
from typing import Any

__all__ = ["ThresholdResult", "check_min_score"]


@dataclass(frozen=True)
class ThresholdResult:
    """The verdict of one ``--min-score`` check.

    Attributes:
        passed: ``ci_low >= min_score`` (False when the run has no score).
        min_score: the threshold, on the score scale.
        mean: the run's mean score over samples, or None when nothing scored.
        ci_low, ci_high: the run's 95% confidence interval, or None.
        n: samples with a score.
    """

    passed: bool
    min_score: float
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    n: int

    def message(self) -> str:
        """One line: the verdict, the lower bound against the threshold, the mean and n."""
        if self.ci_low is None:
            return f"FAIL: no sample scored, so no interval to hold against {self.min_score:g}"
        verdict = "PASS" if self.passed else "FAIL"
        relation = ">=" if self.passed else "<"
        return (
            f"{verdict}: 95% CI lower bound {self.ci_low:.4f} {relation} min score "
            f"{self.min_score:g} (mean {self.mean:.4f}, CI [{self.ci_low:.4f}, "
            f"{self.ci_high:.4f}], n {self.n})"
        )

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data."""
        return asdict(self)


def check_min_score(score: Any, min_score: float) -> ThresholdResult:
    """Hold a run's score interval against ``min_score``.

    Args:
        score: the run's score statistics: ``manifest.score`` (a
            :class:`~gradetrail.rundir.manifest.ScoreStats`, its dict form from ``manifest.json``,
            or None when nothing scored).
        min_score: the threshold; the run passes iff its interval's lower bound >= it.

    Raises:
        ValueError: ``min_score`` is not a finite number.
    """
    if not isinstance(min_score, int | float) or not math.isfinite(min_score):
        raise ValueError(f"min_score must be a finite number, got {min_score!r}")
    data = score.model_dump() if hasattr(score, "model_dump") else dict(score or {})
    low, high, mean = data.get("ci_low"), data.get("ci_high"), data.get("mean")
    passed = low is not None and low >= min_score
    return ThresholdResult(passed, float(min_score), mean, low, high, int(data.get("n") or 0))
