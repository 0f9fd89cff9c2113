"""A sweep's table: every cell's score, cost, tokens, latency and errors, and each
candidate cell's paired verdict against the baseline cell.

The verdicts are :func:`gradetrail.analysis.gate.regression_gate`'s, cell by cell, made one
family by :func:`gradetrail.analysis.gate.correct_family` (Holm unless the sweep names
another correction): the overall comparison of every candidate, and the comparison on
each must-not-regress slice, so the chance that any failing candidate (or slice) passes
stays at alpha for the whole sweep. Nothing here computes an interval or a p-value of its
own; slices' score intervals are :func:`gradetrail.stats.intervals.summarize`'s, as the run
summary's.

A cell's verdict (non-inferiority test; the family decides "passes"):

- ``superior``: passes, and its interval lies above 0;
- ``non-inferior``: passes;
- ``inferior``: fails, and its interval lies below -margin (worse by more than the margin);
- ``inconclusive``: fails otherwise (the interval straddles -margin: more samples would tell).

Superiority tests read ``superior`` / ``inferior`` / ``inconclusive``, equivalence tests
``equivalent`` / ``not equivalent``. A candidate passes when its verdict passes and every
must-not-regress slice passes too; a slice whose interval lies below 0 while its cell
passes overall is flagged as a regression the overall mean hides.
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
        hidden_regression: the cell passes overall, but this slice's interval lies below 0.
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
        cost_usd: USD paid by the run (cache hits cost 0); `cost_usd_cached`: what its
            cache hits once cost; `cache_hits`: rows answered from the cache.
        input_tokens, output_tokens: tokens of every row (cache hits included).
        latency_p50, latency_p90, latency_p99: seconds per call over its rows (a cached
            row keeps its original call's latency), None without latencies.
        gate: the overall comparison with the baseline, family-corrected (None for the
            baseline).
        verdict: see the module docstring ("baseline" for the baseline).
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
        total_cost_usd: what every cell's run paid, summed (None when no cost is known).
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
            for srow, s in zip(row["slices"], cell.slices, strict=True):
                srow["gate"] = s.gate.to_dict() if s.gate else None
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
    rows = [
        _cell_row(record, root, cell, cell.name == base.name, corrected, base_dir, options)
        for cell in record.cells
    ]
    first = comparisons[0] if comparisons else None
    test = first.test if first else str(options.get("test", "non-inferiority"))
    margin = first.margin if first else float(options.get("margin") or 0.02)
    confidence = first.confidence if first else float(options.get("confidence", 0.95))
    costs = [r.cost_usd for r in rows if r.cost_usd is not None]
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
        total_cost_usd=math.fsum(costs) if costs else None,
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
        "pass --errors as-fail (score them 0) or --errors exclude",
        "set gate.errors in the sweep file to as-fail (score them 0) or exclude",
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


def _verdict(r: GateResult) -> str:
    lo, hi = r.unclipped or (r.lo, r.hi)
    if r.test == "equivalence":
        return "equivalent" if r.passed else "not equivalent"
    if r.passed:
        return "superior" if r.test == "superiority" or lo > 0 else "non-inferior"
    return "inferior" if hi < -r.margin else "inconclusive"


def _cell_row(
    record: SweepRecord,
    root: Path,
    cell: CellRecord,
    is_baseline: bool,
    corrected: dict[tuple[str, str | None], GateResult],
    base_dir: Path,
    options: dict[str, Any],
) -> CellRow:
    run = gate_runs.load_run(root / cell.run_dir, cell.name)
    m = run.manifest
    score = m.get("score") or {}
    latencies = sorted(float(r["latency_s"]) for r in run.rows if r.get("latency_s") is not None)
    p50, p90, p99 = _percentiles(latencies)
    errors = Counter(str(r.get("state")) for r in run.rows if r.get("state") != "scored")
    gate = corrected.get((cell.name, None))
    slices = _slices(record, run, cell, gate, corrected, base_dir, options)
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
        cost_usd=m.get("cost_usd"),
        cost_usd_cached=m.get("cost_usd_cached"),
        cache_hits=int(m.get("cache_hits") or 0),
        input_tokens=sum(int(r.get("input_tokens") or 0) for r in run.rows),
        output_tokens=sum(int(r.get("output_tokens") or 0) for r in run.rows),
        latency_p50=p50,
        latency_p90=p90,
        latency_p99=p99,
        gate=gate,
        verdict="baseline" if gate is None else _verdict(gate),
        passed=None if gate is None else (gate.passed and not failed),
        failed_slices=failed,
        slices=slices,
    )


def _slices(
    record: SweepRecord,
    run: gate_runs.GateRun,
    cell: CellRecord,
    gate: GateResult | None,
    corrected: dict[tuple[str, str | None], GateResult],
    base_dir: Path,
    options: dict[str, Any],
) -> tuple[SliceRow, ...]:
    """Each slice's score (its error samples left out, as the run summary does) and, for
    a candidate, its comparison with the baseline: the family's for a must-not-regress
    slice, an uncorrected one for the others (to flag a hidden regression)."""
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
            slice_gate = corrected.get((cell.name, name))
            if slice_gate is None:
                try:
                    slice_gate = regression_gate(base_dir, run.path, samples=ids, **options)
                except GateError as exc:
                    note = str(exc)
        hidden = bool(
            gate is not None
            and gate.passed
            and slice_gate is not None
            and (slice_gate.unclipped or (slice_gate.lo, slice_gate.hi))[1] < 0
        )
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
