"""The one retry policy, shared by every provider and by judge calls.

A provider classifies each failure (a :class:`~gradetrail.errors.ProviderError` with
``transient`` and ``retry_after``); this module owns the loop: exponential backoff with
full jitter ("Exponential Backoff And Jitter", AWS Architecture Blog, 2015), honouring
the server's ``Retry-After``, bounded by ``max_retries`` and by a per-sample wall-clock
ceiling over all attempts. Time and sleep are injected so tests need not wait.
"""

from __future__ import annotations

import asyncio
import contextvars
import random
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Protocol, TypeVar

from gradetrail._util.progress import ATTEMPT_PROGRESS
from gradetrail.errors import MAX_RETRY_AFTER_S, ProviderError, ProviderTimeout, bounded_retry_after
from gradetrail.providers.base import Response

__all__ = [
    "AttemptListener",
    "DRAINING",
    "MAX_RETRY_AFTER_S",
    "CallOutcome",
    "Drain",
    "Drained",
    "Gate",
    "RetriedAttempt",
    "RetryPolicy",
    "call_with_retry",
]


class Drained(BaseException):
    """A request that had not been sent when the run began to drain (a first Ctrl-C): it
    is never sent, and its sample gets no row (a re-run makes it). A BaseException, so no
    ``except Exception`` on the way turns it into an error row."""


_DRAIN_MESSAGE = "gradetrail: drained before it was sent"
T = TypeVar("T")


class Drain:
    """The run's drain switch: once :meth:`start` is called, every request still waiting
    to be sent (for admission: in-flight slots, rate caps, a Retry-After pause; or in a
    retry's backoff) raises :class:`Drained` instead of being sent. Requests already sent
    are left to finish."""

    def __init__(self) -> None:
        self.started = False
        self._waiting: set[asyncio.Task[object]] = set()

    def start(self) -> None:
        """Drain: cancel every wait in progress (they raise :class:`Drained`)."""
        self.started = True
        for task in list(self._waiting):
            task.cancel(_DRAIN_MESSAGE)

    async def wait(self, awaitable: Awaitable[T]) -> T:
        """Await ``awaitable`` (a wait before sending), unless the run drains first.

        Raises:
            Drained: the run drains (before or during the wait).
        """
        if self.started:
            if asyncio.iscoroutine(awaitable):
                awaitable.close()
            raise Drained
        task = asyncio.current_task()
        if task is None:
            return await awaitable
        self._waiting.add(task)
        try:
            return await awaitable
        except asyncio.CancelledError as exc:
            if self.started and exc.args == (_DRAIN_MESSAGE,):
                task.uncancel()
                raise Drained from None
            raise
        finally:
            self._waiting.discard(task)


#: the running run's :class:`Drain` (None outside a run: nothing drains)
DRAINING: contextvars.ContextVar[Drain | None] = contextvars.ContextVar(
    "gradetrail_draining", default=None
)


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """How failed calls are retried.

    Attributes:
        max_retries: retries after the first attempt (so at most ``max_retries + 1`` calls).
        timeout_s: per-attempt timeout, seconds.
        sample_timeout_s: wall-clock ceiling over all attempts and sleeps, seconds (None:
            no ceiling beyond the attempts' own timeouts).
        base_delay_s: backoff before the first retry; doubles each retry, seconds.
        max_delay_s: cap on one backoff, seconds.
    """

    max_retries: int = 5
    timeout_s: float = 120.0
    sample_timeout_s: float | None = None
    base_delay_s: float = 1.0
    max_delay_s: float = 60.0

    def backoff(self, retry: int, retry_after: float | None, rand: Callable[[], float]) -> float:
        """Seconds to wait before retry number ``retry`` (0-based): the server's
        ``retry_after`` when given, else full jitter over ``base * 2**retry`` capped at
        ``max_delay_s`` (a ``retry_after`` is capped at ``10 * max_delay_s`` and at
        :data:`MAX_RETRY_AFTER_S`)."""
        retry_after = bounded_retry_after(retry_after)
        if retry_after is not None:
            return min(retry_after, self.max_delay_s * 10)
        return rand() * min(self.max_delay_s, self.base_delay_s * (2**retry))


