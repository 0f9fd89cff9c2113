"""Running an eval: plan (load and check everything before any call), drive the
per-sample pipeline over the executor, write results, manifest and summary.

The Python API behind ``gradetrail run``::

    spec = gradetrail.load_spec("examples/gsm8k.yaml", ["model.name=175b_finetuning"])
    result = gradetrail.run_eval(spec)
    print(result.manifest.score.mean, result.run_dir)
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import sys
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pydantic import BaseModel

from gradetrail._util.bounded import BoundedCalls
from gradetrail._util.usercode import exits_refused
from gradetrail.cache.inflight import InFlight
from gradetrail.cache.pending import PendingResponses, cache_key, restore_pending
from gradetrail.cache.store import ResponseCache, default_cache_path, retry_advice
from gradetrail.datasets import Sample, Samples, load_samples
from gradetrail.datasets.looks import check_no_held_out_quotes, take_look
from gradetrail.engine.epoch_order import EpochOrder
from gradetrail.engine.failfast import FailFast, ProviderStopped, QuotaExhausted, check_stop
from gradetrail.engine.interrupts import Interrupts, StopKind, deferred_signals
from gradetrail.engine.pipeline import SampleContext, process
from gradetrail.engine.rendering import (
    MissingValueRow,
    Prepared,
    PreparedRequests,
    Renderer,
    counted,
    prepare,
    with_hits,
)
from gradetrail.errors import CacheError, DatasetError, RunError, SpecError
from gradetrail.executors.base import Executor
from gradetrail.executors.budget import (
    Budget,
    BudgetedExecutor,
    BudgetExhausted,
    check_bounded,
    worst_case_usd,
)
from gradetrail.executors.calls import Calls
from gradetrail.executors.local import LocalExecutor
from gradetrail.executors.retry import DRAINING, Drain, Drained, RetryPolicy
from gradetrail.providers import Provider, make_provider
from gradetrail.providers.base import Request
from gradetrail.rundir.artifacts import Artifacts
from gradetrail.rundir.layout import RunDir, check_results_root
from gradetrail.rundir.manifest import (
    CacheReport,
    GitProbe,
    Manifest,
    RunStatus,
    identity_hash,
    now_iso,
    runtime_versions,
    sealed,
    spec_hash,
    write_manifest,
)
from gradetrail.rundir.progress import EVERY_S, ProgressFile
from gradetrail.rundir.results import (
    MANIFEST_FILE,
    OUTPUT_FILES,
    PENDING_FILE,
    RESERVE_FILE,
    SAMPLES_FILE,
    ResultsWriter,
    Row,
)
from gradetrail.rundir.runlog import RunLog, rotated_names
from gradetrail.rundir.summary import Tally
from gradetrail.scorers import Scorer, make_scorer
from gradetrail.scorers.base import ScoreInput
from gradetrail.scorers.function import ScoreFunction, as_scorer, code_identity
from gradetrail.spec import EvalSpec, ModelSpec
from gradetrail.spec.run import MAX_ROWS

if TYPE_CHECKING:  # batches and budgets import theirs when a run has them
    from gradetrail.engine.batching import BatchOptions, BatchReport
    from gradetrail.executors.ray import RayOptions

__all__ = ["RunPlan", "RunResult", "plan_run", "run_eval"]

#: bytes set aside in the run directory while a run goes, so the final manifest can be
#: written when the results disk fills (a final manifest is a few KB)
RESERVE_BYTES = 64 * 1024


@dataclass(eq=False, repr=False)
class RunPlan:
    """Everything a run needs, loaded and checked before any model call.

    Attributes:
        spec: the validated spec.
        samples: the dataset in run order.
        provider: the provider (ready: keys and files checked).
        scorer: the scorer (checked against the first sample).
        prepared: every (sample, epoch), keyed, epoch-major (rendered on access).
        file_hashes: role -> SHA-256 of each file the run reads.
        identity_hash: the run's identity hash.
    """

    spec: EvalSpec
    samples: Sequence[Sample]
    provider: Provider
    scorer: Scorer
    prepared: PreparedRequests
    file_hashes: dict[str, str]
    identity_hash: str

    def run_dir(self, results_root: Path) -> Path:
        """``<results_root>/<name>-<first 12 hex of the identity hash>``."""
        return results_root / f"{self.spec.name}-{self.identity_hash[:12]}"


@dataclass(frozen=True, eq=False)
class RunResult:
    """What a finished (or interrupted) run produced.

    Attributes:
        run_dir: the run directory.
        manifest: the manifest as written.
        tally: the run's totals.
    """

    run_dir: Path
    manifest: Manifest
    tally: Tally = field(repr=False)


def plan_run(spec: EvalSpec, *, scorer: Scorer | ScoreFunction | None = None) -> RunPlan:
    """Load the dataset, build and check the provider and scorer, render every request.

    ``scorer``: a scorer of the user's own (a :class:`~gradetrail.scorers.base.Scorer`
    instance or a function of one ScoreInput, see :mod:`gradetrail.scorers.function`) in
    place of the spec's; its code enters the identity hash.

    With ``run.require_approval``, the harness is checked against its approval first
    (:func:`~gradetrail.engine.approval.check_approval`), before any of its code is
    imported: planning imports a python provider's or scorer's module, which runs its
    top-level code (a sweep plans every cell, and ``--estimate`` plans too).

    Raises:
        ApprovalError: ``run.require_approval`` is set and the harness changed since
            ``gradetrail approve``.
        SpecError, DatasetError: anything wrong with the spec or its files, before any call:
            also a row nested past Python's recursion limit, more than
            :data:`~gradetrail.spec.run.MAX_ROWS` rows (samples x epochs), and a scorer
            that fails on any sample's own data (a regex pattern one row makes invalid).
    """
    if spec.run.require_approval:  # before any of the harness is read, imported or run
        from gradetrail.engine.approval import check_approval

        check_approval(spec)
    try:
        samples = load_samples(spec.dataset, base_dir=spec.base_dir, where=spec.source)
    except RecursionError:
        raise DatasetError(
            f"{spec.source}: dataset.path: a row is nested too deeply to read (over about "
            f"{sys.getrecursionlimit()} levels); flatten the rows"
        ) from None
    check_no_held_out_quotes(spec, samples)  # a tuning split's prompt quoting held-out rows
    rows = len(samples) * spec.run.epochs
    if rows > MAX_ROWS:
        raise SpecError(
            f"{spec.source}: run.epochs: {len(samples):,} samples x {spec.run.epochs:,} epochs "
            f"is {rows:,} rows, over the limit of {MAX_ROWS:,} a run; lower run.epochs or "
            "dataset.limit, or split the dataset"
        )
    provider = make_provider(spec.model, spec.base_dir)
    with _naming_the_spec(spec):
        provider.check_ready()
        provider.check_samples(samples)
    identity = provider.identity()
    custom_scorer = scorer
    if custom_scorer is None:
        scorer = make_scorer(spec)
        custom: dict[str, str] = {}
    else:  # the user's own: its code identifies it (the spec's scorer section does not)
        scorer = as_scorer(custom_scorer)
        custom = {"custom_scorer": code_identity(custom_scorer)}
    with _naming_the_spec(spec):  # a tools module that cannot be imported, say
        renderer = Renderer(spec, identity, provider, target_required=scorer.reads_target)
    renderer.check(samples[0].row)
    try:
        first = prepare(samples[0], 1, renderer)
    except MissingValueRow as exc:  # how many rows are alike, with the first
        raise counted(exc, samples, renderer) from None
    with _naming_the_spec(spec):
        scorer.check_dataset(samples.content_hash)
        scorer.check(
            ScoreInput(
                first.sample, 1, first.request.prompt, first.request.system, first.target, ""
            )
        )

    def check_row(item: Prepared) -> None:  # what a scorer derives from the row alone
        with _naming_the_spec(spec):
            scorer.check_row(
                ScoreInput(
                    item.sample, 1, item.request.prompt, item.request.system, item.target, ""
                )
            )

    try:
        prepared = PreparedRequests(
            samples, spec.run.epochs, renderer, check_row if scorer.checks_rows else None
        )
    except RecursionError:
        raise DatasetError(
            f"{spec.source}: a row is nested too deeply to render; flatten the rows"
        ) from None
    file_hashes = {"dataset": samples.content_hash, **renderer.file_hashes()}
    split = samples.info.get("split")  # a Hugging Face dataset's is the split's name
    if isinstance(split, dict):  # the ids of dataset.split, in dataset order
        file_hashes["split"] = split["ids_sha256"]
    for role, value in identity.items():
        if role.endswith("sha256"):
            file_hashes[role.removesuffix("_sha256")] = value
    file_hashes.update(scorer.identity())
    file_hashes.update(custom)
    return RunPlan(
        spec, samples, provider, scorer, prepared, file_hashes, identity_hash(spec, file_hashes)
    )


@contextlib.contextmanager
def _naming_the_spec(spec: EvalSpec) -> Iterator[None]:
    """Prefix the spec file to a SpecError or DatasetError that does not name it yet."""
    try:
        yield
    except (SpecError, DatasetError) as exc:
        if str(exc).startswith(spec.source):
            raise
        raise type(exc)(f"{spec.source}: {exc}") from None


def run_eval(
    spec: EvalSpec,
    *,
    results_root: str | Path = "results",
    cache_path: str | Path | None = None,
    use_cache: bool = True,
    overrides: Iterable[str] = (),
    executor: Executor | RayOptions | None = None,
    on_row: Callable[[Row, Tally], None] | None = None,
    on_start: Callable[[RunPlan, Path], None] | None = None,
    on_interrupt: Callable[[StopKind, str, int], None] | None = None,
    echo_log: bool = False,
    scorer: Scorer | ScoreFunction | None = None,
    batch: BatchOptions | None = None,
) -> RunResult:
    """Run an eval end to end.

    Everything that can refuse the run (spec, dataset, provider, a symlink planted in the
    run directory, another process writing it, the cache) is checked before the first
    model call. Re-running the same spec after a crash or an interrupt finishes the run:
    responses already cached are not requested again.

    Ctrl-C (SIGINT) stops starting new samples and lets the requests in flight land; a
    second Ctrl-C or SIGTERM cancels them (see :mod:`gradetrail.engine.interrupts`). Either way
    the run returns normally with ``manifest.status == "interrupted"``.

    Args:
        spec: a validated spec (see :func:`gradetrail.load_spec`).
        results_root: where run directories go (default ``results`` under the cwd).
        cache_path: the SQLite cache file (default :func:`default_cache_path`).
        use_cache: False to neither read nor write the cache.
        overrides: the ``--set`` strings the spec was loaded with (recorded in the manifest).
        executor: where provider calls run: an executor, :class:`RayOptions` for Ray
            workers built for this run's provider, or None for a :class:`LocalExecutor`.
        on_row: called with each result row (a dict shaped as :class:`SampleResult`, as
            :func:`~gradetrail.read_results` reads them back) and the running tally.
        on_start: called once the plan is checked, with the plan and the run directory.
        on_interrupt: called when a signal arrives, with ``"drain"`` or ``"abort"``, the
            signal's name and the number of requests in flight.
        echo_log: also write the structured log's lines to stderr.
        scorer: a scorer of your own in place of the spec's (see :func:`plan_run`).
        batch: send the requests the cache lacks through the provider's batch API (half
            price) before scoring (see :mod:`gradetrail.engine.batching`); None: online.
            A run whose batches are still running when it returns (``detach``, Ctrl-C,
            ``max_wait_s``) ends ``interrupted``, its batch ids in the run directory and
            in ``manifest.executor.batch.waiting``: the same call later collects them.

    Returns:
        The run directory, manifest and tally (also for an interrupted run).

    Raises:
        SpecError, DatasetError: before any model call.
        ApprovalError: ``run.require_approval`` is set and the harness changed since
            ``gradetrail approve`` (see :mod:`gradetrail.engine.approval`).
        CacheError, RunError: the cache or results directory cannot be used (before any
            call), or the cache fails mid-run (the manifest then says ``failed``).
        SpecError: also a run on a held-out split past its ``dataset.split.max_looks``
            (:mod:`gradetrail.datasets.looks`), before any call.
    """
    git = GitProbe()  # git answers while the run is planned; the manifest records it
    cache: ResponseCache | None = None
    try:
        plan = plan_run(spec, scorer=scorer)
        check_results_root(results_root)  # before the cache is made or any call paid
        if batch is not None:
            _check_batchable(plan, use_cache, executor)
        executor = _executor(plan, executor)
        cache = (
            ResponseCache(Path(cache_path) if cache_path else default_cache_path())
            if use_cache
            else None
        )
        budget = _budget(
            plan, cache, batched=batch is not None, run_dir=plan.run_dir(Path(results_root))
        )
        if budget is not None:
            executor = BudgetedExecutor(executor, budget)
        # the last refusal before any call: a run on a held-out split is a look, recorded
        take_look(plan.spec, plan.identity_hash, f"{spec.model.provider}:{spec.model.name}")
    except BaseException:
        git.close()
        if cache is not None:
            cache.close()
        raise
    try:
        signing = cache_key(cache.path) if cache is not None else None
    except BaseException:
        git.close()
        if cache is not None:
            cache.close()
        raise
    driving = False  # once the run drives its pipeline, the pipeline closes the executor
    try:
        if cache is None or cache.any_missing(plan.prepared.sorted_keys()):
            plan.provider.warm_up()  # may still refuse the run: before its directory exists
            executor.start()  # Ray: import, join the cluster (never for a fully cached run)
        inflight = InFlight(cache) if cache is not None else None
        with RunDir.create(plan.run_dir(Path(results_root))) as run_dir:
            run_dir.check_outputs((*OUTPUT_FILES, *rotated_names()))
            run_dir.lock()
            progress = ProgressFile(run_dir, len(plan.prepared), _progress_path(spec))
            # before the manifest: a symlink at run.progress_file refuses the run here
            progress.write(Tally.for_spec(spec), strict=True)
            pending = _keep_what_the_cache_cannot(run_dir, cache, signing)
            run_dir.reserve(RESERVE_FILE, RESERVE_BYTES)
            manifest = _initial_manifest(plan, list(overrides), git.result())
            try:
                run_dir.reserve(RESERVE_FILE, RESERVE_BYTES)
                write_manifest(run_dir, manifest)
                writer = ResultsWriter(run_dir, spec.run.epochs, len(plan.samples))
            except BaseException:
                _abandon_start(run_dir, manifest)
                if pending is not None:
                    pending.close()
                raise
            try:
                with RunLog(run_dir, echo=echo_log) as log:
                    log.event(
                        "run_start",
                        run_dir=str(run_dir.path),
                        identity_hash=plan.identity_hash,
                        rows=len(plan.prepared),
                        samples=len(plan.samples),
                        epochs=spec.run.epochs,
                        cache=str(cache.path) if cache is not None else None,
                        pid=os.getpid(),
                    )
                    if on_start is not None:
                        on_start(plan, run_dir.path)
                    # what the providers notice, logged (an executor of the caller's own
                    # may hold none)
                    providers = (plan.provider, getattr(executor, "provider", None))
                    for provider in {id(p): p for p in providers if p is not None}.values():
                        log.follow(provider.events)
                    calls = Calls(cache, executor, log, inflight)
                    context = SampleContext(
                        calls,
                        plan.scorer,
                        refusals=spec.run.refusals,
                        reasoning_tags=tuple(getattr(spec.scorer, "reasoning_tags", ())),
                        artifacts=Artifacts(run_dir),
                        order=EpochOrder()
                        if spec.run.epochs > 1 and plan.scorer.calls_models
                        else None,
                    )
                    run = _Run(plan, run_dir, context, inflight, batch, budget, progress)
                    driving = True
                    return run.execute(manifest, writer, on_row, on_interrupt)
            except BaseException:
                if not driving:  # the log could not be opened (no inode left, say)
                    _abandon_start(run_dir, manifest)
                raise
            finally:
                writer.close()
                progress.close()
                if pending is not None:
                    pending.close()
    finally:
        try:
            if not driving:  # refused before any call: release what start() acquired
                asyncio.run(executor.aclose())
        finally:
            git.close()
            if cache is not None:
                cache.close()


def _progress_path(spec: EvalSpec) -> Path | None:
    """``run.progress_file`` resolved against the spec's directory, or None."""
    chosen = spec.run.progress_file
    if not chosen:
        return None
    path = Path(chosen).expanduser()
    return path if path.is_absolute() else (spec.base_dir or Path(".")) / path


