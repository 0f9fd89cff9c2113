"""The viewer's diff pages: two runs joined on sample id (regressions first), and one
sample of a diff side by side; a diff of large runs is computed in the background."""

from __future__ import annotations

import threading
from collections import OrderedDict
from typing import Any

from starlette.exceptions import HTTPException
from starlette.requests import Request
from starlette.responses import Response

from gradetrail.analysis.diff import (
    DISAGREEMENTS,
    KINDS,
    RunDiff,
    diff_runs,
    different_data,
    different_scoring,
)
from gradetrail.errors import GradetrailError, UsageError
from gradetrail.rundir.results import RESULTS_FILE
from gradetrail.stats.reducers import REDUCERS
from gradetrail.view import pages
from gradetrail.view.render import Pages, Renderer, float_param, sample_id_of, size_of
from gradetrail.view.run_pages import RunPages
from gradetrail.view.store import RunInfo, RunStore, stamp_of

__all__ = ["DIFF_BYTES", "DiffPages"]

#: two results files larger than this together are diffed in the background, the page
#: refreshing itself until the diff is ready (the gate reads both runs as well)
DIFF_BYTES = 32 << 20


class DiffPages(Pages):
    """The diff pages over one :class:`RunStore`; a sample's rows are read through
    ``runs`` (:meth:`RunPages.sample_rows`)."""

    def __init__(self, store: RunStore, renderer: Renderer, runs: RunPages) -> None:
        super().__init__(store, renderer)
        self.runs = runs
        self._diffs: OrderedDict[tuple[Any, ...], RunDiff] = OrderedDict()
        self._diff_jobs: set[tuple[Any, ...]] = set()
        self._diff_errors: dict[tuple[Any, ...], GradetrailError] = {}
        self._lock = threading.Lock()

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
        self,
        base: RunInfo,
        cand: RunInfo,
        margin: float,
        errors: str,
        wait: bool = True,
        reducer: tuple[str, int] | None = None,
    ) -> RunDiff | None:
        """The diff of two runs, kept until either run's files change. A diff of large
        runs not yet computed is started in a background thread when ``wait`` is false,
        and None returned (the page says so and refreshes itself).

        Raises:
            UsageError: a run cannot be read (also when the background job found so).
        """
        key = (
            base.path,
            cand.path,
            margin,
            errors,
            reducer,
            stamp_of(base.path),
            stamp_of(cand.path),
        )
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
            big = size_of(base.path / RESULTS_FILE) + size_of(cand.path / RESULTS_FILE) > DIFF_BYTES
            if big and not wait:
                self._diff_jobs.add(key)
                job = (key, base, cand, margin, errors, True, reducer)
                threading.Thread(target=self._compute_diff, args=job, daemon=True).start()
                return None
        return self._compute_diff(key, base, cand, margin, errors, False, reducer)

    def _compute_diff(
        self,
        key: tuple[Any, ...],
        base: RunInfo,
        cand: RunInfo,
        margin: float,
        errors: str,
        background: bool,
        reducer: tuple[str, int] | None = None,
    ) -> RunDiff | None:
        try:
            result = diff_runs(  # the page refused different data or scoring unless asked
                base.path,
                cand.path,
                margin=margin,
                errors=errors,  # type: ignore[arg-type]
                allow_different_data=True,
                allow_different_scorers=True,
                reducer=reducer[0] if reducer else None,
                pass_k=reducer[1] if reducer else None,
            )
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
        assert base.manifest is not None and cand.manifest is not None
        self._refuse_unlike(base, cand, params)
        margin = float_param(params.get("margin"), 0.02)
        errors = (
            params.get("errors") if params.get("errors") in ("as-fail", "exclude") else "refuse"
        )
        result = self._diff(base, cand, margin, errors, wait=False, reducer=_reducer(params))
        if result is None:
            return self.render("computing.html", 202, base=base, cand=cand)
        kinds = [k for k in params.getlist("kind") if k in KINDS]
        show_all = params.get("show") == "all"
        wanted = frozenset(kinds) if kinds else (frozenset(KINDS) if show_all else DISAGREEMENTS)
        listed = result.shown(kinds=wanted)
        number = int(float_param(params.get("page"), 1))
        page = pages.paginate(len(listed), max(1, number), pages.PER_PAGE)
        state = {"a": base.name, "b": cand.name}
        for key in (
            "margin",
            "errors",
            "show",
            "different_data",
            "different_scorers",
            "reducer",
            "pass_k",
        ):
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

    @staticmethod
    def _refuse_unlike(base: RunInfo, cand: RunInfo, params: Any) -> None:
        """Refuse, as ``gradetrail diff`` does, runs on different datasets or scored
        differently, unless the address asks for them (``different_data=1``,
        ``different_scorers=1``: the CLI's ``--allow-different-*``)."""
        assert base.manifest is not None and cand.manifest is not None
        a, b = base.manifest.model_dump(), cand.manifest.model_dump()
        differ = different_data(a, b)
        if differ is not None and params.get("different_data") != "1":
            raise UsageError(
                f"{differ}; or add &different_data=1 to the address to pair them by id anyway"
            )
        scored = different_scoring(a, b)
        if scored is not None and params.get("different_scorers") != "1":
            raise UsageError(
                f"{scored}; or add &different_scorers=1 to the address to compare them anyway"
            )

    def diff_sample_page(self, request: Request) -> Response:
        """One sample of a diff: both runs' epochs side by side."""
        base, cand = self._pair(request)
        sample_id = sample_id_of(request)
        left = self.runs.sample_rows(base, sample_id)
        right = self.runs.sample_rows(cand, sample_id)
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
        try:
            result = self._diff(base, cand, 0.02, "refuse", wait=False)
        except GradetrailError:  # runs the diff refuses: the sample's rows, no neighbours
            return None, None, None
        if result is None:  # still being computed: no neighbours yet
            return None, None, None
        listed = [s.sample_id for s in result.shown(kinds=frozenset({kind}) if kind else None)]
        at = listed.index(sample_id) if sample_id in listed else -1
        prev_id = listed[at - 1] if at > 0 else None
        next_id = listed[at + 1] if 0 <= at < len(listed) - 1 else None
        return result.sample(sample_id), prev_id, next_id


def _reducer(params: Any) -> tuple[str, int] | None:
    """``reducer`` (and ``pass_k``) from the address, as ``gradetrail diff --reducer``;
    None (each run's own ``run.reducer``) when absent or not a reducer."""
    name = params.get("reducer")
    if name not in REDUCERS:
        return None
    return name, max(1, int(float_param(params.get("pass_k"), 1)))
