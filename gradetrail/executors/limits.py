"""Admission control for provider calls: in-flight slots that adapt to rate limits (AIMD),
optional requests-per-minute and tokens-per-minute caps, and a shared pause when the
server says how long to wait.

:class:`Throttle` is what :class:`~gradetrail.executors.local.LocalExecutor` puts around
every attempt (a :class:`~gradetrail.executors.retry.Gate`):

1. **Retry-After pause.** A 429 (or overloaded) answer that carries ``Retry-After`` holds
   every *new* attempt until then, not only the retry of the request that got it: the
   server has said that nothing sent earlier will be accepted. One pause lasts at most
   :data:`~gradetrail.errors.MAX_RETRY_AFTER_S` (600 s) from the answer that asked for it.
2. **In-flight slots, AIMD.** At most ``limit`` attempts are in flight. A rate-limit
   answer multiplies ``limit`` by ``DECREASE`` (at most once per round: only an attempt
   admitted after the last decrease can cause another, as TCP counts one loss per window,
   RFC 5681); every success adds ``1 / limit`` (one slot per window of successes), up to
   the run's concurrency. The run settles near the provider's real limit instead of
   hammering it. Backoff sleeps hold no slot.
3. **Rate caps.** ``requests_per_minute`` and ``tokens_per_minute`` are token buckets
   refilled continuously and holding at most one second's worth (bursts of a minute's
   quota are what providers' own per-second enforcement rejects). A request reserves its
   estimated tokens (:func:`estimate_tokens`); the reservation is corrected to the usage
   the response reports.

Time and sleep are injected, so tests drive all of this without waiting.
"""

from __future__ import annotations

import asyncio
import math
from collections import deque
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from gradetrail.errors import InvalidResponse, RateLimited, ServerError, bounded_retry_after
from gradetrail.providers.base import Request, Response

__all__ = ["AdaptiveLimit", "RateBucket", "Throttle", "ThrottleStats", "estimate_tokens"]

#: multiplicative decrease of the in-flight limit on a rate-limit answer. 0.5 (TCP Reno)
#: averages 75% of the limit over a sawtooth; 0.75 averages about 87%.
DECREASE = 0.75


def estimate_tokens(request: Request) -> int:
    """Tokens a request may use, for a tokens-per-minute cap: prompt characters / 4 (the
    usual English average; OpenAI's rate limiter estimates the same way) plus
    ``max_tokens`` (0 when unset). The reservation is corrected once usage is known."""
    chars = len(request.system or "") + sum(len(m["content"]) for m in request.messages)
    return math.ceil(chars / 4) + int(request.params.get("max_tokens") or 0)


#: error types and codes of a body that means "send less" under any status: Anthropic's
#: overload and rate limit, OpenAI's rate limit, and codes that are those statuses
_THROTTLE_NAMES = frozenset(
    ["overloaded_error", "rate_limit_error", "rate_limit_exceeded", "429", "529"]
)


def is_throttle(error: Exception | None) -> bool:
    """True for answers that mean "send less": a transient 429, or an overloaded server
    (529, or an ``overloaded_error`` body), and the same bodies under status 200 (the
    ``error`` event of a stream already answered 200, retried as an
    :class:`~gradetrail.errors.InvalidResponse`)."""
    if isinstance(error, RateLimited):
        return error.transient
    if isinstance(error, ServerError):
        return error.status == 529 or error.error_type == "overloaded_error"
    if isinstance(error, InvalidResponse):
        names = _THROTTLE_NAMES
        return error.transient and (error.error_type in names or error.code in names)
    return False


