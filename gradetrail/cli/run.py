"""``gradetrail run`` and ``gradetrail schema``."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated

import typer

from gradetrail._util import gcpause
from gradetrail.cli.options import CacheOption, ExecutorOption, NoCacheOption
from gradetrail.errors import GradetrailError

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``run`` and ``schema`` to ``app``."""
    app.command("run")(run)
    app.command("schema")(schema)


def run(
    spec: Annotated[Path, typer.Argument(help="The eval spec (YAML).")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a spec field: dotted.key=value (repeatable)."),
    ] = None,
    cache: CacheOption = None,
    no_cache: NoCacheOption = False,
    results_root: Annotated[
        str, typer.Option("--results-root", help="Where run directories are written.")
    ] = "results",
    executor: ExecutorOption = "local",
    address: Annotated[
        str | None,
        typer.Option(
            help="With --executor ray: auto (the cluster `ray start --head` started here) or "
            "HOST:PORT of the head node; default: start a local Ray on demand."
        ),
    ] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            help="With --executor ray: Ray workers making provider calls, sharing "
            "run.concurrency (default: one per node)."
        ),
    ] = None,
    json_out: Annotated[
        bool,
        typer.Option("--json", help="Print the run directory and the manifest as JSON."),
    ] = False,
    print_run_dir: Annotated[
        bool,
        typer.Option("--print-run-dir", help="Print only the run directory (for pipelines)."),
    ] = False,
    min_score: Annotated[
        float | None,
        typer.Option(
            "--min-score",
            help="Exit 1 unless the 95% CI's lower bound (not the mean) is at least this.",
        ),
    ] = None,
    models: Annotated[
        str | None,
        typer.Option(
            "--models",
            help="Comma-separated model names: run the spec once per model and gate each "
            "against the first, as `gradetrail sweep` (one table, Holm-corrected).",
        ),
    ] = None,
    label: Annotated[
        list[str] | None,
        typer.Option(
            "--label",
            help="A name for people (repeatable): sets run.labels, shown by `gradetrail runs` "
            "and the viewer; not part of the identity hash.",
        ),
    ] = None,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", help="Also show the run's log (log.jsonl) on stderr."),
    ] = False,
    batch: Annotated[
        bool,
        typer.Option(
            "--batch",
            help="Send what the cache lacks through the provider's batch API (half price), "
            "wait, then score. Re-running collects batches in flight, never resends them.",
        ),
    ] = False,
    detach: Annotated[
        bool,
        typer.Option("--detach", help="With --batch: send, record the batches, and exit."),
    ] = False,
    batch_fallback: Annotated[
        str,
        typer.Option(
            "--batch-fallback",
            help="With --batch: where expired or failed requests go again: batch (a new "
            "batch) or online.",
        ),
    ] = "batch",
    max_cost: Annotated[
        float | None,
        typer.Option(
            "--max-cost",
            help="A hard ceiling on what the run spends, USD, judges included "
            "(run.max_cost_usd; with --models, the whole sweep's): no call starts that "
            "could pass it.",
        ),
    ] = None,
    estimate: Annotated[
        bool,
        typer.Option(
            "--estimate",
            help="Print the requests to make (after the cache), tokens and cost, per model "
            "and for judges, and exit without any call.",
        ),
    ] = False,
    start_over_budget: Annotated[
        bool,
        typer.Option(
            "--start-over-budget",
            help="Start even when the worst case is over the ceiling (stop at it).",
        ),
    ] = False,
    require_approval: Annotated[
        bool,
        typer.Option(
            "--require-approval",
            help="Refuse to start if the harness changed since gradetrail approve "
            "(run.require_approval).",
        ),
    ] = False,
) -> None:
    """Run an eval: call the model for every sample (cached), score, write results.

    Ctrl-C stops starting new samples and waits for those in flight; a second Ctrl-C
    stops at once. Re-running the same command finishes the run from the cache.
    Exit codes: 0 scored (and --min-score met; also --detach), 1 nothing scored or
    --min-score missed, 2 bad spec or usage, 3 stopped at --max-cost, a quota or an error
    every request would repeat (re-run to finish), 130 Ctrl-C, 143 SIGTERM, 141 a broken
    pipe. --json prints the run directory and manifest whenever the run began.
    """
    import math

    from gradetrail._util.terminal import clean
    from gradetrail.cli import fail
    from gradetrail.cli.progress import RunProgress
    from gradetrail.engine.runner import run_eval
    from gradetrail.spec import load_spec

    if executor not in ("local", "ray"):
        raise typer.BadParameter(
            f"unknown executor {executor!r}; use local or ray", param_hint="--executor"
        )
    if executor == "local" and (address is not None or workers is not None):
        raise typer.BadParameter(
            "--address and --workers are for --executor ray", param_hint="--executor"
        )
    if not results_root.strip():
        raise typer.BadParameter(
            "is empty; give the directory run directories go in", param_hint="--results-root"
        )
    if (detach or batch_fallback != "batch") and not batch:
        raise typer.BadParameter("needs --batch", param_hint="--detach/--batch-fallback")
    if batch_fallback not in ("batch", "online"):
        raise typer.BadParameter("use batch or online", param_hint="--batch-fallback")
    if batch:
        from gradetrail.engine.batching import check_batch_executor

        try:
            check_batch_executor(executor == "ray")
        except GradetrailError as exc:
            raise fail(exc) from None
    if models is not None:
        _run_models(
            spec,
            models,
            set_,
            cache,
            no_cache,
            results_root,
            json_out,
            _models_settings(label, start_over_budget, require_approval),
            max_cost,
            (executor, address, workers),
            {
                "--print-run-dir": print_run_dir,
                "--min-score": min_score is not None,
                "--batch": batch,
                "--detach": detach,
                "--estimate": estimate,
            },
        )
    if json_out and print_run_dir:
        raise typer.BadParameter("give one of --json and --print-run-dir", param_hint="--json")
    if min_score is not None and not (math.isfinite(min_score) and 0 < min_score <= 1):
        raise typer.BadParameter(
            "must be a score in (0, 1]: scores are in [0, 1], so a value above 1 can never "
            "pass and one at or below 0 always does",
            param_hint="--min-score",
        )
    overrides = list(set_ or [])
    if label:
        overrides.append(f"run.labels={json.dumps(label)}")
    if max_cost is not None:
        if not math.isfinite(max_cost) or max_cost <= 0:
            raise typer.BadParameter("must be a positive number of USD", param_hint="--max-cost")
        overrides.append(f"run.max_cost_usd={max_cost!r}")
    if start_over_budget:
        overrides.append("run.start_over_budget=true")
    if require_approval:
        overrides.append("run.require_approval=true")
    progress: RunProgress | None = None
    started_in: Path | None = None

    def on_start(plan, run_dir) -> None:  # noqa: ANN001 - typer-free callback
        nonlocal progress, started_in
        gcpause.resume()  # start-up is over: collect cycles as usual from here
        started_in = run_dir
        for warning in getattr(plan.samples, "warnings", ()):  # e.g. an unpinned revision
            print(f"warning: {warning}", file=sys.stderr)
        progress = RunProgress(len(plan.prepared)).__enter__()

    def on_interrupt(kind: str, signal_name: str, in_flight: int) -> None:
        if progress is None:
            return
        if kind == "drain":
            progress.note(
                f"{signal_name}: starting no new samples; waiting for {in_flight} in flight "
                "(Ctrl-C again to stop now)"
            )
        else:
            progress.note(f"{signal_name}: stopping now; cancelling {in_flight} in flight")

    try:
        chosen = None
        if executor == "ray":
            from gradetrail.executors.ray import RayOptions

            chosen = RayOptions(address=address, workers=workers)
        loaded = load_spec(spec, overrides)
        for line in loaded.model.unused_keys():  # before the run: it forks the identity
            print(f"warning: {line}", file=sys.stderr)
        if estimate:
            from gradetrail.engine.estimate import estimate_run

            found = estimate_run(loaded, cache_path=cache, use_cache=not no_cache, batch=batch)
            if json_out:
                print(json.dumps(found.to_dict(), indent=2))
            else:
                for line in found.lines():
                    print(clean(line))
            raise typer.Exit(0)
        batching = None
        if batch:
            from gradetrail.engine.batching import BatchOptions

            batching = BatchOptions(fallback=batch_fallback, detach=detach)  # type: ignore[arg-type]
        from gradetrail.cli.userstdout import guarded_stdout

        try:
            with guarded_stdout(to_stderr=json_out or print_run_dir):
                result = run_eval(
                    loaded,
                    executor=chosen,
                    results_root=results_root,
                    cache_path=cache,
                    use_cache=not no_cache,
                    overrides=overrides,
                    on_start=on_start,
                    on_row=lambda row, tally: progress.update(row, tally) if progress else None,
                    on_interrupt=on_interrupt,
                    echo_log=verbose,
                    batch=batching,
                )
        finally:
            if progress is not None:
                progress.__exit__(None, None, None)
    except GradetrailError as exc:
        if json_out and started_in is not None:  # what landed, as a stop prints it
            _print_manifest(started_in)
        exit_ = fail(exc)
        if started_in is not None:  # the run had begun: say where what landed is
            from gradetrail._util.terminal import one_line

            print(f"note: the rows that landed are in {one_line(str(started_in))}", file=sys.stderr)
        raise exit_ from None
    except KeyboardInterrupt:  # a third Ctrl-C, while the run was closing
        raise typer.Exit(130) from None
    # imported once the run is over: nothing before the first request waits for them
    from gradetrail.ci.threshold import check_min_score
    from gradetrail.report.run import cache_warnings, print_summary

    for line in cache_warnings(result.manifest.cache):
        print(f"warning: {clean(line)}", file=sys.stderr)
    threshold = None if min_score is None else check_min_score(result.manifest.score, min_score)
    if json_out:
        out = {"run_dir": str(result.run_dir), **result.manifest.model_dump(mode="json")}
        if threshold is not None:
            out["min_score"] = threshold.to_dict()
        print(json.dumps(out, indent=2))
    elif print_run_dir:
        print(result.run_dir)
    else:
        print_summary(result)
        if threshold is not None:
            print(f"  {'min score':<11} {threshold.message()}")
    waiting = ((result.manifest.executor or {}).get("batch") or {}).get("waiting") or []
    if waiting:
        print(
            f"note: {len(waiting)} batches are still running ({', '.join(waiting)}); run the "
            "same command again to collect them (`gradetrail batches "
            f"{clean(str(result.run_dir))}` shows them)",
            file=sys.stderr,
        )
        if result.manifest.stop_signal is None:  # --detach, or past the wait: as asked
            raise typer.Exit(0)
    if result.manifest.stop_reason is not None:
        print(f"error: {clean(result.manifest.stop_reason)}", file=sys.stderr)
        raise typer.Exit(3)
    if result.manifest.status == "interrupted":
        raise typer.Exit(143 if result.manifest.stop_signal == "SIGTERM" else 130)
    if threshold is not None and not threshold.passed:
        raise typer.Exit(1)
    raise typer.Exit(0 if result.tally.counts["scored"] else 1)


