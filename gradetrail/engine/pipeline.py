"""The per-sample pipeline, shared by every executor: cache, complete, score.

:func:`process` takes one :class:`~gradetrail.engine.rendering.Prepared` request (rendered
before any model call, so template errors stop the run early) through the cache, the
executor (which decides only *where* ``provider.complete`` runs) and the scorer, and
returns the result row (a dict shaped as :class:`~gradetrail.rundir.results.SampleResult`).
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any

from gradetrail._util.bounded import BoundedCalls, CallAborted, CallTimedOut
from gradetrail._util.terminal import one_line
from gradetrail.conversation.transcript import Transcript
from gradetrail.engine.agent import converse, single_turn
from gradetrail.engine.epoch_order import EpochOrder
from gradetrail.engine.rendering import Prepared
from gradetrail.errors import GradetrailError, ProviderError
from gradetrail.executors.calls import Calls
from gradetrail.providers.base import Response
from gradetrail.rundir.results import Row, is_exact, make_row
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.multi import MultiScorer
from gradetrail.scorers.reasoning import Split, split_reasoning

if TYPE_CHECKING:
    from gradetrail.cache.store import ResponseCache
    from gradetrail.executors.base import Executor
    from gradetrail.rundir.artifacts import Artifacts
    from gradetrail.rundir.runlog import RunLog

__all__ = ["SampleContext", "process"]


@dataclass(slots=True, eq=False, repr=False)
class SampleContext:
    """What :func:`process` needs besides the sample: shared by all samples of a run.

    Attributes:
        calls: the run's calls: its response cache (None with ``--no-cache``), executor
            (where provider calls run) and structured log (``log.jsonl``; None to log
            nothing).
        scorer: the run's scorer.
        bounded: runs a synchronous scorer's ``score`` with the run's time bound and within
            reach of SIGINT/SIGTERM (see :mod:`gradetrail._util.bounded`), or None to call it
            directly.
        refusals: ``run.refusals``: ``score`` a refusal's text as any answer, or
            ``exclude`` it from the mean (a ``judge_error`` row, reason ``refusal``).
        reasoning_tags: ``scorer.reasoning_tags``: the scorer sees only the text after
            the last closing tag of these names; a tag left open scores 0 as no answer
            (see :mod:`gradetrail.scorers.reasoning`).
        artifacts: writes the files a python app hands back into the run directory, or
            None (outside a run: the row then records no artifact).
        order: a sample's epochs that answered alike reach the scorer in epoch order (so
            the same one pays for a judge's request, whatever order responses land in),
            or None (one epoch, or a scorer that calls no model).
    """

    calls: Calls
    scorer: Scorer
    bounded: BoundedCalls | None = None
    refusals: str = "score"
    reasoning_tags: tuple[str, ...] = ()
    artifacts: Artifacts | None = None
    order: EpochOrder | None = None

    @property
    def cache(self) -> ResponseCache | None:
        """The run's response cache, or None with ``--no-cache``."""
        return self.calls.cache

    @property
    def executor(self) -> Executor:
        """Where provider calls run."""
        assert self.calls.executor is not None
        return self.calls.executor

    @property
    def log(self) -> RunLog | None:
        """The run's structured log, or None."""
        return self.calls.log


async def process(
    item: Prepared, ctx: SampleContext, hit: Response | None = None, *, missed: bool = False
) -> Row:
    """Take one prepared (sample, epoch) to its result row (a dict shaped as
    :class:`~gradetrail.rundir.results.SampleResult`): the response from the cache
    (``hit``, when the caller read it already; ``missed`` when that read found none),
    else from the executor (with the run's retry policy, cached on success), then scored.
    With an agent loop every turn goes that way (:func:`gradetrail.engine.agent.converse`).
    With ``ctx.order`` the row is scored after the sample's earlier epochs that answered
    alike (:class:`~gradetrail.engine.epoch_order.EpochOrder`)."""
    order = ctx.order
    if order is None:
        return await _process(item, ctx, hit, missed)
    order.begin(item.sample.index, item.epoch)
    try:
        return await _process(item, ctx, hit, missed)
    finally:
        order.end(item.sample.index, item.epoch)