class AdaptiveLimit:
    """At most ``limit`` holders at once; ``limit`` adapts by AIMD between 1 and
    ``maximum`` (fixed at ``maximum`` when ``adaptive`` is False).

    Args:
        maximum: the run's concurrency.
        adaptive: False keeps the limit fixed.
    """

    def __init__(
        self,
        maximum: int,
        *,
        adaptive: bool = True,
        clock: Callable[[], float] | None = None,
    ) -> None:
        self.maximum = maximum
        self.adaptive = adaptive
        self.limit = float(maximum)
        self.in_flight = 0
        self.lowest = float(maximum)
        self.decreases = 0
        self.rtt: float | None = None
        self._round = 0
        self._last_cut = -math.inf
        self._clock = clock
        self._waiters: deque[asyncio.Future[None]] = deque()

    def admit(self) -> int | None:
        """Take a slot if one is free and nobody waits for one: the round it was admitted
        in (for :meth:`release`), else None (then :meth:`acquire` waits for one)."""
        if self.in_flight < int(self.limit) and not self._waiters:
            self.in_flight += 1
            return self._round
        return None

    async def acquire(self) -> int:
        """Wait for a slot; return the round it was admitted in (for :meth:`release`)."""
        admitted = self.admit()
        if admitted is not None:
            return admitted
        fut: asyncio.Future[None] = asyncio.get_running_loop().create_future()
        self._waiters.append(fut)
        try:
            await fut
        except asyncio.CancelledError:
            if fut.done() and not fut.cancelled():  # handed a slot just as we were cancelled
                self.in_flight -= 1
                self._wake()
            raise
        return self._round

    def release(
        self,
        admitted_round: int,
        throttled: bool,
        succeeded: bool,
        duration_s: float | None = None,
    ) -> None:
        """Free a slot; adapt the limit to how the attempt went.

        A rate-limit answer lowers the limit only if its attempt was admitted after the
        last decrease and, once successes have given a round-trip time (an average of
        their ``duration_s``), at least that long after it: rejections come back at once,
        so without the time rule one full window would be cut to 1 in a burst.
        """
        self.in_flight -= 1
        if self.adaptive:
            if throttled and admitted_round == self._round and self._cut_allowed():
                self.limit = max(1.0, math.floor(self.limit * DECREASE))
                self.lowest = min(self.lowest, self.limit)
                self.decreases += 1
                self._round += 1
            elif succeeded:
                if duration_s is not None:
                    rtt = self.rtt
                    self.rtt = duration_s if rtt is None else 0.8 * rtt + 0.2 * duration_s
                if self.limit < self.maximum:
                    self.limit = min(float(self.maximum), self.limit + 1.0 / self.limit)
        self._wake()

    def _cut_allowed(self) -> bool:
        if self.rtt is None or self._clock is None:
            return True
        now = self._clock()
        if now - self._last_cut < self.rtt:
            return False
        self._last_cut = now
        return True

    def _wake(self) -> None:
        waiters = self._waiters
        while waiters and self.in_flight < int(self.limit):
            fut = waiters.popleft()
            if not fut.done():
                fut.set_result(None)
                self.in_flight += 1


