"""Per-(sample, epoch) values of a run kept in flat typed arrays: no Python object per
row, so a million rows cost a few bytes each (a dict of tuples costs ~150-200 bytes a
row). The results writer and the tally keep their per-row state here.

A row's position is ``index * epochs + epoch - 1`` (``index`` the sample's 0-based index,
``epoch`` 1-based), so walking the positions walks the rows in input order: by sample,
then by epoch. Unused positions hold 0.
"""

from __future__ import annotations

from array import array

__all__ = ["EpochSlots"]


class EpochSlots:
    """Typed arrays indexed by (sample index, epoch), made for the samples expected and
    grown when a row arrives past them.

    Args:
        typecodes: one :mod:`array` type code per array (``"q"``, ``"d"``, ``"B"``...).
        epochs: epochs a sample is expected to have; a row of a later epoch re-lays the
            arrays out for it (a copy, once), so the bound is a hint, not a limit.
        samples: samples expected (a hint): their room is made at once, so a run's
            memory does not climb as its rows arrive (nor keep the slack of growing).

    Attributes:
        arrays: the arrays, in the order of ``typecodes``; read them at :meth:`at`.
        epochs: positions per sample.
    """

    def __init__(self, *typecodes: str, epochs: int = 1, samples: int = 0) -> None:
        self.epochs = max(1, epochs)
        room = max(0, samples) * self.epochs
        self.arrays = [array(code, bytes(array(code).itemsize * room)) for code in typecodes]

    def __len__(self) -> int:
        """Samples with room (some of them may have no row)."""
        return len(self.arrays[0]) // self.epochs

    def at(self, index: int, epoch: int) -> int:
        """The position of (``index``, ``epoch``), making room for it.

        Raises:
            ValueError: a negative index or an epoch below 1.
        """
        if index < 0 or epoch < 1:
            raise ValueError(f"no slot for sample index {index}, epoch {epoch}")
        if epoch > self.epochs:
            self._restride(epoch)
        position = index * self.epochs + epoch - 1
        size = len(self.arrays[0])
        if position >= size:  # grow by an eighth at least: amortized O(1), little slack
            grow = max((index + 1) * self.epochs - size, (size // 8) // self.epochs * self.epochs)
            for a in self.arrays:
                a.frombytes(bytes(a.itemsize * grow))
        return position

    def positions(self, index: int) -> range:
        """The positions of sample ``index``'s epochs (empty past the arrays' end)."""
        start = index * self.epochs
        return range(start, min(start + self.epochs, len(self.arrays[0])))

    def _restride(self, epochs: int) -> None:
        old = self.epochs
        samples = len(self)
        for k, a in enumerate(self.arrays):
            wide = array(a.typecode, bytes(a.itemsize * samples * epochs))
            for i in range(samples):
                wide[i * epochs : i * epochs + old] = a[i * old : i * old + old]
            self.arrays[k] = wide
        self.epochs = epochs
