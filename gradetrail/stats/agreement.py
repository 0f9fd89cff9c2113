"""Agreement of a scorer (usually a judge) with the dataset's human labels.

When the spec names a label (``dataset.label_field``), every result row carries the
sample's label as a score in [0, 1], and the run reports, over the scored rows that have
a label:

- accuracy: the share of rows whose score equals the label, with its standard error and
  Wilson's 95% score interval (:func:`gradetrail.stats.intervals.summarize` over the 0/1 hits);
- Cohen's kappa, the agreement beyond chance, over the categories the two raters used
  (Cohen, "A coefficient of agreement for nominal scales", Educational and Psychological
  Measurement 20(1):37-46, 1960), with the large-sample standard error of Fleiss, Cohen
  and Everitt ("Large sample standard errors of kappa and weighted kappa", Psychological
  Bulletin 72(5):323-327, 1969) and a normal 95% confidence interval;
- the confusion counts, label -> score -> rows.

Rows are compared one by one (with several epochs, each epoch's score is one rating of
the sample). Those ratings are not independent, so when a sample has more than one,
both standard errors are clustered by sample: accuracy's CR1 standard error (with
Wilson's interval on the effective sample size), and kappa's by the delete-one-sample
jackknife (Quenouille-Tukey; sqrt((G - 1) / G * sum_g (kappa_(-g) - mean)^2) over the G
samples), since the Fleiss-Cohen-Everitt formula treats every row as independent and is
then too small. ``clustered`` in the result says so. Scores are categories here: a mean
of k verdicts such as 0.667 is its own category, so for kappa prefer ``reduce: majority``
or one judge sample.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from pydantic import BaseModel, ConfigDict, Field

__all__ = [
    "AgreementStats",
    "AgreementTally",
    "Kappa",
    "cohen_kappa",
    "measure_agreement",
]


@dataclass(frozen=True, slots=True, eq=False)
class Kappa:
    """Cohen's kappa with its large-sample standard error.

    Attributes:
        kappa: (p_o - p_e) / (1 - p_e); NaN when p_e = 1 (both raters used one category).
        se: the non-null standard error (Fleiss, Cohen & Everitt 1969); NaN when undefined.
        p_observed: the share of rows on the diagonal (the accuracy).
        p_expected: the agreement expected by chance from the two marginals.
    """

    kappa: float
    se: float
    p_observed: float
    p_expected: float


def cohen_kappa(matrix: Sequence[Sequence[float]]) -> Kappa:
    """Cohen's kappa of a square confusion matrix of counts (rows: rater 1, columns:
    rater 2, the same categories in the same order).

    With p_ij = count_ij / n, row marginals p_i. and column marginals p_.j:
    p_o = sum_i p_ii, p_e = sum_i p_i. p_.i, kappa = (p_o - p_e) / (1 - p_e) (Cohen 1960).
    Its large-sample variance (Fleiss, Cohen & Everitt 1969, the non-null case) is
    [sum_i p_ii (1 - (p_i. + p_.i)(1 - kappa))^2
     + (1 - kappa)^2 sum_{i != j} p_ij (p_.i + p_j.)^2
     - (kappa - p_e (1 - kappa))^2] / (n (1 - p_e)^2).

    Raises:
        ValueError: the matrix is not square, has a negative count, or sums to 0.
    """
    k = len(matrix)
    if any(len(row) != k for row in matrix):
        raise ValueError("the confusion matrix must be square (the same categories both ways)")
    if any(c < 0 for row in matrix for c in row):
        raise ValueError("confusion counts must be non-negative")
    n = math.fsum(c for row in matrix for c in row)
    if n <= 0:
        raise ValueError("the confusion matrix is empty")
    p = [[c / n for c in row] for row in matrix]
    rows = [math.fsum(r) for r in p]
    cols = [math.fsum(p[i][j] for i in range(k)) for j in range(k)]
    p_o = math.fsum(p[i][i] for i in range(k))
    p_e = math.fsum(rows[i] * cols[i] for i in range(k))
    if p_e >= 1.0:
        return Kappa(math.nan, math.nan, p_o, p_e)
    kappa = (p_o - p_e) / (1 - p_e)
    diagonal = math.fsum(p[i][i] * (1 - (rows[i] + cols[i]) * (1 - kappa)) ** 2 for i in range(k))
    off = math.fsum(
        p[i][j] * (cols[i] + rows[j]) ** 2 for i in range(k) for j in range(k) if i != j
    )
    variance = (diagonal + (1 - kappa) ** 2 * off - (kappa - p_e * (1 - kappa)) ** 2) / (
        n * (1 - p_e) ** 2
    )
    return Kappa(kappa, math.sqrt(max(variance, 0.0)), p_o, p_e)


def _key(value: float) -> str:
    return f"{value:.6g}"


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x


class AgreementStats(BaseModel):
    """How well the scores agree with the dataset's human labels (``manifest.agreement``)."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

    label_field: str = Field(description="The row field holding the label.")
    n: int = Field(description="Scored rows with a label (the rows compared).")
    unlabelled: int = Field(0, description="Scored rows whose sample has no label.")
    not_scored: int = Field(0, description="Labelled rows in an error state (not compared).")
    accuracy: float | None = Field(description="Share of compared rows with score == label.")
    accuracy_se: float | None = Field(description="Standard error of the accuracy.")
    accuracy_ci_low: float | None = Field(description="Lower 95% bound of the accuracy.")
    accuracy_ci_high: float | None = Field(description="Upper 95% bound of the accuracy.")
    kappa: float | None = Field(description="Cohen's kappa (1960); null when undefined.")
    kappa_se: float | None = Field(description="Its standard error (Fleiss et al. 1969).")
    kappa_ci_low: float | None = Field(description="Lower 95% bound of kappa.")
    kappa_ci_high: float | None = Field(description="Upper 95% bound of kappa.")
    categories: list[float] = Field(description="Every label or score value seen, ascending.")
    confusion: dict[str, dict[str, int]] = Field(
        description="label -> score -> rows; values formatted like '1', '0.5'."
    )
    clustered: bool = Field(
        False,
        description="Some sample has several rated rows (epochs): both standard errors are "
        "clustered by sample (accuracy CR1, kappa jackknife over samples).",
    )


