"""``load_samples``, the one entry: pick the format's source, read it streaming, rename
fields, assign ids (:mod:`~gradetrail.datasets.ids`), then shuffle, limit and read
clusters. Format modules are imported only when their format is used (pyarrow and
``datasets`` are heavy)."""

from __future__ import annotations

import importlib
import random
from array import array
from pathlib import Path
from typing import Any

from gradetrail._util.files import not_a_file, path_fix
from gradetrail.datasets.base import Row, Source
from gradetrail.datasets.ids import DEFAULT_ID_FIELD, IdAssigner, describe_row, row_at
from gradetrail.datasets.samples import Blob, Blocks, Packer, Samples
from gradetrail.errors import DatasetError
from gradetrail.spec import DatasetSpec

__all__ = ["load_samples", "open_source", "split_by_position_warning"]

#: format -> "module:class" of its source, imported on first use
FORMATS = {
    "jsonl": "gradetrail.datasets.jsonl:JsonlSource",
    "json": "gradetrail.datasets.json_array:JsonArraySource",
    "csv": "gradetrail.datasets.delimited:CsvSource",
    "tsv": "gradetrail.datasets.delimited:TsvSource",
    "parquet": "gradetrail.datasets.parquet:ParquetSource",
    "hf": "gradetrail.datasets.hf:HFSource",
}


def load_samples(
    source: DatasetSpec | str | Path,
    *,
    base_dir: Path | None = None,
    where: str | None = None,
    **options: Any,
) -> Samples:
    """Load a dataset as samples in run order.

    Args:
        source: the spec's ``dataset`` section, or a file path (then ``options`` are
            :class:`~gradetrail.spec.DatasetSpec` fields: ``id_field``, ``shuffle_seed``,
            ``limit``, ``cluster_field``...).
        base_dir: the directory relative paths resolve against (the spec file's).
        where: the spec file, naming it in errors about spec fields.

    Returns:
        :class:`Samples` with ``index`` 0..n-1 in run order, their ids assigned before
        ``shuffle_seed`` (``random.Random(seed).shuffle``) and ``limit`` apply.

    Raises:
        DatasetError: one line naming the file, the format and the row or column: an
            unreadable source, a malformed row, a duplicate id, an empty dataset, a
            missing cluster field, an ``id_field`` other than the default ``id`` that the
            first row lacks.
    """
    spec = source if isinstance(source, DatasetSpec) else DatasetSpec(path=str(source), **options)
    src = open_source(spec, base_dir or Path("."), where)
    ids, lines, packer = Blob(), array("q"), Packer()
    # rows a shuffle will read in a random order stay uncompressed; others are read in order
    rows: Blob | Blocks = Blob() if spec.shuffle_seed is not None else Blocks()
    # the default id_field may be absent (rows numbered by position); another may not. By
    # value, not by model_fields_set: a spec dumped with its defaults and loaded again
    # names id_field: id, and must still number rows without one by position
    named = "dataset.id_field" if spec.id_field != DEFAULT_ID_FIELD else None
    assigner = IdAssigner(src, spec.id_field, named)
    rename = _Renamer(src, spec.fields) if spec.fields else None
    # without a shuffle, rows past the limit are never run: read (ids, errors), not kept
    keep_all = spec.shuffle_seed is not None or spec.limit is None or spec.split is not None
    for row in src.rows():
        fields = rename(row) if rename else row.fields
        ids.append(assigner.assign(row, fields).encode("utf-8", "surrogatepass"))
        lines.append(row.line)
        if keep_all or len(rows) < (spec.limit or 0):
            rows.append(packer.pack(fields))
    assigner.check_unique(lambda k: ids[k].decode("utf-8", "surrogatepass"))
    by_position, read = assigner.by_position, len(ids)
    del assigner
    if not len(ids):
        raise DatasetError(f"{src.where}: the dataset has no rows")
    info = dict(src.info())
    if spec.split is not None:  # before shuffle and limit: they apply within the split
        from gradetrail.datasets.splits import select_split

        every = [ids[k].decode("utf-8", "surrogatepass") for k in range(len(ids))]
        kept_split, info["split"] = select_split(spec.split, every, base_dir or Path("."), where)
        ids, lines, rows = (
            ids.select(kept_split),
            array("q", (lines[k] for k in kept_split)),
            rows.select(kept_split),
        )
    order: array[int] | None = None
    if spec.shuffle_seed is not None:
        order = array("q", range(len(ids)))
        random.Random(spec.shuffle_seed).shuffle(order)
    if spec.limit is not None and spec.limit < len(ids):
        kept = order[: spec.limit] if order is not None else range(spec.limit)
        ids, lines = ids.select(kept), array("q", (lines[k] for k in kept))
        rows = rows.select(kept) if order is not None else rows
        order = None
    clusters = _clusters(src, spec, rows, packer, lines) if spec.cluster_field else None
    return Samples(
        ids,
        rows,
        packer,
        lines,
        clusters,
        order,
        content_hash=src.content_hash(),
        info=info,
        warnings=[*getattr(src, "warnings", []), *_split_warning(spec, by_position, read)],
        by_position=by_position,
    )


def split_by_position_warning(id_field: str, by_position: int, rows: int) -> str:
    """The warning for splitting rows whose ids are their positions (``by_position`` of
    ``rows`` rows lack ``id_field``): such an id names whatever row is at that line, so a
    row added or removed before others gives them other ids, and other splits."""
    which = "no row has an" if by_position == rows else f"{by_position:,} of {rows:,} rows have no"
    return (
        f"dataset.split: {which} '{id_field}' field, so their ids are their positions "
        "(line numbers): a row added, removed or moved before them gives them other ids "
        "and other splits (held-out rows land in the one you tune on); give each row an "
        "id, or name one with dataset.id_field"
    )


