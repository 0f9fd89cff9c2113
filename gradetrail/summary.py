"""Running totals of a run (counts per state, tokens, cost, cache hits) and its score
statistics, fed one result row at a time so progress and the summary share one tally."""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field
from typing import Any

from gradetrail.agreement import AgreementStats, AgreementTally
from gradetrail.conversation import ConversationStats, ConversationTally
from gradetrail.datasets import Sample
from gradetrail.judge_stats import JudgeStats, JudgeTally
from gradetrail.manifest import ScoreStats
from gradetrail.reducers import ReducerName, reduce_scores
from gradetrail.results import SampleResult, SampleScore
from gradetrail.stats import summarize

__all__ = ["Tally"]


_NO_ROW = object()
_VARYING = re.compile(r"'[^']*'|\"[^\"]*\"|\d+(?:\.\d+)?")


def _shape(message: str) -> str:
    """A message with its quoted values and numbers blanked: messages that differ only in
    the sample they name have one shape, and count as one reason."""
    return _VARYING.sub("#", message)[:200]


def _scored(epochs: list[Any]) -> list[float]:
    """The scores of a sample's scored epochs."""
    return [v for v in epochs if v is not None and v is not _NO_ROW]


def _finite(x: float) -> float | None:
    return None if x is None or math.isnan(x) else x


