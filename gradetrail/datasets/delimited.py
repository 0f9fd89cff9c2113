"""CSV and TSV, read with the standard ``csv`` module: a header line names the columns,
quoted values may hold the delimiter and newlines (of any length: a long document in
one cell is read whole), blank lines are skipped. Values stay
strings unless ``dataset.types`` declares a column's type (``int``, ``float``, ``bool``,
``json``; an empty cell in a declared column is null). A row's position (its id without
an id field) is its 1-based record number, the header not counted; errors name the line
the record starts on."""

from __future__ import annotations

import csv
import json
import math
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradetrail.datasets.base import FileSource, Row, head_is_utf16, not_utf8_at
from gradetrail.errors import DatasetError

__all__ = ["CsvSource", "TsvSource"]

#: the longest value a cell may hold: the ``csv`` module's default (131,072 characters)
#: refused a long document in one cell as malformed, which JSONL and Parquet read whole
MAX_FIELD_CHARS = 2**31 - 1  # the largest the csv module takes on every platform

#: the separators a delimited file may use, ours or another (then named in errors)
_SEPARATORS = (",", ";", "\t", "|")

_TRUE = {"true", "1", "yes", "y", "t"}
_FALSE = {"false", "0", "no", "n", "f"}


class _NotAscii(ValueError):
    """A number written with digits other than ASCII 0-9."""


def _check_ascii(text: str) -> None:
    """Refuse a number with digits other than ASCII 0-9: Python's ``int`` and ``float``
    read any script's decimal digits, so ``"٥"`` (Arabic-Indic five) was 5 and ``"1٥"``
    15, where JSON, Parquet and a spreadsheet's CSV write only ASCII digits: such a cell
    is text (declare the column ``str``) or a data-entry slip to fix."""
    if not text.isascii():
        raise _NotAscii(text)


def _to_int(text: str) -> int:
    if "_" in text:  # Python reads "1_000"; a spreadsheet's number never has one
        raise ValueError("underscore")
    _check_ascii(text)
    return int(text)


def _to_float(text: str) -> float:
    if "_" in text:  # as for int: Python reads "1_000.5"; a spreadsheet's number never
        raise ValueError("underscore")
    _check_ascii(text)
    value = float(text)
    if not math.isfinite(value):
        raise ValueError("not finite")
    return value


def _to_bool(text: str) -> bool:
    folded = text.strip().casefold()
    if folded in _TRUE:
        return True
    if folded in _FALSE:
        return False
    raise ValueError("not true/false, yes/no or 1/0")


_CONVERTERS: dict[str, Callable[[str], Any]] = {
    "str": str,
    "int": _to_int,
    "float": _to_float,
    "bool": _to_bool,
    "json": json.loads,
}


