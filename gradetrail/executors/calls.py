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

from gradetrail.cache.inflight import Shared, in_flight
from gradetrail.errors import ProviderError, RunError
from gradetrail.executors.retry import ATTEMPT_LISTENER
from gradetrail.providers.base import Request, Response

if TYPE_CHECKING:
    from gradetrail.cache.store import ResponseCache
    from gradetrail.executors.base import Executor
    from gradetrail.executors.retry import RetriedAttempt
    from gradetrail.rundir.runlog import RunLog

__all__ = ["CallResult", "cached_call"]

CallKind = Literal["provider", "judge"]


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class CallResult:
    """The end of one request: a response (from the cache or a call) or the last error.

    Attributes:
        response: the response, or None when every attempt failed.
        error: the last error, or None on success.
        cached: the response came from the cache (no call was made).
        attempts: calls made (0 on a cache hit).
    """

    response: Response | None
    error: ProviderError | None
    cached: bool
    attempts: int


async def cached_call(
    request: Request,
    key: str,
    cache: ResponseCache | None,
    executor: Executor | None,
    log: RunLog | None,
    *,
    kind: CallKind,
    epoch: int,
    hit: Response | None = None,
) -> CallResult:
    """Serve ``request`` from ``cache`` (under ``key``), else through ``executor``.

    Args:
        request: the rendered request.
        key: its cache key (``request.key()``, computed once by the caller).
        cache: the run's cache, or None (``--no-cache``).
        executor: where the call runs, with the run's retry policy.
        log: the run's log, or None to log nothing.
        kind: ``provider`` (the model under evaluation) or ``judge``.
        epoch: the row's epoch, for the log.
        hit: its cached response when the caller already read it (a batched read); None
            to look it up here.

    Raises:
        RunError: a cache miss with no executor (a caller that was never bound to a run).
    """
    response = hit if hit is not None or cache is None else cache.get(key)
    if response is not None:
        return served_call(request, response, executor, log, kind, epoch)
    if executor is None:
        raise RunError(f"a {kind} call was made before the run bound its executor")
    if cache is None:
        return await _call(request, key, None, executor, log, kind, epoch)
    result = await in_flight(cache).once(
        key, lambda: _call(request, key, cache, executor, log, kind, epoch), _response_of
    )
    if isinstance(result, Shared):  # an identical request in flight, here or elsewhere
        return served_call(request, result.response, executor, log, kind, epoch)
    return result


def _response_of(result: CallResult) -> Response | None:
    return result.response


def served_call(
    request: Request,
    response: Response,
    executor: Executor | None,
    log: RunLog | None,
    kind: CallKind,
    epoch: int,
) -> CallResult:
    """The end of a call this run did not pay for: ``response`` came from the cache (a
    batched read) or from an identical request's call. It is priced as the spec prices
    it now (``executor``'s provider, or as stored without one) and logged as served."""
    if executor is not None:  # price it as the spec prices it now, not as when cached
        cost = executor.provider.price(request, response)
        if cost != response.cost_usd:
            response = replace(response, cost_usd=cost)
    if log is not None:
        _log_ok(log, kind, request, epoch, response, True, 0)
    return CallResult(response, None, True, 0)


async def _call(
    request: Request,
    key: str,
    cache: ResponseCache | None,
    executor: Executor,
    log: RunLog | None,
    kind: CallKind,
    epoch: int,
) -> CallResult:
    """One call through the executor; a success is cached at once. Each failed attempt
    is logged the moment it ends (see :data:`gradetrail.executors.retry.ATTEMPT_LISTENER`)."""
    live: list[ProviderError] = []

    def attempt_ended(number: int, attempt: RetriedAttempt) -> None:
        live.append(attempt.error)
        if log is not None:
            _log_attempt(log, kind, request, epoch, number, attempt)

    token = ATTEMPT_LISTENER.set(attempt_ended)
    try:
        outcome = await executor.complete(request)
    finally:
        ATTEMPT_LISTENER.reset(token)
    if log is not None and not live:  # the retry loop ran elsewhere: log what it reports
        for number, attempt in enumerate(outcome.retried, start=1):
            _log_attempt(log, kind, request, epoch, number, attempt)
    if outcome.response is None:
        error = outcome.error or ProviderError("no response and no error")
        if log is not None and (not live or live[-1] is not error):  # e.g. the sample ceiling
            _log_error(log, kind, request, epoch, error, outcome.attempts, None)
        return CallResult(None, error, False, outcome.attempts)
    if cache is not None:
        cache.put(key, request, outcome.response)
    if log is not None:
        _log_ok(log, kind, request, epoch, outcome.response, False, outcome.attempts)
    return CallResult(outcome.response, None, False, outcome.attempts)


def _log_ok(
    log: RunLog,
    kind: CallKind,
    request: Request,
    epoch: int,
    response: Response,
    cached: bool,
    attempts: int,
) -> None:
    log.served(kind, request.sample_id, epoch, request.model, response, cached, attempts)


def _log_attempt(
    log: RunLog,
    kind: CallKind,
    request: Request,
    epoch: int,
    number: int,
    attempt: RetriedAttempt,
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
    )


def _log_error(
    log: RunLog,
    kind: CallKind,
    request: Request,
    epoch: int,
    error: ProviderError,
    attempts: int,
    latency_s: float | None,
) -> None:
    log.call(
        kind,
        sample_id=request.sample_id,
        epoch=epoch,
        model=request.model,
        latency_ms=None if latency_s is None else latency_s * 1000.0,
        cached=False,
        attempt=attempts,
        outcome="error",
        error=type(error).__name__,
        status=error.status,
        message=str(error),
    )
