"""Admission control: the AIMD in-flight limit, the rate caps and the Retry-After pause,
on an injected clock."""

from __future__ import annotations

import asyncio

from gradetrail.errors import InvalidResponse, ProviderTimeout, RateLimited, ServerError
from gradetrail.executors.limits import (
    DECREASE,
    AdaptiveLimit,
    RateBucket,
    Throttle,
    estimate_tokens,
    is_throttle,
)
from gradetrail.providers.base import Request, Response
from gradetrail.testing import FakeClock


def request(prompt: str = "x" * 400, **params) -> Request:
    return Request("openai", "m", None, None, ({"role": "user", "content": prompt},), params)


def test_limit_drops_by_the_decrease_factor_once_per_round() -> None:
    """Many 429s from attempts admitted before the first decrease lower the limit once."""

    async def main() -> AdaptiveLimit:
        limit = AdaptiveLimit(16)
        rounds = [await limit.acquire() for _ in range(16)]
        for admitted in rounds:
            limit.release(admitted, throttled=True, succeeded=False)
        return limit

    limit = asyncio.run(main())
    assert limit.limit == 16 * DECREASE == 12
    assert limit.decreases == 1 and limit.in_flight == 0


def test_a_429_admitted_after_a_decrease_lowers_the_limit_again() -> None:
    """Repeated rounds of 429s keep lowering the limit, down to one."""

    async def main() -> list[float]:
        limit = AdaptiveLimit(8)
        seen = []
        for _ in range(10):
            admitted = await limit.acquire()
            limit.release(admitted, throttled=True, succeeded=False)
            seen.append(limit.limit)
        return seen

    assert asyncio.run(main()) == [6, 4, 3, 2, 1, 1, 1, 1, 1, 1]


def test_successes_add_one_slot_per_window_up_to_the_maximum() -> None:
    """Additive increase: +1/limit per success, so 4 successes at limit 4 make it 5;
    never above the run's concurrency."""

    async def main() -> tuple[float, float]:
        limit = AdaptiveLimit(5)
        limit.limit = 4.0
        for _ in range(4):
            limit.release(await limit.acquire(), throttled=False, succeeded=True)
        after_window = limit.limit
        for _ in range(50):
            limit.release(await limit.acquire(), throttled=False, succeeded=True)
        return after_window, limit.limit

    after_window, ceiling = asyncio.run(main())
    assert 4.9 < after_window < 5.0 + 1e-9
    assert ceiling == 5.0


def test_fixed_limit_ignores_rate_limits_when_not_adaptive() -> None:
    """adaptive_concurrency: false keeps the limit at the run's concurrency."""

    async def main() -> float:
        limit = AdaptiveLimit(4, adaptive=False)
        limit.release(await limit.acquire(), throttled=True, succeeded=False)
        return limit.limit

    assert asyncio.run(main()) == 4.0


def test_waiters_are_admitted_in_order_as_slots_free() -> None:
    """With the limit full, later acquirers wait and enter first-come first-served."""

    async def main() -> list[int]:
        limit = AdaptiveLimit(1)
        order: list[int] = []
        first = await limit.acquire()

        async def wait(i: int) -> None:
            admitted = await limit.acquire()
            order.append(i)
            limit.release(admitted, throttled=False, succeeded=True)

        tasks = [asyncio.ensure_future(wait(i)) for i in range(3)]
        await asyncio.sleep(0)
        assert order == [] and limit.in_flight == 1
        limit.release(first, throttled=False, succeeded=True)
        await asyncio.gather(*tasks)
        return order

    assert asyncio.run(main()) == [0, 1, 2]


def test_requests_per_minute_paces_starts_evenly() -> None:
    """60 requests a minute: the first goes at once, each next one a second later."""
    clock = FakeClock()

    async def main() -> None:
        bucket = RateBucket(60, clock.now, clock.sleep)
        for _ in range(4):
            await bucket.take(1)

    asyncio.run(main())
    assert clock.slept == [1.0, 1.0, 1.0]


def test_tokens_per_minute_charges_the_estimate_and_refunds_the_difference() -> None:
    """A request over a second's budget may start on a full bucket (the balance goes
    negative, never deadlocks); the refund of unused tokens shortens the next wait."""
    clock = FakeClock()

    async def main() -> float:
        bucket = RateBucket(6000, clock.now, clock.sleep)  # 100 tokens a second
        await bucket.take(300)  # over capacity: allowed on a full bucket
        assert bucket.balance == -200
        bucket.refund(150)  # the response used 150 of the 300 reserved
        await bucket.take(100)
        return bucket.balance

    assert asyncio.run(main()) == 0.0
    assert clock.slept == [1.5]


def test_estimate_is_characters_over_four_plus_max_tokens() -> None:
    """400 prompt characters and max_tokens 50 reserve 150 tokens."""
    assert estimate_tokens(request(max_tokens=50)) == 150
    assert estimate_tokens(request("abc")) == 1


