"""The viewer's Starlette application: runs, one run, one sample, a diff of two runs.

Every page is a GET whose state is in its URL (filters, sort, page), so a view can be
shared and the browser's back button works; forms submit with GET, and JavaScript only
adds live progress and opening a diff as soon as two runs are ticked.

Security: templates escape everything (Jinja2 autoescape, and a Content-Security-Policy
that allows no inline script, so even an escaping bug could not run one); run names are
confined to the results root (:meth:`RunStore.resolve`); the Host header must name the
address served or be the IP address the connection arrived on
(:mod:`gradetrail.view.security`), so a page on another site cannot read the viewer
through DNS rebinding; only GET and
HEAD are routed, and nothing is written.
A malformed manifest, a torn or malformed results line, a run still being written or
deleted while viewed get a page that says so, never a crash; a run file the viewer does
not read (linked outside the root, a FIFO, a directory: :mod:`gradetrail.view.files`)
leaves its run listed, with the reason and every figure that does not need that file.
A run still being written shows its figures so far, computed from its rows and marked
partial.
"""

from __future__ import annotations

import json
import os
import threading
from collections import OrderedDict
from pathlib import Path
from typing import Any, get_args
from urllib.parse import parse_qs

import jinja2
from starlette.applications import Starlette
from starlette.background import BackgroundTask
from starlette.exceptions import HTTPException
from starlette.middleware import Middleware
from starlette.requests import Request
from starlette.responses import HTMLResponse, JSONResponse, Response
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

from gradetrail.diff import DISAGREEMENTS, KINDS, RunDiff, diff_runs
from gradetrail.errors import GradetrailError, UsageError
from gradetrail.manifest import Manifest
from gradetrail.results import (
    MANIFEST_FILE,
    RESULTS_FILE,
    SAMPLES_FILE,
    SampleState,
    count_result_lines,
    iter_result_spans,
    read_samples,
)
from gradetrail.view import pages
from gradetrail.view.index import FILTERS, SORTS, Query
from gradetrail.view.security import HostCheck, SecurityHeaders, default_hosts
from gradetrail.view.store import Forbidden, NotFound, RunInfo, RunStore
from gradetrail.view.text import shown as shown_text
from gradetrail.view.text import titled

__all__ = ["create_app", "default_hosts"]

HERE = Path(__file__).parent
#: the sample states, in the order the run page counts them
STATES: tuple[str, ...] = get_args(SampleState)
#: a results file larger than this has its unfiltered pages streamed until its index is
#: built (in the background); smaller ones are indexed at once (a few ms)
STREAM_BYTES = 8 << 20
#: two results files larger than this together are diffed in the background, the page
#: refreshing itself until the diff is ready (the gate reads both runs as well)
DIFF_BYTES = 32 << 20


def _pretty(value: Any) -> str:
    """JSON for people: indented, non-ASCII as is (a str, so autoescape applies)."""
    return json.dumps(value, indent=2, ensure_ascii=False, default=str)


def _environment() -> jinja2.Environment:
    env = jinja2.Environment(
        loader=jinja2.FileSystemLoader(HERE / "templates"),
        autoescape=True,
        undefined=jinja2.StrictUndefined,
        trim_blocks=True,
        lstrip_blocks=True,
    )
    env.filters["pretty"] = _pretty
    env.filters["shown"] = shown_text
    env.filters["titled"] = titled
    env.globals.update(
        qs=pages.query_string,
        num=pages.fmt_num,
        cost=pages.fmt_cost,
        int=pages.fmt_int,
        FILTERS=FILTERS,
        SORTS=SORTS,
        KINDS=KINDS,
        KIND_NAMES=KIND_NAMES,
        STATES=STATES,
    )
    return env


KIND_NAMES = {
    "improved": "improved",
    "regressed": "regressed",
    "changed": "changed response",
    "error": "error / missing",
    "only_baseline": "only in baseline",
    "only_candidate": "only in candidate",
    "same": "same",
}


