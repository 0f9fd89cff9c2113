"""A sweep's table: every cell's score, cost, tokens, latency and errors, and each
candidate cell's paired verdict against the baseline cell.

The verdicts are :func:`gradetrail.analysis.gate.regression_gate`'s, cell by cell, made one
family by :func:`gradetrail.analysis.gate.correct_family` (Holm unless the sweep names
another correction): the overall comparison of every candidate, and the comparison on
each must-not-regress slice, so the chance that any failing candidate (or slice) passes
stays at alpha for the whole sweep. Nothing here computes an interval or a p-value of its
own; slices' score intervals are :func:`gradetrail.stats.intervals.summarize`'s, as the run
summary's.

A cell's verdict (non-inferiority test; the family decides "passes"). Every label is a
multiplicity-corrected decision, never a reading of the (unadjusted) interval shown:

- ``superior``: passes, and its superiority test (H0 delta <= 0, the gate's test at margin
  0) passes too, corrected with the same correction over the candidates. It is tested only
  when every comparison of the family passes (serial gatekeeping, Westfall and Krishen
  2001, J. Statistical Planning and Inference 99:25-40): while any comparison fails, a
  superiority claim would add its own error to the family's alpha, so none is made;
- ``non-inferior``: passes;
- ``inferior``: fails, and its inferiority test (H0 delta >= -margin: the gate's
  superiority test of the baseline over the candidate at the margin) passes, corrected
  with the same correction over the candidates (a family of its own);
- ``inconclusive``: fails otherwise (more samples would tell).

Superiority tests read ``superior`` (passes) / ``inferior`` / ``inconclusive``,
equivalence tests ``equivalent`` / ``not equivalent``. A candidate passes when its verdict
passes and every must-not-regress slice passes too; a slice of a passing cell is flagged as
a regression the overall mean hides when its regression test (H0 delta >= 0 on the slice)
passes, corrected with the same correction over every candidate's slices.
"""

from __future__ import annotations

import math
import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from gradetrail.analysis import gate_runs
from gradetrail.analysis.gate import GateFamily, GateResult, correct_family, regression_gate
from gradetrail.analysis.gate_runs import GateError
from gradetrail.rundir.manifest import paid_usd
from gradetrail.rundir.sweep import CellRecord, SweepRecord, read_sweep_record
from gradetrail.stats import intervals as stats

__all__ = ["CellRow", "SliceRow", "SweepTable", "sweep_table"]


@dataclass(frozen=True)
class SliceRow:
    """One slice of one cell.

    Attributes:
        name: the slice (a value of the sweep's slice field).
        n: samples of the slice with a score; `mean`, `ci_low`, `ci_high` their mean
            score and its 95% interval (Wilson for binary scores), NaN when n is 0.
        must_not_regress: the sweep marked it; its gate is then in the family.
        gate: the paired comparison with the baseline on this slice (None for the
            baseline, or when the slice cannot be compared: see `note`).
        hidden_regression: the cell passes overall, but this slice regressed: its
            regression test (H0 delta >= 0 on the slice), corrected over every candidate's
            slices, passes (see `regression`).
        regression: that test (the gate's superiority test of the baseline over the
            candidate at margin 0, so its delta is baseline - candidate), family-corrected;
            None for the baseline or when the slice cannot be compared.
        note: why a slice has no gate.
    """

    name: str
    n: int
    mean: float
    ci_low: float
    ci_high: float
    must_not_regress: bool = False
    gate: GateResult | None = None
    hidden_regression: bool = False
    note: str | None = None
    regression: GateResult | None = None