def _abandon_start(run_dir: RunDir, manifest: Manifest) -> None:
    """A run that failed while setting up its directory (its disk has no space or inode
    left): free the reserved space, then mark a manifest already written ``failed``, so
    neither ``running`` nor ``.reserve`` is left behind (best effort: the error that
    stopped the run is what the user sees)."""
    with contextlib.suppress(OSError, RunError):
        run_dir.remove(RESERVE_FILE)
    with contextlib.suppress(OSError, RunError):
        if (run_dir.path / MANIFEST_FILE).exists():
            write_manifest(run_dir, manifest.model_copy(update={"status": "failed"}))


def _keep_what_the_cache_cannot(
    run_dir: RunDir, cache: ResponseCache | None, key: bytes | None
) -> PendingResponses | None:
    """Store what an earlier run on this cache kept in this directory (its cache was
    full), lines signed by ``key`` only, then send what this run's cache cannot store to
    ``pending-cache.jsonl``, signed.

    Raises:
        CacheError: the cache still cannot store the earlier run's responses.
    """
    if cache is None or key is None:
        return None
    restored = restore_pending(run_dir, cache, key)
    cache.rejected += restored.rejected
    pending = PendingResponses(run_dir, key, cache.path)
    cache.fallback = pending.keep
    return pending