def test_throttle_signals_are_retryable_429s_and_overload() -> None:
    """A retryable 429, a 529 or an overloaded_error body lower the limit; an exhausted
    quota, a 500 or a timeout do not."""
    assert is_throttle(RateLimited("429", status=429))
    assert is_throttle(ServerError("529", status=529))
    assert is_throttle(ServerError("503", status=503, error_type="overloaded_error"))
    assert not is_throttle(RateLimited("quota", status=429, transient=False))
    assert not is_throttle(ServerError("500", status=500))
    assert not is_throttle(ProviderTimeout("slow"))
    # the same bodies under status 200 (a stream's error event), retried as InvalidResponse
    overloaded = InvalidResponse("200 overloaded", transient=True, error_type="overloaded_error")
    assert is_throttle(overloaded)
    assert is_throttle(InvalidResponse("200 429", transient=True, code="rate_limit_exceeded"))
    assert not is_throttle(InvalidResponse("200 bad", transient=False, error_type="invalid"))


def test_retry_after_pauses_every_new_attempt() -> None:
    """After a 429 with Retry-After: 2, the next admission (any request's) waits 2 s, and
    the limit drops."""
    clock = FakeClock()

    async def main() -> Throttle:
        throttle = Throttle(8, clock=clock.now, sleep=clock.sleep)
        gate = throttle.gate(request())
        ticket = await gate.acquire()
        gate.release(ticket, None, RateLimited("429", status=429, retry_after=2.0))
        other = throttle.gate(request())
        other.release(await other.acquire(), Response(text="ok"), None)
        return throttle

    throttle = asyncio.run(main())
    assert clock.slept == [2.0]
    stats = throttle.stats()
    assert stats.throttled == 1 and stats.decreases == 1 and stats.paused_s == 2.0
    assert stats.lowest == 6


def test_a_free_slot_is_taken_at_once_and_a_full_or_paused_throttle_waits() -> None:
    """A gate whose throttle has a free slot (no pause, no rate cap) hands back a done
    future holding the ticket, taking the slot; once the slots are full, or while a
    Retry-After pause holds, or under a rate cap, it hands back the waiting coroutine."""
    clock = FakeClock()

    async def main() -> None:
        throttle = Throttle(2, adaptive=False, clock=clock.now, sleep=clock.sleep)
        first = throttle.gate(request()).acquire()
        assert isinstance(first, asyncio.Future) and first.done()
        assert first.result() == (0, clock.now()) and throttle.slots.in_flight == 1
        second = throttle.gate(request()).acquire()
        assert isinstance(second, asyncio.Future) and throttle.slots.in_flight == 2
        full = throttle.gate(request()).acquire()
        assert asyncio.iscoroutine(full)  # waits for a slot: none is taken yet
        assert throttle.slots.in_flight == 2
        limited = RateLimited("429", status=429, retry_after=2.0)
        throttle.gate(request()).release(second.result(), None, limited)
        throttle.gate(request()).release(first.result(), Response(text="ok"), None)
        assert throttle.slots.in_flight == 0
        paused = throttle.gate(request()).acquire()
        assert asyncio.iscoroutine(paused)  # free slots, but the server asked for 2 s
        paused.close()
        await full  # the pause, then a slot
        assert clock.slept == [2.0] and throttle.slots.in_flight == 1
        capped = Throttle(2, requests_per_minute=60, clock=clock.now, sleep=clock.sleep)
        waiting = capped.gate(request()).acquire()
        assert asyncio.iscoroutine(waiting)
        await waiting

    asyncio.run(main())


def test_throttle_corrects_token_reservations_to_reported_usage() -> None:
    """A response's reported tokens replace the estimate in the tokens-per-minute cap."""
    clock = FakeClock()

    async def main() -> float:
        throttle = Throttle(4, tokens_per_minute=60_000, clock=clock.now, sleep=clock.sleep)
        gate = throttle.gate(request(max_tokens=900))  # reserves 1,000
        ticket = await gate.acquire()
        used = Response(text="ok", input_tokens=80, cached_input_tokens=20, output_tokens=100)
        gate.release(ticket, used, None)
        assert throttle.tpm is not None
        return throttle.tpm.balance

    assert asyncio.run(main()) == 1000 - 1000 + 800


def test_run_settles_under_a_servers_rate_limit(tmp_path, monkeypatch) -> None:
    """Against a server accepting 10 requests per half second (429 with Retry-After beyond),
    a 16-wide run lowers its in-flight limit and scores every sample, each 429 seen by
    the throttle. The 16 first requests leave together, so the limit is hit however
    loaded the machine is; the rate the run achieves is measured in bench/bench_http.py
    (a wall-clock figure, not a test)."""
    from http_support import gsm8k_spec
    from protocol_server import running_server

    import gradetrail
    from gradetrail.executors.local import LocalExecutor
    from gradetrail.executors.retry import RetryPolicy
    from gradetrail.providers import make_provider

    monkeypatch.setenv("ANTHROPIC_API_KEY", "sk-test")
    with running_server(latency=0.05, rate_limit=10, rate_limit_window=0.5) as srv:
        spec = gsm8k_spec(tmp_path, srv, "anthropic", limit=24, run={"concurrency": 16})
        provider = make_provider(spec.model, spec.base_dir)
        provider.check_ready()
        executor = LocalExecutor(provider, RetryPolicy(max_retries=20), 16)
        result = gradetrail.run_eval(spec, results_root=tmp_path / "r", executor=executor)
        stats = srv.settled_stats(24)
    assert result.manifest.counts == {"scored": 24}
    seen = executor.throttle_stats()
    assert seen is not None
    assert seen.throttled == stats["rate_limited"] > 0
    assert stats["total"] == 24 + stats["rate_limited"]
    assert seen.decreases >= 1 and seen.lowest < 16