def measure_agreement(
    pairs: Iterable[tuple[float, float]],
    label_field: str,
    *,
    unlabelled: int = 0,
    not_scored: int = 0,
    confidence: float = 0.95,
    samples: Sequence[str] | None = None,
) -> AgreementStats:
    """Accuracy, Cohen's kappa and confusion counts of ``(label, score)`` pairs.

    Args:
        pairs: one ``(label, score)`` per compared row, both in [0, 1].
        label_field: the spec's label field (recorded as is).
        unlabelled: rows left out without a label, recorded for the denominators.
        not_scored: rows left out without a score, recorded for the denominators.
        samples: each pair's sample id (parallel to ``pairs``); when a sample has several
            pairs, the standard errors are clustered by sample (see the module docstring).
        confidence: of both intervals: Wilson's score interval for accuracy (Wilson 1927,
            via scipy), the normal quantile for kappa (kappa +- z SE, clipped to [-1, 1],
            kappa's possible range: near perfect agreement it would reach past 1; the
            clipped set keeps its coverage, Mandelkern 2002). Kappa's SE and interval are None
            when the labels or the scores use a single category (the SE formula
            degenerates to 0 there). At perfect agreement the SE is 0 and kappa +- z SE
            would be [1, 1]: the interval is then Wilson's interval of the observed
            agreement mapped through kappa = (p_o - p_e) / (1 - p_e) at the estimated
            chance agreement p_e (upper bound 1, lower bound below 1 at any n).

    Returns:
        The statistics; with no pairs, every figure is None and the confusion is empty.
    """
    from gradetrail.stats.intervals import normal_quantile, summarize  # at summary time

    pairs = list(pairs)
    counts = Counter((_key(label), _key(score)) for label, score in pairs)
    values = sorted({v for pair in pairs for v in pair})
    keys = list(dict.fromkeys(_key(v) for v in values))
    confusion: dict[str, dict[str, int]] = {}
    for (label, score), count in sorted(counts.items()):
        confusion.setdefault(label, {})[score] = count
    hits = [float(_key(label) == _key(score)) for label, score in pairs]
    clustered = samples is not None and len(set(samples)) < len(pairs)
    acc = summarize(hits, list(samples) if clustered else None, confidence=confidence)
    acc_lo, acc_hi = acc.ci_low, acc.ci_high
    kappa = se = lo = hi = math.nan
    if pairs:
        result = cohen_kappa([[counts[(a, b)] for b in keys] for a in keys])
        kappa, se = result.kappa, result.se
        if clustered:
            se = _jackknife_kappa_se(pairs, list(samples), keys, counts)  # type: ignore[arg-type]
        one_sided = len({_key(lbl) for lbl, _ in pairs}) < 2 or len({_key(s) for _, s in pairs}) < 2
        if one_sided:  # a judge (or labels) using one category: kappa's SE degenerates to 0
            se = math.nan
        z = normal_quantile(confidence)
        lo, hi = max(-1.0, kappa - z * se), min(1.0, kappa + z * se)  # kappa is in [-1, 1]
        if se == 0 and result.p_expected < 1:
            # perfect agreement: the large-sample SE is 0 and kappa +- z SE is [1, 1], a
            # certainty no finite sample gives; kappa is then read through Wilson's
            # interval of the observed agreement p_o at the estimated chance agreement p_e
            # (kappa = (p_o - p_e) / (1 - p_e) is increasing in p_o)
            lo = max(-1.0, (acc_lo - result.p_expected) / (1 - result.p_expected))
            hi = min(1.0, (acc_hi - result.p_expected) / (1 - result.p_expected))
    return AgreementStats(
        label_field=label_field,
        n=len(pairs),
        unlabelled=unlabelled,
        not_scored=not_scored,
        accuracy=_finite(acc.mean),
        accuracy_se=_finite(acc.se),
        accuracy_ci_low=_finite(acc_lo),
        accuracy_ci_high=_finite(acc_hi),
        kappa=_finite(kappa),
        kappa_se=_finite(se),
        kappa_ci_low=_finite(lo),
        kappa_ci_high=_finite(hi),
        categories=values,
        confusion=confusion,
        clustered=clustered,
    )