def _budget(
    plan: RunPlan, cache: ResponseCache | None, *, batched: bool, run_dir: Path
) -> Budget | None:
    """The run's budget (``run.max_cost_usd``), checked against the worst case of every
    request the cache lacks (judge calls are not in it: they are held during the run, but
    each judge model must have a worst case: a price and a bound on its output).
    What earlier processes of the run paid (``spending.jsonl`` in ``run_dir``) counts
    against the ceiling, and what this one pays is added to it.

    Raises:
        SpecError: no price or max_tokens to bound a call; or the worst case is over the
            ceiling and ``run.start_over_budget`` is not set.
    """
    ceiling = plan.spec.run.max_cost_usd
    if ceiling is None:
        return None
    provider, where = plan.provider, plan.spec.source
    try:
        worst_case_usd(provider, plan.prepared[0].request, batch=batched)  # a price at all
        worst, count = 0.0, 0
        for item, hit in with_hits(plan.prepared, cache):
            if hit is None:
                worst += worst_case_usd(provider, item.request, batch=batched)
                count += 1
    except SpecError as exc:
        raise SpecError(f"{where}: {exc}") from None
    for judge in _judge_models(plan.spec):  # their calls are held too: each needs a bound
        try:
            check_bounded(make_provider(judge, plan.spec.base_dir))
        except SpecError as exc:
            from gradetrail.scorers.judge import judge_fields

            message = judge_fields(str(exc))
            raise SpecError(f"{where}: judge {judge.provider}:{judge.name}: {message}") from None
    from gradetrail.rundir.spending import SpendingLog

    spending = SpendingLog(run_dir)
    recorded = spending.read()
    spent = recorded.total_usd
    if spent + worst > ceiling and not plan.spec.run.start_over_budget:
        before = f" (${spent:.4f} of it spent by earlier runs of this run" if spent else ""
        if recorded.calls_in_flight:
            before += (
                f", ${recorded.in_flight_usd:.4f} the worst case of {recorded.calls_in_flight:,} "
                "calls in flight when a process stopped or cut off by their timeouts, "
                "which may have been billed"
            )
        before += ")" if spent else ""
        raise SpecError(
            f"{where}: run.max_cost_usd: the {count:,} requests the cache lacks could cost up "
            f"to ${worst:.4f}, over what is left of the ceiling of ${ceiling:.4f}{before}; "
            "raise --max-cost, or give --start-over-budget (run.start_over_budget: true) to "
            "run until the ceiling"
        )
    return Budget(ceiling, spent_usd=spent, on_spend=spending.add, on_reserve=spending.reserve)


