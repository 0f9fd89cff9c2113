"""Whether a complete run's ``results.jsonl`` still holds what its ``manifest.json`` says
it wrote: the rows per state, and the mean and n that the rows, reduced as the summary
reduces them, give.

The gate refuses a run that disagrees (its rows were edited or damaged since the run);
a sweep runs such a cell again (the run rewrites its rows from the cache). The two files
are held against each other, not signed: both rewritten to agree are not detected.
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Mapping, Sequence
from typing import Any

from gradetrail.rundir.truncation import counted_score, policy_of
from gradetrail.stats.reducers import reduce_scores

__all__ = ["manifest_reducer", "rows_disagree"]


def manifest_reducer(manifest: Mapping[str, Any]) -> tuple[str, int]:
    """``(run.reducer, k)`` from a manifest's spec; k is 1 unless pass_at_k."""
    run = (manifest.get("spec") or {}).get("run") or {}
    name = str(run.get("reducer") or "mean")
    return name, int(run.get("pass_k") or 1) if name == "pass_at_k" else 1


def _shown(counter: Counter[str]) -> str:
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counter.items()) if n)
    return f"{counter.total()} rows ({parts or 'none'})"


def rows_disagree(manifest: Mapping[str, Any], rows: Sequence[Mapping[str, Any]]) -> str | None:
    """How the rows of a complete run (as :func:`~gradetrail.rundir.results.read_results`
    reads them: a malformed line is skipped, so it shows as a missing row) disagree with
    its manifest, or None when they agree (or the manifest, written by hand, records
    nothing to hold them against).

    They disagree when the rows per state are not the manifest's ``counts`` (``n_samples``
    x ``epochs`` rows when it has none), when a scored row's score is not a number in
    [0, 1], or when the rows reduced by the run's ``run.reducer`` and ``run.truncated``
    do not give the manifest's ``score.mean`` and ``score.n``.
    """
    found = Counter(str(r.get("state")) for r in rows)
    counts = manifest.get("counts")
    if isinstance(counts, dict) and counts:
        expected = Counter({str(k): v for k, v in counts.items() if isinstance(v, int)})
    elif isinstance(manifest.get("n_samples"), int):
        epochs = manifest.get("epochs")
        expected = Counter({"rows": manifest["n_samples"] * (epochs if type(epochs) is int else 1)})
        found = Counter({"rows": len(rows)})
    else:
        expected = found
    if found != expected:
        return (
            f"its results.jsonl holds {_shown(found)} where its manifest counts {_shown(expected)}"
        )
    recorded = manifest.get("score")
    if not isinstance(recorded, dict) or "mean" not in recorded:
        return None  # a manifest written by hand: nothing to hold the scores against
    name, k = manifest_reducer(manifest)
    policy = policy_of(manifest)
    epochs_of: dict[str, list[float]] = {}
    for row in rows:
        sid = str(row.get("sample_id"))
        per = epochs_of.setdefault(sid, [])
        score = row.get("score")
        if row.get("state") == "scored" and not (
            type(score) in (int, float) and 0.0 <= score <= 1.0  # NaN fails both
        ):
            epoch = row.get("epoch")
            return f"sample {sid!r} epoch {epoch} has score {score!r}, not a number in [0, 1]"
        kept = counted_score({"truncated": False, **row}, policy)
        if kept is not None:
            per.append(float(kept))
    values = [v for per in epochs_of.values() if (v := reduce_scores(per, name, k)) is not None]  # type: ignore[arg-type]
    mean = math.fsum(values) / len(values) if values else None
    want_n, want_mean = recorded.get("n"), recorded.get("mean")
    if isinstance(want_mean, int | float):
        same = mean is not None and abs(mean - want_mean) <= 1e-9
    else:
        same = mean is None and want_mean is None
    if want_n == len(values) and same:
        return None
    got = "no mean" if mean is None else f"mean {mean:.6f}"
    want = f"mean {want_mean:.6f}" if isinstance(want_mean, int | float) else "no mean"
    return (
        f"its results.jsonl gives {got} over {len(values)} samples where its manifest "
        f"records {want} over {want_n}"
    )