def _jackknife_kappa_se(
    pairs: list[tuple[float, float]],
    samples: list[str],
    keys: list[str],
    counts: Counter[tuple[str, str]],
) -> float:
    """Delete-one-sample jackknife standard error of kappa: remove each sample's rows in
    turn, recompute kappa, sqrt((G - 1) / G * sum (kappa_(-g) - mean)^2). NaN when fewer
    than 2 samples or a leave-out kappa is undefined."""
    by_sample: dict[str, Counter[tuple[str, str]]] = {}
    for (label, score), sid in zip(pairs, samples, strict=True):
        by_sample.setdefault(sid, Counter())[(_key(label), _key(score))] += 1
    g = len(by_sample)
    if g < 2:
        return math.nan
    estimates = []
    for own in by_sample.values():
        rest = counts - own
        if sum(rest.values()) == 0:
            return math.nan
        estimates.append(cohen_kappa([[rest[(a, b)] for b in keys] for a in keys]).kappa)
    if any(math.isnan(k) for k in estimates):
        return math.nan
    mean = math.fsum(estimates) / g
    return math.sqrt((g - 1) / g * math.fsum((k - mean) ** 2 for k in estimates))


class AgreementTally:
    """Collects ``(label, score)`` pairs from result rows as they arrive."""

    def __init__(self) -> None:
        self.pairs: list[tuple[float, float]] = []
        self.samples: list[str] = []
        self.unlabelled = 0
        self.not_scored = 0

    def add(
        self, state: str, label: float | None, score: float | None, sample_id: str = ""
    ) -> None:
        """Count one row: compared when scored and labelled, else counted as left out."""
        scored = state == "scored" and score is not None
        if label is None:
            self.unlabelled += scored
        elif scored:
            self.pairs.append((label, score))
            self.samples.append(sample_id)
        else:
            self.not_scored += 1

    def stats(self, label_field: str) -> AgreementStats:
        """The agreement over the rows so far (see :func:`measure_agreement`)."""
        return measure_agreement(
            self.pairs,
            label_field,
            unlabelled=self.unlabelled,
            not_scored=self.not_scored,
            samples=self.samples if any(self.samples) else None,
        )