def _judge_models(spec: EvalSpec) -> list[ModelSpec]:
    """The model sections of ``spec``'s scorers (judges, pairwise judges), at any depth."""
    found: list[ModelSpec] = []
    stack: list[Any] = [spec.scorer, *(spec.scorers or [])]
    while stack:
        item = stack.pop()
        if isinstance(item, ModelSpec):
            found.append(item)
        elif isinstance(item, BaseModel):
            stack.extend(getattr(item, name) for name in type(item).model_fields)
        elif isinstance(item, list | tuple):
            stack.extend(item)
    return found


def _check_batchable(
    plan: RunPlan, use_cache: bool, executor: Executor | RayOptions | None
) -> None:
    """Refuse ``--batch`` where it cannot hold: on Ray, no batch API, no cache, agent loops.

    Raises:
        UsageError: ``executor`` is Ray's (``batching.check_batch_executor``).
        SpecError: naming what to change.
    """
    from gradetrail.engine.batching import check_batch_executor

    if executor is not None and not isinstance(executor, LocalExecutor):
        from gradetrail.executors.ray import RayExecutor, RayOptions

        check_batch_executor(isinstance(executor, RayOptions | RayExecutor))
    where = plan.spec.source
    if not plan.provider.batches:
        raise SpecError(
            f"{where}: model.provider {plan.spec.model.provider!r} has no batch API; "
            "run without --batch (openai and anthropic have one)"
        )
    if not use_cache:
        raise SpecError(
            f"{where}: --batch keeps each collected response in the cache; drop --no-cache"
        )
    if plan.spec.model.tools_module is not None:
        raise SpecError(f"{where}: an agent loop's turns cannot be batched; run without --batch")