@dataclass(frozen=True)
class CellRow:
    """One cell of the sweep.

    Attributes:
        name, labels, model: the cell (labels in axis order; model as provider:model).
        run_dir: its run directory.
        outcome: what the last ``gradetrail sweep`` did with it (existing: complete
            already, not run again; ran; interrupted; failed; pending).
        status: the run's status (complete, interrupted, killed, ...).
        is_baseline: the baseline cell.
        n, mean, ci_low, ci_high, ci_method: the run's score (manifest.score).
        rows: result rows; `errors`: rows per error state.
        cost_usd: USD paid by the run, the judge's calls included (cache hits cost 0; None
            when any paid row's price is unknown); `cost_usd_cached`: what its
            cache hits once cost; `cache_hits`: rows answered from the cache.
        input_tokens, output_tokens: tokens of every row (cache hits included).
        latency_p50, latency_p90, latency_p99: seconds per call over its rows (a cached
            row keeps its original call's latency), None without latencies.
        gate: the overall comparison with the baseline, family-corrected (None for the
            baseline).
        verdict: see the module docstring ("baseline" for the baseline).
        label_gate: the corrected test that decided the label beyond pass or fail: the
            superiority test (margin 0) of a passing cell, the inferiority test of a
            failing one (baseline over candidate at the margin, so its delta is baseline -
            candidate); None when none ran (the baseline, an equivalence test, or a
            superiority the family's failures kept untested).
        passed: the candidate passes overall and on every must-not-regress slice (None
            for the baseline).
        failed_slices: must-not-regress slices it fails.
        slices: one row a slice.
    """

    name: str
    labels: tuple[str, ...]
    model: str
    run_dir: str
    outcome: str
    status: str
    is_baseline: bool
    n: int
    mean: float | None
    ci_low: float | None
    ci_high: float | None
    ci_method: str | None
    rows: int
    errors: dict[str, int]
    cost_usd: float | None
    cost_usd_cached: float | None
    cache_hits: int
    input_tokens: int
    output_tokens: int
    latency_p50: float | None
    latency_p90: float | None
    latency_p99: float | None
    gate: GateResult | None = None
    verdict: str = "baseline"
    passed: bool | None = None
    failed_slices: tuple[str, ...] = ()
    slices: tuple[SliceRow, ...] = ()
    label_gate: GateResult | None = None