@dataclass(frozen=True, slots=True, eq=False)
class RetriedAttempt:
    """An attempt that failed (retried, or the last one).

    Attributes:
        error: what it failed with.
        latency_s: seconds the attempt itself took.
        backoff_s: seconds waited before the next attempt; None for the last attempt.
    """

    error: ProviderError
    latency_s: float
    backoff_s: float | None


#: called with ``(attempt number, RetriedAttempt)`` the moment each failed attempt ends
#: (before its backoff), when passed to :func:`call_with_retry` (through
#: :meth:`~gradetrail.executors.base.Executor.complete`): the run log writes each attempt
#: as it happens (``tail -f`` shows retries live), with its own time and latency. An
#: executor that runs the loop elsewhere (another process) never calls it; the caller then
#: logs :attr:`CallOutcome.retried` at the end.
AttemptListener = Callable[[int, RetriedAttempt], None]


# read-only, but not frozen: one is built a call, and a frozen __init__ costs ~8x
@dataclass(slots=True, eq=False)
class CallOutcome:
    """The end of one request's attempts: a response or the last error.

    Attributes:
        response: the response, or None when every attempt failed.
        error: the last error, or None on success.
        attempts: calls made (1 or more).
        slept_s: total backoff slept, seconds.
        retried: the attempts before the last that failed and were retried, in order
            (for the run log: every call is logged, not just the last).
    """

    response: Response | None
    error: ProviderError | None
    attempts: int
    slept_s: float
    retried: tuple[RetriedAttempt, ...] = ()


class Gate(Protocol):
    """What an executor puts around each attempt: admission before it (in-flight slots,
    rate caps, a server's Retry-After pause) and feedback after it (success or 429)."""

    def acquire(self) -> Awaitable[object]:
        """Wait until the attempt may start; return a ticket for :meth:`release` (an
        ``async def``, or a done future when the ticket is taken at once)."""
        ...

    def release(self, ticket: object, response: Response | None, error: Exception | None) -> None:
        """The attempt ended with ``response`` or ``error`` (None for both: cancelled)."""
        ...

    def held_for(self) -> float:
        """Seconds a server's Retry-After pause will still hold a new attempt (0.0 when
        none holds it): a wait the per-sample ceiling may not have room for."""
        ...


