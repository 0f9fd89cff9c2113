"""``gradetrail export``: a run's result rows as one flat CSV, Parquet or JSONL table."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``export`` to ``app``."""
    app.command("export")(export)


def export(
    run_dir: Annotated[Path, typer.Argument(help="The run directory (holding results.jsonl).")],
    format_: Annotated[
        str, typer.Option("--format", help="csv, parquet (needs gradetrail[parquet]) or jsonl.")
    ] = "csv",
    out: Annotated[
        str | None,
        typer.Option(
            "--out",
            help="The file to write ('-': standard output); default <run dir name>.<format>.",
        ),
    ] = None,
) -> None:
    """Write one row per (sample, epoch) with flat columns (scorer.*, error.kind, ...),
    ready for pandas, DuckDB or a spreadsheet."""
    from gradetrail.analysis.export import export_run
    from gradetrail.cli import fail
    from gradetrail.errors import GradetrailError, UsageError

    try:
        if format_ not in ("csv", "parquet", "jsonl"):
            raise UsageError(f"--format: unknown format {format_!r}; use csv, parquet or jsonl")
        done = export_run(run_dir, format_, out)  # type: ignore[arg-type]
    except GradetrailError as exc:
        raise fail(exc) from None
    if done.path is not None:
        print(f"wrote {done.rows} rows x {len(done.columns)} columns to {done.path}")
    if done.status not in (None, "complete"):
        from gradetrail.rundir.manifest import run_warnings

        for line in run_warnings({"status": done.status}):
            print(
                f"warning: {line}: the export holds the {done.rows} rows written", file=sys.stderr
            )
    if done.disagrees is not None:
        from gradetrail._util.terminal import one_line
        from gradetrail.rundir.agreement import warning

        print(one_line(f"warning: {warning(run_dir, done.disagrees)}"), file=sys.stderr)
