"""Running a sweep: each cell an ordinary run (:func:`~gradetrail.engine.runner.run_eval`)
with its own identity hash and run directory, all sharing one cache.

A cell whose run directory already holds a complete run of the same identity, without
provider_error rows and whose rows still agree with its manifest (:func:`is_complete`), is
not run again (outcome ``existing``); any other is run, so an interrupted or killed cell resumes
from the cache and a cell that is new (a model added to the sweep) is the only one that
pays. The sweep's record (:mod:`gradetrail.rundir.sweep`) is written before the first cell
and after each one. Cells run one after another: each run drives its own requests
concurrently under its spec's limits.
"""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail.datasets.looks import refusal as looks_refusal
from gradetrail.datasets.looks import take_look, would_look
from gradetrail.engine.runner import RunPlan, RunResult, plan_run, run_eval
from gradetrail.errors import GradetrailError, RunError, SpecError, UsageError
from gradetrail.rundir.agreement import run_disagrees
from gradetrail.rundir.layout import check_results_root
from gradetrail.rundir.results import read_manifest
from gradetrail.rundir.sweep import (
    CellRecord,
    SweepRecord,
    sweep_dir,
    write_sweep_record,
)
from gradetrail.spec import EvalSpec, load_spec
from gradetrail.spec.sweep import SweepCell, SweepSpec

__all__ = [
    "CellPlan",
    "DryRunCell",
    "SweepResult",
    "check_looks",
    "check_pairable",
    "dry_run",
    "plan_sweep",
    "run_sweep",
]


@dataclass
class CellPlan:
    """One cell, planned: its spec and run plan (no call made)."""

    cell: SweepCell
    spec: EvalSpec
    plan: RunPlan

    def run_dir(self, results_root: Path) -> Path:
        """The cell's run directory."""
        return self.plan.run_dir(results_root)


@dataclass(frozen=True)
class SweepResult:
    """What ``run_sweep`` did.

    Attributes:
        directory: the sweep's directory (``sweep.json``).
        record: the record as last written.
        interrupted: a cell was interrupted (Ctrl-C, SIGTERM, its run.max_cost_usd or the
            sweep's max_cost_usd); the cells after it did not run.
        stop_signal: the signal that stopped it, if one did.
        stop_reason: why the run stopped itself (its manifest's ``stop_reason``: the
            budget), if it did.
    """

    directory: Path
    record: SweepRecord
    interrupted: bool
    stop_signal: str | None = None
    stop_reason: str | None = None


def plan_sweep(sweep: SweepSpec) -> list[CellPlan]:
    """Load every cell's spec and plan its run (dataset, provider, scorer, requests).

    Raises:
        SpecError, DatasetError: a cell's spec is invalid (the message names the cell).
    """
    out = []
    try:
        base_labels = load_spec(sweep.spec_path, list(sweep.settings)).run.labels
    except SpecError as exc:
        raise type(exc)(f"{sweep.source}: spec: {exc}") from None
    for cell in sweep.cells():
        # each cell's run is labelled with the sweep and the cell (not in its identity)
        labels = [*base_labels, f"{sweep.name}:{cell.name}"]
        try:
            overrides = [*cell.overrides, f"run.labels={json.dumps(labels)}"]
            spec = load_spec(sweep.spec_path, overrides, overrides_from="axis")
            plan = plan_run(spec)
        except SpecError as exc:
            raise type(exc)(f"{sweep.source}: cell {cell.name}: {exc}") from None
        out.append(CellPlan(cell, spec, plan))
    _check_distinct(sweep, out)
    return out


def _check_distinct(sweep: SweepSpec, cells: list[CellPlan]) -> None:
    """Refuse two cells that are one run (the same identity hash: their settings differ
    only in what decides no number, such as run.concurrency, or not at all): they share a
    run directory, so a candidate would be gated against itself, or counted twice in the
    family that corrects the verdicts.

    Raises:
        SpecError: naming the two cells and their identity hash.
    """
    seen: dict[str, str] = {}
    for c in cells:
        first = seen.setdefault(c.plan.identity_hash, c.cell.name)
        if first != c.cell.name:
            raise SpecError(
                f"{sweep.source}: cells {first} and {c.cell.name} are the same run (identity "
                f"hash {c.plan.identity_hash[:12]}): nothing that decides a score differs "
                "between them; drop one, or make the axis change the model, prompt, data, "
                "sampling or scoring"
            )


