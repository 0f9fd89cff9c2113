"""The optional ``ci:`` section: how a CI check (the pytest plugin,
:func:`gradetrail.testing.assert_eval`) judges this eval. It decides no number, so it is
not part of the identity hash."""

from __future__ import annotations

from pydantic import Field

from gradetrail.spec.base import _Strict


class CiSpec(_Strict):
    """What a CI check requires of a run of this eval; with neither ``min_score`` nor
    ``baseline`` it requires only a complete run with at least one scored sample."""

    min_score: float | None = Field(
        None,
        gt=0,
        le=1,
        allow_inf_nan=False,
        description="Pass only when the run's 95% CI lower bound (not the mean) is at least "
        "this; a score in (0, 1] (above 1 could never pass, 0 or below always would).",
    )
    baseline: str | None = Field(
        None,
        description="A stored baseline run directory (relative to this file): pass only "
        "when the run is non-inferior to it (the regression gate).",
    )
    margin: float = Field(
        0.02,
        ge=0,
        lt=1,
        allow_inf_nan=False,
        description="The gate's non-inferiority margin, on the score scale (0.02 = 2 points).",
    )
    confidence: float = Field(
        0.95, gt=0, lt=1, description="Two-sided confidence of the gate's interval."
    )
