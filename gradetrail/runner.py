"""Running an eval: plan (load and check everything before any call), drive the
per-sample pipeline over the executor, write results, manifest and summary.

The Python API behind ``gradetrail run``::

    spec = gradetrail.load_spec("examples/gsm8k.yaml", ["model.name=175b_finetuning"])
    result = gradetrail.run_eval(spec)
    print(result.manifest.score.mean, result.run_dir)
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field
from pathlib import Path

from gradetrail.cache import ResponseCache, default_cache_path
from gradetrail.datasets import Sample, file_sha256, load_samples
from gradetrail.errors import DatasetError, RunError, SpecError
from gradetrail.executors.base import Executor
from gradetrail.executors.local import LocalExecutor
from gradetrail.manifest import (
    Manifest,
    git_state,
    identity_hash,
    now_iso,
    runtime_versions,
    spec_hash,
    write_manifest,
)
from gradetrail.pipeline import Prepared, Renderer, SampleContext, prepare, process
from gradetrail.providers import Provider, make_provider
from gradetrail.results import ResultsWriter, SampleResult
from gradetrail.retry import RetryPolicy
from gradetrail.scorers import Scorer, make_scorer
from gradetrail.scorers.base import ScoreInput
from gradetrail.spec import EvalSpec
from gradetrail.summary import Tally

__all__ = ["RunPlan", "RunResult", "plan_run", "run_eval"]


@dataclass
class RunPlan:
    """Everything a run needs, loaded and checked before any model call.

    Attributes:
        spec: the validated spec.
        samples: the dataset in run order.
        provider: the provider (ready: keys and files checked).
        scorer: the scorer (checked against the first sample).
        prepared: every (sample, epoch) rendered and keyed, epoch-major.
        file_hashes: role -> SHA-256 of each file the run reads.
        identity_hash: the run's identity hash.
    """

    spec: EvalSpec
    samples: list[Sample]
    provider: Provider
    scorer: Scorer
    prepared: list[Prepared]
    file_hashes: dict[str, str]
    identity_hash: str

    def run_dir(self, results_root: Path) -> Path:
        """``<results_root>/<name>-<first 12 hex of the identity hash>``."""
        return results_root / f"{self.spec.name}-{self.identity_hash[:12]}"


@dataclass(frozen=True)
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


def plan_run(spec: EvalSpec) -> RunPlan:
    """Load the dataset, build and check the provider and scorer, render every request.

    Raises:
        SpecError, DatasetError: anything wrong with the spec or its files, before any call.
    """
    data_path = spec.resolve(spec.dataset.path)
    if not data_path.is_file():
        raise DatasetError(
            f"{spec.source}: dataset.path: {data_path} not found; check the path in the spec"
        )
    samples = load_samples(
        data_path,
        id_field=spec.dataset.id_field,
        shuffle_seed=spec.dataset.shuffle_seed,
        limit=spec.dataset.limit,
        cluster_field=spec.dataset.cluster_field,
    )
    provider = make_provider(spec.model, spec.base_dir)
    try:
        provider.check_ready()
    except (SpecError, DatasetError) as exc:
        raise type(exc)(f"{spec.source}: {exc}") from None
    renderer = Renderer(spec, provider.identity(), provider.keyed_by_sample)
    renderer.check(samples[0].row)
    scorer = make_scorer(spec)
    first = prepare(samples[0], 1, renderer)
    scorer.check(
        ScoreInput(first.sample, 1, first.request.prompt, first.request.system, first.target, "")
    )
    prepared = [
        prepare(sample, epoch, renderer)
        for epoch in range(1, spec.run.epochs + 1)
        for sample in samples
    ]
    file_hashes = {"dataset": file_sha256(data_path)}
    for role, value in provider.identity().items():
        if role.endswith("sha256"):
            file_hashes[role.removesuffix("_sha256")] = value
    file_hashes.update(scorer.identity())
    return RunPlan(
        spec, samples, provider, scorer, prepared, file_hashes, identity_hash(spec, file_hashes)
    )


def _make_run_dir(path: Path) -> Path:
    """Create the run directory, refusing symlinks (planted links could redirect writes)."""
    for p in (path.parent, path):
        if p.is_symlink():
            raise RunError(f"{p}: is a symlink; refusing to write results through it")
    path.mkdir(parents=True, exist_ok=True)
    return path


def run_eval(
    spec: EvalSpec,
    *,
    results_root: str | Path = "results",
    cache_path: str | Path | None = None,
    use_cache: bool = True,
    overrides: Iterable[str] = (),
    executor: Executor | None = None,
    on_row: Callable[[SampleResult, Tally], None] | None = None,
    on_start: Callable[[RunPlan, Path], None] | None = None,
) -> RunResult:
    """Run an eval end to end.

    Args:
        spec: a validated spec (see :func:`gradetrail.load_spec`).
        results_root: where run directories go (default ``results`` under the cwd).
        cache_path: the SQLite cache file (default :func:`default_cache_path`).
        use_cache: False to neither read nor write the cache.
        overrides: the ``--set`` strings the spec was loaded with (recorded in the manifest).
        executor: where provider calls run (default: a :class:`LocalExecutor`).
        on_row: called with each result row and the running tally (for progress).
        on_start: called once the plan is checked, with the plan and the run directory.

    Returns:
        The run directory, manifest and tally.

    Raises:
        SpecError, DatasetError: before any model call.
        CacheError, RunError: the cache or results directory cannot be used.
    """
    plan = plan_run(spec)
    run_dir = _make_run_dir(plan.run_dir(Path(results_root)))
    cache = (
        ResponseCache(Path(cache_path) if cache_path else default_cache_path())
        if use_cache
        else None
    )
    if executor is None:
        policy = RetryPolicy(
            max_retries=spec.run.max_retries,
            timeout_s=spec.run.timeout_s,
            sample_timeout_s=spec.run.sample_timeout_s,
        )
        executor = LocalExecutor(plan.provider, policy, spec.run.concurrency)
    manifest = _initial_manifest(plan, list(overrides))
    write_manifest(run_dir, manifest)
    if on_start is not None:
        on_start(plan, run_dir)
    writer = ResultsWriter(run_dir)
    tally = Tally()
    ctx = SampleContext(cache, executor, plan.scorer)
    start = time.perf_counter()
    status = "interrupted"
    try:
        asyncio.run(_drive(plan.prepared, ctx, writer, tally, on_row))
        writer.finalize()
        status = "complete"
    finally:
        writer.close()
        if cache is not None:
            cache.close()
        manifest = _final_manifest(manifest, plan, tally, status, time.perf_counter() - start)
        write_manifest(run_dir, manifest)
    return RunResult(run_dir, manifest, tally)


async def _drive(
    prepared: list[Prepared],
    ctx: SampleContext,
    writer: ResultsWriter,
    tally: Tally,
    on_row: Callable[[SampleResult, Tally], None] | None,
) -> None:
    items = iter(prepared)

    async def worker() -> None:
        for item in items:  # one shared iterator: each item is taken by exactly one worker
            row = await process(item, ctx)
            writer.append((item.sample.index, item.epoch), row)
            tally.add(row)
            if on_row is not None:
                on_row(row, tally)

    try:
        workers = min(ctx.executor.concurrency, len(prepared)) or 1
        await asyncio.gather(*(worker() for _ in range(workers)))
    finally:
        await ctx.executor.aclose()


def _initial_manifest(plan: RunPlan, overrides: list[str]) -> Manifest:
    version, python = runtime_versions()
    sha, dirty = git_state()
    spec = plan.spec
    return Manifest(
        name=spec.name,
        status="running",
        identity_hash=plan.identity_hash,
        spec_hash=spec_hash(spec),
        dataset_hash=plan.file_hashes["dataset"],
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
            "counts": dict(tally.counts),
            "served_models": dict(tally.served_models),
            "truncated": tally.truncated,
            "input_tokens": tally.input_tokens,
            "output_tokens": tally.output_tokens,
            "cached_input_tokens": tally.cached_input_tokens,
            "cost_usd": tally.cost_usd,
            "cost_usd_cached": tally.cost_usd_cached,
            "cache_hits": tally.cache_hits,
            "score": tally.score_stats(clustered=plan.spec.dataset.cluster_field is not None),
        }
    )
