"""Sample ids, decided here for every format: the row's ``id_field`` when it has one, else
its 1-based position in the source (for JSONL, its line number). Ids are assigned while
the source is read, before any shuffle or limit, so a sample's id never depends on the
seed; a second row with an id already seen is refused."""

from __future__ import annotations

from typing import Any

from gradetrail.datasets.base import Row, Source
from gradetrail.errors import DatasetError

__all__ = ["IdAssigner", "describe_row", "row_at"]

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


class IdAssigner:
    """Gives each row of one source its sample id and refuses duplicates.

    Args:
        source: the source being read (for error messages).
        id_field: the row field holding the id (after ``dataset.fields`` renaming).
    """

    def __init__(self, source: Source, id_field: str) -> None:
        self.source = source
        self.id_field = id_field
        self._seen: set[str] = set()

    def assign(self, row: Row, fields: dict[str, Any]) -> str:
        """The sample id of ``row`` (whose renamed fields are ``fields``).

        Raises:
            DatasetError: the id was already given to an earlier row.
        """
        value = fields.get(self.id_field)
        sample_id = str(row.position) if value is None else str(value)
        if sample_id in self._seen:
            origin = (
                f"in field '{self.id_field}'"
                if value is not None
                else f"(the row's position: it has no '{self.id_field}' field)"
            )
            raise DatasetError(
                f"{row_at(self.source, row.line)}: duplicate sample id {sample_id!r} {origin}; "
                "ids must be unique"
            )
        self._seen.add(sample_id)
        return sample_id