def _print_manifest(run_dir: Path) -> None:
    """``--json`` for a run an error ended once it had begun (fail-fast, a disk that
    filled): its run directory and manifest as written (``status`` ``failed``), as a run
    that stopped prints them; nothing when no manifest was written."""
    from gradetrail.rundir.results import read_manifest

    try:
        manifest = read_manifest(run_dir)
    except GradetrailError:
        return
    print(json.dumps({"run_dir": str(run_dir), **manifest}, indent=2))


def _models_settings(
    label: list[str] | None, start_over_budget: bool, require_approval: bool
) -> list[str]:
    """The overrides ``--label``, ``--start-over-budget`` and ``--require-approval`` give
    every cell of ``--models``."""
    settings = [f"run.labels={json.dumps(label)}"] if label else []
    if start_over_budget:
        settings.append("run.start_over_budget=true")
    if require_approval:
        settings.append("run.require_approval=true")
    return settings


def _run_models(
    spec: Path,
    models: str,
    set_: list[str] | None,
    cache: Path | None,
    no_cache: bool,
    results_root: Path,
    json_out: bool,
    settings: list[str],
    max_cost: float | None,
    where: tuple[str, str | None, int | None],
    unsupported: dict[str, bool],
) -> None:
    """``gradetrail run SPEC --models a,b,c``: the sweep of one cell a model, each cell
    with ``settings``, the whole sweep under ``max_cost`` (``--max-cost``); ``where`` is
    (executor, address, workers). A flag of ``unsupported`` that is set is refused (exit 2):
    before, --require-approval, --max-cost and the others were dropped without a word.
    """
    gcpause.resume()  # several runs: collect cycles as usual throughout
    from gradetrail.cli import fail
    from gradetrail.cli.sweep import check_max_cost, run_loaded
    from gradetrail.spec.sweep import models_sweep

    if set_:
        raise typer.BadParameter(
            "--models runs the spec as it is: for other changes write a sweep file "
            "(gradetrail sweep)",
            param_hint="--set",
        )
    for flag, given in unsupported.items():
        if given:
            raise typer.BadParameter(
                f"{flag} is for a run of one model; run each model on its own, or drop it",
                param_hint="--models",
            )
    try:
        loaded = models_sweep(
            spec,
            models.split(","),
            settings=settings,
            max_cost_usd=None if max_cost is None else check_max_cost(max_cost),
        )
    except GradetrailError as exc:
        raise fail(exc) from None
    executor, address, workers = where
    run_loaded(
        loaded,
        cache=cache,
        no_cache=no_cache,
        results_root=results_root,
        executor=executor,
        address=address,
        workers=workers,
        json_out=json_out,
    )


def schema() -> None:
    """Print the JSON Schema of spec files (for editor completion and checking)."""
    from gradetrail.spec import spec_json_schema

    print(json.dumps(spec_json_schema(), indent=2))