def slice_groups(plan: RunPlan, field: str, where: str) -> dict[str, list[str]]:
    """Sample ids by slice: each row's ``field`` names its slice (a list: each of them).

    Raises:
        SpecError: a row has no such field.
    """
    groups: dict[str, list[str]] = {}
    for sample in plan.samples:
        if field not in sample.row:
            raise SpecError(
                f"{where}: slices.field {field!r} is not in sample {sample.id!r} (line "
                f"{sample.line}); name a field every row has"
            )
        value = sample.row[field]
        for name in value if isinstance(value, list) else [value]:
            groups.setdefault(str(name), []).append(sample.id)
    return groups


def _record(sweep: SweepSpec, cells: list[CellPlan], results_root: Path) -> SweepRecord:
    baseline = sweep.baseline_cell()
    groups: dict[str, list[str]] = {}
    if sweep.slices is not None:
        base_plan = next(c for c in cells if c.cell.name == baseline.name).plan
        groups = slice_groups(base_plan, sweep.slices.field, sweep.source)
        unknown = [s for s in sweep.slices.must_not_regress if s not in groups]
        if unknown:
            raise SpecError(
                f"{sweep.source}: slices.must_not_regress names {', '.join(unknown)}, which "
                f"no row's {sweep.slices.field} holds; the slices are {', '.join(list(groups)[:8])}"
            )
    return SweepRecord(
        name=sweep.name,
        sweep_path=sweep.source,
        spec_path=str(sweep.spec_path),
        axes=list(sweep.axes),
        baseline=baseline.name,
        gate=sweep.gate.model_dump(mode="json"),
        slice_field=sweep.slices.field if sweep.slices else None,
        must_not_regress=list(sweep.slices.must_not_regress) if sweep.slices else [],
        slices=groups,
        cells=[
            CellRecord(
                name=c.cell.name,
                labels=list(c.cell.labels),
                overrides=list(c.cell.overrides),
                run_dir=c.run_dir(results_root).name,
                identity_hash=c.plan.identity_hash,
                model=f"{c.spec.model.provider}:{c.spec.model.name}",
            )
            for c in cells
        ],
    )


def check_pairable(sweep: SweepSpec, cells: list[CellPlan], *, allow_partial: bool) -> None:
    """Refuse, before any call, a cell the table could never gate against the baseline:
    one on other dataset content or another split (the gate pairs rows by sample id, and
    refuses both), or on other samples (another ``dataset.limit``, or a ``shuffle_seed``
    with a limit) unless ``allow_partial`` (then they must share some). Before, every cell
    ran and paid, and the table then refused the sweep, exit 2.

    Raises:
        SpecError: one line naming the cell and what differs.
    """
    name = sweep.baseline_cell().name
    base = next(c for c in cells if c.cell.name == name)
    base_ids = {s.id for s in base.plan.samples}
    for c in cells:
        if c is base:
            continue
        where = f"{sweep.source}: cell {c.cell.name}"
        b_hash, c_hash = base.plan.file_hashes["dataset"], c.plan.file_hashes["dataset"]
        if b_hash != c_hash:
            raise SpecError(
                f"{where}: runs on different datasets from the baseline {name} (dataset_hash "
                f"{c_hash[:12]} vs {b_hash[:12]}), so its samples cannot be paired with the "
                "baseline's: every cell must read the same dataset content (no call made)"
            )
        b_split, c_split = _split_name(base.spec), _split_name(c.spec)
        if b_split != c_split:
            raise SpecError(
                f"{where}: runs on {c_split or 'the whole dataset'} but the baseline {name} on "
                f"{b_split or 'the whole dataset'}: every cell must run on the same "
                "dataset.split (no call made)"
            )
        ids = {s.id for s in c.plan.samples}
        if ids == base_ids:
            continue
        shared = len(ids & base_ids)
        if shared == 0:
            raise SpecError(
                f"{where}: it and the baseline {name} share no sample ids ({len(ids)} vs "
                f"{len(base_ids)} samples): give every cell the same dataset.limit and "
                "dataset.shuffle_seed (no call made)"
            )
        if not allow_partial:
            differ = [
                f"{n} {what}"
                for n, what in (
                    (len(ids - base_ids), "of its samples are not the baseline's"),
                    (len(base_ids - ids), "of the baseline's are not its"),
                )
                if n
            ]
            raise SpecError(
                f"{where}: {' and '.join(differ)} (baseline {name}): give every cell the same "
                "dataset.limit and dataset.shuffle_seed, or pass --allow-partial to gate the "
                f"shared ones ({shared}; no call made)"
            )