@dataclass(frozen=True)
class SweepTable:
    """The whole table.

    Attributes:
        name: the sweep.
        directory: its directory (``sweep.json``).
        axes: axis names, in order.
        baseline: the baseline cell's name.
        test, margin, confidence, alpha: the comparisons' test, margin (score scale),
            two-sided confidence and one-sided level.
        correction: "holm", "bonferroni" or "none"; `family_size` the comparisons in it.
        slice_field: the dataset field naming slices, or None.
        cells: one row a cell, in the sweep's order.
        best: the passing candidate with the highest mean (ties: the cheaper), or None.
        total_cost_usd: what every cell's run paid, summed (None when any cell's cost is
            unknown).
        labels: one sentence saying how the labels were decided (the correction, and
            why ``superior`` was not tested when the family did not pass).
    """

    name: str
    directory: str
    axes: tuple[str, ...]
    baseline: str
    test: str
    margin: float
    confidence: float
    alpha: float
    correction: str
    family_size: int
    slice_field: str | None
    cells: tuple[CellRow, ...]
    best: str | None
    total_cost_usd: float | None
    warnings: tuple[str, ...] = field(default=())
    labels: str = ""

    @property
    def candidates(self) -> tuple[CellRow, ...]:
        """Every cell but the baseline."""
        return tuple(c for c in self.cells if not c.is_baseline)

    def family(self) -> GateFamily:
        """Every comparison of the family (each candidate overall, then its
        must-not-regress slices), as :func:`gate_family` would return them: for JUnit
        and GitHub reports shared with ``gradetrail gate``."""
        results = []
        for c in self.candidates:
            if c.gate is not None:
                results.append(c.gate)
            results += [s.gate for s in c.slices if s.must_not_regress and s.gate]
        return GateFamily(tuple(results), self.correction, self.alpha)

    def passed(self, candidate: str | None = None) -> bool:
        """Any candidate passed, or (named) that one did."""
        if candidate is not None:
            return bool(self.cell(candidate).passed)
        return any(c.passed for c in self.candidates)

    def cell(self, name: str) -> CellRow:
        """The cell ``name`` (or the one cell with that label).

        Raises:
            GateError: no cell, or several, answer to it.
        """
        return _find(self.cells, name, "cell")

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: NaN as None, tuples as lists, each gate as GateResult.to_dict()."""
        out = _json(asdict(self))
        for row, cell in zip(out["cells"], self.cells, strict=True):
            row["gate"] = cell.gate.to_dict() if cell.gate else None
            row["label_gate"] = cell.label_gate.to_dict() if cell.label_gate else None
            for srow, s in zip(row["slices"], cell.slices, strict=True):
                srow["gate"] = s.gate.to_dict() if s.gate else None
                srow["regression"] = s.regression.to_dict() if s.regression else None
        return out


def _json(value: Any) -> Any:
    if isinstance(value, dict):
        return {k: _json(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_json(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def _find(cells: Any, name: str, what: str) -> Any:
    exact = [c for c in cells if c.name == name]
    matches = exact or [c for c in cells if name in c.labels]
    if len(matches) == 1:
        return matches[0]
    names = ", ".join(c.name for c in (matches or cells)[:8])
    if matches:
        raise GateError(f"{what} {name!r} names {len(matches)} cells ({names}); name one")
    raise GateError(f"{what} {name!r} is not a cell of the sweep; the cells are {names}")


def sweep_table(
    directory: str | Path,
    *,
    baseline: str | None = None,
    correction: str | None = None,
    allow_partial: bool = False,
) -> SweepTable:
    """Read a sweep's record and its cells' runs; gate every candidate against the baseline.

    Args:
        directory: the sweep's directory (``<results root>/sweep-<name>``); run directories
            are read from its parent.
        baseline: a cell (name, or a label only one cell has) in place of the record's.
        correction: "holm", "bonferroni" or "none" in place of the sweep's.
        allow_partial: gate cells whose runs did not complete, on the samples they share.

    Raises:
        GateError: a cell cannot be compared (the message names it), or no such baseline.
        UsageError: no sweep record in ``directory``.
        ValueError: an unknown correction.
    """
    directory = Path(directory)
    record = read_sweep_record(directory)
    root = directory.parent
    base = _find(record.cells, baseline, "baseline") if baseline else record.cell(record.baseline)
    gate = dict(record.gate)
    correction = correction or str(gate.pop("correction", "holm"))
    gate.pop("correction", None)
    keys = ("test", "margin", "confidence", "method", "errors")
    options: dict[str, Any] = {k: gate[k] for k in keys if k in gate}
    options["allow_partial"] = allow_partial
    base_dir = root / base.run_dir
    candidates = [c for c in record.cells if c.name != base.name]
    comparisons: list[GateResult] = []
    where: list[tuple[str, str | None]] = []  # (cell, slice or None) of each comparison
    for cell in candidates:
        comparisons.append(_gate(base_dir, root / cell.run_dir, cell, None, None, options))
        where.append((cell.name, None))
        for name in record.must_not_regress:
            ids = record.slices[name]
            comparisons.append(_gate(base_dir, root / cell.run_dir, cell, name, ids, options))
            where.append((cell.name, name))
    corrected = (
        dict(zip(where, correct_family(comparisons, correction).results, strict=True))
        if comparisons
        else {}
    )
    decided = _Decided(
        corrected,
        *_labels(base_dir, root, candidates, corrected, correction, options),
        _regressions(record, base_dir, root, candidates, correction, options),
    )
    rows = [
        _cell_row(record, root, cell, cell.name == base.name, decided, base_dir, options)
        for cell in record.cells
    ]
    first = comparisons[0] if comparisons else None
    test = first.test if first else str(options.get("test", "non-inferiority"))
    margin = first.margin if first else float(options.get("margin") or 0.02)
    confidence = first.confidence if first else float(options.get("confidence", 0.95))
    costs = [r.cost_usd for r in rows]
    return SweepTable(
        name=record.name,
        directory=str(directory),
        axes=tuple(record.axes),
        baseline=base.name,
        test=test,
        margin=margin,
        confidence=confidence,
        alpha=(1 - confidence) / 2,
        correction=correction if len(comparisons) > 1 else "none",
        family_size=len(comparisons),
        slice_field=record.slice_field,
        cells=tuple(rows),
        best=_best(rows),
        # a cell of unknown cost leaves the total unknown: the others' sum is not it
        total_cost_usd=None if None in costs or not costs else math.fsum(costs),
        labels=decided.rule,
    )


def _gate(
    base_dir: Path,
    cand_dir: Path,
    cell: CellRecord,
    slice_name: str | None,
    ids: list[str] | None,
    options: dict[str, Any],
) -> GateResult:
    try:
        return regression_gate(base_dir, cand_dir, samples=ids, **options)
    except GateError as exc:
        where = f"cell {cell.name}" + (f", slice {slice_name}" if slice_name else "")
        message = str(exc)
        for said, instead in _SWEEP_WAYS_OUT:  # only what a sweep can do
            message = message.replace(said, instead)
        raise GateError(f"{where}: {message}") from None


#: ways out ``gradetrail gate``'s refusals name with flags ``gradetrail sweep`` does not
#: take, and what a sweep says instead (its file's gate.errors; nothing for the others)
_SWEEP_WAYS_OUT = (
    (
        "pass --errors as-fail (the candidate's score 0) or --errors exclude",
        "set gate.errors in the sweep file to as-fail (the candidate's score 0) or exclude",
    ),
    (
        ", pass --allow-partial to gate the shared ones, or --unpaired to compare the two "
        "runs' means",
        ", or pass --allow-partial to gate the shared ones",
    ),
    (", or pass --unpaired to compare their means", ""),
    (", or pass --allow-different-data to compare them anyway", ""),
    (", or pass --allow-different-splits to compare them anyway", ""),
    (", or pass --allow-different-scorers to compare them anyway", ""),
    (", or pass --reducer to gate both on one", ""),
    (", or pass --reducer mean", ""),
)


@dataclass(frozen=True)
class _Decided:
    """Every corrected decision of a sweep: (cell, slice or None) -> the family's
    comparison; cell -> (label, the corrected test that decided it); the sentence saying
    how; (cell, slice) -> the slice's corrected regression test."""

    family: dict[tuple[str, str | None], GateResult]
    labels: dict[str, tuple[str, GateResult | None]]
    rule: str
    regressions: dict[tuple[str, str], GateResult]


