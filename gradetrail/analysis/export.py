"""Exporting a run's result rows as one flat table: CSV, Parquet or JSONL, one row per
(sample, epoch), so a run opens directly in pandas, DuckDB or a spreadsheet.

Nested fields become dotted columns (``scorer.extracted``, ``error.kind``,
``judge.calls``), down to :data:`MAX_DEPTH` levels; lists, and anything deeper, become
JSON text. The first three columns say which run a row came from, so exports of several runs can be
concatenated: ``run`` (the run directory's name), ``model`` (the requested model) and
``identity`` (the run's identity hash; empty when its manifest cannot be read). Then
come :class:`~gradetrail.rundir.results.SampleResult`'s fields in their
order (``error.kind``, ``error.message``, ``error.status``, ``error.error_type`` and
``error.code`` always, even when no row failed), then every other column in the order
first seen. ``results.jsonl`` is read twice, streaming (once for the columns and their
types, once to write), so memory stays flat in the run's size. Each column has one type
in Parquet: bool, int64, float64 (ints and floats mixed) or string (anything else mixed,
or an integer past int64, non-strings as JSON text). Text UTF-8 cannot encode (a lone
surrogate in a response or a sample id) is written as its escape
(:func:`gradetrail._util.jsontext.encodable`): a JSON escape in JSONL (lossless), the six
characters ``\\ud800`` in a CSV or Parquet cell. The file is written to a temporary name
and renamed, so a failed export leaves nothing half-written (a character device or a
FIFO, ``/dev/null`` or a named pipe, is written into instead, never replaced); it is
created with the permissions the user's umask gives a new file (readable by others
unless the umask says otherwise), like any file a tool writes.

CSV is opened by spreadsheets, which run a cell starting with ``=``, ``+``, ``-``,
``@``, a tab or a carriage return as a formula: such a text cell (a model's response, a
sample id, a column name) is written with a leading apostrophe (``'=HYPERLINK(...)``),
which they show as text. Numbers are written as numbers. JSONL and Parquet are unchanged.
"""

from __future__ import annotations

import contextlib
import csv
import json
import os
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

from gradetrail._util.jsontext import encodable
from gradetrail._util.outfiles import written_in_place
from gradetrail.errors import UsageError
from gradetrail.rundir.agreement import run_disagrees
from gradetrail.rundir.results import (
    RESULTS_FILE,
    SampleResult,
    iter_result_spans,
    not_a_run_dir,
    read_manifest,
)

__all__ = ["ExportFormat", "Exported", "export_run", "flatten"]

ExportFormat = Literal["csv", "parquet", "jsonl"]
MAX_DEPTH = 3
BATCH_ROWS = 10_000
#: the columns naming the run of every row (first in every export)
RUN_COLUMNS = ("run", "model", "identity")
ERROR_COLUMNS = ("error.kind", "error.message", "error.status", "error.error_type", "error.code")
_NESTED = ("error", "scorer", "judge", "app")  # flattened: app.metrics.words, ...
#: the Parquet type of known columns that no row filled (an all-null column)
_KNOWN_TYPES = {
    "score": "float64",
    "cost_usd": "float64",
    "latency_s": "float64",
    "label": "float64",
    "error.status": "int64",
}


@dataclass(frozen=True)
class Exported:
    """What :func:`export_run` wrote.

    Attributes:
        path: the file written (None for standard output).
        rows: rows written, one per (sample, epoch).
        columns: the column names in order.
        status: the run's status as :func:`~gradetrail.rundir.results.read_manifest` reads it
            (``killed`` when its process is gone without ending it), or None without a
            readable manifest.
        disagrees: what disagrees, when the run is complete but its rows disagree with its
            manifest (:func:`~gradetrail.rundir.agreement.run_disagrees`), else None.
    """

    path: Path | None
    rows: int
    columns: tuple[str, ...]
    status: str | None = None
    disagrees: str | None = None


def flatten(row: dict[str, Any]) -> dict[str, Any]:
    """One result row as flat columns: nested objects as ``parent.child`` keys (down to
    :data:`MAX_DEPTH` levels), lists and deeper values as JSON text."""
    out: dict[str, Any] = {}
    _flatten_into(out, "", {k: v for k, v in row.items() if not (k in _NESTED and v is None)}, 1)
    return out


def _flatten_into(out: dict[str, Any], prefix: str, value: dict[str, Any], depth: int) -> None:
    for key, item in value.items():
        name = f"{prefix}{key}"
        if isinstance(item, dict) and item and depth < MAX_DEPTH:
            _flatten_into(out, name + ".", item, depth + 1)
        elif isinstance(item, dict | list):
            out[name] = json.dumps(item, ensure_ascii=False, sort_keys=True) if item else None
        else:
            out[name] = item


