"""A sweep's record, ``<results root>/sweep-<name>/sweep.json``: which run directory each
cell is, which cell is the baseline, the gate's settings and the dataset's slices. One
model (:class:`SweepRecord`); written atomically after every cell, so an interrupted
sweep's record says what is done."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field, ValidationError

from gradetrail.errors import RunError, UsageError
from gradetrail.rundir.results import MAX_MANIFEST_BYTES, open_run_file

__all__ = [
    "SWEEP_FILE",
    "CellRecord",
    "SweepRecord",
    "read_sweep_record",
    "sweep_dir",
    "write_sweep_record",
]

SWEEP_FILE = "sweep.json"

#: what became of a cell in the last ``gradetrail sweep``: ``existing`` (complete already,
#: not run again), ``ran`` (run now: complete), ``interrupted``, ``failed``, ``pending``
CellOutcome = Literal["pending", "existing", "ran", "interrupted", "failed"]


class CellRecord(BaseModel):
    """One cell: its labels, overrides and run directory."""

    name: str = Field(description="The cell's labels joined by /.")
    labels: list[str] = Field(description="One label per axis, in axis order.")
    overrides: list[str] = Field(description="dotted.key=value applied to the base spec.")
    run_dir: str = Field(description="The run directory's name, under the results root.")
    identity_hash: str
    model: str = Field(description="provider:model of the cell.")
    outcome: CellOutcome = "pending"


class SweepRecord(BaseModel):
    """``sweep.json``."""

    name: str
    sweep_path: str = Field(description="The sweep file as given.")
    spec_path: str = Field(description="The base eval spec.")
    axes: list[str] = Field(description="Axis names, in order (rows first).")
    baseline: str = Field(description="The baseline cell's name.")
    gate: dict[str, Any] = Field(description="The sweep file's gate section, defaults filled.")
    slice_field: str | None = None
    must_not_regress: list[str] = Field(default_factory=list)
    slices: dict[str, list[str]] = Field(
        default_factory=dict, description="slice -> sample ids in it, slices in first-seen order."
    )
    cells: list[CellRecord]

    def cell(self, name: str) -> CellRecord:
        """The cell called ``name``. Raises UsageError naming the cells when there is none."""
        for cell in self.cells:
            if cell.name == name:
                return cell
        names = ", ".join(c.name for c in self.cells[:8])
        raise UsageError(f"sweep {self.name} has no cell {name!r}; its cells are {names}")


def sweep_dir(results_root: Path, name: str) -> Path:
    """Where a sweep's record lives: ``<results_root>/sweep-<name>``."""
    return Path(results_root) / f"sweep-{name}"


def write_sweep_record(directory: Path, record: SweepRecord) -> Path:
    """Write ``directory/sweep.json`` through a temporary file and a rename.

    Raises:
        RunError: the directory or the file cannot be written (the message says where).
    """
    path = directory / SWEEP_FILE
    tmp = directory / (SWEEP_FILE + ".tmp")
    text = json.dumps(record.model_dump(mode="json"), indent=2) + "\n"
    try:
        directory.mkdir(parents=True, exist_ok=True)
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, path)
    except OSError as exc:
        raise RunError(
            f"cannot write the sweep record {path} ({exc.strerror or exc}): free space or "
            "pick a writable --results-root"
        ) from None
    return path


def read_sweep_record(directory: str | Path) -> SweepRecord:
    """Read ``directory/sweep.json``.

    Raises:
        UsageError: no record there, not one gradetrail wrote, not a regular file, or
            over :data:`~gradetrail.rundir.results.MAX_MANIFEST_BYTES`.
    """
    path = Path(directory) / SWEEP_FILE
    try:
        with open_run_file(path) as f:  # a FIFO in its place never blocks the reader
            data = f.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise UsageError(
                f"{path}: larger than {MAX_MANIFEST_BYTES >> 20} MB; not a gradetrail sweep record"
            )
        return SweepRecord.model_validate_json(data)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{directory}: not a sweep directory (no {SWEEP_FILE})") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    except ValidationError as exc:
        problems = exc.error_count()
        raise UsageError(f"{path}: not a gradetrail sweep record ({problems} errors)") from None