_HOW = {"holm": "Holm-corrected", "bonferroni": "Bonferroni-corrected", "none": "uncorrected"}


def _corrected(tests: dict[Any, GateResult], correction: str) -> dict[Any, GateResult]:
    """``tests`` corrected as one family (:func:`correct_family`), under the same keys."""
    if not tests:
        return {}
    family = correct_family(list(tests.values()), correction)
    return dict(zip(tests, family.results, strict=True))


def _labels(
    base_dir: Path,
    root: Path,
    candidates: list[CellRecord],
    family: dict[tuple[str, str | None], GateResult],
    correction: str,
    options: dict[str, Any],
) -> tuple[dict[str, tuple[str, GateResult | None]], str]:
    """Each candidate's label (see the module docstring) with the corrected test that
    decided it, and one sentence saying how the labels were decided."""
    overall = {c.name: family[(c.name, None)] for c in candidates}
    if not overall:
        return {}, ""
    first = next(iter(overall.values()))
    how = _HOW[correction if len(family) > 1 else "none"]
    if first.test == "equivalence":
        labels = {
            n: ("equivalent" if r.passed else "not equivalent", None) for n, r in overall.items()
        }
        return labels, f"labels are the {how} verdicts"
    cells = {c.name: c for c in candidates}

    def tests(swap: bool, margin: float) -> dict[str, GateResult]:
        opts = {**options, "test": "superiority", "margin": margin}
        if swap:  # the candidate is the gate's baseline here: its errors still count
            opts["fail_errors_of"] = "baseline"
        out = {}
        for name in overall:
            cand_dir = root / cells[name].run_dir
            pair = (cand_dir, base_dir) if swap else (base_dir, cand_dir)
            out[name] = _gate(*pair, cells[name], None, None, opts)
        return out

    inferior = _corrected(tests(True, first.margin), correction)
    failing = [f"{c}{f' (slice {s})' if s else ''}" for (c, s), r in family.items() if not r.passed]
    superior: dict[str, GateResult] = {}
    if first.test == "non-inferiority" and (not failing or correction == "none"):
        superior = _corrected(tests(False, 0.0), correction)
    labels: dict[str, tuple[str, GateResult | None]] = {}
    for name, r in overall.items():
        if not r.passed:
            labels[name] = ("inferior" if inferior[name].passed else "inconclusive", inferior[name])
        elif first.test == "superiority":
            labels[name] = ("superior", None)
        else:
            sup = superior.get(name)
            labels[name] = ("superior" if sup and sup.passed else "non-inferior", sup)
    rule = "labels: superior and inferior each by its own test"
    if len(overall) > 1:  # one family of such tests a label, over the candidates
        rule += f", {_HOW[correction]} over the {len(overall)} candidates"
    if first.test == "non-inferiority" and failing and correction != "none":
        rule += (
            f"; superior not tested while {', '.join(failing)} "
            f"{'fails' if len(failing) == 1 else 'fail'} the family (claimed "
            "only when every comparison passes, so the family-wise alpha holds)"
        )
    return labels, rule


def _regressions(
    record: SweepRecord,
    base_dir: Path,
    root: Path,
    candidates: list[CellRecord],
    correction: str,
    options: dict[str, Any],
) -> dict[tuple[str, str], GateResult]:
    """Every candidate's slices' regression tests (H0 delta >= 0 on the slice: the gate's
    superiority test of the baseline over the candidate at margin 0), corrected as one
    family; a slice that cannot be compared is left out (its row says why)."""
    opts = {**options, "test": "superiority", "margin": 0.0, "fail_errors_of": "baseline"}
    tests = {}
    for cell in candidates:
        for name, ids in record.slices.items():
            try:
                tests[(cell.name, name)] = regression_gate(
                    root / cell.run_dir, base_dir, samples=ids, **opts
                )
            except GateError:
                continue
    return _corrected(tests, correction)


