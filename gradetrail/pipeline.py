"""The per-sample pipeline, shared by every executor: render, cache, complete, score.

Stages are plain functions: :func:`prepare` renders one (sample, epoch) into a
:class:`Prepared` request (before any model call, so template errors stop the run early);
:func:`process` takes it through the cache, the executor (which decides only *where*
``provider.complete`` runs) and the scorer, and returns the :class:`SampleResult` row.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import jinja2

from gradetrail.agreement import LabelReader
from gradetrail.calls import cached_call
from gradetrail.datasets import Sample
from gradetrail.errors import DatasetError, ProviderError
from gradetrail.providers.base import Request, Response
from gradetrail.results import SampleResult
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.spec import EvalSpec
from gradetrail.templates import Template, compile_template

if TYPE_CHECKING:
    from gradetrail.cache import ResponseCache
    from gradetrail.executors.base import Executor
    from gradetrail.runlog import RunLog

__all__ = ["Prepared", "Renderer", "SampleContext", "prepare", "process"]


@dataclass(frozen=True, slots=True)
class Prepared:
    """One (sample, epoch), rendered and keyed.

    Attributes:
        sample: the dataset sample.
        epoch: 1-based epoch index.
        request: the rendered request.
        key: the request's cache key.
        target: the rendered target, or None.
        label: the sample's human label as a score (``dataset.label_field``), or None.
    """

    sample: Sample
    epoch: int
    request: Request
    key: str
    target: str | None
    label: float | None = None


class Renderer:
    """The spec's templates, compiled once, and the request fields every sample shares.

    Args:
        spec: the validated spec.
        identity: the provider's cache-key material (:meth:`Provider.identity`).
        keyed_by_sample: put the sample id into every request's identity (and so its key),
            for providers whose response depends on the sample (replay).
    """

    def __init__(
        self, spec: EvalSpec, identity: dict[str, Any], keyed_by_sample: bool = False
    ) -> None:
        where = spec.source
        self.prompt = compile_template(spec.prompt, f"{where}: prompt")
        self.system = compile_template(spec.system, f"{where}: system") if spec.system else None
        self.target = compile_template(spec.target, f"{where}: target") if spec.target else None
        self.model = spec.model
        self.params = spec.model.params.model_dump(exclude_none=True)
        if not self.params.get("extra"):
            self.params.pop("extra", None)
        self.identity = identity
        self.keyed_by_sample = keyed_by_sample
        self.label = (
            LabelReader(spec.dataset.label_field, spec.model.name, spec.dataset.label_map, where)
            if spec.dataset.label_field
            else None
        )

    def templates(self) -> list[Template]:
        """The templates this renderer applies to every row."""
        return [t for t in (self.prompt, self.system, self.target) if t is not None]

    def check(self, row: dict[str, Any]) -> None:
        """Check every template (and the label field) against the first row. Raises
        SpecError."""
        for template in self.templates():
            template.check(row)
        if self.label is not None:
            self.label.check(row)


def _render(template: Template, sample: Sample) -> str:
    try:
        return template.render(sample.row)
    except jinja2.UndefinedError as exc:
        raise DatasetError(
            f"{template.where}: sample {sample.id!r} (line {sample.line}): {exc.message}; "
            "fix the template or the row"
        ) from None
    except Exception as exc:  # a template expression failing on one row's data
        raise DatasetError(
            f"{template.where}: sample {sample.id!r} (line {sample.line}): "
            f"{type(exc).__name__}: {exc}"
        ) from None


def prepare(sample: Sample, epoch: int, renderer: Renderer) -> Prepared:
    """Render one (sample, epoch) into a keyed request.

    Raises:
        DatasetError: a template fails on this row (naming the sample id and line).
    """
    system = _render(renderer.system, sample) if renderer.system else None
    request = Request(
        provider=renderer.model.provider,
        model=renderer.model.name,
        base_url=renderer.model.base_url,
        system=system,
        messages=({"role": "user", "content": _render(renderer.prompt, sample)},),
        params=renderer.params,
        epoch=epoch,
        sample_id=sample.id,
        identity=(
            {**renderer.identity, "sample_id": sample.id}
            if renderer.keyed_by_sample
            else renderer.identity
        ),
    )
    target = _render(renderer.target, sample) if renderer.target else None
    label = renderer.label.read(sample.row, sample.id) if renderer.label else None
    return Prepared(sample, epoch, request, request.key(), target, label)


@dataclass(slots=True)
class SampleContext:
    """What :func:`process` needs besides the sample: shared by all samples of a run.

    Attributes:
        cache: the response cache, or None with ``--no-cache``.
        executor: where provider calls run.
        scorer: the run's scorer.
        log: the run's structured log (``log.jsonl``), or None to log nothing.
    """

    cache: ResponseCache | None
    executor: Executor
    scorer: Scorer
    log: RunLog | None = None


async def process(item: Prepared, ctx: SampleContext) -> SampleResult:
    """Take one prepared (sample, epoch) to its result row: the response from the cache,
    else from the executor (with the run's retry policy, cached on success), then scored."""
    call = await cached_call(
        item.request, item.key, ctx.cache, ctx.executor, ctx.log, kind="provider", epoch=item.epoch
    )
    if call.response is None:
        return _error_row(item, call.error, call.attempts)
    score = await ctx.scorer.ascore(
        ScoreInput(
            item.sample,
            item.epoch,
            item.request.prompt,
            item.request.system,
            item.target,
            call.response.text,
        )
    )
    return _scored_row(item, call.response, score, call.cached, call.attempts)


def _scored_row(
    item: Prepared, response: Response, score: Score, cached: bool, attempts: int
) -> SampleResult:
    return SampleResult(
        sample_id=item.sample.id,
        epoch=item.epoch,
        state="scored" if score.error is None else "judge_error",
        score=score.value if score.error is None else None,
        target=item.target,
        response=response.text,
        stop_reason=response.stop_reason,
        raw_stop_reason=response.raw_stop_reason,
        truncated=response.truncated,
        served_model=response.served_model,
        input_tokens=response.total_input_tokens,
        output_tokens=response.output_tokens,
        cached_input_tokens=response.cached_input_tokens,
        cost_usd=response.cost_usd,
        cached=cached,
        latency_s=response.latency_s,
        attempts=attempts,
        error=score.error,
        scorer=score.detail,
        cluster=item.sample.cluster,
        label=item.label,
        judge=score.judge,
    )


def _error_row(item: Prepared, error: ProviderError | None, attempts: int) -> SampleResult:
    detail = error.detail() if error is not None else {"kind": "ProviderError", "message": "?"}
    return SampleResult(
        sample_id=item.sample.id,
        epoch=item.epoch,
        state="provider_error",
        target=item.target,
        attempts=attempts,
        error=detail,
        cluster=item.sample.cluster,
        label=item.label,
    )