def check_looks(cells: list[CellPlan]) -> None:
    """Refuse, before any call, a sweep whose cells on a held-out split would pass its
    ``dataset.split.max_looks`` (each cell of a new identity there is a look,
    :mod:`gradetrail.datasets.looks`): before, the cells ran until the one past the limit.

    Raises:
        SpecError: one line naming the split and the looks taken.
    """
    if not cells:
        return
    spec = cells[0].spec  # every cell runs on the baseline's split (check_pairable)
    looks, new = would_look(spec, [c.plan.identity_hash for c in cells])
    if (line := looks_refusal(spec, looks, len(new))) is not None:
        raise SpecError(f"{line} ({len(new)} of this sweep's cells would be new looks)")


def _split_name(spec: EvalSpec) -> str | None:
    split = spec.dataset.split
    return None if split is None else f"split {split.name!r}"


def is_complete(run_dir: Path, identity_hash: str) -> bool:
    """``run_dir`` holds a complete run of this identity without provider_error rows (a
    run with some is run again: only their requests are sent, the rest is cached) whose
    ``results.jsonl`` still agrees with its manifest
    (:func:`~gradetrail.rundir.agreement.rows_disagree`): a cell whose rows were edited or
    damaged since is run again, which rewrites them from the cache, instead of being gated
    as it is (the gate would refuse it for good)."""
    try:
        manifest = read_manifest(run_dir)
    except UsageError:
        return False
    counts = manifest.get("counts") or {}
    if (
        manifest.get("status") != "complete"
        or manifest.get("identity_hash") != identity_hash
        or counts.get("provider_error")
    ):
        return False
    return run_disagrees(run_dir, manifest) is None