#: the range of Parquet's int64: an integer past it (a python scorer's detail, an app's
#: metadata) makes its column text, the number's digits, never a wrong or failed number
_INT64 = (-(2**63), 2**63 - 1)


class _BigInt:
    """The kind of an integer past :data:`_INT64`."""


class _Columns:
    """The columns of a run's rows, in order, with the kinds of value each holds."""

    def __init__(self) -> None:
        self.kinds: dict[str, set[type]] = {name: {str} for name in RUN_COLUMNS}
        #: where the first pass ended in ``results.jsonl`` (bytes): the second stops there
        self.end = 0
        for name in SampleResult.model_fields:
            if name == "error":
                for column in ERROR_COLUMNS:
                    self.kinds[column] = set()
            elif name not in _NESTED:
                self.kinds[name] = set()

    def observe(self, flat: dict[str, Any]) -> None:
        for name, value in flat.items():
            kinds = self.kinds.setdefault(name, set())
            if value is not None:
                kinds.add(
                    _BigInt
                    if type(value) is int and not _INT64[0] <= value <= _INT64[1]
                    else type(value)
                )

    def arrow_type(self, name: str) -> str:
        kinds = self.kinds[name]
        if not kinds:
            return _KNOWN_TYPES.get(name, "string")
        if kinds == {bool}:
            return "bool"
        if kinds == {int}:
            return "int64"
        if kinds and kinds <= {int, float}:
            return "float64"
        return "string"


def export_run(run_dir: str | Path, fmt: ExportFormat, out: str | Path | None = None) -> Exported:
    """Write a run's result rows as one flat table.

    Args:
        run_dir: the run directory (holding ``results.jsonl``).
        fmt: ``csv``, ``parquet`` or ``jsonl``.
        out: the file to write; ``-`` for standard output (csv and jsonl); default
            ``<run directory name>.<fmt>`` in the working directory.

    Returns:
        Where it was written, the row count and the columns.

    Raises:
        UsageError: not a run directory, parquet without pyarrow, parquet to standard
            output, or the output cannot be written.
    """
    run_dir = Path(run_dir)
    if not (run_dir / RESULTS_FILE).is_file():
        raise UsageError(not_a_run_dir(run_dir, RESULTS_FILE))
    if out is None:
        out = Path(f"{run_dir.resolve().name}.{fmt}")
    try:
        manifest = read_manifest(run_dir)
        status: str | None = str(manifest.get("status", "complete"))
    except UsageError:
        manifest, status = {}, None
    disagrees = run_disagrees(run_dir, manifest) if manifest else None
    names = {
        "run": run_dir.resolve().name,
        "model": manifest.get("requested_model"),
        "identity": manifest.get("identity_hash"),
    }
    columns = _Columns()
    rows = 0
    for offset, length, row in iter_result_spans(run_dir):
        if row is not None:
            columns.observe(flatten(row))
            rows += 1
        columns.end = offset + length  # the second pass stops here: rows appended since
        # (a run still writing) are left out of both passes, so the count is the file's
    if str(out) == "-":
        if fmt == "parquet":
            raise UsageError("parquet is binary: write it to a file with --out FILE")
        _write_text(fmt, columns, run_dir, _stdout(), names)
        return Exported(None, rows, tuple(columns.kinds), status, disagrees)
    path = Path(out)
    if fmt == "parquet":
        _import_pyarrow()  # before any file is created
    with _atomic(path) as tmp:
        if fmt == "parquet":
            _write_parquet(columns, run_dir, tmp, names)
        else:
            with open(tmp, "w", encoding="utf-8", newline="") as f:
                _write_text(fmt, columns, run_dir, f, names)
    return Exported(path, rows, tuple(columns.kinds), status, disagrees)


def _stdout() -> Any:
    import sys

    return sys.stdout


def _records(columns: _Columns, run_dir: Path, run: dict[str, Any]) -> Iterator[dict[str, Any]]:
    names = list(columns.kinds)
    for offset, _, row in iter_result_spans(run_dir):
        if offset >= columns.end:
            return
        if row is None:
            continue
        flat = {**flatten(row), **run}
        yield {name: flat.get(name) for name in names}


class _Encodable:
    """A text stream's ``write`` with every string made :func:`encodable` first."""

    def __init__(self, stream: Any) -> None:
        self.stream = stream

    def write(self, text: str) -> int:
        return self.stream.write(encodable(text))