@dataclass
class CsvSource(FileSource):
    """A CSV file (see :class:`~gradetrail.datasets.base.Source`).

    Args:
        path: the file.
        types: column -> type name, for the columns that are not strings (the column
            names are the dataset's, before ``dataset.fields`` renaming).
    """

    format: str = "csv"
    delimiter: str = ","
    types: dict[str, str] = field(default_factory=dict)

    def rows(self) -> Iterator[Row]:
        """Yield each record as ``{column: value}``.

        Raises:
            DatasetError: not UTF-8, no header, a header of one column split by another
                separator (``q;a``), an empty or repeated column name, a row with
                more or fewer values than the header, a value not of its declared type, a
                declared column missing from the header, or malformed quoting.
        """
        name = self.format.upper()
        try:
            f = self.path.open(encoding="utf-8-sig", newline="")
        except FileNotFoundError:
            raise DatasetError(f"{self.path}: file not found; check the path in the spec") from None
        except OSError as exc:
            raise DatasetError(f"{self.path}: cannot read ({exc.strerror})") from None
        if csv.field_size_limit() < MAX_FIELD_CHARS:  # process-wide: never lowered here
            csv.field_size_limit(MAX_FIELD_CHARS)
        with f:
            reader = csv.reader(f, delimiter=self.delimiter, strict=True)
            try:
                yield from self._records(reader, name)
            except UnicodeDecodeError:
                raise DatasetError(_not_utf8(self.path, name)) from None
            except csv.Error as exc:
                found = self._header_separator(reader.line_num)
                if found is not None:  # '"q";"a"': Excel's export where ',' is a decimal point
                    message = self._other_separator(reader.line_num, name, *found)
                    raise DatasetError(message) from None
                hint = ""
                if "expected after '\"'" in str(exc):  # text that opens with a quote
                    hint = (
                        "; a value holding a quote must be quoted whole, its own quotes "
                        'doubled ("say ""hi"" twice")'
                    )
                raise DatasetError(
                    f"{self.path}:{reader.line_num}: malformed {name} ({exc}){hint}"
                ) from None

    def _records(self, reader: Any, name: str) -> Iterator[Row]:
        header = self._header(reader, name)
        converters = self._converters(header, name)
        position = 0
        start = reader.line_num + 1
        for values in reader:
            line, start = start, reader.line_num + 1
            if not values:
                continue  # a blank line
            position += 1
            if len(values) != len(header):
                raise DatasetError(
                    f"{self.path}:{line}: {name} row {position} has {len(values)} values but the "
                    f"header has {len(header)} columns; quote values that hold "
                    f"{'a tab' if self.delimiter == chr(9) else 'a comma'}"
                )
            row: dict[str, Any] = dict(zip(header, values, strict=True))
            for column, convert in converters.items():
                row[column] = self._convert(row[column], convert, column, line, position, name)
            yield Row(position, line, row)

    def _header(self, reader: Any, name: str) -> list[str]:
        for header in reader:
            if header:
                break
        else:
            return []
        for i, column in enumerate(header, start=1):
            if not column.strip():
                raise DatasetError(
                    f"{self.path}:{reader.line_num}: {name} header column {i} has no name; "
                    "name every column"
                )
        other = [s for s in _SEPARATORS if s != self.delimiter and s in header[0]]
        if len(header) == 1 and other:  # 'q;a': every row would be one value
            raise DatasetError(self._other_separator(reader.line_num, name, other[0], header[0]))
        repeated = sorted({c for c in header if header.count(c) > 1})
        if repeated:
            raise DatasetError(
                f"{self.path}:{reader.line_num}: {name} header names column "
                f"{repeated[0]!r} twice; name each column once"
            )
        return header

    def _other_separator(self, line: int, name: str, other: str, header: str) -> str:
        """The error for a header (its text ``header``) whose values ``other`` separates."""
        delimiter = "a tab" if self.delimiter == "\t" else "a comma"
        return (
            f"{self.path}:{line}: {name} header is one column, {header!r}: the file "
            f"separates its values with {other!r}, and {name} values are separated by "
            f"{delimiter}; save it with that separator"
        )

    def _header_separator(self, line: int) -> tuple[str, str] | None:
        """The separator other than ours that splits the header into several columns, and
        the header's text, when ``line`` (where the csv module refused the file) is the
        header's; else None.
        A header quoted with another separator (``"q";"a"``) is refused by the csv module
        as bad quoting before its columns are seen."""
        with self.path.open(encoding="utf-8-sig", newline="") as f:
            first = next(((n, t) for n, t in enumerate(f, start=1) if t.strip()), None)
        if first is None or first[0] != line:
            return None
        text = first[1]
        for other in _SEPARATORS:
            if other == self.delimiter:
                continue
            try:
                columns = next(csv.reader([text], delimiter=other, strict=True))
            except csv.Error:
                continue
            if len(columns) > 1:
                return other, text.strip()
        return None

    def _converters(self, header: list[str], name: str) -> dict[str, Callable[[str], Any]]:
        missing = [c for c in self.types if c not in header]
        if missing and header:
            raise DatasetError(
                f"{self.path}: {name} has no column {missing[0]!r} (dataset.types); columns: "
                f"{', '.join(header)}"
            )
        return {c: _CONVERTERS[t] for c, t in self.types.items() if t != "str"}

    def _convert(
        self,
        text: str,
        convert: Callable[[str], Any],
        column: str,
        line: int,
        position: int,
        name: str,
    ) -> Any:
        if text == "":
            return None
        try:
            return convert(text)
        except ValueError as exc:
            kind = self.types[column]
            why = (
                ": its digits are not the ASCII 0-9 a number is written with"
                if isinstance(exc, _NotAscii)
                else ""
            )
            raise DatasetError(
                f"{self.path}:{line}: {name} row {position}, column {column!r}: {text[:50]!r} is "
                f"not {'an' if kind == 'int' else 'a'} {kind} (dataset.types.{column}){why}; fix "
                "the value or the declared type"
            ) from None


def _not_utf8(path: Path, name: str) -> str:
    """The error for a file that is not UTF-8, naming where (:func:`not_utf8_at`).

    The text decoder reads the file a buffer (8 KiB) at a time, so when it fails the csv
    reader's line is that of the buffer, not of the byte (a line 1843 for a byte on line
    2002): the line is found in the file's bytes instead."""
    if head_is_utf16(path):  # Excel's "Unicode Text"
        return f"{path}:1: {name} file is UTF-16 text; save it as UTF-8 ('CSV UTF-8')"
    return (
        f"{not_utf8_at(path)}: {name} file is not UTF-8 text; save it as UTF-8 (Excel: 'CSV UTF-8')"
    )


@dataclass
class TsvSource(CsvSource):
    """A TSV file: CSV with tabs between values (quoting as in CSV)."""

    format: str = "tsv"
    delimiter: str = "\t"
