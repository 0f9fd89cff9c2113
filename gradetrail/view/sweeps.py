"""The viewer's sweep pages: the matrix of a sweep's cells (rows: the first axis' labels;
columns: the other axes'), each cell coloured by its verdict and linked to its run and to
its diff against the baseline; the sweep's table and slices; and one sample across every
cell. The figures are :func:`gradetrail.analysis.sweep.sweep_table`'s, as the CLI prints them."""

from __future__ import annotations

import contextlib
from typing import TYPE_CHECKING, Any

from gradetrail.analysis.gate_runs import GateError
from gradetrail.analysis.sweep import CellRow, SweepTable, sweep_table
from gradetrail.errors import UsageError
from gradetrail.rundir.sweep import SWEEP_FILE, SweepRecord, read_sweep_record
from gradetrail.view.files import refusal
from gradetrail.view.store import NotFound

if TYPE_CHECKING:
    from pathlib import Path

    from starlette.requests import Request
    from starlette.responses import Response

    from gradetrail.view.run_pages import RunPages as Viewer

__all__ = ["is_sweep_dir", "sweep_page", "sweep_sample_page", "sweeps_by_run"]


def is_sweep_dir(path: Path) -> bool:
    """``path`` holds a sweep's record (not a run)."""
    return (path / SWEEP_FILE).is_file()


def sweeps_by_run(viewer: Viewer) -> tuple[list[SweepRecord], dict[str, list[str]]]:
    """Every readable sweep record under the root, and run directory name -> the sweep
    directories it is a cell of (for grouping the runs page)."""
    records, runs = [], {}
    for name in viewer.store.names():
        path = viewer.store.root / name
        if not is_sweep_dir(path) or refusal(viewer.store.root, path / SWEEP_FILE) is not None:
            continue  # a record linked out of the root is never read (its page says why)
        try:
            record = read_sweep_record(path)
        except UsageError:
            continue
        records.append(record)
        for cell in record.cells:
            runs.setdefault(cell.run_dir, []).append(name)
    return records, runs


def _matrix(table: SweepTable) -> tuple[list[str], list[str], dict[tuple[str, str], CellRow]]:
    """(row labels, column labels, (row, column) -> cell)."""
    rows: dict[str, None] = {}
    cols: dict[str, None] = {}
    grid = {}
    for cell in table.cells:
        row, col = cell.labels[0], "/".join(cell.labels[1:]) or "score"
        rows.setdefault(row, None)
        cols.setdefault(col, None)
        grid[(row, col)] = cell
    return list(rows), list(cols), grid


def _table(viewer: Viewer, request: Request) -> tuple[str, SweepTable]:
    """The sweep named in the URL and its table.

    Raises:
        Forbidden: a cell's run directory is not one name under the results root (an
            absolute path, ``..``, a link out): nothing of it is read.
    """
    name = request.path_params["sweep"]
    path = viewer.store.resolve(name)
    if not is_sweep_dir(path):
        raise UsageError(f"{name} is not a sweep directory (no {SWEEP_FILE})")
    why = refusal(viewer.store.root, path / SWEEP_FILE)
    if why is not None:
        raise UsageError(f"{name}: {why}")
    for cell in read_sweep_record(path).cells:  # every cell's run stays under the root
        with contextlib.suppress(NotFound):  # not run yet, or deleted: the table says so
            viewer.store.resolve(cell.run_dir)
    baseline = request.query_params.get("baseline") or None
    try:
        return name, sweep_table(path, baseline=baseline, allow_partial=True)
    except GateError as exc:
        raise UsageError(f"sweep {name}: {exc}") from None


def sweep_page(viewer: Viewer, request: Request) -> Response:
    """The sweep's matrix, table and slices."""
    from gradetrail.report.sweep import HEADERS, family_line, table_rows, verdict_text

    name, table = _table(viewer, request)
    rows, cols, grid = _matrix(table)
    base = table.cell(table.baseline)
    return viewer.render(
        "sweep.html",
        sweep=name,
        table=table,
        rows=rows,
        cols=cols,
        grid=grid,
        base=base,
        headers=HEADERS,
        lines=table_rows(table),
        verdict_text=verdict_text,
        family=family_line(table),
        run_name=_run_name,
    )


def sweep_sample_page(viewer: Viewer, request: Request) -> Response:
    """One sample in every cell: each model's (and prompt's) answer side by side."""
    name, table = _table(viewer, request)
    sample_id = request.query_params.get("id", "")
    if not sample_id:
        return viewer.problem("No sample named", "add ?id=SAMPLE_ID to the address", 400)
    answers: list[dict[str, Any]] = []
    for cell in table.cells:
        info = viewer.store.info(_run_name(cell))
        answers.append({"cell": cell, "rows": viewer.sample_rows(info, sample_id)})
    if not any(a["rows"] for a in answers):
        return viewer.problem(
            "No such sample", f"no cell of sweep {name} has sample id {sample_id!r}.", 404
        )
    first = next(a["rows"][0] for a in answers if a["rows"])
    return viewer.render(
        "sweep_sample.html",
        sweep=name,
        table=table,
        sample_id=sample_id,
        answers=answers,
        first=first,
        run_name=_run_name,
    )


def _run_name(cell: CellRow) -> str:
    """The cell's run directory name (under the root)."""
    return cell.run_dir.replace("\\", "/").rsplit("/", 1)[-1]