class RateBucket:
    """A token bucket refilled at ``per_minute / 60`` per second, holding at most one
    second's worth (at least one request's cost). A taker waits until the balance covers
    its cost (or the bucket's capacity, for a cost above it: the balance may go negative,
    so one large request never deadlocks).

    Args:
        per_minute: the cap.
        clock, sleep: injected time (seconds).
    """

    def __init__(
        self,
        per_minute: float,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.rate = per_minute / 60.0
        self.capacity = max(1.0, self.rate)
        self.balance = self.capacity
        self._clock, self._sleep = clock, sleep
        self._stamp = clock()
        self._lock = asyncio.Lock()  # FIFO: one waiter sleeps, the rest queue behind it

    def _refill(self, now: float) -> None:
        if now > self._stamp:
            self.balance = min(self.capacity, self.balance + (now - self._stamp) * self.rate)
            self._stamp = now

    async def take(self, cost: float) -> None:
        """Wait until ``cost`` may be spent, then spend it."""
        need = min(cost, self.capacity)
        self._refill(self._clock())
        if self.balance >= need and not self._lock.locked():
            self.balance -= cost
            return
        async with self._lock:
            self._refill(self._clock())
            # the tolerance: near a clock of 1e3 s, a wait of 1e-14 s is lost in rounding
            # (the clock does not move), and an exact comparison would loop for ever
            while self.balance < need - 1e-9:
                wait = (need - self.balance) / self.rate
                before = self._clock()
                await self._sleep(wait)
                # a fake sleep may not move the clock: count the wait as time passed
                self._refill(max(self._clock(), before + wait))
            self.balance -= cost

    def refund(self, tokens: float) -> None:
        """Give back (or, negative, charge) the difference between a reservation and the
        usage the response reported."""
        self.balance = min(self.capacity, self.balance + tokens)


@dataclass(frozen=True, slots=True, eq=False)
class ThrottleStats:
    """How admission went so far.

    Attributes:
        limit: the in-flight limit now.
        lowest: the lowest in-flight limit reached.
        decreases: times the limit was lowered.
        throttled: attempts answered with a rate-limit or overloaded error.
        paused_s: seconds new attempts were held for a server's Retry-After, in total.
    """

    limit: float
    lowest: float
    decreases: int
    throttled: int
    paused_s: float


class Throttle:
    """In-flight slots (AIMD), rate caps and the Retry-After pause, shared by every
    request of one executor.

    Args:
        concurrency: attempts in flight at most.
        adaptive: adapt the in-flight limit to rate-limit answers.
        requests_per_minute, tokens_per_minute: optional caps.
        clock, sleep: injected time (seconds).
    """

    def __init__(
        self,
        concurrency: int,
        *,
        adaptive: bool = True,
        requests_per_minute: float | None = None,
        tokens_per_minute: float | None = None,
        clock: Callable[[], float],
        sleep: Callable[[float], Awaitable[None]],
    ) -> None:
        self.slots = AdaptiveLimit(concurrency, adaptive=adaptive, clock=clock)
        self.rpm = RateBucket(requests_per_minute, clock, sleep) if requests_per_minute else None
        self.tpm = RateBucket(tokens_per_minute, clock, sleep) if tokens_per_minute else None
        self._clock, self._sleep = clock, sleep
        self._hold_until = 0.0
        self._paused = 0.0
        self._throttled = 0
        #: the gate of every request when no tokens-per-minute cap needs its estimate
        self._untallied = RequestGate(self, 0)

    def gate(self, request: Request) -> RequestGate:
        """The :class:`~gradetrail.executors.retry.Gate` for one request's attempts."""
        if self.tpm is None:
            return self._untallied  # nothing of the request to carry: one gate serves all
        return RequestGate(self, estimate_tokens(request))

    def admit(self) -> tuple[int, float] | None:
        """The ticket :meth:`acquire` would return, taken at once when it has nothing to
        wait for (no pause, a free slot, no rate cap); else None."""
        if self.rpm is not None or self.tpm is not None or self._hold_until > self._clock():
            return None
        admitted = self.slots.admit()
        return None if admitted is None else (admitted, self._clock())

    async def acquire(self, tokens: int) -> tuple[int, float]:
        """Wait out a Retry-After pause, then for a slot and the rate caps; return the
        ticket for :meth:`release` (the admission round and time)."""
        hold = self._hold_until - self._clock()
        if hold > 0:
            await self._sleep(hold)
        admitted = await self.slots.acquire()
        try:
            if self.rpm is not None:
                await self.rpm.take(1)
            if self.tpm is not None:
                await self.tpm.take(tokens)
        except BaseException:
            self.slots.release(admitted, False, False)
            raise
        return admitted, self._clock()

    def release(
        self,
        ticket: tuple[int, float],
        tokens: int,
        response: Response | None,
        error: Exception | None,
    ) -> None:
        """Free the slot, adapt the limit, start a pause if the server asked for one, and
        correct the token reservation."""
        throttled = error is not None and is_throttle(error)
        if throttled:
            self._throttled += 1
            # bounded here too: a pause from a raw value would hold every request for good
            retry_after = bounded_retry_after(getattr(error, "retry_after", None))
            if retry_after:
                until = self._clock() + retry_after
                if until > self._hold_until:
                    self._paused += until - max(self._hold_until, self._clock())
                    self._hold_until = until
        admitted, started = ticket
        duration = self._clock() - started
        self.slots.release(admitted, throttled, response is not None, duration)
        if self.tpm is not None and response is not None:
            used = response.input_tokens + response.cached_input_tokens + response.output_tokens
            self.tpm.refund(tokens - used)

    def held_for(self) -> float:
        """Seconds the server's Retry-After pause still holds every new attempt (0.0 when
        none does)."""
        return max(self._hold_until - self._clock(), 0.0)

    def stats(self) -> ThrottleStats:
        """The current limit and what admission has done so far."""
        s = self.slots
        return ThrottleStats(s.limit, s.lowest, s.decreases, self._throttled, self._paused)


class RequestGate:
    """One request's view of a :class:`Throttle` (its token estimate travels along)."""

    __slots__ = ("_throttle", "_tokens")

    def __init__(self, throttle: Throttle, tokens: int) -> None:
        self._throttle = throttle
        self._tokens = tokens

    def acquire(self) -> Awaitable[object]:
        """See :meth:`Throttle.acquire`: a future already holding the ticket when it is
        taken at once (:meth:`Throttle.admit`: no coroutine is made for it), else the
        waiting coroutine."""
        ticket = self._throttle.admit()
        if ticket is None:
            return self._throttle.acquire(self._tokens)
        admitted = asyncio.get_running_loop().create_future()
        admitted.set_result(ticket)
        return admitted

    def release(self, ticket: object, response: Response | None, error: Exception | None) -> None:
        """See :meth:`Throttle.release`."""
        self._throttle.release(ticket, self._tokens, response, error)  # type: ignore[arg-type]

    def held_for(self) -> float:
        """See :meth:`Throttle.held_for`."""
        return self._throttle.held_for()
