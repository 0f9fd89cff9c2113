"""manifest.judge's Arena-Hard battles: pooled over the rows the mean counts."""

from __future__ import annotations

from typing import Any

from gradetrail.rundir.judge_stats import JudgeTally
from gradetrail.rundir.results import JudgeRecord


def _row(score: float | None, battles: Any, state: str = "scored") -> dict[str, Any]:
    return {
        "judge": JudgeRecord(requests=2, outcome="split" if state == "scored" else None),
        "state": state,
        "error": None if state == "scored" else {"reason": "unparseable"},
        "scorer": {"battles": battles},
    }


def test_battles_pool_over_the_counted_rows_and_only_integers_count() -> None:
    """3 of 4 and 1 of 2 battles: 4 of 6; a row the mean does not count (score None), a
    bool and a float battle count add nothing (before, true counted as one battle)."""
    tally = JudgeTally()
    tally.add(_row(0.75, 4), 0.75)
    tally.add(_row(0.5, 2), 0.5)
    tally.add(_row(None, 4, state="judge_error"), None)
    tally.add(_row(1.0, True), 1.0)
    tally.add(_row(1.0, 2.0), 1.0)
    stats = tally.stats()
    assert stats is not None
    assert (stats.battles, stats.battles_won) == (6, 4.0)


def test_no_battles_leave_the_fields_empty() -> None:
    """A judge without battles (another format): battles and battles_won are None."""
    tally = JudgeTally()
    tally.add(_row(1.0, None), 1.0)
    stats = tally.stats()
    assert stats is not None and stats.battles is None and stats.battles_won is None