def _write_text(
    fmt: str, columns: _Columns, run_dir: Path, stream: Any, run: dict[str, Any]
) -> None:
    f = _Encodable(stream)
    if fmt == "jsonl":
        for record in _records(columns, run_dir, run):
            f.write(json.dumps(record, ensure_ascii=False) + "\n")
        return
    writer = csv.writer(f)
    writer.writerow(_csv_cell(name) for name in columns.kinds)
    for record in _records(columns, run_dir, run):
        writer.writerow(_csv_cell(v) for v in record.values())


#: a CSV text cell starting with one of these is run as a formula by spreadsheets
FORMULA_LEADS = ("=", "+", "-", "@", "\t", "\r")


def _csv_cell(value: Any) -> Any:
    """One CSV cell: empty for None, ``true``/``false``, and a text that a spreadsheet
    would run as a formula (it starts with ``=``, ``+``, ``-``, ``@``, a tab or a carriage
    return) prefixed with an apostrophe, which spreadsheets show as text (OWASP's CSV
    injection advice); numbers are left as they are."""
    if value is None:
        return ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str) and value.startswith(FORMULA_LEADS):
        return "'" + value
    return value


def _import_pyarrow() -> Any:
    try:
        import pyarrow as pa
        import pyarrow.parquet  # noqa: F401 - the writer
    except ImportError:
        raise UsageError(
            "export --format parquet needs pyarrow, which is not installed; "
            "pip install 'gradetrail[parquet]'"
        ) from None
    return pa


def _write_parquet(columns: _Columns, run_dir: Path, path: Path, run: dict[str, Any]) -> None:
    pa = _import_pyarrow()
    import pyarrow.parquet as pq

    types = {name: columns.arrow_type(name) for name in columns.kinds}
    arrow = {
        "bool": pa.bool_(),
        "int64": pa.int64(),
        "float64": pa.float64(),
        "string": pa.string(),
    }
    schema = pa.schema([(encodable(name), arrow[kind]) for name, kind in types.items()])
    with pq.ParquetWriter(path, schema) as writer:
        batch: list[dict[str, Any]] = []
        for record in _records(columns, run_dir, run):
            batch.append({encodable(k): _typed(v, types[k]) for k, v in record.items()})
            if len(batch) >= BATCH_ROWS:
                writer.write_batch(pa.RecordBatch.from_pylist(batch, schema=schema))
                batch = []
        if batch:
            writer.write_batch(pa.RecordBatch.from_pylist(batch, schema=schema))


def _typed(value: Any, kind: str) -> Any:
    if value is None or kind != "string":
        return float(value) if kind == "float64" and value is not None else value
    return encodable(value if isinstance(value, str) else json.dumps(value, ensure_ascii=False))


@contextlib.contextmanager
def _atomic(path: Path) -> Iterator[Path]:
    """A temporary file beside ``path``, renamed onto it on success, removed on failure;
    ``path`` itself when it is a character device or a FIFO (``/dev/null``, a named pipe:
    :func:`~gradetrail._util.outfiles.written_in_place`), written into, never replaced.

    Raises:
        UsageError: the directory cannot be written, or ``path`` is a directory, a block
            device or a socket.
    """
    try:
        in_place = written_in_place(path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
    if in_place:
        try:
            yield path
        except OSError as exc:
            raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
        return
    _remove_dead_exports(path)
    try:
        fd, name = tempfile.mkstemp(
            prefix=f".{path.name}.{os.getpid()}.", suffix=".tmp", dir=path.parent
        )
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp's 0600 is for secrets; an export is not
    finally:
        os.close(fd)
    tmp = Path(name)
    try:
        yield tmp
        os.replace(tmp, path)
    except OSError as exc:
        raise UsageError(f"{path}: cannot write ({exc.strerror})") from None
    finally:
        tmp.unlink(missing_ok=True)


def _umask() -> int:
    """The process's umask (read by setting it and setting it back)."""
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def _remove_dead_exports(path: Path) -> None:
    """Delete the temporary files an export to ``path`` left when it was killed
    (``.NAME.PID.XXXX.tmp`` whose process no longer exists); a live export's are kept."""
    prefix = f".{path.name}."
    try:
        names = os.listdir(path.parent)
    except OSError:
        return
    for name in names:
        if not (name.startswith(prefix) and name.endswith(".tmp")):
            continue
        pid = name[len(prefix) :].split(".", 1)[0]
        if not pid.isdigit() or _alive(int(pid)):
            continue
        with contextlib.suppress(OSError):
            os.unlink(path.parent / name)


def _alive(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except OSError:
        return True
    return True
