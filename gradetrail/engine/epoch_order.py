"""A sample's epochs reach a model-calling scorer (a judge) in epoch order when their
answers are the same, so the same row pays for the judge's request whatever order the
responses land in.

The judge request of a row is its cache key (:mod:`gradetrail.scorers.judge`): two epochs
of one sample that answered alike make the same judge request, and the first to make it
pays while the other is served it (an identical request in flight, or the cache). Which
one is first used to follow the order the model's responses landed in, which differs from
run to run and between executors (Ray's workers answer in their own order): the same spec
wrote different ``results.jsonl`` bytes (the ``judge`` record and each verdict's
``cached`` flag of the rows concerned), locally and on Ray.

Now a row whose answer equals an earlier epoch's still unscored waits for that epoch's
row to end before it is scored: the lower epoch pays, the higher one is served its
response from the cache. Rows whose answers differ never wait for each other. Rows are
taken in order (epoch-major), so an earlier epoch's row is always under way or done when
a later one waits for it.

Rows of different samples that make the same judge request (duplicate samples) still pay
in the order they reach the judge.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field
from typing import Any

__all__ = ["EpochOrder"]


@dataclass(slots=True, eq=False, repr=False)
class _Row:
    """One row under way: its answer once known (None before), and who waits for it."""

    answer: Any = None
    changed: asyncio.Event = field(default_factory=asyncio.Event)


class EpochOrder:
    """The rows under way of each sample, by epoch (one per run, when the scorer calls a
    model and the run has more than one epoch).

    Usage, for each row: :meth:`begin` when it is taken (before its first await),
    :meth:`answered` before it is scored, :meth:`end` when it ends (however it ends).
    """

    def __init__(self) -> None:
        #: sample index -> epoch -> its row, while that row is under way
        self._samples: dict[int, dict[int, _Row]] = {}

    def begin(self, sample: int, epoch: int) -> None:
        """The row ``(sample, epoch)`` (epoch 1-based) is under way."""
        self._samples.setdefault(sample, {})[epoch] = _Row()

    async def answered(self, sample: int, epoch: int, answer: Any) -> None:
        """Record the row's ``answer`` (what its scorer reads: compared with ``==``), then
        wait until no earlier epoch of the sample still under way has the same answer or
        none yet."""
        rows = self._samples[sample]
        mine = rows[epoch]
        mine.answer = answer
        _wake(mine)
        for earlier in range(1, epoch):
            while (row := rows.get(earlier)) is not None and row.answer in (None, answer):
                await row.changed.wait()

    def end(self, sample: int, epoch: int) -> None:
        """The row ``(sample, epoch)`` ended (scored, failed or stopped)."""
        rows = self._samples.get(sample)
        if rows is None:
            return
        row = rows.pop(epoch, None)
        if not rows:
            del self._samples[sample]
        if row is not None:
            _wake(row)


def _wake(row: _Row) -> None:
    """Wake whoever waits on ``row`` (they check again), and arm its event for the next
    change."""
    row.changed.set()
    row.changed = asyncio.Event()
