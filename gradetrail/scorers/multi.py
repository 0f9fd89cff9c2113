"""Several scorers a run (``scorers:``): each row records every metric; one is primary.

The primary metric is the row's ``score`` (and its ``state``, ``error`` and ``judge``):
what ``gate``, ``--min-score`` and the summary's headline use by default. Every metric's
value is in the row's ``metrics`` (``{name: value or null}``), and the other metrics'
details and errors under ``scorer.metrics`` (``{name: {"value", "detail", "error"}}``). A
metric that fails on a row is null there, and its error is recorded; the row stays scored
when the primary scored it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, Any

from gradetrail.errors import DatasetError, SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer

if TYPE_CHECKING:
    from collections.abc import Iterable, Mapping

    from gradetrail.executors.calls import Calls

__all__ = ["MultiScorer"]


class MultiScorer(Scorer):
    """Named scorers run on every response; the pipeline scores each in turn (a
    synchronous one under the run's time bound) and :meth:`combine` makes the row's Score.

    Args:
        scorers: ``(name, scorer)`` in the spec's order, names unique.
        primary: the primary metric's name (one of ``scorers``).

    Raises:
        ValueError: ``primary`` names none of the scorers.
    """

    def __init__(self, scorers: list[tuple[str, Scorer]], primary: str) -> None:
        if primary not in {name for name, _ in scorers}:
            raise ValueError(f"primary metric {primary!r} is none of the scorers")
        self.scorers = scorers
        self.primary = primary
        self.wants_meta = any(s.wants_meta for _, s in scorers)
        self.calls_models = any(s.calls_models for _, s in scorers)
        self.reads_target = any(s.reads_target for _, s in scorers)

    def combine(self, scores: list[tuple[str, Score]]) -> Score:
        """The row's Score: the primary's value, detail, error and judge record, with every
        metric's value in ``metrics`` and the others' details under ``detail.metrics``."""
        by_name = dict(scores)
        main = by_name[self.primary]
        others = {
            name: {"value": s.value, "detail": s.detail, "error": s.error}
            for name, s in scores
            if name != self.primary
        }
        detail = {**main.detail, "metrics": others}
        metrics = {name: (s.value if s.error is None else None) for name, s in scores}
        return Score(main.value, detail, main.error, main.judge, metrics)

    def score(self, item: ScoreInput) -> Score:
        """Every scorer in turn, synchronously (the pipeline instead scores each one with
        the run's time bound); for use outside a run."""
        return self.combine([(name, s.score(item)) for name, s in self.scorers])

    def check(self, first: ScoreInput) -> None:
        """Each scorer's check, its error naming the metric.

        Raises:
            SpecError: from a scorer's check, prefixed ``scorers[NAME]``.
        """
        for name, scorer in self.scorers:
            try:
                scorer.check(first)
            except SpecError as exc:
                raise SpecError(f"scorers[{name}]: {exc}") from None

    def check_row(self, item: ScoreInput) -> None:
        """Each scorer's row check, its error naming the metric.

        Raises:
            SpecError, DatasetError: from a scorer, prefixed ``scorers[NAME]``.
        """
        for name, scorer in self.scorers:
            try:
                scorer.check_row(item)
            except (SpecError, DatasetError) as exc:
                raise type(exc)(f"scorers[{name}]: {exc}") from None

    def check_dataset(self, dataset_hash: str) -> None:
        """Each scorer's dataset check, its error naming the metric.

        Raises:
            SpecError: from a scorer, prefixed ``scorers[NAME]``.
        """
        for name, scorer in self.scorers:
            try:
                scorer.check_dataset(dataset_hash)
            except SpecError as exc:
                raise SpecError(f"scorers[{name}]: {exc}") from None

    def identity(self) -> dict[str, Any]:
        """Every scorer's identity material, keyed ``NAME.key``."""
        return {
            f"{name}.{key}": value
            for name, scorer in self.scorers
            for key, value in scorer.identity().items()
        }

    async def bind(self, calls: Calls) -> None:
        """Bind every scorer to the run's calls (cache, executor, log)."""
        for _, scorer in self.scorers:
            await scorer.bind(calls)

    async def aclose(self) -> None:
        """Close every scorer."""
        for _, scorer in self.scorers:
            await scorer.aclose()


def row_metrics(row: Mapping[str, Any]) -> Mapping[str, Any]:
    """A result row's ``metrics`` object (name -> value), or an empty one when the row
    has none or holds something else there (an edited row's ``"metrics": [1]``)."""
    metrics = row.get("metrics")
    return metrics if isinstance(metrics, dict) else {}


def check_metric(names: Iterable[str], metric: str, label: str) -> None:
    """Refuse ``metric`` when the run's rows name no metric of that name.

    Args:
        names: the metric names the run's rows hold, in first-seen order.
        metric: the metric asked for (``--metric``).
        label: ``baseline`` or ``candidate``, for the message.

    Raises:
        ValueError: naming the metrics the run has.
    """
    names = list(names)
    if metric not in names:
        have = ", ".join(names) or "none: it was run with one scorer"
        raise ValueError(
            f"the {label} run has no metric {metric!r} (its metrics: {have}); name one of "
            "them, or leave out --metric to gate the primary score"
        )


def metric_rows(rows: list[dict[str, Any]], metric: str, label: str) -> list[dict[str, Any]]:
    """A run's rows with ``metric``'s value as each row's score (what ``gate --metric``
    gates): a row whose metric is null (the metric failed there, or the row is an error
    row) is an error row of that metric.

    Args:
        rows: the run's ``results.jsonl`` rows.
        metric: a metric name of the run's ``scorers:``.
        label: ``baseline`` or ``candidate``, for the message.

    Raises:
        ValueError: the run records no metrics, or none of that name (naming those it has).
    """
    names: dict[str, None] = {}
    for row in rows:
        names.update(dict.fromkeys(row_metrics(row)))
    check_metric(names, metric, label)
    out = []
    for row in rows:
        value = row_metrics(row).get(metric)
        state = "scored" if value is not None else "metric_error"
        out.append({**row, "score": value, "state": state})
    return out
