"""What every dataset format shares: the :class:`Sample`, the :class:`Source` a format
module returns, and file hashing."""

from __future__ import annotations

import hashlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Protocol

from gradetrail.errors import DatasetError

__all__ = ["Sample", "Source", "file_sha256"]


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Sample:
    """One dataset row.

    Attributes:
        index: position in the run's input order (after shuffle and limit), 0-based.
        id: the stable sample id (a string).
        row: the row's fields (after ``dataset.fields`` renaming).
        line: where the row is in the source, 1-based: its line for JSONL and CSV/TSV
            (the line its record starts on), its position for JSON, Parquet and
            Hugging Face datasets.
        cluster: the row's cluster value (as a string), or None.
    """

    index: int
    id: str
    row: dict[str, Any]
    line: int
    cluster: str | None = None


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True, eq=False, repr=False)
class Row:
    """A row as a format reads it, before ids are assigned.

    Attributes:
        position: 1-based position in the source; the id of a row without an id field.
        line: where an error about this row should point (a line, or the position).
        fields: the row's fields, as the format parsed them.
    """

    position: int
    line: int
    fields: dict[str, Any]


class Source(Protocol):
    """A readable dataset in one format (one module of :mod:`gradetrail.datasets` each).

    Attributes:
        where: how errors name it, e.g. ``data/q.csv`` or ``hf openai/gsm8k``.
        format: the format's name (``jsonl``, ``csv``, ``parquet``, ``hf``...).
        locator: the word errors put before a row's ``line`` (``line`` or ``row``).
    """

    where: str
    format: str
    locator: str

    def rows(self) -> Iterator[Row]:
        """Yield the rows in source order, streaming (never the whole source at once).

        Raises:
            DatasetError: one line naming the source, the format and the row or column.
        """
        ...

    def content_hash(self) -> str:
        """SHA-256 hex of what decides the rows (the file's bytes; for a Hugging Face
        dataset its resolved revision and fingerprint); it enters the identity hash."""
        ...

    def info(self) -> dict[str, Any]:
        """What the manifest records about the source (format, revision, fingerprint)."""
        ...


@dataclass(eq=False, repr=False)
class FileSource:
    """Shared part of the file formats: the path, its hash, its manifest info."""

    path: Path
    format: str = ""
    locator: str = "line"
    warnings: list[str] = field(default_factory=list)

    @property
    def where(self) -> str:
        return str(self.path)

    def content_hash(self) -> str:
        return file_sha256(self.path)

    def info(self) -> dict[str, Any]:
        return {"format": self.format}


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes, read in 1 MiB chunks.

    Raises:
        DatasetError: the file cannot be read.
    """
    h = hashlib.sha256()
    try:
        with path.open("rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from None
    return h.hexdigest()


def open_binary(path: Path) -> Any:
    """Open a dataset file for reading bytes.

    Raises:
        DatasetError: missing or unreadable, naming the file.
    """
    try:
        return path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found; check the path in the spec") from None
    except IsADirectoryError:
        raise DatasetError(f"{path}: is a directory, not a dataset file") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from None


#: the encodings a file that is not UTF-8 was likely saved in (for errors)
LIKELY_ENCODING = "likely Windows-1252 or Latin-1"


def head_is_utf16(path: Path) -> bool:
    """Whether the file at ``path`` starts with a UTF-16 byte-order mark."""
    with path.open("rb") as f:
        return f.read(2) in (b"\xff\xfe", b"\xfe\xff")


def bad_byte(raw: bytes, exc: UnicodeDecodeError) -> str:
    """``byte 0xe9 at column 4; likely Windows-1252 or Latin-1``: what an error says of the
    first byte of the line ``raw`` that is not UTF-8 (``exc``: its decoding error)."""
    return f"byte 0x{raw[exc.start]:02x} at column {exc.start + 1}; {LIKELY_ENCODING}"


def not_utf8_at(path: Path) -> str:
    """Where the first byte of the file at ``path`` that is not UTF-8 is, for an error:
    ``data.csv:2002 (byte 0xe9 at column 4; likely ...)``, or the path alone when every
    line decodes.

    Each line is decoded on its own: a newline byte is never part of another character
    in UTF-8, so a line decodes on its own exactly when it does within the file.

    Raises:
        OSError: the file cannot be read.
    """
    with path.open("rb") as f:
        for lineno, raw in enumerate(f, start=1):
            try:
                raw.decode("utf-8")
            except UnicodeDecodeError as exc:
                return f"{path}:{lineno} ({bad_byte(raw, exc)})"
    return str(path)
