"""JSONL: one JSON object a line; blank lines are skipped but counted, so a row's
position (its id when it has no id field) is its 1-based line number."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from gradetrail._util.jsontext import Repeated, duplicate_key, parsed
from gradetrail.datasets.base import FileSource, Row, bad_byte, open_binary
from gradetrail.errors import DatasetError

__all__ = ["JsonlSource", "repeated_key"]


@dataclass(eq=False, repr=False)
class JsonlSource(FileSource):
    """A JSONL file (see :class:`~gradetrail.datasets.base.Source`)."""

    format: str = "jsonl"

    def rows(self) -> Iterator[Row]:
        """Yield each non-blank line's object (read by
        :func:`~gradetrail._util.jsontext.parsed`: the value ``json.loads`` reads, in a
        fraction of its time).

        Raises:
            DatasetError: a missing file, a UTF-16 file, or a line that is not a JSON
                object (naming it).
        """
        with open_binary(self.path) as f:
            for lineno, raw in enumerate(f, start=1):
                if lineno == 1 and raw.startswith((b"\xff\xfe", b"\xfe\xff")):
                    raise DatasetError(
                        f"{self.path}:1: JSONL file is UTF-16 text; save it as UTF-8"
                    )
                if lineno == 1 and raw.startswith(b"\xef\xbb\xbf"):  # a UTF-8 byte-order mark
                    raw = raw[3:]  # a file of only a BOM and blank lines has no rows
                if not raw.strip():
                    continue
                try:
                    row = parsed(raw)
                except ValueError as exc:
                    exc = self._why_not_json(raw, lineno, exc)
                    hint = ""
                    if getattr(exc, "lineno", 1) > 1:  # the parser read past the line's end
                        hint = (
                            "; the value goes on past the end of its line, but JSONL holds one "
                            "whole object a line (a JSON array, or objects over several lines, "
                            "belong in a .json file)"
                        )
                    raise DatasetError(
                        f"{self.path}:{lineno}: not valid JSON ({exc}){hint}"
                    ) from None
                if not isinstance(row, dict):
                    hint = (
                        ", and this one is an array (a JSON array of objects belongs in a .json "
                        "file)"
                        if isinstance(row, list)
                        else ""
                    )
                    raise DatasetError(
                        f"{self.path}:{lineno}: each line must be a JSON object{hint}"
                    )
                repeated = duplicate_key(raw, row)
                if repeated is not None:
                    raise DatasetError(f"{self.path}:{lineno}: {repeated_key(repeated)}")
                yield Row(lineno, lineno, row)

    def _why_not_json(self, raw: bytes, lineno: int, exc: ValueError) -> ValueError:
        """The error of reading ``raw`` as UTF-8 JSON text. ``json.loads`` of bytes guesses
        their encoding from the first bytes, so a line that starts with a NUL byte (the
        padding a crash leaves at a file's end) was read as UTF-16 and refused at "line
        2", a value going on past its line; the line's own text says what is wrong.

        Raises:
            DatasetError: the line is not UTF-8 (naming the byte and its column), or
                holds NUL bytes.
        """
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as bad:
            raise DatasetError(
                f"{self.path}:{lineno}: JSONL file is not UTF-8 text ({bad_byte(raw, bad)}); "
                "save it as UTF-8"
            ) from None
        if "\x00" in text:
            raise DatasetError(
                f"{self.path}:{lineno}: the line holds NUL bytes (UTF-16 text without a "
                "byte-order mark, or the padding a crash leaves in a file cut short); save "
                "the file as UTF-8, or remove the line"
            )
        try:
            json.loads(text)
        except ValueError as own:
            return own
        return exc


def repeated_key(repeated: Repeated) -> str:
    """The error for a JSON object naming a key twice: JSON readers keep the last value
    silently, so the other was never seen."""
    text = json.dumps(repeated.value, ensure_ascii=False)
    shown = text if len(text) <= 40 else text[:37] + "..."
    return (
        f"an object names the key {repeated.key!r} twice (JSON readers keep the last "
        f"value, {shown}, and drop the other silently); keep one"
    )
