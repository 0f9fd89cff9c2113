"""What the viewer's pages show, computed apart from HTTP: the runs table's filters and
sort, the sample table's query and pagination, the score histogram, number formats."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

from gradetrail.view.index import FILTERS, SORTS, Query
from gradetrail.view.store import RunInfo

__all__ = [
    "Page",
    "filter_runs",
    "fmt_cost",
    "fmt_num",
    "histogram",
    "paginate",
    "parse_query",
    "query_string",
    "runs_page_of",
]

PER_PAGE = 50
MAX_PER_PAGE = 500
#: runs a page of the runs table lists (``per`` sets it, 10 to :data:`MAX_PER_PAGE`)
RUNS_PER_PAGE = 100
RUN_SORTS = ("date", "name", "model", "status", "samples", "mean", "cost", "tokens", "wall")


def fmt_num(x: Any, digits: int = 4) -> str:
    """A number with ``digits`` decimals, or ``n/a``."""
    if not isinstance(x, int | float) or isinstance(x, bool):
        return "n/a"
    if isinstance(x, float) and not math.isfinite(x):
        return "n/a"
    return f"{x:.{digits}f}"


def fmt_cost(x: Any) -> str:
    """USD with four decimals, or ``n/a`` when unknown."""
    return "n/a" if not isinstance(x, int | float) else f"${x:.4f}"


def fmt_int(x: Any) -> str:
    """An integer with thousands separators."""
    return f"{x:,}" if isinstance(x, int) and not isinstance(x, bool) else "n/a"


def query_string(params: Mapping[str, Any], **changes: Any) -> str:
    """``?a=1&b=2`` from ``params`` with ``changes`` applied (None removes a key; lists
    repeat the key), so every link keeps the rest of the view."""
    merged: dict[str, Any] = {**params, **changes}
    pairs: list[tuple[str, str]] = []
    for key, value in merged.items():
        if value is None or value == "" or value == []:
            continue
        for item in value if isinstance(value, list | tuple) else [value]:
            pairs.append((key, str(item)))
    # a sample id holding a lone surrogate round-trips (see app._sample_id)
    return "?" + urlencode(pairs, errors="surrogatepass") if pairs else "?"


def _int(value: str | None, default: int, low: int, high: int) -> int:
    try:
        number = int(value) if value is not None else default
    except ValueError:
        number = default
    return max(low, min(high, number))


def parse_query(get: Any) -> tuple[Query, int, int]:
    """The sample table's query, page (1-based) and rows a page from the URL's query
    parameters; unknown values are ignored rather than refused (a shared URL from an
    older viewer still opens)."""
    filters = tuple(f for f in FILTERS if f in get.getlist("f"))
    sort = get.get("sort")
    direction = "desc" if get.get("dir") == "desc" else "asc"
    query = Query(
        filters=filters,
        text=(get.get("q") or "").strip()[:200],
        sort=sort if sort in SORTS else None,
        direction=direction,
    )
    return (
        query,
        _int(get.get("page"), 1, 1, 10**9),
        _int(get.get("per"), PER_PAGE, 10, MAX_PER_PAGE),
    )


def runs_page_of(get: Any) -> tuple[int, int]:
    """The runs table's page (1-based) and runs a page from the URL's ``page`` and
    ``per`` (:data:`RUNS_PER_PAGE` by default)."""
    return _int(get.get("page"), 1, 1, 10**9), _int(get.get("per"), RUNS_PER_PAGE, 10, MAX_PER_PAGE)


@dataclass(frozen=True)
class Page:
    """One page of a list: which items, and where the others are."""

    number: int
    pages: int
    total: int
    start: int
    stop: int

    @property
    def has_prev(self) -> bool:
        """There is a page before."""
        return self.number > 1

    @property
    def has_next(self) -> bool:
        """There is a page after."""
        return self.number < self.pages


def paginate(total: int, number: int, per: int) -> Page:
    """Page ``number`` (clamped to the last page) of ``total`` items, ``per`` a page."""
    pages = max(1, math.ceil(total / per))
    number = min(number, pages)
    start = (number - 1) * per
    return Page(number, pages, total, start, min(total, start + per))


def filter_runs(runs: list[RunInfo], get: Any) -> list[RunInfo]:
    """The runs table filtered by name (substring), model (substring) and status, sorted
    by ``sort`` (``dir`` asc or desc; runs without the value last)."""
    name = (get.get("name") or "").strip().casefold()
    model = (get.get("model") or "").strip().casefold()
    status = get.get("status") or ""
    kept = [
        r
        for r in runs
        if name in r.name.casefold()
        and model in r.model.casefold()
        and (not status or r.status == status)
    ]
    key = get.get("sort") if get.get("sort") in RUN_SORTS else "date"
    descending = get.get("dir", "desc" if key == "date" else "asc") == "desc"
    present = [r for r in kept if r.sort_value(key) is not None]
    missing = [r for r in kept if r.sort_value(key) is None]
    present.sort(key=lambda r: r.sort_value(key), reverse=descending)
    return present + missing


@dataclass(frozen=True)
class Bar:
    """One bar of the score histogram."""

    label: str
    count: int
    percent: float


def histogram(scores: Sequence[float | None], bins: int = 10) -> list[Bar]:
    """Bars of the per-sample score distribution: one per value when there are at most
    eleven distinct values (0/1 scores, judge grades), else ``bins`` equal bins over
    [0, 1]; samples without a score get a last bar, ``no score``."""
    values = [s for s in scores if s is not None and math.isfinite(s)]
    missing = len(scores) - len(values)
    distinct = sorted(set(values))
    counts: list[tuple[str, int]]
    if len(distinct) <= 11:
        tally = {v: 0 for v in distinct}
        for v in values:
            tally[v] += 1
        counts = [(f"{v:g}", n) for v, n in tally.items()]
    else:
        edges = [i / bins for i in range(bins + 1)]
        tally_bins = [0] * bins
        for v in values:
            tally_bins[min(bins - 1, max(0, int(v * bins)))] += 1
        counts = [(f"{edges[i]:.1f}–{edges[i + 1]:.1f}", n) for i, n in enumerate(tally_bins)]
    if missing:
        counts.append(("no score", missing))
    top = max((n for _, n in counts), default=0) or 1
    return [Bar(label, n, 100.0 * n / top) for label, n in counts]
