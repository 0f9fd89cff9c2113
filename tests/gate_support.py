"""Run directories written by hand for the gate's tests: rows with chosen scores."""

from __future__ import annotations

import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any


def write_run(
    run_dir: Path,
    scores: Sequence[float | None | Sequence[float | None]],
    *,
    ids: Sequence[str] | None = None,
    clusters: Sequence[str | None] | None = None,
    states: dict[tuple[str, int], str] | None = None,
    dataset_hash: str = "dataset-1",
    status: str = "complete",
) -> Path:
    """Write a run directory: one row per (sample, epoch), as `gradetrail run` would.

    `scores[i]` is a float (one epoch) or a list (one entry per epoch); `states` marks
    (sample_id, epoch) rows as an error state (their score is written as null).
    """
    run_dir.mkdir(parents=True)
    ids = list(ids) if ids is not None else [f"s{i}" for i in range(len(scores))]
    states = states or {}
    rows: list[dict[str, Any]] = []
    epochs = 1
    for i, (sample_id, sample_scores) in enumerate(zip(ids, scores, strict=True)):
        per_epoch = sample_scores if isinstance(sample_scores, Sequence) else [sample_scores]
        epochs = max(epochs, len(per_epoch))
        for epoch, score in enumerate(per_epoch, start=1):
            state = states.get((sample_id, epoch), "scored")
            rows.append(
                {
                    "sample_id": sample_id,
                    "epoch": epoch,
                    "state": state,
                    "score": score if state == "scored" else None,
                    "cluster": clusters[i] if clusters else None,
                }
            )
    (run_dir / "results.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = {
        "name": run_dir.name,
        "identity_hash": f"id-{run_dir.name}",
        "dataset_hash": dataset_hash,
        "epochs": epochs,
        "status": status,
    }
    (run_dir / "manifest.json").write_text(json.dumps(manifest))
    return run_dir


def passes(n_pass: int, n: int = 100) -> list[float]:
    """n binary scores, the first n_pass passing."""
    return [1.0] * n_pass + [0.0] * (n - n_pass)
