"""The one retry policy: backoff with full jitter, Retry-After, bounds, the per-sample
ceiling and the per-attempt gate, on an injected clock; the attempt timeouts, which read
the loop's own time, on the fake-time loop of loop_support."""

from __future__ import annotations

import asyncio

from loop_support import run_on_fake_time

from gradetrail._util.progress import attempt_progress
from gradetrail.errors import BadRequest, ProviderError, ProviderTimeout, RateLimited, ServerError
from gradetrail.executors.retry import Cutoffs, RetryPolicy, call_with_retry
from gradetrail.providers.base import Response
from gradetrail.testing import FakeClock

OK = Response(text="fine")


def scripted(*outcomes: Response | ProviderError):
    """A call that fails or answers as scripted, one outcome per attempt."""
    queue = list(outcomes)

    async def call() -> Response:
        outcome = queue.pop(0)
        if isinstance(outcome, ProviderError):
            raise outcome
        return outcome

    return call


def run(call, policy: RetryPolicy, clock: FakeClock, rand=lambda: 1.0, gate=None):
    """Backoff and the ceiling on ``clock``; the attempts' timeouts, which read the loop's
    time, on the fake-time loop."""
    return run_on_fake_time(
        call_with_retry(call, policy, sleep=clock.sleep, clock=clock.now, rand=rand, gate=gate)
    )


def test_transient_errors_back_off_exponentially_with_full_jitter_up_to_the_cap() -> None:
    """Each retry waits rand() x min(max_delay, base x 2^retry): 1, 2, 4, then capped at 5."""
    clock = FakeClock()
    errors = [ServerError("500 boom", status=500) for _ in range(5)]
    policy = RetryPolicy(max_retries=4, base_delay_s=1.0, max_delay_s=5.0)
    outcome = run(scripted(*errors), policy, clock)
    assert outcome.response is None
    assert outcome.attempts == 5
    assert clock.slept == [1.0, 2.0, 4.0, 5.0]
    assert outcome.slept_s == 12.0
    assert isinstance(outcome.error, ServerError)


def test_jitter_scales_each_wait_by_the_random_draw() -> None:
    """Full jitter: a draw of 0.25 waits a quarter of the exponential step."""
    clock = FakeClock()
    errors = [ServerError("503", status=503), ServerError("503", status=503)]
    outcome = run(scripted(*errors, OK), RetryPolicy(base_delay_s=2.0), clock, rand=lambda: 0.25)
    assert outcome.response == OK and outcome.attempts == 3
    assert clock.slept == [0.5, 1.0]


def test_retry_after_is_honoured_exactly_instead_of_backoff() -> None:
    """A 429 with Retry-After: 3 waits exactly 3 s, whatever the jitter draw."""
    clock = FakeClock()
    limited = RateLimited("429 rate_limit_error", status=429, retry_after=3.0)
    outcome = run(scripted(limited, limited, OK), RetryPolicy(), clock, rand=lambda: 0.1)
    assert outcome.response == OK
    assert outcome.attempts == 3
    assert clock.slept == [3.0, 3.0]


def test_permanent_error_is_returned_at_once_without_sleeping() -> None:
    """A 400 is recorded after one attempt; nothing is slept."""
    clock = FakeClock()
    outcome = run(scripted(BadRequest("400 bad", status=400)), RetryPolicy(), clock)
    assert outcome.attempts == 1 and clock.slept == []
    assert isinstance(outcome.error, BadRequest) and outcome.error.status == 400


def test_exhausted_quota_429_is_permanent() -> None:
    """A 429 whose transient flag is off (quota exhausted) is not retried."""
    clock = FakeClock()
    quota = RateLimited("429 insufficient_quota", transient=False, status=429, retry_after=1.0)
    outcome = run(scripted(quota), RetryPolicy(), clock)
    assert outcome.attempts == 1 and clock.slept == []


def test_max_retries_zero_means_one_attempt() -> None:
    """max_retries counts retries after the first attempt."""
    clock = FakeClock()
    outcome = run(scripted(ServerError("500", status=500)), RetryPolicy(max_retries=0), clock)
    assert outcome.attempts == 1 and clock.slept == []


