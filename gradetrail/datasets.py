"""Datasets: JSONL rows with stable sample ids, shuffle, limit and a content hash.

Ids are assigned from the file before any shuffle or limit applies, so a sample's id
never depends on the seed: the row's ``id_field`` when present, else its 1-based line
number.
"""

from __future__ import annotations

import hashlib
import json
import random
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail.errors import DatasetError

__all__ = ["Sample", "file_sha256", "iter_jsonl", "load_samples"]


@dataclass(frozen=True, slots=True)
class Sample:
    """One dataset row.

    Attributes:
        index: position in the run's input order (after shuffle and limit), 0-based.
        id: the stable sample id (a string).
        row: the row's fields, as parsed from JSON.
        line: the row's 1-based line number in the file.
        cluster: the row's cluster value (as a string), or None.
    """

    index: int
    id: str
    row: dict[str, Any]
    line: int
    cluster: str | None = None


def file_sha256(path: Path) -> str:
    """SHA-256 hex digest of a file's bytes.

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


def iter_jsonl(path: Path, id_field: str) -> Iterator[tuple[str, int, dict[str, Any]]]:
    """Yield ``(sample_id, line_number, row)`` for each non-blank line of a JSONL file.

    Raises:
        DatasetError: a missing file, a line that is not a JSON object, or a duplicate id.
    """
    seen: set[str] = set()
    try:
        f = path.open("rb")
    except FileNotFoundError:
        raise DatasetError(f"{path}: file not found; check the path in the spec") from None
    except OSError as exc:
        raise DatasetError(f"{path}: cannot read ({exc.strerror})") from None
    with f:
        for lineno, raw in enumerate(f, start=1):
            if not raw.strip():
                continue
            try:
                row = json.loads(raw)
            except ValueError as exc:
                raise DatasetError(f"{path}:{lineno}: not valid JSON ({exc})") from None
            if not isinstance(row, dict):
                raise DatasetError(f"{path}:{lineno}: each line must be a JSON object")
            value = row.get(id_field)
            sample_id = str(lineno) if value is None else str(value)
            if sample_id in seen:
                raise DatasetError(
                    f"{path}:{lineno}: duplicate sample id {sample_id!r} in field "
                    f"'{id_field}'; ids must be unique"
                )
            seen.add(sample_id)
            yield sample_id, lineno, row


def load_samples(
    path: Path,
    *,
    id_field: str = "id",
    shuffle_seed: int | None = None,
    limit: int | None = None,
    cluster_field: str | None = None,
) -> list[Sample]:
    """Load a JSONL dataset as samples in run order.

    Args:
        path: the JSONL file.
        id_field: row field holding the id (fallback: 1-based line number).
        shuffle_seed: shuffle with ``random.Random(seed)`` after ids are assigned.
        limit: keep the first ``limit`` samples after the shuffle.
        cluster_field: row field whose value groups samples into clusters.

    Returns:
        Samples with ``index`` 0..n-1 in run order.

    Raises:
        DatasetError: see :func:`iter_jsonl`; an empty dataset; a missing cluster field.
    """
    entries = list(iter_jsonl(path, id_field))
    if not entries:
        raise DatasetError(f"{path}: the dataset has no rows")
    if shuffle_seed is not None:
        random.Random(shuffle_seed).shuffle(entries)
    if limit is not None:
        entries = entries[:limit]
    samples = []
    for index, (sample_id, lineno, row) in enumerate(entries):
        cluster = None
        if cluster_field is not None:
            if cluster_field not in row:
                raise DatasetError(
                    f"{path}:{lineno}: row has no cluster field '{cluster_field}'; "
                    "add it or remove dataset.cluster_field"
                )
            cluster = str(row[cluster_field])
        samples.append(Sample(index, sample_id, row, lineno, cluster))
    return samples
