"""An index of one run's ``results.jsonl``, so a page of a 100,000-row run never parses
the whole file.

:class:`RowIndex` keeps, for every row, where it is in the file and the few fields that
filters and sorting need (state, score, truncated, latency, cost, tokens); a page then
reads only its own rows by offset (:func:`gradetrail.rundir.results.read_row_at`). The index is
keyed by the file's inode, size and modification time: a run still appending rows is
indexed from where the last refresh stopped, and a file replaced by the run's final
rewrite (a new inode) or shrunk is indexed again from the start. Lines come through
:func:`gradetrail.rundir.results.iter_result_spans`, the same parser every reader uses.

An index made with a ``tally_of`` also counts every row in a
:class:`gradetrail.rundir.summary.Tally` (the runner's own totals) as it indexes it, so a run
still being written has its figures so far at the cost of the rows appended since the
last refresh.
"""

from __future__ import annotations

import os
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from pydantic import ValidationError

from gradetrail.errors import UsageError
from gradetrail.rundir.results import (
    RESULTS_FILE,
    iter_result_spans,
    make_row,
    open_run_file,
    parse_row,
    read_row_at,
)
from gradetrail.rundir.summary import Tally
from gradetrail.spec import EvalSpec

__all__ = ["FILTERS", "SORTS", "Entry", "Query", "RowIndex"]

#: sample-table filters: name -> what it keeps
FILTERS: dict[str, str] = {
    "failures": "score below 1 or not scored",
    "errors": "provider or judge error",
    "truncated": "response stopped at max_tokens",
    "judge_errors": "judge error",
}
#: sample-table sort keys (besides file order)
SORTS: tuple[str, ...] = ("score", "latency", "cost", "tokens")


@dataclass(slots=True)
class Entry:
    """One row of the file: where it is and what filters and sorting read."""

    offset: int
    length: int
    position: int
    sample_id: str
    epoch: int
    state: str
    score: float | None
    truncated: bool
    latency: float | None
    cost: float | None
    tokens: int

    def keep(self, name: str) -> bool:
        """Whether the filter ``name`` (a key of :data:`FILTERS`) keeps this row."""
        if name == "failures":
            return self.state != "scored" or self.score is None or self.score < 1.0
        if name == "errors":
            return self.state != "scored"
        if name == "truncated":
            return self.truncated
        if name == "judge_errors":
            return self.state == "judge_error"
        raise ValueError(f"unknown filter {name!r}")


def _number(value: Any) -> float | None:
    return float(value) if isinstance(value, int | float) and not isinstance(value, bool) else None


def _entry(offset: int, length: int, position: int, row: dict[str, Any]) -> Entry:
    epoch = row.get("epoch")
    tokens = sum(
        int(v)
        for v in (row.get("input_tokens"), row.get("output_tokens"))
        if isinstance(v, int) and not isinstance(v, bool)
    )
    return Entry(
        offset=offset,
        length=length,
        position=position,
        sample_id=str(row.get("sample_id")),
        epoch=epoch if isinstance(epoch, int) and not isinstance(epoch, bool) else 1,
        state=str(row.get("state")),
        score=_number(row.get("score")),
        truncated=row.get("truncated") is True,
        latency=_number(row.get("latency_s")),
        cost=_number(row.get("cost_usd")),
        tokens=tokens,
    )


@dataclass(frozen=True)
class Query:
    """One view of the sample table: filters (all must keep a row), a text search over
    prompt, response and target (case-insensitive), a sort key with direction."""

    filters: tuple[str, ...] = ()
    text: str = ""
    sort: str | None = None
    direction: Literal["asc", "desc"] = "asc"

    @property
    def plain(self) -> bool:
        """No filter, no search, file order: the first page needs no index."""
        return not self.filters and not self.text and self.sort is None