def test_attempt_timeout_is_a_transient_provider_timeout() -> None:
    """An attempt that does not answer within timeout_s is cut and retried."""
    clock = FakeClock()
    calls = []

    async def call() -> Response:
        calls.append(1)
        if len(calls) == 1:
            await asyncio.sleep(10)
        return OK

    outcome = run(call, RetryPolicy(timeout_s=0.05), clock, rand=lambda: 0.0)
    assert outcome.response == OK and outcome.attempts == 2
    assert clock.slept == [0.0]
    assert str(outcome.retried[0].error) == "no response within 0.05 s"


def test_sample_ceiling_stops_a_wait_that_would_pass_it() -> None:
    """A Retry-After longer than what is left of the ceiling ends the sample now, as a
    ProviderTimeout naming the ceiling and the last error."""
    clock = FakeClock()
    limited = RateLimited("429 rate_limit_error", status=429, retry_after=30.0)
    policy = RetryPolicy(sample_timeout_s=10.0)
    outcome = run(scripted(limited, OK), policy, clock)
    assert outcome.attempts == 1 and clock.slept == []
    assert isinstance(outcome.error, ProviderTimeout)
    assert str(outcome.error) == (
        "sample ceiling of 10 s leaves no room for a 30 s wait after 1 attempts; last error: "
        "429 rate_limit_error"
    )
    assert outcome.error.status == 429


class RecordingGate:
    """A gate that records admissions and releases; admission takes ``wait`` fake s, of
    which ``held`` are a server's Retry-After pause."""

    def __init__(self, clock: FakeClock, wait: float = 0.0, held: float = 0.0) -> None:
        self.clock, self.wait, self.held = clock, wait, held
        self.events: list[tuple[str, object]] = []

    def held_for(self) -> float:
        return self.held

    async def acquire(self) -> object:
        await self.clock.sleep(self.wait)
        self.events.append(("acquire", len(self.events)))
        return len(self.events)

    def release(self, ticket, response, error) -> None:
        self.events.append(("release", type(error).__name__ if error else response.text))


def test_gate_admits_each_attempt_and_hears_how_it_went() -> None:
    """Every attempt passes the gate and reports its outcome; backoff happens outside it."""
    clock = FakeClock()
    gate = RecordingGate(clock)
    limited = RateLimited("429", status=429, retry_after=2.0)
    outcome = run(scripted(limited, OK), RetryPolicy(), clock, gate=gate)
    assert outcome.attempts == 2
    assert gate.events == [
        ("acquire", 0),
        ("release", "RateLimited"),
        ("acquire", 2),
        ("release", "fine"),
    ]
    assert clock.slept == [0.0, 2.0, 0.0]


def test_ceiling_starts_when_the_first_attempt_is_admitted() -> None:
    """Time queued behind other samples before the first admission does not count against
    the per-sample ceiling."""
    clock = FakeClock()
    gate = RecordingGate(clock, wait=100.0)
    outcome = run(scripted(OK), RetryPolicy(sample_timeout_s=10.0), clock, gate=gate)
    assert outcome.response == OK and outcome.attempts == 1


def test_a_server_pause_longer_than_the_ceiling_is_not_waited() -> None:
    """A Retry-After pause holding the gate for longer than the whole per-sample ceiling
    ends the sample at once, nothing sent, as a transient ProviderTimeout (a re-run
    retries it): before, the sample waited out the pause (600 s with a 5 s ceiling)."""
    clock = FakeClock()
    gate = RecordingGate(clock, wait=600.0, held=600.0)
    outcome = run(scripted(OK), RetryPolicy(sample_timeout_s=5.0), clock, gate=gate)
    assert (outcome.response, outcome.attempts, clock.slept, gate.events) == (None, 0, [], [])
    assert isinstance(outcome.error, ProviderTimeout) and outcome.error.transient
    assert str(outcome.error) == (
        "sample ceiling of 5 s leaves no room for the server's 600 s Retry-After pause; not "
        "sent after 0 attempts"
    )