class Viewer:
    """The pages over one :class:`RunStore`."""

    def __init__(self, store: RunStore) -> None:
        self.store = store
        self.env = _environment()
        self._diffs: OrderedDict[tuple[Any, ...], RunDiff] = OrderedDict()
        self._diff_jobs: set[tuple[Any, ...]] = set()
        self._diff_errors: dict[tuple[Any, ...], GradetrailError] = {}
        self._samples: dict[Path, tuple[Any, list[float | None]]] = {}
        self._lock = threading.Lock()

    def render(self, name: str, status: int = 200, **context: Any) -> HTMLResponse:
        """Render template ``name`` with ``context``. Text UTF-8 cannot encode (a lone
        surrogate a response may hold) is shown as its escape, ``\\ud800``."""
        html = self.env.get_template(name).render(root=str(self.store.root), **context)
        return HTMLResponse(html.encode("utf-8", "backslashreplace"), status_code=status)

    def problem(self, title: str, message: str, status: int) -> HTMLResponse:
        """A page that says what is wrong (and the way back)."""
        return self.render("problem.html", status, title=title, message=message)

    # ---- pages ------------------------------------------------------------------------

    def runs_page(self, request: Request) -> Response:
        """Every run directory under the root, filtered and sorted by the URL."""
        runs = self.store.runs()
        shown = pages.filter_runs(runs, request.query_params)
        statuses = sorted({r.status for r in runs})
        return self.render(
            "runs.html",
            runs=shown,
            done=self._rows_written(shown),
            partial={r.name: p for r in shown if r.live and (p := self._live_figures(r))},
            total=len(runs),
            statuses=statuses,
            params=dict(request.query_params),
            live=any(r.live for r in shown),
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
        response = self.render(
            "run.html",
            info=info,
            m=m,
            partial=partial is not None,
            counting=partial is None and self.store.counting(info.path),
            lines=_summary(m, info.path)["lines"],
            chart=SAMPLES_FILE not in info.refused and (info.path / SAMPLES_FILE).exists(),
            query=query,
            params=_params(request),
            **table,
        )
        if table["streamed"]:  # build the index once this page is sent
            response.background = BackgroundTask(self.store.warm, info.path)
        return response

    def scores_chart(self, request: Request) -> Response:
        """The run's per-sample score distribution as an SVG image (its own request, so
        reading samples.jsonl of a large run never delays the run page)."""
        info = self.store.info(request.path_params["run"])
        bars = self._histogram(info) or []
        svg = self.env.get_template("scores.svg").render(bars=bars, int=pages.fmt_int)
        return Response(svg, media_type="image/svg+xml", headers={"cache-control": "no-cache"})

    def _live_figures(self, info: RunInfo) -> Manifest | None:
        """:meth:`RunStore.live_figures`, waiting for the rows to be counted only when the
        results file is small enough to index at once (:data:`STREAM_BYTES`): a larger
        one is counted in the background, so no page waits, and its figures are shown
        from the first request after that."""
        small = RESULTS_FILE in info.refused or _size(info.path / RESULTS_FILE) <= STREAM_BYTES
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
            return _no_rows(info, per, UsageError(info.refused[RESULTS_FILE]))
        if (
            query.plain
            and _size(info.path / RESULTS_FILE) > STREAM_BYTES
            and self.store.fresh_index(info.path) is None
        ):
            try:
                return self._streamed(info, number, per)
            except UsageError as exc:
                return _no_rows(info, per, exc)
        try:
            index = self.store.index(info.path)
        except UsageError as exc:
            return _no_rows(info, per, exc)
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
        """Bars over each sample's reduced score (``samples.jsonl``, written when a run
        ends), kept until the file changes; None while there is no such file."""
        if SAMPLES_FILE in info.refused:
            return None
        path = info.path / SAMPLES_FILE
        try:
            st = path.stat()
        except OSError:
            return None
        stamp = (st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            cached = self._samples.get(info.path)
        if cached is None or cached[0] != stamp:
            try:
                scores = [s.get("score") for s in read_samples(info.path)]
            except (GradetrailError, ValueError):
                return None
            cached = (stamp, scores)
            with self._lock:
                self._samples[info.path] = cached
        return pages.histogram(cached[1])

    def progress(self, request: Request) -> Response:
        """A running run's progress as JSON (polled by the page's script): status, live,
        rows written, rows expected; with ``?figures=1``, also ``partial``: the run page's
        summary lines (label, text) and rows per state computed from the rows so far
        (:meth:`RunStore.live_figures`), null when there are none."""
        info = self.store.info(request.path_params["run"])
        data: dict[str, Any] = {"status": info.status, "live": info.live}
        if request.query_params.get("figures") == "1":
            partial = self._live_figures(info)
            data["partial"] = None if partial is None else _summary(partial, info.path)
        try:
            done = len(self.store.index(info.path).entries)
        except UsageError:
            done = 0
        return JSONResponse(data | {"rows": done, "expected": info.rows_expected})

    def sample_page(self, request: Request) -> Response:
        """Every epoch of one sample, with everything needed to audit it."""
        info = self.store.info(request.path_params["run"])
        if RESULTS_FILE in info.refused:
            raise UsageError(info.refused[RESULTS_FILE])
        sample_id = _sample_id(request)
        rows = self._sample_rows(info, sample_id)
        if not rows:
            return self.problem(
                "No such sample",
                f"run {info.name} has no row for sample id {sample_id!r}.",
                404,
            )
        back = request.query_params.get("back", "")
        return self.render(
            "sample.html",
            info=info,
            sample_id=sample_id,
            rows=rows,
            back=back if back.startswith("?") else "",
        )

    def _sample_rows(self, info: RunInfo, sample_id: str) -> list[dict[str, Any]]:
        try:
            index = self.store.index(info.path)
        except UsageError:
            return []
        rows = index.rows(index.sample_positions(sample_id))
        if any(r is None for r in rows):
            index = self.store.index(info.path)
            rows = index.rows(index.sample_positions(sample_id))
        return sorted((r for r in rows if r is not None), key=lambda r: r.get("epoch") or 0)

    def _pair(self, request: Request) -> tuple[RunInfo, RunInfo]:
        """The baseline and candidate: ``a`` and ``b``, or the two ``run`` values ticked
        on the runs page (then the older run is the baseline)."""
        params = request.query_params
        a, b = params.get("a"), params.get("b")
        ticked = not (a and b)
        if ticked:
            picked = params.getlist("run")
            if len(picked) != 2:
                raise HTTPException(
                    400, f"tick exactly two runs to diff them ({len(picked)} ticked)"
                )
            a, b = picked
        base, cand = self.store.info(a), self.store.info(b)
        for info in (base, cand):
            if info.manifest is None:
                raise UsageError(f"run {info.name} cannot be compared: {info.problem}")
            if RESULTS_FILE in info.refused:
                raise UsageError(
                    f"run {info.name} cannot be compared: {info.refused[RESULTS_FILE]}"
                )
        assert base.manifest is not None and cand.manifest is not None
        if ticked and base.manifest.started_at > cand.manifest.started_at:
            base, cand = cand, base
        return base, cand

    def _diff(
        self, base: RunInfo, cand: RunInfo, margin: float, errors: str, wait: bool = True
    ) -> RunDiff | None:
        """The diff of two runs, kept until either run's files change. A diff of large
        runs not yet computed is started in a background thread when ``wait`` is false,
        and None returned (the page says so and refreshes itself).

        Raises:
            UsageError: a run cannot be read (also when the background job found so).
        """
        key = (base.path, cand.path, margin, errors, _stamp(base.path), _stamp(cand.path))
        with self._lock:
            found = self._diffs.get(key)
            if found is not None:
                self._diffs.move_to_end(key)
                return found
            failed = self._diff_errors.pop(key, None)
            if failed is not None:
                raise failed
            if key in self._diff_jobs:
                return None
            big = _size(base.path / RESULTS_FILE) + _size(cand.path / RESULTS_FILE) > DIFF_BYTES
            if big and not wait:
                self._diff_jobs.add(key)
                job = (key, base, cand, margin, errors, True)
                threading.Thread(target=self._compute_diff, args=job, daemon=True).start()
                return None
        return self._compute_diff(key, base, cand, margin, errors, False)

    def _compute_diff(
        self,
        key: tuple[Any, ...],
        base: RunInfo,
        cand: RunInfo,
        margin: float,
        errors: str,
        background: bool,
    ) -> RunDiff | None:
        try:
            result = diff_runs(base.path, cand.path, margin=margin, errors=errors)  # type: ignore[arg-type]
        except GradetrailError as exc:
            with self._lock:
                self._diff_jobs.discard(key)
                if background:  # the next request for this diff reports it
                    self._diff_errors[key] = exc
                    return None
            raise
        with self._lock:
            self._diff_jobs.discard(key)
            self._diffs[key] = result
            while len(self._diffs) > 4:
                self._diffs.popitem(last=False)
        return result

    def diff_page(self, request: Request) -> Response:
        """Two runs joined on sample id: counts, the gate, identity, the disagreements."""
        base, cand = self._pair(request)
        params = request.query_params
        margin = _float(params.get("margin"), 0.02)
        errors = (
            params.get("errors") if params.get("errors") in ("as-fail", "exclude") else "refuse"
        )
        result = self._diff(base, cand, margin, errors, wait=False)
        if result is None:
            return self.render("computing.html", 202, base=base, cand=cand)
        kinds = [k for k in params.getlist("kind") if k in KINDS]
        show_all = params.get("show") == "all"
        wanted = frozenset(kinds) if kinds else (frozenset(KINDS) if show_all else DISAGREEMENTS)
        listed = result.shown(kinds=wanted)
        number = int(_float(params.get("page"), 1))
        page = pages.paginate(len(listed), max(1, number), pages.PER_PAGE)
        state = {"a": base.name, "b": cand.name}
        for key in ("margin", "errors", "show"):
            if params.get(key):
                state[key] = params[key]
        if kinds:
            state["kind"] = kinds  # type: ignore[assignment]
        return self.render(
            "diff.html",
            base=base,
            cand=cand,
            d=result,
            samples=listed[page.start : page.stop],
            page=page,
            params=state,
            kinds=kinds,
            show_all=show_all,
            margin=margin,
            errors=errors,
        )

    def diff_sample_page(self, request: Request) -> Response:
        """One sample of a diff: both runs' epochs side by side."""
        base, cand = self._pair(request)
        sample_id = _sample_id(request)
        left = self._sample_rows(base, sample_id)
        right = self._sample_rows(cand, sample_id)
        if not left and not right:
            return self.problem(
                "No such sample", f"neither run has a row for sample id {sample_id!r}.", 404
            )
        epochs = sorted({r.get("epoch") for r in left} | {r.get("epoch") for r in right})
        pairs = [
            (
                e,
                next((r for r in left if r.get("epoch") == e), None),
                next((r for r in right if r.get("epoch") == e), None),
            )
            for e in epochs
        ]
        kind = request.query_params.get("kind")
        kind = kind if kind in KINDS else None
        neighbours = self._neighbours(base, cand, sample_id, kind)
        return self.render(
            "diff_sample.html",
            base=base,
            cand=cand,
            sample_id=sample_id,
            pairs=pairs,
            kind=kind,
            sample=neighbours[0],
            prev_id=neighbours[1],
            next_id=neighbours[2],
        )

    def _neighbours(
        self, base: RunInfo, cand: RunInfo, sample_id: str, kind: str | None
    ) -> tuple[Any, str | None, str | None]:
        """The sample's diff entry, and the previous and next sample of ``kind`` (or of
        the disagreements), so regressions can be read one after another."""
        result = self._diff(base, cand, 0.02, "refuse", wait=False)
        if result is None:  # still being computed: no neighbours yet
            return None, None, None
        listed = [s.sample_id for s in result.shown(kinds=frozenset({kind}) if kind else None)]
        at = listed.index(sample_id) if sample_id in listed else -1
        prev_id = listed[at - 1] if at > 0 else None
        next_id = listed[at + 1] if 0 <= at < len(listed) - 1 else None
        return result.sample(sample_id), prev_id, next_id

    def no_such_page(self, request: Request) -> Response:
        """Any other path under /runs/: a run name holding ``/`` (``%2f``) or ``..``."""
        rest = request.path_params["rest"]
        if ".." in rest.split("/"):
            raise Forbidden(f"{rest!r} points outside the results root")
        raise NotFound(f"no page {request.url.path!r}: run pages are /runs/<run directory>")


def _params(request: Request) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for key, value in request.query_params.multi_items():
        if key in out:
            out[key] = [*out[key], value] if isinstance(out[key], list) else [out[key], value]
        else:
            out[key] = [value] if key == "f" else value
    return out


def _no_rows(info: RunInfo, per: int, problem: UsageError) -> dict[str, Any]:
    """The sample table of a run whose results cannot be read: none yet, or why not."""
    there = os.path.lexists(info.path / RESULTS_FILE)
    return {
        "rows": [],
        "page": pages.paginate(0, 1, per),
        "index": None,
        "streamed": False,
        "problem": str(problem) if there else None,
    }


def _summary(m: Manifest, run_dir: Path) -> dict[str, Any]:
    """What the run page's summary shows of manifest ``m``: ``lines``, the (label, text)
    pairs the CLI prints (:func:`gradetrail.cli.report.manifest_lines`), ``rows`` and
    ``counts`` (rows per state)."""
    from gradetrail.cli.report import manifest_lines

    return {
        "lines": manifest_lines(m, run_dir),
        "rows": sum(m.counts.values()),
        "counts": {state: m.counts.get(state, 0) for state in STATES},
    }


def _sample_id(request: Request) -> str:
    """The ``id`` parameter, decoded so that an id holding a lone surrogate (which
    :func:`pages.query_string` encodes as such) names its sample; Starlette's own
    decoding would replace it."""
    raw = request.scope.get("query_string", b"").decode("latin-1")
    found = parse_qs(raw, keep_blank_values=True, errors="surrogatepass").get("id")
    return found[-1] if found else ""


def _float(value: str | None, default: float) -> float:
    try:
        number = float(value) if value else default
    except ValueError:
        return default
    return number if number == number and abs(number) != float("inf") and number >= 0 else default


def _size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0


def _stamp(path: Path) -> tuple[Any, ...]:
    out = []
    for name in (RESULTS_FILE, MANIFEST_FILE):
        try:
            st = (path / name).stat()
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def create_app(results_root: str | Path, allowed_hosts: list[str] | None = None) -> Starlette:
    """The viewer as an ASGI application.

    Args:
        results_root: the directory holding run directories.
        allowed_hosts: Host header values to accept (default: the loopback names).

    Raises:
        UsageError: ``results_root`` is not a directory.
    """
    viewer = Viewer(RunStore(results_root))
    for name in viewer.env.list_templates():  # compiled now, not on someone's first page
        viewer.env.get_template(name)

    def page(method: Any) -> Any:
        def endpoint(request: Request) -> Response:
            try:
                return method(request)
            except Forbidden as exc:
                return viewer.problem("Outside the results root", str(exc), 403)
            except NotFound as exc:
                return viewer.problem("Run not found", str(exc), 404)
            except UsageError as exc:
                return viewer.problem("Cannot read this run", str(exc), 409)

        return endpoint

    async def http_error(request: Request, exc: Exception) -> Response:
        assert isinstance(exc, HTTPException)
        return viewer.problem(f"Error {exc.status_code}", str(exc.detail), exc.status_code)

    async def server_error(request: Request, exc: Exception) -> Response:
        return viewer.problem(
            "The viewer failed on this page",
            f"{type(exc).__name__}: {exc}. Other pages still work; please report this.",
            500,
        )

    routes = [
        Route("/", page(viewer.runs_page), methods=["GET"]),
        Route("/runs/{run:str}", page(viewer.run_page), methods=["GET"]),
        Route("/runs/{run:str}/sample", page(viewer.sample_page), methods=["GET"]),
        Route("/runs/{run:str}/progress", page(viewer.progress), methods=["GET"]),
        Route("/runs/{run:str}/scores.svg", page(viewer.scores_chart), methods=["GET"]),
        Route("/diff", page(viewer.diff_page), methods=["GET"]),
        Route("/diff/sample", page(viewer.diff_sample_page), methods=["GET"]),
        Route("/runs/{rest:path}", page(viewer.no_such_page), methods=["GET"]),
        Mount("/static", StaticFiles(directory=HERE / "static"), name="static"),
    ]
    middleware = [
        Middleware(HostCheck, allowed_hosts=allowed_hosts or default_hosts("127.0.0.1")),
        Middleware(SecurityHeaders),
    ]
    return Starlette(
        routes=routes,
        middleware=middleware,
        exception_handlers={HTTPException: http_error, Exception: server_error},
    )
