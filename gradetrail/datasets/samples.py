"""The loaded dataset, :class:`Samples`: the samples in run order, kept compact.

Rows are pickled (in this process only; nothing is written) end to end, and ids are
kept the same way as UTF-8, so a row costs its pickled bytes plus its offsets instead of
a dict of Python objects. Rows read in order (no shuffle: the run then reads them in
order) are compressed a block of 1,024 at a time once a dataset's rows pass
:data:`COMPRESS_AFTER_BYTES` (:class:`Blocks`; one decompression a block as the run goes;
a smaller dataset, GSM8K's 0.75 MB say, is held as it is: compressing and reading it back
would cost more time than its memory is worth), shuffled rows stay uncompressed
(:class:`Blob`, read in any order). Past :data:`SPILL_AFTER_BYTES` a store's bytes go
to an unnamed temporary file (in ``TMPDIR``, gone when the process ends) and are read
back with ``os.pread``: a dataset's rows then cost disk and the page cache, not the
process's memory (the 1,000,000 GSM8K rows of ``bench/bench_scale.py``, 115 MB
compressed, hold 16 MB), and a store that cannot write its file keeps its bytes in
memory. A :class:`Sample` is decoded when it is asked
for.
Pickle rather than JSON because Parquet and Hugging Face rows hold values JSON cannot
(timestamps, bytes, decimals) and templates should see them as the format gave them.
"""

from __future__ import annotations

import bisect
import os
import pickle
import tempfile
import zlib
from array import array
from collections.abc import Iterator, Sequence
from typing import IO, Any, overload

from gradetrail.datasets.base import Sample

__all__ = ["COMPRESS_AFTER_BYTES", "SPILL_AFTER_BYTES", "Blob", "Blocks", "Packer", "Samples"]

#: bytes a :class:`Blob` holds in memory before it moves them to its temporary file
SPILL_AFTER_BYTES = 16 * 1024 * 1024
#: bytes of rows a :class:`Blocks` keeps uncompressed before it compresses its blocks
COMPRESS_AFTER_BYTES = 8 * 1024 * 1024


class Blob:
    """Byte strings appended end to end, read back by position.

    The first bytes are in memory; each time :data:`SPILL_AFTER_BYTES` of them gather
    (``spill_after`` for this blob), they are moved to an unnamed temporary file (made on
    the first move, in ``TMPDIR``; the operating system removes it when it is closed or
    the process ends) and read back with ``os.pread``. An item never straddles the two.
    When the file cannot be made or written (no ``TMPDIR``, a full disk), the bytes stay
    in memory: the blob works the same, at the memory it would have cost without a file.
    """

    def __init__(self, spill_after: int | None = None) -> None:
        self.data = bytearray()  # the items from offset ``spilled`` on
        self.ends = array("q")
        self.spilled = 0  # bytes moved to the file: offsets below it are read from there
        self._spill_after = SPILL_AFTER_BYTES if spill_after is None else spill_after
        self._file: IO[bytes] | None = None

    def append(self, item: bytes) -> None:
        """Add one item at the end."""
        self.data += item
        self.ends.append(self.spilled + len(self.data))
        if len(self.data) >= self._spill_after:
            self._spill()

    def _spill(self) -> None:
        """Move the in-memory bytes to the file's end; on failure, stop spilling."""
        try:
            if self._file is None:
                self._file = tempfile.TemporaryFile(prefix="gradetrail-rows-")  # noqa: SIM115
            fd, view, at = self._file.fileno(), memoryview(self.data), self.spilled
            while view:
                written = os.pwrite(fd, view, at)
                view, at = view[written:], at + written
        except OSError:
            self._spill_after = 1 << 62  # keep the rest in memory; what is on file stays
            return
        self.spilled += len(self.data)
        self.data = bytearray()

    def __len__(self) -> int:
        return len(self.ends)

    def _span(self, i: int) -> bytearray | bytes:
        """Item ``i``'s bytes, copied (a slice of the in-memory bytes, or read from the
        file): for the short items most are (ids, rows) a copy costs less than making a
        view of them (measured: ~2,000 instructions less an id)."""
        start, end = self.ends[i - 1] if i else 0, self.ends[i]
        if start >= self.spilled:
            return self.data[start - self.spilled : end - self.spilled]
        assert self._file is not None  # noqa: S101 - bytes below spilled are on file
        data = os.pread(self._file.fileno(), end - start, start)
        if len(data) != end - start:
            raise OSError(f"the dataset's temporary file {self._file.name} was cut short")
        return data

    def __getitem__(self, i: int) -> bytes:
        span = self._span(i)
        return span if isinstance(span, bytes) else bytes(span)

    def text(self, i: int) -> str:
        """Item ``i`` decoded as UTF-8 (lone surrogates passed through)."""
        return self._span(i).decode("utf-8", "surrogatepass")

    def select(self, order: Sequence[int]) -> Blob:
        """A new blob holding the items at ``order``, in that order."""
        out = Blob(self._spill_after)
        for k in order:
            out.append(self[k])
        return out


