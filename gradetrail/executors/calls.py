"""One model call through the run's cache and retry policy, logged: the single path
shared by the per-sample pipeline (the model under evaluation) and by judges.

A cache hit is served without a call; a miss goes to the executor (which owns retries),
and a success is cached at once (errors never are). Identical requests in flight at once,
in this process or in another one sharing the cache, make one call
(:mod:`gradetrail.cache.inflight`); the others are served its response as a cache hit. Every
attempt lands in the run's structured log as a ``provider_call`` or ``judge_call`` line.
"""

from __future__ import annotations

from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Literal

from gradetrail.cache.inflight import InFlight, Shared
from gradetrail.errors import ProviderError, RunError
from gradetrail.providers.base import Request, Response

if TYPE_CHECKING:
    from gradetrail.cache.store import ResponseCache
    from gradetrail.executors.base import Executor
    from gradetrail.executors.retry import RetriedAttempt
    from gradetrail.rundir.runlog import RunLog

__all__ = ["CallResult", "Calls", "billed_sum"]

CallKind = Literal["provider", "judge"]


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True, eq=False, repr=False)
class CallResult:
    """The end of one request: a response (from the cache or a call) or the last error.

    Attributes:
        response: the response, or None when every attempt failed.
        error: the last error, or None on success.
        cached: the response came from the cache (no call was made).
        attempts: calls made (0 on a cache hit).
        billed: on failure, what the provider answered and billed before the call was
            refused (every attempt's :attr:`ProviderError.billed` summed: tokens, USD
            cost, the last served model), or None when nothing was billed.
    """

    response: Response | None
    error: ProviderError | None
    cached: bool
    attempts: int
    billed: Response | None = None


class Calls:
    """The run's one way to make a model call: its cache (with in-flight de-duplication),
    its executor (the retry policy and concurrency bound) and its log. Built once a run,
    by the runner, and passed down; a judge gets one for its own model from
    :meth:`for_executor`.

    Args:
        cache: the run's cache, or None (``--no-cache``).
        executor: where calls run, or None for a caller that serves only cache hits.
        log: the run's log, or None to log nothing.
        inflight: the calls in flight on ``cache``, shared by every caller of this run
            (built from ``cache`` when not given).
    """

    def __init__(
        self,
        cache: ResponseCache | None,
        executor: Executor | None,
        log: RunLog | None,
        inflight: InFlight | None = None,
    ) -> None:
        self.cache = cache
        self.executor = executor
        self.log = log
        self.inflight = inflight if inflight is not None or cache is None else InFlight(cache)

    def for_executor(self, executor: Executor) -> Calls:
        """The same cache, log and in-flight requests, calling through ``executor``."""
        return Calls(self.cache, executor, self.log, self.inflight)

    async def call(
        self,
        request: Request,
        key: str,
        *,
        kind: CallKind,
        epoch: int,
        hit: Response | None = None,
        missed: bool = False,
        turn: int | None = None,
    ) -> CallResult:
        """Serve ``request`` from the cache (under ``key``), else through the executor.

        Args:
            request: the rendered request.
            key: its cache key (``request.key()``, computed once by the caller).
            kind: ``provider`` (the model under evaluation) or ``judge``.
            epoch: the row's epoch, for the log.
            hit: its cached response when the caller already read it (a batched read);
                None to look it up here.
            missed: the caller's batched read found no response for ``key``: it is not
                looked up again here (the claim before the call reads it under the write
                lock, and serves it if it landed since).
            turn: the agent loop's turn number (1-based), for the log; None outside one.

        Raises:
            RunError: a cache miss with no executor (a caller that was never bound to a
                run).
        """
        cache = self.cache
        response = hit if hit is not None or cache is None or missed else cache.get(key)
        if response is not None:
            return self.served(request, response, kind=kind, epoch=epoch, turn=turn)
        if self.executor is None:
            raise RunError(f"a {kind} call was made before the run bound its executor")
        if self.inflight is None:
            return await self._call(request, key, kind, epoch, turn)
        result = await self.inflight.once(
            key, lambda: self._call(request, key, kind, epoch, turn), _response_of
        )
        if isinstance(result, Shared):  # cached since, or an identical request's response
            return self.served(request, result.response, kind=kind, epoch=epoch, turn=turn)
        return result

    def served(
        self,
        request: Request,
        response: Response,
        *,
        kind: CallKind,
        epoch: int,
        turn: int | None = None,
    ) -> CallResult:
        """The end of a call this run did not pay for: ``response`` came from the cache (a
        batched read) or from an identical request's call. It is priced as the spec prices
        it now (the executor's provider, or as stored without one) and logged as served."""
        executor = self.executor
        if executor is not None:  # price it as the spec prices it now, not as when cached
            cost = executor.provider.price(request, response)
            if cost != response.cost_usd:
                response = replace(response, cost_usd=cost)
        if self.log is not None:
            _log_ok(self.log, kind, request, epoch, response, True, 0, turn)
        return CallResult(response, None, True, 0)

    async def _call(
        self, request: Request, key: str, kind: CallKind, epoch: int, turn: int | None
    ) -> CallResult:
        """One call through the executor; a success is cached at once. Each failed
        attempt is logged the moment it ends (the executor's ``on_attempt``)."""
        log, executor = self.log, self.executor
        assert executor is not None
        live: list[ProviderError] = []

        def attempt_ended(number: int, attempt: RetriedAttempt) -> None:
            live.append(attempt.error)
            if log is not None:
                _log_attempt(log, kind, request, epoch, number, attempt, turn)

        outcome = await executor.complete(request, on_attempt=attempt_ended)
        if log is not None and not live:  # the retry loop ran elsewhere: log its report
            for number, attempt in enumerate(outcome.retried, start=1):
                _log_attempt(log, kind, request, epoch, number, attempt, turn)
        if outcome.response is None:
            error = outcome.error or ProviderError("no response and no error")
            if log is not None and (not live or live[-1] is not error):  # the sample ceiling
                _log_error(log, kind, request, epoch, error, outcome.attempts, turn)
            billed = billed_sum([*(a.error for a in outcome.retried), error])
            return CallResult(None, error, False, outcome.attempts, billed)
        if self.cache is not None:  # committed (with this pass's others) before the row
            await self.cache.group.put(key, request, outcome.response)
        if log is not None:
            _log_ok(log, kind, request, epoch, outcome.response, False, outcome.attempts, turn)
        return CallResult(outcome.response, None, False, outcome.attempts)


