"""JSON: one array of objects (``[{...}, {...}]``); a row's position is its 1-based index
in the array. The file is parsed whole (JSON has no streaming form in the standard
library): prefer JSONL or Parquet for millions of rows."""

from __future__ import annotations

import json
from collections.abc import Iterator
from dataclasses import dataclass

from gradetrail._util.jsontext import duplicate_key
from gradetrail.datasets.base import FileSource, Row, not_utf8_at, open_binary
from gradetrail.datasets.jsonl import repeated_key
from gradetrail.errors import DatasetError

__all__ = ["JsonArraySource"]


@dataclass
class JsonArraySource(FileSource):
    """A JSON array file (see :class:`~gradetrail.datasets.base.Source`)."""

    format: str = "json"
    locator: str = "item"

    def rows(self) -> Iterator[Row]:
        """Yield each item of the array.

        Raises:
            DatasetError: not JSON, not an array, or an item that is not an object.
        """
        with open_binary(self.path) as f:
            try:
                raw = f.read()
                data = json.loads(raw)
            except UnicodeDecodeError:
                raise DatasetError(
                    f"{not_utf8_at(self.path)}: JSON file is not UTF-8 text; save it as UTF-8"
                ) from None
            except ValueError as exc:
                raise DatasetError(
                    f"{self.path}:{getattr(exc, 'lineno', '?')}: not valid JSON ({exc}); a .json "
                    "dataset is one array of objects (JSON Lines files end in .jsonl)"
                ) from None
        if not isinstance(data, list):
            raise DatasetError(
                f"{self.path}: a JSON dataset must be an array of objects, not a "
                f"{type(data).__name__}; use [{{...}}, ...] or JSON Lines (.jsonl)"
            )
        repeated = duplicate_key(raw, data)
        if repeated is not None:
            at = f" item {repeated.item}" if repeated.item is not None else ""
            raise DatasetError(f"{self.path}: JSON{at}: {repeated_key(repeated)}")
        for position, item in enumerate(data, start=1):
            if not isinstance(item, dict):
                raise DatasetError(
                    f"{self.path}: JSON item {position} is a {type(item).__name__}; each item "
                    "must be an object"
                )
            yield Row(position, position, item)