@dataclass
class Tally:
    """Totals over the rows seen so far.

    Attributes:
        rows: rows seen.
        counts: rows per state.
        cache_hits: rows whose response came from the cache.
        truncated: rows whose response stopped at max_tokens.
        input_tokens, output_tokens, cached_input_tokens: token totals (cache hits included);
            input counts prompt-cache reads, of which ``cached_input_tokens`` were read.
        cost_usd: USD paid this run (rows not from the cache: 0.0 when every priced row
            was a cache hit), None while nothing is priced.
        cost_usd_cached: USD the cache hits once cost.
        served_models: served model -> rows.
        reducer: how a sample's scored epochs become its score (see
            :mod:`gradetrail.reducers`).
        pass_k: the k of reducer ``pass_at_k``.
        judge: judge calls, tokens, cost, errors per reason (rows with a judge record).
        agreement: (label, score) pairs of labelled rows, for judge agreement.
        conversations: turns and tool calls of the rows with a transcript.
    """

    rows: int = 0
    counts: Counter[str] = field(default_factory=Counter)
    cache_hits: int = 0
    truncated: int = 0
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float | None = None
    cost_usd_cached: float | None = None
    served_models: Counter[str] = field(default_factory=Counter)
    reducer: ReducerName = "mean"
    pass_k: int = 1
    judge: JudgeTally = field(default_factory=JudgeTally)
    agreement: AgreementTally = field(default_factory=AgreementTally)
    conversations: ConversationTally = field(default_factory=ConversationTally)
    #: (state, error kind, provider error type, status, message shape) -> [rows, first
    #: message]
    error_kinds: dict[tuple[str, str, str | None, int | None, str], list[Any]] = field(
        default_factory=dict
    )
    #: sample id -> [epoch 1's score, epoch 2's, ...]: None for an error row, _NO_ROW
    #: for an epoch with no row yet (a list: a third of a dict's memory per sample)
    _epochs: dict[str, list[Any]] = field(default_factory=dict)
    _clusters: dict[str, str | None] = field(default_factory=dict)

    def add(self, row: SampleResult) -> None:
        """Count one row."""
        self.rows += 1
        self.counts[row.state] += 1
        self.cache_hits += row.cached
        self.truncated += row.truncated
        self.input_tokens += row.input_tokens
        self.output_tokens += row.output_tokens
        self.cached_input_tokens += row.cached_input_tokens
        if row.served_model:
            self.served_models[row.served_model] += 1
        if row.cost_usd is not None:
            if row.cached:
                self.cost_usd_cached = (self.cost_usd_cached or 0.0) + row.cost_usd
                self.cost_usd = self.cost_usd or 0.0  # priced, and this run paid nothing
            else:
                self.cost_usd = (self.cost_usd or 0.0) + row.cost_usd
        epochs = self._epochs.get(row.sample_id)
        if epochs is None:
            epochs = self._epochs[row.sample_id] = []
            self._clusters[row.sample_id] = row.cluster
        if len(epochs) < row.epoch:
            epochs.extend([_NO_ROW] * (row.epoch - len(epochs)))
        epochs[row.epoch - 1] = row.score if row.state == "scored" else None
        if row.error is not None:
            self._count_error(row)
        if row.judge is not None:
            self.judge.add(row)
        self.agreement.add(row.state, row.label, row.score, row.sample_id)
        self.conversations.add(row.transcript)

    def conversation_stats(self) -> ConversationStats | None:
        """Turns, tool calls, tool errors and stop reasons of the conversation rows, or
        None when there were none."""
        return self.conversations.stats()

    def _count_error(self, row: SampleResult) -> None:
        error = row.error or {}
        kind = str(error.get("kind") or error.get("reason") or "error")
        message = str(error.get("message") or "")
        # one entry a reason: the same kind with another message (digits and quoted
        # values aside, which name the sample) is another reason, counted apart
        key = (row.state, kind, error.get("error_type"), error.get("status"), _shape(message))
        entry = self.error_kinds.get(key)
        if entry is None:
            self.error_kinds[key] = [1, message]
        else:
            entry[0] += 1

    def top_errors(self, limit: int = 3) -> list[dict[str, Any]]:
        """The most frequent kinds of error rows, most first: ``state``, ``kind``,
        ``error_type``, ``status``, ``rows`` and the first row's ``message``."""
        ranked = sorted(self.error_kinds.items(), key=lambda item: -item[1][0])[:limit]
        return [
            {
                "state": state,
                "kind": kind,
                "error_type": error_type,
                "status": status,
                "rows": rows,
                "message": message,
            }
            for (state, kind, error_type, status, _), (rows, message) in ranked
        ]

    @property
    def errors(self) -> int:
        """Rows in an error state."""
        return self.rows - self.counts["scored"]

    def reduced(self) -> dict[str, float | None]:
        """Each sample's score: its scored epochs reduced by :attr:`reducer` (None when
        there is nothing to reduce), in the order samples were first seen."""
        return {
            sample_id: reduce_scores(_scored(epochs), self.reducer, self.pass_k)
            for sample_id, epochs in self._epochs.items()
        }

    def sample_scores(self, samples: Iterable[Sample]) -> Iterator[SampleScore]:
        """The ``samples.jsonl`` lines: one per sample with at least one row, in the
        order of ``samples`` (the run's input order), made one at a time (a list of
        100,000 of them would cost ~100 MB)."""
        for sample in samples:
            epochs = self._epochs.get(sample.id)
            if epochs is None:
                continue
            scores = [v for v in epochs if v is not _NO_ROW]
            scored = _scored(epochs)
            yield SampleScore(
                sample_id=sample.id,
                score=reduce_scores(scored, self.reducer, self.pass_k),
                epochs=len(scores),
                scored=len(scored),
                scores=scores,
                cluster=sample.cluster,
            )

    def score_stats(self, clustered: bool = False) -> ScoreStats:
        """Mean over samples of their reduced scores (:meth:`reduced`; samples without a
        score left out) with standard error and 95% CI over samples, not rows; clustered
        standard error when ``clustered``. Binary scores get Wilson's interval (see
        :func:`gradetrail.stats.summarize`). Scores lie in [0, 1], so the interval is
        clipped to it (a small run's t interval can reach past either end)."""
        reduced = {k: v for k, v in self.reduced().items() if v is not None}
        values = list(reduced.values())
        clusters = [self._clusters[s] for s in reduced] if clustered else None
        s = summarize(values, clusters)
        return ScoreStats(
            n=s.n,
            mean=_finite(s.mean),
            se=_finite(s.se),
            ci_low=_finite(max(s.ci_low, 0.0)) if not math.isnan(s.ci_low) else None,
            ci_high=_finite(min(s.ci_high, 1.0)) if not math.isnan(s.ci_high) else None,
            n_clusters=s.n_clusters,
            ci_method=s.method,
        )

    def judge_stats(self) -> JudgeStats | None:
        """The judge's totals (None when no row had a judge)."""
        return self.judge.stats()

    def agreement_stats(self, label_field: str | None) -> AgreementStats | None:
        """Agreement of the scores with the labels (None when the spec names no label)."""
        return None if label_field is None else self.agreement.stats(label_field)