def test_a_server_pause_counts_against_the_ceiling() -> None:
    """A pause the ceiling has room for is waited, and counted: 3 s of pause leave 2 s of
    a 5 s ceiling once the sample is admitted, so a 2 s backoff after its first attempt no
    longer fits (before, the ceiling started at admission: the pause was free)."""
    clock = FakeClock()
    gate = RecordingGate(clock, wait=3.0, held=3.0)
    limited = RateLimited("429", status=429, retry_after=2.0)
    outcome = run(scripted(limited, OK), RetryPolicy(sample_timeout_s=5.0), clock, gate=gate)
    assert outcome.response is None and outcome.attempts == 1 and clock.slept == [3.0]
    assert str(outcome.error).startswith("sample ceiling of 5 s leaves no room for a 2 s wait")


def test_a_slot_queue_after_a_pause_does_not_count() -> None:
    """Only the server's pause counts: 3 s of pause, then 7 s queued for a slot, under a
    5 s ceiling, leave the sample 2 s from its admission, enough for its answer."""
    clock = FakeClock()
    gate = RecordingGate(clock, wait=10.0, held=3.0)
    outcome = run(scripted(OK), RetryPolicy(sample_timeout_s=5.0), clock, gate=gate)
    assert outcome.response == OK and clock.slept == [10.0]


def test_no_ceiling_waits_the_pause_out() -> None:
    """Without run.sample_timeout_s a server's pause is waited out, as it asks."""
    clock = FakeClock()
    gate = RecordingGate(clock, wait=600.0, held=600.0)
    outcome = run(scripted(OK), RetryPolicy(), clock, gate=gate)
    assert outcome.response == OK and clock.slept == [600.0]


def test_attempts_sharing_the_cutoff_timer_are_each_cut_at_their_own_deadline() -> None:
    """Attempt timeouts share one loop timer (executors.retry.Cutoffs), yet each attempt is
    cut at its own deadline: one due after the shared timer is not cut when it fires, one
    due before it is not left waiting for it, and progress moves a deadline on. On the
    fake-time loop, so every end is at an exact loop time (all of them binary fractions:
    their sums are exact floats)."""
    ended: list[tuple[str, float]] = []

    def now() -> float:
        return asyncio.get_running_loop().time()

    def sleeping(name: str, seconds: float, beats: int = 0):
        async def call() -> Response:
            for _ in range(beats):  # a streamed answer that keeps producing bytes
                await asyncio.sleep(seconds / (beats + 1))
                attempt_progress()
            await asyncio.sleep(seconds / (beats + 1))
            ended.append((name, now()))
            return OK

        return call

    async def attempt(name: str, call, timeout_s: float):
        policy = RetryPolicy(max_retries=0, timeout_s=timeout_s)
        outcome = await call_with_retry(call, policy)
        if outcome.error is not None:
            assert isinstance(outcome.error, ProviderTimeout)
            ended.append((f"{name} cut", now()))
        return outcome

    async def main() -> None:
        loop = asyncio.get_running_loop()
        first = asyncio.ensure_future(attempt("first", sleeping("first", 10.0), 0.625))
        await asyncio.sleep(0)  # the shared timer is set for first's deadline, 0.625
        assert Cutoffs.on(loop)._at == 0.625
        later = asyncio.ensure_future(attempt("later", sleeping("later", 0.875), 4.0))
        sooner = asyncio.ensure_future(attempt("sooner", sleeping("sooner", 10.0), 0.125))
        # due at 0.75, after the shared timer, and moved on by each beat (at 0.25, 0.5,
        # ..., 1.25: 0.75 after the last is 2.0) past the answer's end at 1.5
        beating = asyncio.ensure_future(attempt("beating", sleeping("beat", 1.5, 5), 0.75))
        quick = await attempt("quick", sleeping("quick", 0.0), 5.0)
        assert quick.response == OK
        await asyncio.gather(first, later, sooner, beating)
        assert not Cutoffs.on(loop).due  # every attempt that ended is forgotten

    run_on_fake_time(main())
    assert ended == [
        ("quick", 0.0),
        ("sooner cut", 0.125),  # before the shared timer, on a timer of its own
        ("first cut", 0.625),  # the shared timer
        ("later", 0.875),  # armed at 4.0 by the shared timer, not cut by it
        ("beat", 1.5),  # moved on past its first deadline, 0.75, five times
    ]
