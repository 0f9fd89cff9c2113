"""Per-sample reducers: the k scores of a sample's epochs turned into one score.

A run with ``run.epochs: k`` scores every (sample, epoch); the spec's ``run.reducer``
says how a sample's scored epochs become its one score, and the summary's mean,
standard error and confidence interval are then taken over samples (never over rows):

- ``mean`` (default): the arithmetic mean of the epoch scores.
- ``max``: the best epoch (for binary scores: "any epoch correct", pass@n).
- ``majority``: the most frequent score; a tie goes to the lowest tied score, so a
  binary sample counts as correct only when more than half its epochs are.
- ``pass_at_k``: the unbiased estimator of pass@k from n epochs of which c are correct
  (Chen et al. 2021, "Evaluating Large Language Models Trained on Code", arXiv
  2107.03374, eq. 1): ``1 - C(n - c, k) / C(n, k)``. An epoch is correct when its score
  is 1 (full marks). Needs n >= k scored epochs; a sample with fewer has no score.

Epochs in an error state (``provider_error``, ``judge_error``) have no score and are
left out of n, as they are left out of the mean.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Sequence
from typing import Literal

__all__ = ["REDUCERS", "ReducerName", "pass_at_k", "reduce_scores"]

ReducerName = Literal["mean", "max", "majority", "pass_at_k"]

#: the reducer names a spec accepts
REDUCERS: tuple[str, ...] = ("mean", "max", "majority", "pass_at_k")


def pass_at_k(n: int, c: int, k: int) -> float:
    """The unbiased pass@k estimate from n samples of which c are correct.

    Chen et al. 2021 (arXiv 2107.03374) eq. 1, ``1 - C(n - c, k) / C(n, k)``, computed as
    their numerically stable product ``1 - prod_{i = n - c + 1}^{n} (1 - k / i)``.

    Args:
        n: samples drawn (scored epochs), n >= 1.
        c: correct samples, 0 <= c <= n.
        k: the k of pass@k, 1 <= k <= n.

    Returns:
        The estimate in [0, 1].

    Raises:
        ValueError: the arguments break the bounds above.
    """
    if not (n >= 1 and 0 <= c <= n and 1 <= k <= n):
        raise ValueError(f"pass@k needs 1 <= k <= n and 0 <= c <= n; got n={n}, c={c}, k={k}")
    if n - c < k:
        return 1.0
    product = 1.0
    for i in range(n - c + 1, n + 1):
        product *= 1.0 - k / i
    return 1.0 - product


def _majority(scores: Sequence[float]) -> float:
    counts = Counter(scores)
    top = max(counts.values())
    return min(value for value, count in counts.items() if count == top)


def reduce_scores(scores: Sequence[float], reducer: ReducerName, k: int = 1) -> float | None:
    """One sample's score from its scored epochs.

    Args:
        scores: the scores (in [0, 1]) of the sample's scored epochs, any order.
        reducer: ``mean``, ``max``, ``majority`` or ``pass_at_k``.
        k: the k of ``pass_at_k`` (ignored by the others).

    Returns:
        The reduced score, or None when there is nothing to reduce: no scored epoch, or
        fewer than k for ``pass_at_k``.

    Raises:
        ValueError: an unknown reducer.
    """
    if not scores:
        return None
    if reducer == "mean":
        return math.fsum(scores) / len(scores)
    if reducer == "max":
        return max(scores)
    if reducer == "majority":
        return _majority(scores)
    if reducer == "pass_at_k":
        if len(scores) < k:
            return None
        return pass_at_k(len(scores), sum(1 for s in scores if s >= 1.0), k)
    raise ValueError(f"unknown reducer {reducer!r}; use one of {', '.join(REDUCERS)}")