def run_sweep(
    sweep: SweepSpec,
    *,
    results_root: str | Path = "results",
    cache_path: str | Path | None = None,
    use_cache: bool = True,
    executor_options: Any = None,
    on_cell: Callable[[CellPlan, str, RunResult | None], None] | None = None,
    allow_partial: bool = False,
    **run_options: Any,
) -> SweepResult:
    """Run every cell that is not complete yet, in order; write the sweep's record.

    With the sweep's ``max_cost_usd``, each cell's run gets what is left of it as its
    ``run.max_cost_usd`` (:func:`_within_sweep_ceiling`), so the whole sweep spends at most
    that, across re-runs too; once nothing is left, no later cell starts.

    Args:
        sweep: a loaded sweep (:func:`gradetrail.spec.sweep.load_sweep`).
        results_root: where run directories and ``sweep-<name>/`` go.
        cache_path: the cache every cell shares (as :func:`run_eval`).
        use_cache: False to neither read nor write it.
        executor_options: :class:`~gradetrail.executors.ray.RayOptions` to run each cell's
            calls on Ray, or None for local.
        on_cell: called after each cell with its plan, its outcome (``existing``, ``ran``,
            ``interrupted``, ``failed``) and its RunResult (None when not run).
        allow_partial: cells on other samples than the baseline's may run (the table
            gates the shared ones); without it they are refused (:func:`check_pairable`).
        run_options: passed to :func:`run_eval` (on_row, on_start, on_interrupt, echo_log).

    Raises:
        UsageError: the results root cannot hold run directories (a file, read-only).
        SpecError, DatasetError: a cell's spec, the slices, or a cell that cannot be paired
            with the baseline (:func:`check_pairable`), before any call.
        CacheError, RunError: as :func:`run_eval` (the message starts ``cell NAME:``, the
            cell whose run raised it); the record says which cells are done. A cell whose
            run stopped itself (a RunError: fail-fast) does not stop the others: they run,
            and the first such error is raised after them.
    """
    root = Path(results_root)
    check_results_root(root)  # a file or a read-only directory: bad input, before any cell
    cells = plan_sweep(sweep)
    record = _record(sweep, cells, root)
    check_pairable(sweep, cells, allow_partial=allow_partial)
    check_looks(cells)
    directory = sweep_dir(root, sweep.name)
    write_sweep_record(directory, record)
    failed: list[RunError] = []
    for index, cell in enumerate(cells):
        run_dir = cell.run_dir(root)
        if is_complete(run_dir, cell.plan.identity_hash):
            # its table row is read: on a held-out split, a look like a run
            take_look(cell.spec, cell.plan.identity_hash, record.cells[index].model)
            record.cells[index].outcome = "existing"
            write_sweep_record(directory, record)
            if on_cell is not None:
                on_cell(cell, "existing", None)
            continue
        spec = cell.spec
        if sweep.max_cost_usd is not None:
            spec, spent = _within_sweep_ceiling(sweep.max_cost_usd, cells, index, root)
            if spec is None:
                record.cells[index].outcome = "interrupted"
                write_sweep_record(directory, record)
                return SweepResult(
                    directory,
                    record,
                    True,
                    stop_reason=f"the sweep's max_cost_usd of ${sweep.max_cost_usd:.4f} is "
                    f"spent (${spent:.4f} by its cells' runs); raise it to run the rest",
                )
        try:
            result = run_eval(
                spec,
                results_root=root,
                cache_path=cache_path,
                use_cache=use_cache,
                overrides=[*cell.cell.overrides, f"run.labels={json.dumps(cell.spec.run.labels)}"],
                executor=executor_options,
                **run_options,
            )
        except BaseException as exc:
            record.cells[index].outcome = "failed"
            write_sweep_record(directory, record)
            if isinstance(exc, GradetrailError):  # which cell of many stopped, in its line
                _name_the_cell(exc, cell.cell.name)
            if type(exc) is not RunError:
                raise
            # the run stopped itself (fail-fast: a retired model, a bad key): the other
            # cells still run, so the next sweep has only this one left to fix
            failed.append(exc)
            if on_cell is not None:
                on_cell(cell, "failed", None)
            continue
        status = result.manifest.status
        outcome = (
            "ran"
            if status == "complete"
            else ("interrupted" if status == "interrupted" else "failed")
        )
        record.cells[index].outcome = outcome  # type: ignore[assignment]
        write_sweep_record(directory, record)
        if on_cell is not None:
            on_cell(cell, outcome, result)
        if outcome == "interrupted":
            return SweepResult(
                directory,
                record,
                True,
                result.manifest.stop_signal,
                result.manifest.stop_reason,
            )
    if failed:
        first = failed[0]
        if len(failed) > 1:
            first.args = (f"{first} (and {len(failed) - 1} more cells failed)", *first.args[1:])
        raise first
    return SweepResult(directory, record, False)


def _name_the_cell(exc: GradetrailError, name: str) -> None:
    """Prefix ``exc``'s message (and its problems) with ``cell NAME:``."""
    exc.args = (f"cell {name}: {exc}", *exc.args[1:])
    if getattr(exc, "problems", None):
        exc.problems = [f"cell {name}: {p}" for p in exc.problems]  # type: ignore[attr-defined]