class Blocks:
    """Byte strings appended end to end, kept a block at a time (a block sealed at
    :attr:`BLOCK_ROWS` items or :attr:`BLOCK_BYTES` bytes) and read back by position.

    The blocks sealed while fewer than ``compress_after`` bytes (default
    :data:`COMPRESS_AFTER_BYTES`) came before them are kept as they are; every later one is
    compressed (zlib level 1), and the last block read is kept decompressed, so reading in
    order costs one decompression a block. For rows read in order (a dataset without a
    shuffle); rows read in a random order belong in a :class:`Blob`. The sealed blocks are
    kept in a :class:`Blob`, so past its bound they are on its temporary file."""

    BLOCK_ROWS = 1024
    BLOCK_BYTES = 256 * 1024

    def __init__(self, compress_after: int | None = None) -> None:
        self._sealed = Blob()  # the sealed blocks (spilled to a file past its bound)
        self._compress_after = COMPRESS_AFTER_BYTES if compress_after is None else compress_after
        self._plain = 0  # how many sealed blocks, the first ones, are not compressed
        self._appended = 0  # bytes appended before the open block
        self._first = array("q")  # each sealed block's first item
        self._ends = array("I")  # each item's end within its block
        self._open = bytearray()
        self._open_first = 0
        self._cached: tuple[int, int, bytes] = (0, 0, b"")  # (first, stop, data): last read

    def append(self, item: bytes) -> None:
        """Add one item at the end."""
        self._open += item
        self._ends.append(len(self._open))
        if (
            len(self._ends) - self._open_first >= self.BLOCK_ROWS
            or len(self._open) >= self.BLOCK_BYTES
        ):
            self._seal()

    def _seal(self) -> None:
        if self._appended < self._compress_after and self._plain == len(self._first):
            self._sealed.append(self._open)
            self._plain += 1
        else:
            self._sealed.append(zlib.compress(self._open, 1))
        self._appended += len(self._open)
        self._first.append(self._open_first)
        self._open = bytearray()
        self._open_first = len(self._ends)

    def __len__(self) -> int:
        return len(self._ends)

    @property
    def nbytes(self) -> int:
        """Bytes held: the sealed blocks as stored (compressed or not, in memory or on the
        temporary file) plus the open block."""
        sealed = self._sealed.ends
        return (sealed[-1] if sealed else 0) + len(self._open)

    def __getitem__(self, i: int) -> bytes:
        first, stop, data = self._cached
        if not first <= i < stop:  # not in the last block read: find it
            if i >= self._open_first:
                first, stop, data = self._open_first, len(self._ends), self._open
            else:
                block = bisect.bisect_right(self._first, i) - 1
                first = self._first[block]
                stop = self._first[block + 1] if block + 1 < len(self._first) else self._open_first
                data = self._sealed[block]
                if block >= self._plain:
                    data = zlib.decompress(data)
                self._cached = (first, stop, data)
        start = self._ends[i - 1] if i > first else 0
        return bytes(data[start : self._ends[i]])

    def select(self, order: Sequence[int]) -> Blocks:
        """A new store holding the items at ``order``, in that order."""
        out = Blocks(self._compress_after)
        for k in order:
            out.append(self[k])
        return out


