"""The viewer's pages of runs: the runs list, one run (its summary, histogram and table
of samples), its live progress, and one sample's page with previous and next."""

from __future__ import annotations

import threading
from collections.abc import Iterable
from typing import Any

from starlette.background import BackgroundTask
from starlette.requests import Request
from starlette.responses import JSONResponse, Response

from gradetrail.errors import UsageError
from gradetrail.rundir.agreement import manifest_reducer
from gradetrail.rundir.manifest import Manifest
from gradetrail.rundir.results import RESULTS_FILE, count_result_lines, iter_result_spans
from gradetrail.rundir.truncation import counted_score, policy_of
from gradetrail.stats.reducers import reduce_scores
from gradetrail.view import pages
from gradetrail.view.index import Entry, Query
from gradetrail.view.render import (
    Pages,
    Renderer,
    back_at,
    no_rows,
    params_of,
    sample_id_of,
    size_of,
    summary_of,
)
from gradetrail.view.store import RunInfo, RunStore

__all__ = ["GROUP_IDS", "GROUP_ROWS", "STREAM_BYTES", "RunPages"]

#: a results file larger than this has its unfiltered pages streamed until its index is
#: built (in the background); smaller ones are indexed at once (a few ms)
STREAM_BYTES = 8 << 20
#: error rows the run page groups (the filtered table's first ones), and sample ids it
#: names a group
GROUP_ROWS = 5000
GROUP_IDS = 5