def _policy(spec: EvalSpec) -> RetryPolicy:
    """The run's one retry policy, from its run settings."""
    run = spec.run
    return RetryPolicy(
        max_retries=run.max_retries, timeout_s=run.timeout_s, sample_timeout_s=run.sample_timeout_s
    )


def _executor(plan: RunPlan, chosen: Executor | RayOptions | None) -> Executor:
    """The executor for ``plan``: ``chosen`` itself, or one built from the spec's run
    settings (retry policy, concurrency, rate caps), local or on Ray."""
    if isinstance(chosen, Executor):
        return chosen
    run = plan.spec.run
    policy = _policy(plan.spec)
    limits: dict[str, Any] = {
        "requests_per_minute": run.requests_per_minute,
        "tokens_per_minute": run.tokens_per_minute,
        "adaptive": run.adaptive_concurrency,
    }
    if chosen is None:
        return LocalExecutor(plan.provider, policy, run.concurrency, **limits)
    return chosen.build(plan.provider, policy, run.concurrency, **limits)


class _Run:
    """One execution of a plan: drive the pipeline, then write what it produced."""

    def __init__(
        self,
        plan: RunPlan,
        run_dir: RunDir,
        ctx: SampleContext,
        inflight: InFlight | None,
        batch: BatchOptions | None = None,
        budget: Budget | None = None,
        progress: ProgressFile | None = None,
    ) -> None:
        self.plan = plan
        self.inflight = inflight
        self.run_dir = run_dir
        self.ctx = ctx
        self.log: RunLog = ctx.log  # type: ignore[assignment]
        self.tally = Tally.for_spec(plan.spec, len(plan.samples))
        self.in_flight = 0
        #: the batch pass's options (None: online), and what it did
        self.batch = batch
        self.batch_report: BatchReport | None = None
        #: the run's budget (``run.max_cost_usd``), or None
        self.budget = budget
        self.stop_reason: str | None = None
        #: the run's progress file (``progress.json``), rewritten as rows land
        self.progress = progress

    def execute(
        self,
        manifest: Manifest,
        writer: ResultsWriter,
        on_row: Callable[[Row, Tally], None] | None,
        on_interrupt: Callable[[StopKind, str, int], None] | None,
    ) -> RunResult:
        def signalled(kind: StopKind, name: str) -> None:
            self.log.event("interrupt", kind=kind, signal=name, in_flight=self.in_flight)
            if on_interrupt is not None:
                on_interrupt(kind, name, self.in_flight)

        stop = Interrupts(signalled)
        start = time.perf_counter()
        status: RunStatus = "failed"
        unwritten: Exception | None = None
        try:
            with exits_refused():  # the user's os._exit(0) must not end the run as a success
                asyncio.run(self._main(writer, on_row, stop))
            waiting = self.batch_report is not None and self.batch_report.waiting
            status = "interrupted" if stop.stopping or waiting else "complete"
        except (KeyboardInterrupt, asyncio.CancelledError):
            status = "interrupted"
        except (BudgetExhausted, ProviderStopped) as exc:  # a clean stop: resumable
            status, self.stop_reason = "interrupted", str(exc)
            event = "budget_exhausted" if isinstance(exc, BudgetExhausted) else "quota_exhausted"
            if isinstance(exc, ProviderStopped) and not isinstance(exc, QuotaExhausted):
                event = "provider_stopped"
            self.log.event(event, message=str(exc))
        finally:
            # a signal now would cut the final rewrite in half (status left "running",
            # .tmp files behind): it is held until the results and manifest are written
            with deferred_signals():
                # an interrupted or failed run keeps its rows too, in input order
                results_sha256 = None
                try:
                    results_sha256 = self._write_outputs(writer)
                except Exception as exc:  # e.g. a full disk: never leave the status "running"
                    if status == "complete":
                        status, unwritten = "failed", exc
                manifest = _final_manifest(
                    manifest, self.plan, self.tally, status, time.perf_counter() - start
                ).model_copy(
                    update={
                        "executor": self.ctx.executor.describe(),
                        "results_sha256": results_sha256,
                    }
                )
                if self.ctx.cache is not None:
                    manifest = manifest.model_copy(update={"cache": self._cache_report()})
                if stop.signal_name is not None:
                    manifest = manifest.model_copy(update={"stop_signal": stop.signal_name})
                if self.stop_reason is not None:
                    manifest = manifest.model_copy(update={"stop_reason": self.stop_reason})
                manifest = sealed(manifest)  # the manifest returned is the one written
                self._write_manifest(manifest)
                if self.progress is not None:
                    self.progress.write(self.tally, status)
                    self.progress.close()
                self.log.event(
                    "run_end",
                    status=status,
                    counts=dict(self.tally.counts),
                    cache_hits=self.tally.cache_hits,
                    cost_usd=self.tally.cost_usd,
                    wall_s=manifest.wall_time_s,
                )
        if unwritten is not None:
            raise unwritten
        return RunResult(self.run_dir.path, manifest, self.tally)

    def _cache_report(self) -> CacheReport:
        """What the cache saw, once it is checked to still be there (recreated if not)."""
        cache = self.ctx.cache
        assert cache is not None
        try:
            if cache.ensure_file():
                self.log.event("cache_recreated", path=str(cache.path), rescued=cache.rescued)
        except CacheError as exc:
            self.log.event("cache_lost", path=str(cache.path), message=str(exc))
        shared = self.inflight
        assert shared is not None
        return CacheReport(
            path=str(cache.path),
            damaged=cache.damaged,
            twins=shared.twins,
            shared=shared.waited,
            other_processes=sorted(shared.holders),
            took_over=cache.took_over,
            recreated=cache.recreated,
            rescued=cache.rescued,
            unsaved=cache.unsaved,
            lost=cache.lost,
            rejected=cache.rejected,
        )

    def _unstored(self, cache: ResponseCache) -> CacheError:
        """The error that stops a run whose cache could not store what arrived."""
        kept = cache.unsaved - cache.lost
        where = f"{self.run_dir.path / PENDING_FILE}"
        text = (
            f"{cache.write_error}; the run stopped starting samples, and the {kept} "
            f"responses that arrived since are kept in {where} and go into the cache on the "
            f"next run: {retry_advice(cache.write_error)}"
        )
        if cache.lost:
            text += f" ({cache.lost} could not be kept anywhere and will be requested again)"
        return CacheError(text)

    def _write_manifest(self, manifest: Manifest) -> None:
        """Write the final manifest; on a full disk, free the space reserved for it first.

        Raises:
            RunError: it cannot be written even then.
        """
        try:
            write_manifest(self.run_dir, manifest)
        except RunError:
            self.run_dir.remove(RESERVE_FILE)
            write_manifest(self.run_dir, manifest)
        self.run_dir.remove(RESERVE_FILE)

    def _write_outputs(self, writer: ResultsWriter) -> str:
        """results.jsonl in input order, then samples.jsonl; returns results.jsonl's
        SHA-256 (hex). If this fails, the rows appended so far stay on disk as they are."""
        results_sha256 = writer.finalize()
        samples = self.plan.samples
        pairs = (
            samples.id_clusters()
            if isinstance(samples, Samples)
            else ((s.id, s.cluster) for s in samples)
        )
        self.run_dir.write_atomic(SAMPLES_FILE, self.tally.sample_lines(pairs))
        return results_sha256

    async def _main(
        self,
        writer: ResultsWriter,
        on_row: Callable[[Row, Tally], None] | None,
        stop: Interrupts,
    ) -> None:
        task = asyncio.current_task()
        assert task is not None
        drain = Drain()  # a first Ctrl-C: nothing still waiting to be sent is sent
        DRAINING.set(drain)  # this task's context, copied into every worker it starts
        stop.on_stop.append(drain.start)
        stop.install(task)
        # after the loop's own handlers: scorers stay within reach of SIGINT/SIGTERM
        bounded = BoundedCalls(self.plan.spec.run.score_timeout_s, lambda: stop.stopping)
        self.ctx.bounded = bounded
        beat = asyncio.ensure_future(self._beat())
        try:
            with bounded:
                await self._drive(writer, on_row, stop)
        finally:
            beat.cancel()
            stop.uninstall()
            if stop.signal_name is None and bounded.aborted_by is not None:
                stop.signal_name = bounded.aborted_by  # the loop never saw it: it ended first

    async def _beat(self) -> None:
        """Rewrite the progress file every few seconds while the run goes."""
        if self.progress is None:
            return
        while True:
            await asyncio.sleep(EVERY_S)
            self.progress.write(self.tally)

    async def _drive(
        self,
        writer: ResultsWriter,
        on_row: Callable[[Row, Tally], None] | None,
        stop: Interrupts,
    ) -> None:
        prepared, ctx, tally, cache = self.plan.prepared, self.ctx, self.tally, self.ctx.cache
        items = with_hits(prepared, cache, release=True)  # one shared iterator, in batches
        fail_fast = FailFast(self.plan.spec.run.fail_fast)
        paid: set[str] = set()  # keys a batch of this process paid for
        halted = False  # set when one worker fails: the others start nothing new

        async def worker() -> None:
            nonlocal halted
            try:
                for item, hit in items:  # each item is taken by one worker
                    if stop.stopping or halted:
                        return  # Ctrl-C or a failed worker: start nothing new
                    self.in_flight += 1
                    try:
                        # with a cache, with_hits read every key: a None hit is a miss
                        row = await process(item, ctx, hit, missed=cache is not None)
                    except Drained:
                        return  # its request was never sent: no row, a re-run makes it
                    finally:
                        self.in_flight -= 1
                    if paid and row["cached"] and item.key in paid:  # a batch of this run's
                        row = {**row, "cached": False, "attempts": max(row["attempts"], 1)}
                        paid.discard(item.key)  # paid once: another row of its key is a hit
                    # a cache hit's row may wait for the next ones: nothing is lost
                    writer.append((item.sample.index, item.epoch), row, hold=row["cached"])
                    tally.add(row, item.sample.index)
                    if on_row is not None:
                        on_row(row, tally)
                    # raises ProviderStopped: nothing after it can succeed (a quota ran
                    # out, or with fail-fast on, a refused key, an unknown model ...)
                    check_stop(row, run_stops=fail_fast.first > 0)
                    fail_fast.observe(row)  # raises RunError: one permanent error, N times
                    if cache is not None and cache.write_error is not None:
                        halted = True  # the cache cannot store what arrives: pay for no more
            except BaseException:  # fail-fast, a cache or results error: start nothing new
                halted = True
                raise

        try:
            if self.batch is not None:
                report = await self._batch_pass(stop)
                if report.waiting:
                    return  # the batches run on: the same command collects them
                paid = set(report.paid)  # a copy: each key is claimed by one row
            await ctx.scorer.bind(ctx.calls)  # judges share cache, log and retries
            workers = min(ctx.executor.concurrency, len(prepared)) or 1
            tasks = [asyncio.ensure_future(worker()) for _ in range(workers)]
            try:
                # once one worker fails the others start nothing new, and the requests they
                # have in flight land (paid for: their responses are kept, not cancelled)
                ended = await asyncio.gather(*tasks, return_exceptions=True)
            finally:  # an abort (SIGTERM, a second Ctrl-C) cancels what is in flight
                for task in tasks:
                    task.cancel()
            failures = [e for e in ended if isinstance(e, BaseException)]
            unstored = cache is not None and cache.write_error is not None
            if failures and not (unstored and all(isinstance(e, CacheError) for e in failures)):
                raise next((e for e in failures if isinstance(e, Exception)), failures[0])
            # a claim refused by the same full disk says less than this (the pending file)
            if cache is not None and unstored:
                raise self._unstored(cache)
        finally:
            try:
                await ctx.scorer.aclose()
            finally:
                await ctx.executor.aclose()

    async def _batch_pass(self, stop: Interrupts) -> BatchReport:
        """Send what the cache lacks in batches, wait, collect; then score through a
        :class:`BatchedExecutor` (failed requests answered with their batch error)."""
        from gradetrail.executors.batched import BatchedExecutor

        ctx = self.ctx
        assert self.batch is not None and ctx.cache is not None
        requests = {item.key: item.request for item in self.plan.prepared}
        report = await self._send_batches(self.plan.provider, requests, stop, "provider")
        if not report.waiting and report.over_budget is None:
            await self._judge_batches(report, stop)
        self.batch_report = report
        ctx.calls.executor = BatchedExecutor(
            ctx.executor,
            report.failed,
            report.describe(),
            report.over_budget,
            frozenset(requests.keys() - report.online),
        )
        return report

    async def _judge_batches(self, report: BatchReport, stop: Interrupts) -> None:
        """Score the cached answers once through a :class:`RecordingExecutor` to learn the
        judge requests scoring will make (those scores are thrown away), and send the
        ones the cache lacks in batches of their own, one pass per judge model with a
        batch API (others are called online when scoring). Follow-up judge requests
        (made after a first reply) are made online."""
        from gradetrail.executors.recording import RecordingExecutor

        ctx = self.ctx
        assert self.batch is not None and ctx.cache is not None
        from gradetrail.scorers.multi import MultiScorer

        recorder = RecordingExecutor(self.plan.provider)
        await ctx.scorer.bind(Calls(ctx.cache, recorder, None))
        # several metrics: each scorer scored on its own, as the pipeline does (a
        # MultiScorer's ascore scores them synchronously, which a judge cannot)
        scorers = (
            [one for _, one in ctx.scorer.scorers]
            if isinstance(ctx.scorer, MultiScorer)
            else [ctx.scorer]
        )
        try:
            if not recorder.others:
                return  # no judge
            prepared = self.plan.prepared
            for start in range(0, len(prepared), 1000):
                items = [prepared[i] for i in range(start, min(start + 1000, len(prepared)))]
                hits = ctx.cache.get_many([item.key for item in items])
                for item in items:
                    response = hits.get(item.key)
                    if response is None or stop.stopping:
                        continue
                    scored = ScoreInput(
                        item.sample,
                        item.epoch,
                        item.request.prompt,
                        item.request.system,
                        item.target,
                        response.text,
                        response.tool_calls,
                        item.request.tools,
                    )
                    for scorer in scorers:
                        with contextlib.suppress(Exception):
                            await scorer.ascore(scored)
        finally:
            await ctx.scorer.aclose()
        for provider in {id(p): p for p in recorder.others}.values():
            requests = {k: r for k, (p, r) in recorder.recorded.items() if p is provider}
            if not requests or not provider.batches:
                continue
            report.add_judges(await self._send_batches(provider, requests, stop, "judge"))

    async def _send_batches(
        self, provider: Provider, requests: dict[str, Request], stop: Interrupts, kind: str
    ) -> BatchReport:
        """One batch pass of ``provider``'s ``requests`` (``kind``: ``provider`` or
        ``judge``) through its batch API, closed afterwards (see
        :func:`gradetrail.engine.batching.run_batches`)."""
        from gradetrail.engine.batching import run_batches
        from gradetrail.rundir.batches import BatchLedger

        assert self.batch is not None and self.ctx.cache is not None
        api = provider.batch_api()
        try:
            return await run_batches(
                requests,
                api=api,
                ledger=BatchLedger(self.run_dir.path),
                cache=self.ctx.cache,
                policy=_policy(self.plan.spec),
                options=self.batch,
                budget=self.budget,
                log=self.log,
                kind=kind,
                stopping=lambda: stop.stopping,
            )
        finally:
            await api.aclose()


def _initial_manifest(
    plan: RunPlan, overrides: list[str], git: tuple[str | None, bool | None]
) -> Manifest:
    version, python = runtime_versions()
    sha, dirty = git
    spec = plan.spec
    return Manifest(
        name=spec.name,
        status="running",
        identity_hash=plan.identity_hash,
        spec_hash=spec_hash(spec),
        dataset_hash=plan.file_hashes["dataset"],
        dataset=plan.samples.info if isinstance(plan.samples, Samples) else None,
        file_hashes=plan.file_hashes,
        spec=spec.model_dump(mode="json"),
        spec_path=spec.source,
        overrides=overrides,
        requested_model=spec.model.name,
        provider=spec.model.provider,
        gradetrail_version=version,
        python_version=python,
        git_sha=sha,
        git_dirty=dirty,
        started_at=now_iso(),
        n_samples=len(plan.samples),
        epochs=spec.run.epochs,
    )


def _final_manifest(
    manifest: Manifest, plan: RunPlan, tally: Tally, status: str, wall_s: float
) -> Manifest:
    return manifest.model_copy(
        update={
            "status": status,
            "ended_at": now_iso(),
            "wall_time_s": round(wall_s, 4),
            **tally.manifest_figures(plan.spec),
        }
    )