async def _process(item: Prepared, ctx: SampleContext, hit: Response | None, missed: bool) -> Row:
    if item.agent is not None:
        talk = await converse(
            item.agent,
            item.request,
            item.key,
            calls=ctx.calls,
            epoch=item.epoch,
        )
        response, error, cached, attempts = talk.response, talk.error, talk.cached, talk.attempts
        transcript: Transcript | None = talk.transcript
        billed = talk.billed
    else:
        call = (
            ctx.calls.served(item.request, hit, kind="provider", epoch=item.epoch)
            if hit is not None  # read already: nothing to wait for
            else await ctx.calls.call(
                item.request, item.key, kind="provider", epoch=item.epoch, missed=missed
            )
        )
        response, error, cached, attempts = call.response, call.error, call.cached, call.attempts
        transcript = single_turn(item.request, item.key, call) if item.conversational else None
        billed = call.billed
    if response is None:
        return _error_row(item, error, attempts, transcript, billed)
    text, split, prompt = response.text, None, item.request.prompt
    if ctx.reasoning_tags and "<" in text:
        split = split_reasoning(text, ctx.reasoning_tags)
        text = split.answer
    scored = ScoreInput(
        item.sample,
        item.epoch,
        prompt,
        item.request.system,
        item.target,
        text,
        response.tool_calls,
        item.request.tools,
        _meta(response, cached) if ctx.scorer.wants_meta else None,
        app := _app_input(response),
    )
    scorer = ctx.scorer
    if ctx.order is not None:  # the lowest epoch answering alike pays the judge
        await ctx.order.answered(item.sample.index, item.epoch, (text, response.tool_calls))
    if response.refused and ctx.refusals == "exclude":
        score = refusal_excluded(response)
        return _scored_row(item, prompt, response, score, cached, attempts, transcript)
    if split is not None and split.unclosed is not None:  # no answer: never its thinking
        score = Score(
            0.0,
            {
                "extracted": None,
                "reason": f"no answer: the <{split.unclosed}> reasoning was never closed (the "
                "model ran out while reasoning); raise max_tokens",
                "response_chars": len(response.text),
            },
        )
        return _scored_row(item, prompt, response, score, cached, attempts, transcript, split)
    if isinstance(scorer, MultiScorer):  # several metrics: each scored as one scorer is
        scores = [
            (name, await _score(ctx, one, _own_answer(ctx, one, scored, response.text)))
            for name, one in scorer.scorers
        ]
        score = scorer.combine(scores)
    else:
        score = await _score(ctx, scorer, scored)
    row = _scored_row(item, prompt, response, score, cached, attempts, transcript, split)
    if app is not None:  # a python app's extra fields: rare, validated
        row = make_row(**row, app=_app_record(item, response, ctx))
    return row


def _own_answer(ctx: SampleContext, scorer: Scorer, scored: ScoreInput, text: str) -> ScoreInput:
    """What one of several scorers reads: the answer after its own ``reasoning_tags``
    (the run's split follows the primary's; a python primary has none, and a numeric
    metric beside it read the ``<think>`` block as the answer), the same input when its
    tags are the primary's."""
    tags = tuple(getattr(getattr(scorer, "spec", None), "reasoning_tags", ()))
    if tags == ctx.reasoning_tags:
        return scored
    answer = split_reasoning(text, tags).answer if tags and "<" in text else text
    return replace(scored, response=answer)


def _app_input(response: Response) -> dict[str, Any] | None:
    """What a scorer sees of a python app's extra fields (``ScoreInput.app``), or None
    (four attribute reads for every other response)."""
    if (
        response.metadata is None
        and response.metrics is None
        and response.transcript is None
        and response.artifacts is None
    ):
        return None
    seen = dict(response.app or {})
    if response.artifacts:
        seen["artifacts"] = response.artifacts
    return seen or None