class RunPages(Pages):
    """The pages of runs and samples over one :class:`RunStore`."""

    def __init__(self, store: RunStore, renderer: Renderer) -> None:
        super().__init__(store, renderer)
        self._samples: dict[Any, tuple[Any, list[float | None]]] = {}
        self._lock = threading.Lock()

    def runs_page(self, request: Request) -> Response:
        """Every run directory under the root, filtered and sorted by the URL, one page
        of :data:`~gradetrail.view.pages.RUNS_PER_PAGE` (``page``, ``per``) at a time
        (the live progress and figures of the runs on it only); the sweeps, each with
        its cells."""
        from gradetrail.view import sweeps

        runs = [r for r in self.store.runs() if not sweeps.is_sweep_dir(r.path)]
        sweep_records, in_sweeps = sweeps.sweeps_by_run(self)
        matched = pages.filter_runs(runs, request.query_params)
        page = pages.paginate(len(matched), *pages.runs_page_of(request.query_params))
        shown = matched[page.start : page.stop]
        statuses = sorted({r.status for r in runs})
        return self.render(
            "runs.html",
            runs=shown,
            page=page,
            done=self._rows_written(shown),
            partial={r.name: p for r in shown if r.live and (p := self._live_figures(r))},
            total=len(runs),
            statuses=statuses,
            params=dict(request.query_params),
            live=any(r.live for r in shown),
            sweeps=sweep_records,
            in_sweeps=in_sweeps,
        )

    def run_page(self, request: Request) -> Response:
        """One run: its summary, score histogram, counts, and a page of its samples."""
        info = self.store.info(request.path_params["run"])
        if info.manifest is None:
            return self.render("run_unreadable.html", 200, info=info)
        query, number, per = pages.parse_query(request.query_params)
        partial = self._live_figures(info)
        table = self._table(info, query, number, per)
        m = partial or info.manifest
        groups = self._error_groups(table["index"], query)
        response = self.render(
            "run.html",
            error_groups=groups,
            info=info,
            m=m,
            partial=partial is not None,
            counting=partial is None and self.store.counting(info.path),
            lines=summary_of(m, info.path, _withheld(info))["lines"],
            withheld=_withheld(info),
            chart=_chart_shown(info),
            query=query,
            params=params_of(request),
            **table,
        )
        if table["streamed"]:  # build the index once this page is sent
            response.background = BackgroundTask(self.store.warm, info.path)
        return response

    def scores_chart(self, request: Request) -> Response:
        """The run's per-sample score distribution as an SVG image (its own request, so
        indexing a large run's rows never delays the run page)."""
        info = self.store.info(request.path_params["run"])
        bars = self._histogram(info) or []
        svg = self.renderer.env.get_template("scores.svg").render(bars=bars, int=pages.fmt_int)
        return Response(svg, media_type="image/svg+xml", headers={"cache-control": "no-cache"})

    def _live_figures(self, info: RunInfo) -> Manifest | None:
        """:meth:`RunStore.live_figures`, waiting for the rows to be counted only when the
        results file is small enough to index at once (:data:`STREAM_BYTES`): a larger
        one is counted in the background, so no page waits, and its figures are shown
        from the first request after that."""
        small = RESULTS_FILE in info.refused or size_of(info.path / RESULTS_FILE) <= STREAM_BYTES
        return self.store.live_figures(info, wait=small)

    def _rows_written(self, runs: list[RunInfo]) -> dict[str, int]:
        """Rows each unfinished run has written so far (its live progress without
        JavaScript, and how far a killed or interrupted run got), counted without parsing
        (:meth:`RunStore.rows_written`)."""
        out = {}
        for info in runs:
            if info.manifest is not None and info.status != "complete":
                written = self.store.rows_written(info.path)
                if written is not None:
                    out[info.name] = written
        return out

    def _table(self, info: RunInfo, query: Query, number: int, per: int) -> dict[str, Any]:
        """The page of sample rows ``query`` asks for. Unfiltered pages in file order are
        streamed from the file (stopping after the page) while no up-to-date index exists,
        so the first page of a large run never waits for one; anything else uses it."""
        if RESULTS_FILE in info.refused:
            return no_rows(info, per, UsageError(info.refused[RESULTS_FILE]))
        if (
            query.plain
            and size_of(info.path / RESULTS_FILE) > STREAM_BYTES
            and self.store.fresh_index(info.path) is None
        ):
            try:
                return self._streamed(info, number, per)
            except UsageError as exc:
                return no_rows(info, per, exc)
        try:
            index = self.store.index(info.path)
        except UsageError as exc:
            return no_rows(info, per, exc)
        for _ in range(3):  # the file may be replaced between select and read
            positions = index.select(query) if not query.plain else range(len(index.entries))
            page = pages.paginate(len(positions), number, per)
            chosen = list(positions[page.start : page.stop])
            rows = index.rows(chosen)
            if all(r is not None for r in rows):
                break
            index = self.store.index(info.path)
        else:
            rows = [r for r in rows if r is not None]
        return {"rows": rows, "page": page, "index": index, "streamed": False, "problem": None}

    def _error_groups(self, index: Any, query: Query) -> list[dict[str, Any]]:
        """The error rows the table lists (when its filters keep only failures or errors),
        grouped by what went wrong (state, kind, type, status and message), most rows
        first: ``rows``, those fields, and the first :data:`GROUP_IDS` sample ids. Reads
        at most :data:`GROUP_ROWS` error rows; none without an index."""
        if index is None or not set(query.filters) & {"failures", "errors", "judge_errors"}:
            return []
        positions = [i for i in (index.select(query)) if index.entries[i].state != "scored"][
            :GROUP_ROWS
        ]
        groups: dict[tuple[Any, ...], dict[str, Any]] = {}
        for row in index.rows(positions):
            if row is None:
                continue
            error = row.get("error") if isinstance(row.get("error"), dict) else {}
            fields = {
                "state": row.get("state"),
                "kind": error.get("kind"),
                "error_type": error.get("error_type"),
                "status": error.get("status"),
                "message": error.get("message"),
            }
            key = tuple(str(v) for v in fields.values())
            group = groups.setdefault(key, {**fields, "rows": 0, "ids": []})
            group["rows"] += 1
            if len(group["ids"]) < GROUP_IDS:
                group["ids"].append(row.get("sample_id"))
        return sorted(groups.values(), key=lambda g: -g["rows"])

    def _streamed(self, info: RunInfo, number: int, per: int) -> dict[str, Any]:
        total = count_result_lines(info.path)
        page = pages.paginate(total, number, per)
        rows: list[dict[str, Any]] = []
        for i, (_, _, row) in enumerate(iter_result_spans(info.path)):
            if i >= page.stop:
                break
            if i >= page.start and row is not None:
                rows.append(row)
        return {"rows": rows, "page": page, "index": None, "streamed": True, "problem": None}

    def _histogram(self, info: RunInfo) -> list[pages.Bar] | None:
        """Bars over each sample's score: its rows in ``results.jsonl`` (through the
        run's index) reduced by the run's ``run.reducer`` and ``run.truncated``, as the
        summary's mean is; kept until the file changes. Never ``samples.jsonl``, which no
        check holds against the manifest (edited to all 1s, it drew every sample right
        beside a mean of 0.75). None for a run whose score is not shown
        (:func:`_chart_shown`)."""
        if not _chart_shown(info) or info.manifest is None:
            return None
        try:
            index = self.store.index(info.path)
        except (UsageError, OSError):
            return None
        key = (info.path, index.stamp)
        with self._lock:
            cached = self._samples.get(info.path)
        if cached is None or cached[0] != key:
            cached = (key, _sample_scores(index.entries, info.manifest.model_dump(mode="json")))
            with self._lock:
                self._samples[info.path] = cached
        return pages.histogram(cached[1])

    def progress(self, request: Request) -> Response:
        """A running run's progress as JSON (polled by the page's script): status, live,
        rows written (complete lines of ``results.jsonl``, counted incrementally:
        :meth:`RunStore.rows_written`), rows expected; with ``?figures=1``, also
        ``partial``: the run page's summary lines (label, text) and rows per state
        computed from the rows so far (:meth:`RunStore.live_figures`), null when there
        are none."""
        info = self.store.info(request.path_params["run"])
        data: dict[str, Any] = {"status": info.status, "live": info.live}
        if request.query_params.get("figures") == "1":
            partial = self._live_figures(info)
            data["partial"] = None if partial is None else summary_of(partial, info.path)
        # rows counted without parsing, only those appended since the last poll: the
        # row index (every row parsed) was built here, the first poll of a large run
        # waiting for all of it
        done = self.store.rows_written(info.path) or 0
        return JSONResponse(data | {"rows": done, "expected": info.rows_expected})

    def sample_page(self, request: Request) -> Response:
        """Every epoch of one sample, with everything needed to audit it."""
        info = self.store.info(request.path_params["run"])
        if RESULTS_FILE in info.refused:
            raise UsageError(info.refused[RESULTS_FILE])
        sample_id = sample_id_of(request)
        rows = self.sample_rows(info, sample_id)
        if not rows:
            return self.problem(
                "No such sample",
                f"run {info.name} has no row for sample id {sample_id!r}.",
                404,
            )
        back = request.query_params.get("back", "")
        back = back if back.startswith("?") else ""
        steps = self._steps(info, sample_id, back)
        return self.render(
            "sample.html",
            info=info,
            sample_id=sample_id,
            rows=rows,
            back=back,
            steps=steps,
        )

    def _steps(self, info: RunInfo, sample_id: str, back: str) -> dict[str, Any] | None:
        """Where the sample is in the list the run page showed (its filters, search and
        sort, from ``back``): the previous and next sample ids of that list, each with
        the ``back`` of the table page that lists it, the sample's place and the list's
        length; None when the sample is not in it."""
        from starlette.datastructures import QueryParams

        query, _, per = pages.parse_query(QueryParams(back[1:]))
        try:
            index = self.store.index(info.path)
            positions = index.select(query) if not query.plain else range(len(index.entries))
            first: dict[str, int] = {}  # sample id -> its first row's place in the list
            for place, i in enumerate(positions):
                first.setdefault(index.entries[i].sample_id, place)
        except (UsageError, IndexError):
            return None
        ids = list(first)
        if sample_id not in first:
            return None
        at = ids.index(sample_id)
        prev_id = ids[at - 1] if at > 0 else None
        next_id = ids[at + 1] if at < len(ids) - 1 else None
        return {
            "prev": prev_id,
            "next": next_id,
            "prev_back": back_at(back, first[prev_id] // per + 1) if prev_id else back,
            "next_back": back_at(back, first[next_id] // per + 1) if next_id else back,
            "number": at + 1,
            "total": len(ids),
            "filtered": not query.plain,
        }

    def sample_rows(self, info: RunInfo, sample_id: str) -> list[dict[str, Any]]:
        try:
            index = self.store.index(info.path)
        except UsageError:
            return []
        rows = index.rows(index.sample_positions(sample_id))
        if any(r is None for r in rows):
            index = self.store.index(info.path)
            rows = index.rows(index.sample_positions(sample_id))
        return sorted((r for r in rows if r is not None), key=lambda r: r.get("epoch") or 0)


def _chart_shown(info: RunInfo) -> bool:
    """Whether the run page draws its score distribution: an ended run whose results file
    is read and whose score is shown (its rows agree with its manifest)."""
    m = info.manifest
    return (
        m is not None
        and m.status != "running"
        and RESULTS_FILE not in info.refused
        and info.score_shown
        and (info.path / RESULTS_FILE).exists()
    )


def _sample_scores(entries: Iterable[Entry], manifest: dict[str, Any]) -> list[float | None]:
    """Each sample's score, in first-row order: its rows' counted scores
    (:func:`~gradetrail.rundir.truncation.counted_score`) reduced by the manifest's
    reducer; None for a sample with nothing to reduce."""
    name, k = manifest_reducer(manifest)
    policy = policy_of(manifest)
    per: dict[str, list[float]] = {}
    for e in entries:
        kept = counted_score({"state": e.state, "truncated": e.truncated, "score": e.score}, policy)
        values = per.setdefault(e.sample_id, [])
        if kept is not None:
            values.append(float(kept))
    return [reduce_scores(v, name, k) if v else None for v in per.values()]  # type: ignore[arg-type]


def _withheld(info: RunInfo) -> str | None:
    """Why the run page shows no score for ``info`` (one line), or None when it does."""
    if info.disagrees is not None:
        return "results.jsonl disagrees with the manifest (see above)"
    if not info.checked:
        return "its rows are being checked against the manifest (reload)"
    return None
