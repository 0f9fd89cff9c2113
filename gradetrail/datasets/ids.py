"""Sample ids, decided here for every format: the row's ``id_field`` when it has one, else
its 1-based position in the source (for JSONL, its line number). Ids are assigned while
the source is read, before any shuffle or limit, so a sample's id never depends on the
seed; a second row with an id already seen is refused. An ``id_field`` other than the
default ``id`` must be a field of the first row: a misspelled one would otherwise number
every row by position without a word."""

from __future__ import annotations

from array import array
from collections.abc import Callable
from typing import Any

from gradetrail.datasets.base import Row, Source
from gradetrail.errors import DatasetError

__all__ = ["DEFAULT_ID_FIELD", "IdAssigner", "describe_row", "row_at"]

#: the id field every spec has unless it names another; the only one rows may lack
DEFAULT_ID_FIELD = "id"

#: how messages spell each format
FORMAT_NAMES = {
    "jsonl": "JSONL",
    "json": "JSON",
    "csv": "CSV",
    "tsv": "TSV",
    "parquet": "Parquet",
    "hf": "Hugging Face",
}


def row_at(source: Source, line: int) -> str:
    """How an error names a row: ``data.jsonl:7`` (a line) or ``data.parquet: row 7``."""
    if source.locator == "line":
        return f"{source.where}:{line}"
    return f"{source.where}: {source.locator} {line}"


def describe_row(source: Source, row: Row) -> str:
    """How an error names a row with its format: ``q.csv:7: CSV row 6`` (the line its
    record starts on, then its position) or ``q.parquet: Parquet row 6``."""
    name = FORMAT_NAMES.get(source.format, source.format)
    if source.locator == "line":
        return f"{source.where}:{row.line}: {name} row {row.position}"
    return f"{source.where}: {name} {source.locator} {row.position}"


def _float_id(value: float) -> int | float | None:
    """A float id as the id it stands for: a whole number as that integer (pandas writes
    an integer column with a missing value as floats, ``7.0``, where the same data in CSV
    or JSON without the gap gives ``7``), NaN (a missing value, as pandas and Python's
    ``json`` spell it) as no id; any other float as it is."""
    if value != value:
        return None
    if value.is_integer() and abs(value) < 1e16:  # where str() would write an exponent
        return int(value)
    return value


class IdAssigner:
    """Gives each row of one source its sample id; :meth:`check_unique` then refuses
    duplicates. It keeps one 8-byte hash a row, not the ids, so a million rows cost 8 MB
    here rather than a set of a million strings (~120 MB); equal hashes are checked on
    the ids themselves, so a hash collision is never taken for a duplicate.

    Args:
        source: the source being read (for error messages).
        id_field: the row field holding the id (after ``dataset.fields`` renaming).
        named_by: the setting that named an ``id_field`` other than the default
            (``dataset.id_field``), so the first row must have it; None for the default
            ``id``, which may be absent (rows are then numbered by position).
    """

    def __init__(self, source: Source, id_field: str, named_by: str | None = None) -> None:
        self.source = source
        self.id_field = id_field
        self.named_by = named_by
        self._hashes = array("q")
        self._from_field = bytearray()
        self._lines = array("q")

    def assign(self, row: Row, fields: dict[str, Any]) -> str:
        """The sample id of ``row`` (whose renamed fields are ``fields``): its
        ``id_field`` value as text, else its 1-based position.

        A whole-number float is the integer's id (``7.0``: ``"7"``), and NaN is no id
        (the row's position), as a null is.

        Raises:
            DatasetError: ``named_by`` is set and the first row has no ``id_field``
                (naming the field, the fields the row has and the setting to fix), the
                id is empty or blank text, or a bool, a list or a mapping (not text or a
                number).
        """
        if self.named_by and not self._hashes and self.id_field not in fields:
            have = ", ".join(sorted(fields)) or "(none)"
            raise DatasetError(
                f"{row_at(self.source, row.line)}: the first row has no id field "
                f"'{self.id_field}' (it has {have}); fix {self.named_by}, or remove it to "
                "number the rows by position"
            )
        value = fields.get(self.id_field)
        if type(value) is float:  # a column of whole numbers with a gap reads as floats
            value = _float_id(value)
        if value is None:
            sample_id = str(row.position)
        elif type(value) is str:
            sample_id = value
            if not value.strip():  # a CSV's empty cell: no id, where no row can be named
                raise DatasetError(
                    f"{row_at(self.source, row.line)}: the id field '{self.id_field}' is "
                    f"{'empty' if not value else 'blank'}; give the row an id"
                )
        elif not isinstance(value, bool | list | dict | tuple):
            sample_id = str(value)  # a number, a date
        else:  # a bool, list or mapping would become its Python text ("True", "['a']")
            kind = "a bool" if isinstance(value, bool) else f"a {type(value).__name__}"
            raise DatasetError(
                f"{row_at(self.source, row.line)}: the id field '{self.id_field}' holds "
                f"{kind} ({str(value)[:40]}); ids are text or numbers: fix the row, or "
                "name another field with dataset.id_field"
            )
        self._hashes.append(hash(sample_id))
        self._from_field.append(value is not None)
        self._lines.append(row.line)
        return sample_id

    @property
    def by_position(self) -> int:
        """How many rows assigned so far had no ``id_field`` value (numbered by position)."""
        return len(self._from_field) - sum(self._from_field)

    def check_unique(self, id_at: Callable[[int], str]) -> None:
        """Refuse a second row with an id already given (the earliest such row).

        Args:
            id_at: the id of the k-th row assigned (0-based).

        Raises:
            DatasetError: naming the duplicate's row, its id and where the id came from.
        """
        shared = self._shared()
        if not shared:
            return
        first_seen: dict[str, int] = {}
        for k, h in enumerate(self._hashes):
            if h not in shared:
                continue
            sample_id = id_at(k)
            if sample_id in first_seen:
                origin = (
                    f"in field '{self.id_field}'"
                    if self._from_field[k]
                    else f"(the row's position: it has no '{self.id_field}' field)"
                )
                raise DatasetError(
                    f"{row_at(self.source, self._lines[k])}: duplicate sample id {sample_id!r} "
                    f"{origin}; ids must be unique"
                )
            first_seen[sample_id] = k

    def _shared(self) -> set[int]:
        """The hashes given to more than one row. They are sorted a bucket (by hash
        modulo the bucket count) at a time, so only one bucket's Python ints exist at
        once: sorting a million rows' hashes in one list cost ~45 MB."""
        count = max(1, len(self._hashes) // 4096)
        buckets = [array("q") for _ in range(count)]
        for h in self._hashes:
            buckets[h % count].append(h)
        shared: set[int] = set()
        for i in range(count):
            ordered = sorted(buckets[i])
            buckets[i] = array("q")  # freed as it is done
            shared.update(a for a, b in zip(ordered, ordered[1:], strict=False) if a == b)
        return shared
