"""``gradetrail runs``: which run directory is which."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``runs`` to ``app``."""
    app.command("runs")(runs)


def runs(
    results_root: Annotated[
        Path, typer.Option("--results-root", help="Where run directories are.")
    ] = Path("results"),
) -> None:
    """List run directories, newest first: name, model, status, samples, mean score."""
    from gradetrail.results import list_runs
    from gradetrail.terminal import clean

    found = list_runs(results_root)
    if not found:
        print(f"no runs under {results_root}")
        return
    rows = [("run directory", "model", "status", "samples", "mean", "started")]
    for path, m in found:
        score = m.get("score")
        mean = score.get("mean") if isinstance(score, dict) else None
        rows.append(
            (
                clean(str(path)),
                clean(f"{m.get('provider', '?')}:{m.get('requested_model', '?')}"),
                clean(str(m.get("status", "?"))),
                clean(str(m.get("n_samples", "?"))),
                f"{mean:.4f}" if isinstance(mean, int | float) else "n/a",
                clean(str(m.get("started_at", ""))[:19]),
            )
        )
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    for row in rows:  # plain columns: never truncated, so a path can be copied
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
