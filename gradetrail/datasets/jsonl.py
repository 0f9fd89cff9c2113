"""JSONL: one JSON object a line; blank lines are skipped but counted, so a row's
position (its id when it has no id field) is its 1-based line number."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass

from gradetrail._util.jsontext import parsed
from gradetrail.datasets.base import FileSource, Row, open_binary
from gradetrail.errors import DatasetError

__all__ = ["JsonlSource"]


@dataclass(eq=False, repr=False)
class JsonlSource(FileSource):
    """A JSONL file (see :class:`~gradetrail.datasets.base.Source`)."""

    format: str = "jsonl"

    def rows(self) -> Iterator[Row]:
        """Yield each non-blank line's object (read by
        :func:`~gradetrail._util.jsontext.parsed`: the value ``json.loads`` reads, in a
        fraction of its time).

        Raises:
            DatasetError: a missing file, or a line that is not a JSON object (naming it).
        """
        with open_binary(self.path) as f:
            for lineno, raw in enumerate(f, start=1):
                if not raw.strip():
                    continue
                try:
                    row = parsed(raw)
                except ValueError as exc:
                    raise DatasetError(f"{self.path}:{lineno}: not valid JSON ({exc})") from None
                if not isinstance(row, dict):
                    raise DatasetError(f"{self.path}:{lineno}: each line must be a JSON object")
                yield Row(lineno, lineno, row)