def _within_sweep_ceiling(
    ceiling: float, cells: list[CellPlan], index: int, root: Path
) -> tuple[EvalSpec | None, float]:
    """Cell ``index``'s spec with ``run.max_cost_usd`` lowered to what the sweep's
    ``ceiling`` leaves it: what its run has paid so far plus the ceiling less what every
    cell's run has paid (each run directory's ``spending.jsonl``: re-runs after a kill and
    calls in flight at one counted as the run's own budget counts them), or the cell's own
    ceiling when lower. Returns (None, paid) when nothing is left; (spec, paid) else, paid
    the USD the sweep's cells have paid.
    """
    from gradetrail.rundir.spending import SpendingLog

    paid = [SpendingLog(c.run_dir(root)).read().total_usd for c in cells]
    spent = math.fsum(paid)
    left = ceiling - spent
    if left <= 0:
        return None, spent
    spec = cells[index].spec
    own = spec.run.max_cost_usd
    cap = paid[index] + left if own is None else min(own, paid[index] + left)
    run = spec.run.model_copy(update={"max_cost_usd": cap})
    return spec.model_copy(update={"run": run}), spent


@dataclass(frozen=True)
class DryRunCell:
    """What one cell would call.

    Attributes:
        name: the cell.
        model: provider:model.
        run_dir: its run directory.
        complete: the run directory already holds it (nothing would be called).
        requests: (sample, epoch) requests of the run.
        to_call: of them, not in the cache (what would be paid for).
        est_input_tokens: prompt tokens of `to_call`, estimated as characters / 4.
        est_output_tokens: `to_call` x model.params.max_tokens, or None without it.
        est_cost_usd: the estimate at the price table's (or the spec's) price, or None.
    """

    name: str
    model: str
    run_dir: str
    complete: bool
    requests: int
    to_call: int
    est_input_tokens: int
    est_output_tokens: int | None
    est_cost_usd: float | None


def dry_run(
    sweep: SweepSpec,
    *,
    results_root: str | Path = "results",
    cache_path: str | Path | None = None,
    allow_partial: bool = False,
) -> list[DryRunCell]:
    """Plan every cell and count what would be called (no call is made; the cache is
    only read).

    Raises:
        SpecError, DatasetError: as :func:`plan_sweep` and :func:`check_pairable`.
    """
    from gradetrail.cache.store import ResponseCache, default_cache_path

    root = Path(results_root)
    check_results_root(root)  # a file or a read-only directory: bad input, before any cell
    cells = plan_sweep(sweep)
    _record(sweep, cells, root)  # the slices are checked too
    check_pairable(sweep, cells, allow_partial=allow_partial)
    check_looks(cells)
    path = Path(cache_path) if cache_path else default_cache_path()
    cache = ResponseCache(path, read_only=True) if path.exists() else None
    out = []
    try:
        for c in cells:
            run_dir = c.run_dir(root)
            complete = is_complete(run_dir, c.plan.identity_hash)
            keys = list(c.plan.prepared.keys())
            found = cache.get_many(keys) if cache is not None and not complete else {}
            missing = [i for i, k in enumerate(keys) if k not in found] if not complete else []
            chars = sum(len(_prompt_text(c.plan.prepared[i])) for i in missing)
            est_in = chars // 4
            max_tokens = c.spec.model.params.max_tokens if c.spec.model.params else None
            est_out = None if max_tokens is None else max_tokens * len(missing)
            out.append(
                DryRunCell(
                    c.cell.name,
                    f"{c.spec.model.provider}:{c.spec.model.name}",
                    str(run_dir),
                    complete,
                    len(keys),
                    len(missing),
                    est_in,
                    est_out,
                    _estimate(c.spec, est_in, est_out or 0) if missing else 0.0,
                )
            )
    finally:
        if cache is not None:
            cache.close()
    return out


def _prompt_text(item: Any) -> str:
    request = item.request
    return (request.system or "") + (request.prompt or "")


def _estimate(spec: EvalSpec, input_tokens: int, output_tokens: int) -> float | None:
    from gradetrail.providers.pricing import Price, price_for

    if spec.model.price is not None:
        price = Price.from_dict(spec.model.price.model_dump())
    else:
        price = price_for(spec.model.provider, spec.model.name)
    return None if price is None else price.cost(input_tokens, output_tokens)