def billed_sum(errors: list[ProviderError]) -> Response | None:
    """The responses ``errors`` were billed for (:attr:`ProviderError.billed`), summed
    into one: tokens and cost (USD; None when any of them is unpriced, as the others'
    sum would pass for the whole) added, the last served model kept; None when no error
    was billed."""
    billed = [e.billed for e in errors if isinstance(e.billed, Response)]
    if not billed:
        return None
    costs = [b.cost_usd for b in billed]
    return Response(
        "",
        served_model=billed[-1].served_model,
        input_tokens=sum(b.input_tokens for b in billed),
        output_tokens=sum(b.output_tokens for b in billed),
        cached_input_tokens=sum(b.cached_input_tokens for b in billed),
        latency_s=sum(b.latency_s for b in billed),
        cost_usd=None if None in costs else sum(c for c in costs if c is not None),
        cache_write_tokens=sum(b.cache_write_tokens for b in billed),
    )


def _response_of(result: CallResult) -> Response | None:
    return result.response


def _log_ok(
    log: RunLog,
    kind: CallKind,
    request: Request,
    epoch: int,
    response: Response,
    cached: bool,
    attempts: int,
    turn: int | None,
) -> None:
    log.served(kind, request.sample_id, epoch, request.model, response, cached, attempts, turn)


def _log_attempt(
    log: RunLog,
    kind: CallKind,
    request: Request,
    epoch: int,
    number: int,
    attempt: RetriedAttempt,
    turn: int | None,
) -> None:
    log.call(
        kind,
        sample_id=request.sample_id,
        epoch=epoch,
        model=request.model,
        latency_ms=attempt.latency_s * 1000.0,
        cached=False,
        attempt=number,
        outcome="error",
        error=type(attempt.error).__name__,
        status=attempt.error.status,
        message=str(attempt.error),
        retry_in_s=attempt.backoff_s,
        turn=turn,
    )


def _log_error(
    log: RunLog,
    kind: CallKind,
    request: Request,
    epoch: int,
    error: ProviderError,
    attempts: int,
    turn: int | None,
) -> None:
    log.call(
        kind,
        sample_id=request.sample_id,
        epoch=epoch,
        model=request.model,
        latency_ms=None,
        cached=False,
        attempt=attempts,
        outcome="error",
        error=type(error).__name__,
        status=error.status,
        message=str(error),
        turn=turn,
    )