@dataclass
class RowIndex:
    """The index of one run directory's ``results.jsonl`` (see the module docstring).

    Attributes:
        run_dir: the run directory.
        entries: one per row, in file order.
        malformed: lines that are not a JSON object (skipped).
        torn: the file ends in a partial line (a row being written, or a killed run).
        tally_of: makes the empty :class:`Tally` every row is counted in (from the file's
            start, again whenever the index is rebuilt); None counts nothing.
        tally: the rows counted so far, or None.
        uncounted: rows the tally could not take (a field of the wrong type).
    """

    run_dir: Path
    entries: list[Entry] = field(default_factory=list)
    malformed: int = 0
    torn: bool = False
    tally_of: Callable[[], Tally] | None = None
    tally: Tally | None = None
    uncounted: int = 0
    _stamp: tuple[int, int, int, int] | None = None
    _end: int = 0
    _by_sample: dict[str, list[int]] = field(default_factory=dict)
    _lock: threading.Lock = field(default_factory=threading.Lock)
    _queries: dict[Query, list[int]] = field(default_factory=dict)

    def refresh(self) -> RowIndex:
        """Bring the index up to date with the file (cheap when nothing changed).

        Raises:
            UsageError: the run directory has no results file (any more).
        """
        path = self.run_dir / RESULTS_FILE
        with self._lock:
            try:
                st = os.stat(path)
            except (FileNotFoundError, NotADirectoryError):
                raise UsageError(
                    f"{self.run_dir}: not a run directory (no {RESULTS_FILE})"
                ) from None
            stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
            if stamp == self._stamp:
                return self
            same_file = self._stamp is not None and self._stamp[:2] == stamp[:2]
            if not same_file or st.st_size < self._end:
                self._reset()
            self._extend(self._end)
            self.torn = st.st_size > self._end
            self._stamp = stamp
            self._queries.clear()
        return self

    @property
    def stamp(self) -> tuple[int, int, int, int] | None:
        """(device, inode, size, mtime) of the file as last indexed; None before."""
        return self._stamp

    @property
    def built(self) -> bool:
        """Whether the file has been indexed at least once (not only being indexed)."""
        return self._stamp is not None

    def fresh(self) -> bool:
        """Whether the index matches the file as it is now (no refresh needed)."""
        try:
            st = os.stat(self.run_dir / RESULTS_FILE)
        except OSError:
            return False
        return self._stamp == (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)

    def _reset(self) -> None:
        self.entries = []
        self.malformed = 0
        self._end = 0
        self._by_sample = {}
        self.tally = self.tally_of() if self.tally_of is not None else None
        self.uncounted = 0

    def _extend(self, start: int) -> None:
        for offset, length, row in iter_result_spans(self.run_dir, start):
            self._end = offset + length
            if row is None:
                self.malformed += 1
                continue
            entry = _entry(offset, length, len(self.entries), row)
            self._by_sample.setdefault(entry.sample_id, []).append(entry.position)
            self.entries.append(entry)
            if self.tally is not None:
                self._count(row)

    def _count(self, row: dict[str, Any]) -> None:
        assert self.tally is not None
        try:  # validated as the runner's rows are: nested records become their models
            self.tally.add(make_row(**row))
        except (ValidationError, ValueError, TypeError):
            self.uncounted += 1

    def figures(self, spec: EvalSpec) -> dict[str, Any] | None:
        """The manifest fields the rows indexed so far decide
        (:meth:`Tally.manifest_figures`), or None when this index counts nothing."""
        with self._lock:
            return None if self.tally is None else self.tally.manifest_figures(spec)

    def select(self, query: Query) -> list[int]:
        """Positions of the rows ``query`` keeps, in its order (searches read the rows
        they test; results are kept until the file changes)."""
        with self._lock:
            found = self._queries.get(query)
        if found is not None:
            return found
        kept: Iterable[Entry] = self.entries
        for name in query.filters:
            kept = [e for e in kept if e.keep(name)]
        if query.text:
            kept = self._search(list(kept), query.text)
        kept = list(kept)
        if query.sort is not None:
            kept = _sorted(kept, query.sort, query.direction == "desc")
        positions = [e.position for e in kept]
        with self._lock:
            if len(self._queries) > 32:
                self._queries.clear()
            self._queries[query] = positions
        return positions

    def _search(self, entries: list[Entry], text: str) -> list[Entry]:
        needle = text.casefold()
        # a needle JSON would not escape can be looked for in the raw line first
        raw_ok = all(ch not in needle for ch in '"\\') and needle.isprintable()
        out = []
        with open_run_file(self.run_dir / RESULTS_FILE) as f:
            for entry in entries:
                f.seek(entry.offset)
                line = f.read(entry.length)
                decoded = line.decode("utf-8", errors="replace")
                if raw_ok and needle not in decoded.casefold():
                    continue
                row = parse_row(line)
                if row is not None and any(
                    isinstance(row.get(k), str) and needle in row[k].casefold()
                    for k in ("prompt", "system", "response", "target")
                ):
                    out.append(entry)
        return out

    def rows(self, positions: Iterable[int]) -> list[dict[str, Any] | None]:
        """The rows at ``positions``, read by offset; None where the file changed under
        the index (the caller refreshes and retries)."""
        entries = self.entries  # a refresh may replace the list meanwhile
        return [
            read_row_at(self.run_dir, entries[p].offset, entries[p].length)
            if p < len(entries)
            else None
            for p in positions
        ]

    def sample_positions(self, sample_id: str) -> list[int]:
        """Positions of every row (epoch) of one sample, in file order."""
        return list(self._by_sample.get(sample_id, ()))

    def state_counts(self) -> dict[str, int]:
        """Rows per state."""
        out: dict[str, int] = {}
        for e in self.entries:
            out[e.state] = out.get(e.state, 0) + 1
        return out


def _sorted(entries: list[Entry], key: str, descending: bool) -> list[Entry]:
    """Stable sort on ``key``; rows without a value come last in either direction."""
    attr = {"score": "score", "latency": "latency", "cost": "cost", "tokens": "tokens"}[key]
    present = [e for e in entries if getattr(e, attr) is not None]
    missing = [e for e in entries if getattr(e, attr) is None]
    present.sort(key=lambda e: getattr(e, attr), reverse=descending)
    return present + missing
