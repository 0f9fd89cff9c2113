"""``run.truncated``: how a response that stopped at max_tokens counts, in one place.

The summary (:class:`~gradetrail.rundir.summary.Tally`, and through it the manifest,
``samples.jsonl``, the progress line and the viewer) and the gate read a row's score
through :func:`counted_score`, so every one of them applies the run's policy the same
way:

- ``score`` (the default): a truncated answer is scored like any other (flagged and
  counted in ``manifest.truncated``);
- ``exclude``: a truncated row is left out of the mean, like a row with no score (the
  sample's other epochs still count; a sample with none has no score);
- ``zero``: a truncated row scores 0, whatever its scorer said.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from gradetrail.spec.run import TruncatedPolicy

__all__ = ["TruncatedPolicy", "counted_score", "policy_of"]


def counted_score(row: Mapping[str, Any], policy: str = "score") -> float | None:
    """The score a result row counts with (in [0, 1]), or None when it counts with none:
    a row in an error state, or a truncated row under ``exclude``.

    Args:
        row: a result row (``state``, ``score`` and ``truncated`` are read).
        policy: ``run.truncated``: score, exclude or zero.
    """
    if row["state"] != "scored":
        return None
    if row["truncated"] and policy != "score":
        return 0.0 if policy == "zero" else None
    return row["score"]


def policy_of(manifest: Mapping[str, Any]) -> str:
    """The ``run.truncated`` a run was made with, from its manifest's JSON form (``score``
    for a run from before the setting)."""
    run = (manifest.get("spec") or {}).get("run") or {}
    return str(run.get("truncated") or "score")