def _split_warning(spec: DatasetSpec, by_position: int, rows: int) -> list[str]:
    if spec.split is None or not by_position:
        return []
    return [split_by_position_warning(spec.id_field, by_position, rows)]


def _clusters(
    src: Source, spec: DatasetSpec, rows: Blob | Blocks, packer: Packer, lines: array[int]
) -> list[str | None]:
    """Each stored row's ``cluster_field`` value, as text.

    Raises:
        DatasetError: a row without the field, or whose value is null, NaN or blank (naming its
            line).
    """
    out: list[str | None] = []
    for k in range(len(rows)):
        row = packer.unpack(rows[k])
        if spec.cluster_field not in row:
            raise DatasetError(
                f"{row_at(src, lines[k])}: row has no cluster field '{spec.cluster_field}'; "
                "add it or remove dataset.cluster_field"
            )
        value = row[spec.cluster_field]
        missing = _missing_kind(value)
        if missing is not None:
            # str() made every such row one cluster ("None", "nan", ""): unrelated samples
            # counted as one dependent group
            raise DatasetError(
                f"{row_at(src, lines[k])}: the row's cluster field '{spec.cluster_field}' is "
                f"{missing}; fill it in (a value of its own for a row that shares no cluster)"
            )
        out.append(str(value))
    return out


def _missing_kind(value: Any) -> str | None:
    """``null``, ``NaN`` or ``empty`` (blank text: a CSV's empty cell) when ``value`` is
    missing; else None."""
    if value is None:
        return "null"
    if isinstance(value, float) and value != value:
        return "NaN"
    if isinstance(value, str) and not value.strip():
        return "empty"
    return None


def open_source(spec: DatasetSpec, base_dir: Path, where: str | None = None) -> Source:
    """The :class:`~gradetrail.datasets.base.Source` reading ``spec``'s dataset (its
    format's module imported now).

    Raises:
        DatasetError: the file does not exist.
    """
    if spec.hf is not None:
        return _source_class("hf")(spec.hf, base_dir)
    assert spec.path is not None  # the spec validator guarantees path or hf
    path = Path(spec.path).expanduser()
    path = path if path.is_absolute() else base_dir / path
    problem = not_a_file(path)
    if problem is not None:
        prefix = f"{where}: " if where else ""
        fix = path_fix(spec.path, base_dir)
        raise DatasetError(f"{prefix}dataset.path: {path} {problem}; {fix}")
    fmt = spec.file_format()
    assert fmt is not None  # the spec validator guarantees a known format
    packed = _compression(path) if fmt != "parquet" else None  # Parquet says so itself
    if packed is not None:
        prefix = f"{where}: " if where else ""
        raise DatasetError(
            f"{prefix}dataset.path: {path} is {packed}-compressed; decompress it and set "
            "dataset.path to the file it gives"
        )
    if fmt in ("csv", "tsv"):
        return _source_class(fmt)(path, types=dict(spec.types))
    return _source_class(fmt)(path)


#: the first bytes of compressed files, and what compressed them
_MAGIC = (
    (b"\x1f\x8b", "gzip"),
    (b"BZh", "bzip2"),  # then a block size digit and a block's magic: checked below
    (b"\xfd7zXZ\x00", "xz"),
    (b"\x28\xb5\x2f\xfd", "zstd"),
    (b"PK\x03\x04", "zip"),
)


def _compression(path: Path) -> str | None:
    """What compressed the file at ``path`` (by its first bytes), or None: a text format's
    reader would call such a file not UTF-8, or not JSON, without saying why."""
    try:
        with path.open("rb") as f:
            head = f.read(10)
    except OSError:
        return None  # the format's reader names the problem
    kind = next((kind for magic, kind in _MAGIC if head.startswith(magic)), None)
    if kind == "bzip2" and not (head[3:4].isdigit() and head[4:10] in (b"1AY&SY", b"\x17rE8P\x90")):
        return None  # a text file that starts with "BZh" (a column named BZhx, say)
    return kind


def _source_class(fmt: str) -> Any:
    module_name, _, class_name = FORMATS[fmt].partition(":")
    return getattr(importlib.import_module(module_name), class_name)


class _Renamer:
    """Applies ``dataset.fields`` ({name in templates: column in the dataset}) to a row:
    each named column is renamed, the others keep their names.

    Raises (when called):
        DatasetError: a row without a renamed column, or one whose other column already
            has a new name (two values for one name).
    """

    def __init__(self, source: Source, fields: dict[str, str]) -> None:
        self.source = source
        self.fields = fields
        self.columns = set(fields.values())

    def __call__(self, row: Row) -> dict[str, Any]:
        have = row.fields
        out = {k: v for k, v in have.items() if k not in self.columns}
        for name, column in self.fields.items():
            if column not in have:
                raise DatasetError(
                    f"{describe_row(self.source, row)} has no column {column!r} "
                    f"(dataset.fields.{name}); columns: {', '.join(map(str, have))}"
                )
            if name in out:
                raise DatasetError(
                    f"{describe_row(self.source, row)}: dataset.fields.{name} renames "
                    f"{column!r} to {name!r}, but the row already has a column {name!r}; "
                    "rename that one too, or pick another name"
                )
            out[name] = have[column]
        return out