def _app_record(item: Prepared, response: Response, ctx: SampleContext) -> dict[str, Any]:
    """The row's ``app``: the app's metadata, metrics and transcript, and each artifact
    written into the run directory (``{name, path, bytes, sha256}``)."""
    record = dict(response.app or {})
    if response.artifacts and ctx.artifacts is not None:
        record["artifacts"] = ctx.artifacts.save(item.sample.id, item.epoch, response.artifacts)
    return record


def refusal_excluded(response: Response) -> Score:
    """The score of a refusal under ``run.refusals: exclude``: none, the row left out of
    the mean (``judge_error``, reason ``refusal``), its tokens and cost kept."""
    why = response.refusal or "no explanation given"
    return scorer_error(
        {"response_chars": len(response.text)},
        "refusal",
        f"the model declined (stop reason {response.raw_stop_reason or response.stop_reason}"
        f"): {one_line(why)[:200]}; run.refusals is exclude, so the row is left out of the "
        "mean",
    )


def response_extras(response: Response) -> dict[str, Any]:
    """The optional row fields a response sets (absent when at their defaults, so rows of
    responses without them stay as they were): ``reasoning`` (text), ``reasoning_tokens``
    (of output_tokens), ``reasoning_exhausted`` (max_tokens ran out while reasoning),
    ``refusal`` (the refusal text or explanation), ``cache_write_tokens`` (of
    input_tokens, written to the prompt cache), ``server_tool_uses`` (billed per use,
    ``{"web_search_requests": n}``), ``ttft_s`` (seconds to the first token of a
    streamed answer) and ``service_tier`` (the tier that served it, priced at its rates,
    when not the standard one)."""
    extras: dict[str, Any] = {}
    if response.reasoning is not None:
        extras["reasoning"] = response.reasoning
    if response.reasoning_tokens:
        extras["reasoning_tokens"] = response.reasoning_tokens
    if response.reasoning_exhausted:
        extras["reasoning_exhausted"] = True
    if response.refused:
        extras["refusal"] = response.refusal or ""
    if response.cache_write_tokens:
        extras["cache_write_tokens"] = response.cache_write_tokens
    if response.server_tool_uses:
        extras["server_tool_uses"] = dict(response.server_tool_uses)
    if response.ttft_s is not None:
        extras["ttft_s"] = response.ttft_s
    if response.service_tier is not None:
        extras["service_tier"] = response.service_tier
    return extras


async def _score(ctx: SampleContext, scorer: Scorer, scored: ScoreInput) -> Score:
    """One scorer's verdict on one response: a synchronous scorer through the run's time
    bound, an asynchronous one awaited; a scorer that raises gives a scorer error row."""
    try:
        if ctx.bounded is None or scorer.asynchronous:
            return await scorer.ascore(scored)
        return _bounded_score(ctx, scored, scorer)  # synchronous: no coroutine to wait on
    except GradetrailError:  # the cache or the run failing: the run stops, as it says
        raise
    except Exception as exc:  # the scorer failing on this one response: its row says so
        return _scorer_failed(scorer, scored, exc)


def _meta(response: Response, cached: bool) -> dict[str, Any]:
    """What a python scorer sees of the response besides its text."""
    return {
        "stop_reason": response.stop_reason,
        "truncated": response.truncated,
        "served_model": response.served_model,
        "input_tokens": response.total_input_tokens,
        "output_tokens": response.output_tokens,
        "cost_usd": response.cost_usd,
        "latency_s": response.latency_s,
        "cached": cached,
    }


def _scorer_failed(scorer: Scorer, item: ScoreInput, exc: Exception) -> Score:
    """The row of a response the scorer raised on (a bug it has with this text, e.g. an
    overflow): a ``judge_error`` row left out of the mean, naming the exception, instead
    of a run that stops and loses the rows after it."""
    name = type(scorer).__name__
    return scorer_error(
        {"response_chars": len(item.response)},
        "scorer_failed",
        f"the {name} raised {type(exc).__name__} on this response ({one_line(str(exc))[:200]}); "
        "the row is left out of the mean: report it with the response",
    )


