"""The loaded dataset, :class:`Samples`: the samples in run order, kept compact.

Each row is held as one pickled ``bytes`` object (in this process only; nothing is
written), not as a dict of Python objects, and decoded when a :class:`Sample` is asked
for: a million short rows cost some 100-200 MB this way instead of a gigabyte of dicts.
Pickle rather than JSON because Parquet and Hugging Face rows hold values JSON cannot
(timestamps, bytes, decimals) and templates should see them as the format gave them.
"""

from __future__ import annotations

import pickle
from array import array
from collections.abc import Iterator, Sequence
from typing import Any, overload

from gradetrail.datasets.base import Sample

__all__ = ["Samples"]


class Samples(Sequence[Sample]):
    """The dataset in run order (after shuffle and limit): a read-only sequence of
    :class:`Sample`, each decoded on access (so ``samples[i] is samples[i]`` is False,
    but they are equal).

    Attributes:
        content_hash: SHA-256 hex of the source (the file's bytes; for a Hugging Face
            dataset, its resolved revision and fingerprint); the manifest's dataset hash.
        info: what the manifest records about the source (format, revision, ...).
        warnings: things the user should know but that do not stop the run (an unpinned
            Hugging Face revision, with the SHA to pin).
    """

    def __init__(
        self,
        ids: list[str],
        lines: array[int],
        rows: list[bytes],
        clusters: list[str | None],
        *,
        content_hash: str,
        info: dict[str, Any],
        warnings: list[str],
    ) -> None:
        self._ids = ids
        self._lines = lines
        self._rows = rows
        self._clusters = clusters
        self.content_hash = content_hash
        self.info = info
        self.warnings = warnings

    def __len__(self) -> int:
        return len(self._ids)

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> list[Sample]: ...
    def __getitem__(self, index: int | slice) -> Sample | list[Sample]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        if index < 0:
            index += len(self)
        if not 0 <= index < len(self):
            raise IndexError(index)
        row = pickle.loads(self._rows[index])  # noqa: S301 - bytes this process pickled
        return Sample(index, self._ids[index], row, self._lines[index], self._clusters[index])

    def __iter__(self) -> Iterator[Sample]:
        for i in range(len(self)):
            yield self[i]

    @property
    def ids(self) -> list[str]:
        """The sample ids in run order (without decoding any row)."""
        return list(self._ids)


def pack(row: dict[str, Any]) -> bytes:
    """A row as :class:`Samples` keeps it."""
    return pickle.dumps(row, protocol=pickle.HIGHEST_PROTOCOL)
