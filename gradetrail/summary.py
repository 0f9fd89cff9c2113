"""Running totals of a run (counts per state, tokens, cost, cache hits) and its score
statistics, fed one result row at a time so progress and the summary share one tally."""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field

from gradetrail.manifest import ScoreStats
from gradetrail.results import SampleResult
from gradetrail.stats import sample_means, summarize

__all__ = ["Tally"]


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
        input_tokens, output_tokens, cached_input_tokens: token totals (cache hits included).
        cost_usd: USD paid this run (rows not from the cache), None while nothing is priced.
        cost_usd_cached: USD the cache hits once cost.
        served_models: served model -> rows.
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
    _scores: list[tuple[str, int, float]] = field(default_factory=list)
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
            else:
                self.cost_usd = (self.cost_usd or 0.0) + row.cost_usd
        if row.state == "scored" and row.score is not None:
            self._scores.append((row.sample_id, row.epoch, row.score))
            self._clusters[row.sample_id] = row.cluster

    @property
    def errors(self) -> int:
        """Rows in an error state."""
        return self.rows - self.counts["scored"]

    def score_stats(self, clustered: bool = False) -> ScoreStats:
        """Mean of per-sample scores (epochs averaged first) with SE and 95% CI; clustered
        standard error when ``clustered``."""
        means = sample_means(self._scores)
        values = list(means.values())
        clusters = [self._clusters[s] for s in means] if clustered else None
        s = summarize(values, clusters)
        return ScoreStats(
            n=s.n,
            mean=_finite(s.mean),
            se=_finite(s.se),
            ci_low=_finite(s.ci_low),
            ci_high=_finite(s.ci_high),
            n_clusters=s.n_clusters,
        )