def _bounded_score(ctx: SampleContext, item: ScoreInput, scorer: Scorer) -> Score:
    """A synchronous scorer's verdict (one that implements only ``score``), run through
    ``ctx.bounded``: past the run's ``score_timeout_s`` it is stopped and the row is a
    ``judge_error`` with reason ``scorer_timeout``; SIGTERM or a second Ctrl-C during it
    cancels the sample like any other in flight."""
    assert ctx.bounded is not None
    try:
        return ctx.bounded.call(scorer.score, item)
    except CallTimedOut:
        limit = ctx.bounded.timeout_s
        return Score(
            None,
            {"response_chars": len(item.response)},
            error={
                "kind": "ScorerTimeout",
                "reason": "scorer_timeout",
                "message": f"the {type(scorer).__name__} took more than {limit:g} s on this "
                "response and was stopped (run.score_timeout_s); a pattern that backtracks "
                "catastrophically, e.g. (a+)+$, does this",
            },
        )
    except CallAborted:
        raise asyncio.CancelledError from None


def _scored_row(
    item: Prepared,
    prompt: str,
    response: Response,
    score: Score,
    cached: bool,
    attempts: int,
    transcript: Transcript | None = None,
    split: Split | None = None,
) -> Row:
    """The row of a scored (or judge_error) sample (``prompt``: its request's, read once
    by the caller): built as a dict in SampleResult's field order; validated by
    :func:`~gradetrail.rundir.results.make_row` only when a value from the scorer or the
    provider is not exactly of its field's type (validation would return every other row
    unchanged: the pipeline's own values have their types already)."""
    ok = score.error is None
    row = {
        "sample_id": item.sample.id,
        "epoch": item.epoch,
        "state": "scored" if ok else "judge_error",
        "score": score.value if ok else None,
        "system": item.request.system,
        "prompt": prompt,
        "target": item.target,
        "response": response.text,
        "stop_reason": response.stop_reason,
        "raw_stop_reason": response.raw_stop_reason,
        "truncated": response.truncated,
        "served_model": response.served_model,
        "input_tokens": response.total_input_tokens,
        "output_tokens": response.output_tokens,
        "cached_input_tokens": response.cached_input_tokens,
        "cost_usd": response.cost_usd,
        "cached": cached,
        "latency_s": response.latency_s,
        "attempts": attempts,
        "error": score.error,
        "scorer": score.detail,
        "cluster": item.sample.cluster,
        "label": item.label,
        "judge": score.judge,
        "tool_calls": list(response.tool_calls) if item.conversational else None,
        "transcript": transcript,
    }
    extras = response_extras(response)
    if split is not None:
        if split.reasoning is not None and "reasoning" not in extras:
            extras["reasoning"] = split.reasoning
        if split.unclosed is not None:
            extras["reasoning_exhausted"] = True
    if extras:
        row.update(extras)
    if score.metrics is not None:  # several scorers: every metric's value (see scorers.multi)
        row["metrics"] = score.metrics
        return make_row(**row)
    return row if is_exact(row) else make_row(**row)


def _error_row(
    item: Prepared,
    error: ProviderError | None,
    attempts: int,
    transcript: Transcript | None = None,
    billed: Response | None = None,
) -> Row:
    """The row of a request that ended without a response: no tokens and no cost, unless
    something was billed (``billed``: a response refused after it was paid for, a served
    model other than the requested one; an agent loop's answered turns before the one
    that failed), whose tokens, USD cost and served model it keeps."""
    detail = error.detail() if error is not None else {"kind": "ProviderError", "message": "?"}
    usage = (
        {
            "served_model": billed.served_model,
            "input_tokens": billed.total_input_tokens,
            "output_tokens": billed.output_tokens,
            "cached_input_tokens": billed.cached_input_tokens,
            "cost_usd": billed.cost_usd,
        }
        if billed is not None
        else {}
    )
    return make_row(
        **usage,
        sample_id=item.sample.id,
        epoch=item.epoch,
        state="provider_error",
        system=item.request.system,
        prompt=item.request.prompt,
        target=item.target,
        attempts=attempts,
        error=detail,
        cluster=item.sample.cluster,
        label=item.label,
        transcript=transcript,
    )
