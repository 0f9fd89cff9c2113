"""Datasets: rows of every format with stable sample ids, shuffle, limit and a content hash.

:func:`load_samples` is the one entry. Each format is one module returning a
:class:`~gradetrail.datasets.base.Source` (``jsonl``); ids are decided in one place
(:mod:`~gradetrail.datasets.ids`) for every format, before any shuffle or limit, so a
sample's id never depends on the seed: the row's ``id_field`` when present, else its
1-based position in the source (for JSONL, its line number).
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradetrail.datasets.base import Sample, file_sha256
from gradetrail.datasets.ids import IdAssigner
from gradetrail.datasets.jsonl import JsonlSource
from gradetrail.datasets.loading import load_samples
from gradetrail.datasets.samples import Samples

__all__ = ["Sample", "Samples", "file_sha256", "iter_jsonl", "load_samples"]


def iter_jsonl(
    path: Path, id_field: str, named_by: str | None = None
) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Yield ``(sample_id, line_number, row)`` for each non-blank line of a JSONL file,
    ids by the dataset rule (used for replay recordings). ``named_by``: the setting that
    named an ``id_field`` other than the default (the first row must then have it), or None.

    Raises:
        DatasetError: a missing file, a line that is not a JSON object, a first row
            without the ``id_field`` ``named_by`` names, or (once every row has been
            yielded) a duplicate id.
    """
    source = JsonlSource(path)
    assigner = IdAssigner(source, id_field, named_by)
    ids: list[str] = []
    for row in source.rows():
        ids.append(assigner.assign(row, row.fields))
        yield ids[-1], row.line, row.fields
    assigner.check_unique(ids.__getitem__)