class Packer:
    """Rows as compact bytes: the pickle of ``(*values, layout)``, the column names kept
    once per layout (the tuple of a row's keys) instead of in every row; a source whose
    rows have more than :attr:`MAX_LAYOUTS` key layouts stores the rest as whole dicts."""

    MAX_LAYOUTS = 1024

    def __init__(self) -> None:
        self.layouts: list[tuple[str, ...]] = []
        self._index: dict[tuple[str, ...], int] = {}

    def pack(self, row: dict[str, Any]) -> bytes:
        """One row's bytes."""
        keys = tuple(row)
        layout = self._index.get(keys)
        if layout is None and len(self.layouts) < self.MAX_LAYOUTS:
            layout = self._index[keys] = len(self.layouts)
            self.layouts.append(keys)
        # the layout last: zip() pairs the names with the values and stops before it
        item = (*row.values(), layout) if layout is not None else (row, -1)
        return pickle.dumps(item, protocol=pickle.HIGHEST_PROTOCOL)

    def unpack(self, data: bytes) -> dict[str, Any]:
        """The row back from its bytes."""
        item = pickle.loads(data)  # noqa: S301 - bytes this process pickled
        layout = item[-1]
        if layout < 0:
            return item[0]
        return dict(zip(self.layouts[layout], item))  # noqa: B905 - the layout is left out


class Samples(Sequence[Sample]):
    """The dataset in run order (after shuffle and limit): a read-only sequence of
    :class:`Sample`, each decoded on access (so ``samples[i] is samples[i]`` is False,
    but they are equal).

    Args:
        ids: the sample ids (UTF-8), by stored position.
        rows: the packed rows, by stored position (a :class:`Blob` or :class:`Blocks`).
        packer: what packed them.
        lines: each stored row's line in the source.
        clusters: each stored row's cluster, or None for all (no cluster field).
        order: run position -> stored position (None: the same).

    Attributes:
        content_hash: SHA-256 hex of the source (the file's bytes; for a Hugging Face
            dataset, its resolved revision and fingerprint); the manifest's dataset hash.
        info: what the manifest records about the source (format, revision, ...).
        warnings: things the user should know but that do not stop the run (an unpinned
            Hugging Face revision, with the SHA to pin; a split of rows whose ids are
            their positions).
        by_position: how many rows of the source had no id field (their ids are their
            positions), before any split or limit.
    """

    def __init__(
        self,
        ids: Blob,
        rows: Blob | Blocks,
        packer: Packer,
        lines: array[int],
        clusters: list[str | None] | None,
        order: array[int] | None,
        *,
        content_hash: str,
        info: dict[str, Any],
        warnings: list[str],
        by_position: int = 0,
    ) -> None:
        self._ids = ids
        self._rows = rows
        self._packer = packer
        self._lines = lines
        self._clusters = clusters
        self._order = order
        self.content_hash = content_hash
        self.info = info
        self.warnings = warnings
        self.by_position = by_position
        self._n = len(order) if order is not None else len(ids)  # read for every sample

    def __len__(self) -> int:
        return self._n

    @overload
    def __getitem__(self, index: int) -> Sample: ...
    @overload
    def __getitem__(self, index: slice) -> list[Sample]: ...
    def __getitem__(self, index: int | slice) -> Sample | list[Sample]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        n = self._n
        if index < 0:
            index += n
        if not 0 <= index < n:
            raise IndexError(index)
        return self._sample(index)

    def _sample(self, index: int) -> Sample:
        """The sample at run position ``index`` (in range: unchecked), decoded."""
        k = self._order[index] if self._order is not None else index
        row = self._packer.unpack(self._rows[k])
        cluster = self._clusters[k] if self._clusters is not None else None
        return Sample(index, self._ids.text(k), row, self._lines[k], cluster)

    def __iter__(self) -> Iterator[Sample]:
        for i in range(self._n):
            yield self._sample(i)

    def id_clusters(self) -> Iterator[tuple[str, str | None]]:
        """Each sample's ``(id, cluster)`` in run order, without decoding its row."""
        order = self._order if self._order is not None else range(len(self._ids))
        clusters = self._clusters
        for k in order:
            sample_id = self._ids.text(k)
            yield sample_id, clusters[k] if clusters is not None else None

    @property
    def ids(self) -> list[str]:
        """The sample ids in run order (without decoding any row)."""
        order = self._order if self._order is not None else range(len(self._ids))
        return [self._ids.text(k) for k in order]