async def call_with_retry(
    call: Callable[[], Awaitable[Response]],
    policy: RetryPolicy,
    *,
    sleep: Callable[[float], Awaitable[None]] = asyncio.sleep,
    clock: Callable[[], float] = time.monotonic,
    rand: Callable[[], float] = random.random,
    gate: Gate | None = None,
    on_attempt: AttemptListener | None = None,
) -> CallOutcome:
    """Call ``call`` until it succeeds, fails permanently, or the policy's bounds end it.

    Each attempt waits for ``gate`` (when given) outside its own timeout. The per-sample
    ceiling (``policy.sample_timeout_s``) starts when the first attempt is admitted, less
    the server's Retry-After pause it waited for first (:meth:`Gate.held_for`): time
    queued behind other samples for an in-flight slot does not count, a wait the server
    imposed does; it covers every later wait, attempt and backoff. A wait that cannot end
    inside the ceiling (a backoff or Retry-After, or a pause holding the gate) is never
    started: the sample ends at once with a transient ProviderTimeout naming the ceiling
    (and the wait, and the last error), which a re-run retries.

    An attempt's timeout counts from its start, or from the last byte of a streamed
    answer still arriving (:func:`gradetrail._util.progress.attempt_progress`). An
    attempt cut off by its timeout is a transient ProviderTimeout, unless the call
    says why it could not end in time by letting the cancellation out as
    ``CancelledError(error)`` with a ProviderError: that is the attempt's error (the
    python provider's permanent ``function_blocked``, for a function holding its loop).

    ``on_attempt`` is called the moment each failed attempt ends (see
    :data:`AttemptListener`).

    Never raises a ProviderError: failures are returned in the outcome.

    Raises:
        Drained: the run began to drain (:data:`DRAINING`) while this request waited to
            be sent (for the gate, or in a backoff): it is not sent.
    """
    drain = DRAINING.get()
    deadline: float | None = None
    paused = 0.0  # seconds of a server's pause the first attempt waited (they count)
    attempts = 0
    slept = 0.0
    retried: list[RetriedAttempt] = []
    while True:
        ticket: object = None
        if drain is not None and drain.started:
            raise Drained  # before the gate: it takes no slot for a request never sent
        held = gate.held_for() if gate is not None and policy.sample_timeout_s else 0.0
        if held > 0:  # the server's pause: a wait that counts against the ceiling
            room = policy.sample_timeout_s if deadline is None else deadline - clock()
            if held >= room:  # type: ignore[operator]
                last = retried[-1].error if retried else None
                ceiling = _ceiling(policy, attempts, last, held)
                return CallOutcome(None, ceiling, attempts, slept, tuple(retried))
            if deadline is None:
                paused = held  # taken off the ceiling once the first attempt is admitted
        if gate is not None:
            acquired = gate.acquire()
            if isinstance(acquired, asyncio.Future) and acquired.done():
                ticket = acquired.result()  # taken at once: there was nothing to wait for
            else:
                admitted = acquired if drain is None else drain.wait(acquired)
                if deadline is None:  # no ceiling yet: nothing can cut the wait short
                    ticket = await admitted
                else:
                    try:
                        async with asyncio.timeout(deadline - clock()):
                            ticket = await admitted
                    except TimeoutError:
                        ceiling = _ceiling(policy, attempts, None)
                        return CallOutcome(None, ceiling, attempts, slept, tuple(retried))
        if deadline is None and policy.sample_timeout_s is not None:
            deadline = clock() + policy.sample_timeout_s - paused
        attempts += 1
        timeout = policy.timeout_s
        if deadline is not None:
            timeout = min(timeout, max(deadline - clock(), 0.0))
        response: Response | None = None
        error: ProviderError | None = None
        started = clock()
        progressed = False
        try:
            async with asyncio.Timeout(None) as limit:  # armed by the loop's Cutoffs
                cutoffs = Cutoffs.on(asyncio.get_running_loop())
                cutoffs.watch(limit, timeout)

                def progress(
                    limit: asyncio.Timeout = limit,
                    ceiling: float | None = deadline,
                    cutoffs: Cutoffs = cutoffs,
                ) -> None:
                    nonlocal progressed
                    progressed = True
                    left = policy.timeout_s
                    if ceiling is not None:
                        left = min(left, max(ceiling - clock(), 0.0))
                    cutoffs.move(limit, left)

                token = ATTEMPT_PROGRESS.set(progress)
                try:
                    response = await call()
                finally:
                    ATTEMPT_PROGRESS.reset(token)
                    cutoffs.forget(limit)
        except TimeoutError as exc:
            what = "no bytes" if progressed else "no response"
            error = _cut_off(exc) or ProviderTimeout(f"{what} within {timeout:.3g} s")
        except ProviderError as exc:
            error = exc
        finally:
            if gate is not None:
                gate.release(ticket, response, error)
        if error is None:
            return CallOutcome(response, None, attempts, slept, tuple(retried))
        latency = clock() - started
        listener = on_attempt
        if not error.transient or attempts > policy.max_retries:
            if listener is not None:
                listener(attempts, RetriedAttempt(error, latency, None))
            return CallOutcome(None, error, attempts, slept, tuple(retried))
        delay = policy.backoff(attempts - 1, error.retry_after, rand)
        if deadline is not None and clock() + delay >= deadline:
            if listener is not None:
                listener(attempts, RetriedAttempt(error, latency, None))
            ceiling = _ceiling(policy, attempts, error, delay if clock() < deadline else None)
            return CallOutcome(None, ceiling, attempts, slept, tuple(retried))
        attempt = RetriedAttempt(error, latency, delay)
        retried.append(attempt)
        if listener is not None:
            listener(attempts, attempt)
        await (sleep(delay) if drain is None else drain.wait(sleep(delay)))
        slept += delay