def _cell_row(
    record: SweepRecord,
    root: Path,
    cell: CellRecord,
    is_baseline: bool,
    decided: _Decided,
    base_dir: Path,
    options: dict[str, Any],
) -> CellRow:
    run = gate_runs.load_run(root / cell.run_dir, f"cell {cell.name}")
    gate_runs.check_rows(run)  # its manifest's figures are shown: they must be its rows'
    m = run.manifest
    score = m.get("score") or {}
    latencies = sorted(float(r["latency_s"]) for r in run.rows if r.get("latency_s") is not None)
    p50, p90, p99 = _percentiles(latencies)
    errors = Counter(str(r.get("state")) for r in run.rows if r.get("state") != "scored")
    gate = decided.family.get((cell.name, None))
    label, label_gate = decided.labels.get(cell.name, ("baseline", None))
    slices = _slices(record, run, cell, gate, decided, base_dir, options)
    failed = tuple(s.name for s in slices if s.must_not_regress and s.gate and not s.gate.passed)
    return CellRow(
        name=cell.name,
        labels=tuple(cell.labels),
        model=cell.model,
        run_dir=str(root / cell.run_dir),
        outcome=cell.outcome,
        status=run.status,
        is_baseline=is_baseline,
        n=int(score.get("n") or 0),
        mean=score.get("mean"),
        ci_low=score.get("ci_low"),
        ci_high=score.get("ci_high"),
        ci_method=score.get("ci_method"),
        rows=len(run.rows),
        errors=dict(sorted(errors.items())),
        cost_usd=paid_usd(m),
        cost_usd_cached=m.get("cost_usd_cached"),
        cache_hits=int(m.get("cache_hits") or 0),
        input_tokens=sum(int(r.get("input_tokens") or 0) for r in run.rows),
        output_tokens=sum(int(r.get("output_tokens") or 0) for r in run.rows),
        latency_p50=p50,
        latency_p90=p90,
        latency_p99=p99,
        gate=gate,
        verdict=label,
        passed=None if gate is None else (gate.passed and not failed),
        failed_slices=failed,
        slices=slices,
        label_gate=label_gate,
    )


def _slices(
    record: SweepRecord,
    run: gate_runs.GateRun,
    cell: CellRecord,
    gate: GateResult | None,
    decided: _Decided,
    base_dir: Path,
    options: dict[str, Any],
) -> tuple[SliceRow, ...]:
    """Each slice's score (its error samples left out, as the run summary does) and, for
    a candidate, its comparison with the baseline (the family's for a must-not-regress
    slice, an uncorrected one for the others, shown only) and its corrected regression
    test (which flags a hidden regression)."""
    if not record.slices:
        return ()
    reducer, k = run.reducer
    scores, _ = gate_runs.sample_scores(run, set(gate_runs.errored_ids(run)), reducer, k)
    out = []
    for name, ids in record.slices.items():
        values = [scores[sid] for sid in ids if sid in scores]
        summary = stats.summarize(values)
        must = name in record.must_not_regress
        slice_gate, note = None, None
        if gate is not None:
            slice_gate = decided.family.get((cell.name, name))
            if slice_gate is None:
                try:
                    slice_gate = regression_gate(base_dir, run.path, samples=ids, **options)
                except GateError as exc:
                    note = str(exc)
        regression = decided.regressions.get((cell.name, name))
        hidden = bool(gate is not None and gate.passed and regression and regression.passed)
        out.append(
            SliceRow(
                name,
                summary.n,
                summary.mean,
                summary.ci_low,
                summary.ci_high,
                must,
                slice_gate,
                hidden,
                note,
                regression,
            )
        )
    return tuple(out)


def _percentiles(values: list[float]) -> tuple[float | None, float | None, float | None]:
    """p50, p90, p99 of sorted ``values`` (linear interpolation between order statistics,
    as numpy's default); None without values."""
    if not values:
        return None, None, None
    if len(values) == 1:
        return values[0], values[0], values[0]
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return cuts[49], cuts[89], cuts[98]


def _best(rows: list[CellRow]) -> str | None:
    passing = [r for r in rows if r.passed]
    if not passing:
        return None
    best = max(passing, key=lambda r: (r.mean or 0.0, -(r.cost_usd or 0.0)))
    return best.name
