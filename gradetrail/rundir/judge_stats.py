"""Run totals of judge calls (``manifest.judge``), summed from each row's
:class:`~gradetrail.rundir.results.JudgeRecord` so progress, the summary and the manifest agree.

Judge errors are counted by ``error.reason`` (``unparseable``, ``truncated``,
``refusal``, ``provider_error``, ``template_error``, ``missing_baseline``,
``baseline_error``), apart from the rows that were scored; pairwise outcomes are counted
as win, tie, loss and split (the two orders disagreed). Under ``parse.format: arena-hard``
each scored row's ``scorer.battles`` and its score (the share it won, a tie half) are
pooled over the run: ``battles`` and ``battles_won``, whose ratio is Arena-Hard-Auto's
leaderboard score (its ``show_result.py`` averages every battle of every question, so a
question whose verdicts were strong counts 3 times as much).
"""

from __future__ import annotations

from collections import Counter

from pydantic import BaseModel, ConfigDict, Field

from gradetrail._util.exactsum import ExactSum
from gradetrail.rundir.results import Row

__all__ = ["JudgeStats", "JudgeTally"]


class JudgeStats(BaseModel):
    """What the judge did over a run."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

    rows: int = Field(description="Rows the judge scorer handled (scored or judge_error).")
    requests: int = Field(description="Judge requests (rows x samples x orders).")
    calls: int = Field(description="Requests sent to the judge this run (cache misses).")
    attempts: int = Field(description="Attempts over those calls, retries included.")
    cache_hits: int = Field(description="Requests answered from gradetrail's cache.")
    verdicts: int = Field(description="Replies a verdict was read from.")
    truncated: int = Field(description="Replies that stopped at the judge's max_tokens.")
    input_tokens: int = Field(description="Judge prompt tokens (cache hits included).")
    output_tokens: int = Field(description="Judge completion tokens (cache hits included).")
    cost_usd: float | None = Field(
        description="USD paid for judge calls this run, over the rows whose judge cost is "
        "known (see unpriced_rows)."
    )
    unpriced_rows: int = Field(
        0,
        description="Rows whose judge calls this run were paid at no known price (the judge "
        "model has no price): cost_usd leaves them out, so the judge's cost is unknown.",
    )
    cost_usd_cached: float | None = Field(description="USD the judge's cache hits once cost.")
    errors: dict[str, int] = Field(description="judge_error rows per reason.")
    outcomes: dict[str, int] = Field(
        description="Pairwise rows per outcome: win, tie, loss, split; empty for a judge."
    )
    battles: int | None = Field(
        None,
        description="Arena-Hard battles over the scored rows that count in the mean (each "
        "row's scorer.battles: a strong verdict 3, a weak one or a tie 1); None when no "
        "row counts battles (another format, or reduce other than mean).",
    )
    battles_won: float | None = Field(
        None,
        description="Of `battles`, those the candidate won (a tie half): battles_won / "
        "battles is the pooled win rate Arena-Hard-Auto's leaderboard reports, where the "
        "run's mean score weighs each sample once.",
    )


class JudgeTally:
    """Sums the judge records of rows as they arrive."""

    def __init__(self) -> None:
        self.rows = 0
        self.totals: Counter[str] = Counter()
        # exact sums (the same float whatever order the rows landed in); None: unpriced
        self._paid: ExactSum | None = None
        self._paid_cached: ExactSum | None = None
        self.errors: Counter[str] = Counter()
        self.outcomes: Counter[str] = Counter()
        self.battles = 0
        self._won = ExactSum()

    @property
    def cost_usd(self) -> float | None:
        """USD paid for judge calls this run (None while none was priced)."""
        return None if self._paid is None else self._paid.value

    @property
    def cost_usd_cached(self) -> float | None:
        """USD the judge's cache hits once cost (None while none was priced)."""
        return None if self._paid_cached is None else self._paid_cached.value

    def add(self, row: Row, score: float | None = None) -> None:
        """Count one row's judge record (rows without one are ignored); ``score``, the
        row's score as the run's mean counts it (None: not counted), pools its Arena-Hard
        battles."""
        record = row["judge"]
        if record is None:
            return
        self.rows += 1
        for name in _COUNTS:
            self.totals[name] += getattr(record, name)
        if record.cost_usd is None and record.calls and record.input_tokens + record.output_tokens:
            self.totals["unpriced_rows"] += 1
        if record.cost_usd is not None:
            if self._paid is None:
                self._paid = ExactSum()
            self._paid.add(record.cost_usd)
        if record.cost_usd_cached is not None:
            if self._paid_cached is None:
                self._paid_cached = ExactSum()
            self._paid_cached.add(record.cost_usd_cached)
        if row["state"] == "judge_error":
            self.errors[str((row["error"] or {}).get("reason", "unknown"))] += 1
        elif record.outcome is not None:
            self.outcomes[record.outcome] += 1
        battles = (row.get("scorer") or {}).get("battles")
        if score is not None and type(battles) is int and battles > 0:  # not a bool
            self.battles += battles
            self._won.add(score * battles)

    def stats(self) -> JudgeStats | None:
        """The totals, or None when no row had a judge."""
        if not self.rows:
            return None
        return JudgeStats(
            rows=self.rows,
            **{name: self.totals[name] for name in _COUNTS},
            cost_usd=self.cost_usd,
            cost_usd_cached=self.cost_usd_cached,
            unpriced_rows=self.totals["unpriced_rows"],
            errors=dict(sorted(self.errors.items())),
            outcomes={k: self.outcomes[k] for k in _OUTCOMES if k in self.outcomes},
            battles=self.battles or None,
            battles_won=self._won.value if self.battles else None,
        )


_COUNTS = (
    "requests",
    "calls",
    "attempts",
    "cache_hits",
    "verdicts",
    "truncated",
    "input_tokens",
    "output_tokens",
)
_OUTCOMES = ("win", "tie", "loss", "split")