class Cutoffs:
    """The timeouts of the attempts running on one event loop, sharing one loop timer.

    An attempt's ``asyncio.Timeout`` is entered unarmed (``asyncio.Timeout(None)``) and
    its deadline is kept here. One timer, due at the earliest deadline kept when it was
    set, arms each attempt still running then at its own deadline
    (``Timeout.reschedule``: at once if it has passed, else with a timer of its own), so
    every attempt is cut off when an armed ``asyncio.timeout`` would have cut it. Most
    attempts end long before their timeout: each costs a dict entry instead of a timer
    scheduled and cancelled (about 3 % of a cold row), and a streamed answer's progress
    moves its deadline here instead of rescheduling a timer for every chunk.

    Args:
        loop: the event loop the attempts run on.
    """

    _current: Cutoffs | None = None

    def __init__(self, loop: asyncio.AbstractEventLoop) -> None:
        self.loop = loop
        #: each unarmed attempt's Timeout and its deadline (the loop's time)
        self.due: dict[asyncio.Timeout, float] = {}
        self._timer: asyncio.TimerHandle | None = None
        self._at = 0.0

    @classmethod
    def on(cls, loop: asyncio.AbstractEventLoop) -> Cutoffs:
        """The cutoffs of ``loop`` (a new one when the last one used was another loop's:
        a timer already set stays with the attempts it watches)."""
        cutoffs = cls._current
        if cutoffs is None or cutoffs.loop is not loop:
            cutoffs = cls._current = cls(loop)
        return cutoffs

    def watch(self, limit: asyncio.Timeout, delay: float) -> None:
        """Cut off the attempt of ``limit`` (entered, unarmed) ``delay`` seconds from now."""
        when = self.loop.time() + delay
        if delay <= 0 or (self._timer is not None and when < self._at):
            limit.reschedule(when)  # due now, or before the timer: armed on its own
            return
        self.due[limit] = when
        if self._timer is None:
            self._at = when
            self._timer = self.loop.call_at(when, self._arm)

    def move(self, limit: asyncio.Timeout, delay: float) -> None:
        """Cut off the attempt of ``limit`` ``delay`` seconds from now instead (never
        earlier than its deadline so far: a streamed answer's progress)."""
        when = self.loop.time() + delay
        if limit in self.due:
            self.due[limit] = when
        else:  # armed already
            limit.reschedule(when)

    def forget(self, limit: asyncio.Timeout) -> None:
        """The attempt of ``limit`` is ending: nothing is armed for it any more here."""
        self.due.pop(limit, None)

    def _arm(self) -> None:
        """The timer is due: arm every attempt still watched at its own deadline."""
        self._timer = None
        due, self.due = self.due, {}
        for limit, when in due.items():
            limit.reschedule(when)


def _cut_off(exc: TimeoutError) -> ProviderError | None:
    """The ProviderError a call cut off by ``asyncio.timeout`` gave as the reason (the
    argument of the CancelledError it let out, which the timeout chains), or None."""
    cancelled = exc.__cause__ or exc.__context__
    if isinstance(cancelled, asyncio.CancelledError) and cancelled.args:
        reason = cancelled.args[0]
        if isinstance(reason, ProviderError):
            return reason
    return None


def _ceiling(
    policy: RetryPolicy, attempts: int, error: ProviderError | None, wait: float | None = None
) -> ProviderTimeout:
    """The transient error of a sample that ran out of its ceiling after ``attempts``
    attempts (``error`` the last one's), or would have in a ``wait`` (seconds) not
    started."""
    last = f"; last error: {error}" if error is not None else ""
    if wait is None:
        reached = "reached"
    elif attempts:
        reached = f"leaves no room for a {wait:.3g} s wait"
    else:  # nothing sent: the server's pause outlasts the whole ceiling
        reached = f"leaves no room for the server's {wait:.3g} s Retry-After pause; not sent"
    return ProviderTimeout(
        f"sample ceiling of {policy.sample_timeout_s:g} s {reached} after {attempts} attempts"
        f"{last}",
        status=error.status if error else None,
        error_type=error.error_type if error else None,
        code=error.code if error else None,
    )
