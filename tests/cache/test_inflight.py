"""Never pay twice for one request: identical requests in flight in one run make one
call, and processes sharing a cache wait on each other's claims (a dead one's lapses)."""

from __future__ import annotations

import asyncio
import json
import os
import socket
import sqlite3
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from http_support import GSM8K_DATA
from loop_support import run_on_fake_time
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture
from run_support import app_env, read_calls, release, start_run, wait_until, write_eval

import gradetrail
from gradetrail.cache.claims import CLAIM_TTL_S, Claim
from gradetrail.cache.inflight import _POLL_FIRST_S, _POLL_MAX_S, InFlight, Shared
from gradetrail.cache.store import ResponseCache
from gradetrail.providers.base import Request, Response
from gradetrail.testing import FakeClock

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")


def _twice_each(tmp_path: Path, srv, concurrency: int, **run: object) -> gradetrail.EvalSpec:  # noqa: ANN001
    """8 GSM8K questions, each in the dataset twice under two ids, over HTTP."""
    rows = [json.loads(line) for line in (GSM8K_DATA / "test.jsonl").open()][:8]
    tmp_path.mkdir(parents=True, exist_ok=True)
    data = tmp_path / "twice.jsonl"
    with data.open("w") as f:
        for copy in ("a", "b"):
            for i, row in enumerate(rows):
                f.write(json.dumps({**row, "id": f"{copy}{i}"}) + "\n")
    spec = {
        "name": "twice",
        "dataset": {"path": str(data)},
        "prompt": "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {
            "provider": "openai_compatible",
            "name": "175b_verification",
            "base_url": srv.openai_base_url,
            "api_key_required": False,
        },
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"concurrency": concurrency, **run},
    }
    path = tmp_path / f"twice-{concurrency}.yaml"
    path.write_text(yaml.safe_dump(spec))
    return gradetrail.load_spec(path)


def test_identical_requests_in_flight_make_one_call(tmp_path: Path, srv) -> None:  # noqa: ANN001
    """At concurrency 16, 16 rows asking 8 distinct requests make 8 calls and 8 cache
    hits over the real SDK and HTTP, as at concurrency 1 (before: 16 calls, 0 hits)."""
    srv.configure(latency=0.2)
    by_concurrency = {}
    for concurrency in (16, 1):
        spec = _twice_each(tmp_path / str(concurrency), srv, concurrency)
        srv.reset(config=False)
        result = gradetrail.run_eval(
            spec, results_root=tmp_path / "results", cache_path=tmp_path / f"c{concurrency}.db"
        )
        by_concurrency[concurrency] = (srv.stats()["total"], result.manifest.cache_hits)
        rows = gradetrail.read_results(result.run_dir)
        assert [r["state"] for r in rows] == ["scored"] * 16
        assert [r["response"] for r in rows[:8]] == [r["response"] for r in rows[8:]]
    assert by_concurrency == {16: (8, 8), 1: (8, 8)}


def test_a_failed_call_is_made_again_by_its_twin(tmp_path: Path, srv) -> None:  # noqa: ANN001
    """Errors are never shared: when the first of two identical requests fails for good,
    the second makes its own call (as at concurrency 1) and its row has its own error."""
    srv.configure(latency=0.1, faults=[{"kind": "error", "status": 400}])
    spec = _twice_each(tmp_path, srv, 16, fail_fast=0)
    result = gradetrail.run_eval(
        spec, results_root=tmp_path / "results", cache_path=tmp_path / "c.db"
    )
    assert result.manifest.counts == {"provider_error": 16}
    assert srv.stats()["total"] == 16


def test_twins_wait_for_one_call_and_a_failed_call_passes_to_the_next(tmp_path: Path) -> None:
    """Three identical requests in flight: the first calls and the others wait for it
    (the future they wait on is made by the first of them); its call fails, so one of them
    calls in turn and the last is served that call's response, as at concurrency 1."""
    cache = ResponseCache(tmp_path / "c.db")
    inflight = InFlight(cache)
    made: list[int] = []

    async def main() -> list[object]:
        first_may_end = asyncio.Event()

        async def call() -> Response | None:
            made.append(len(made))
            if len(made) == 1:
                await first_may_end.wait()
                return None  # failed: errors are never shared
            return Response(text="ok")

        tasks = [asyncio.ensure_future(inflight.once("k", call, lambda r: r)) for _ in range(3)]
        for _ in range(5):
            await asyncio.sleep(0)  # the first claims and calls; the twins wait
        assert made == [0] and inflight._calls["k"] is not None
        first_may_end.set()
        return list(await asyncio.gather(*tasks))

    try:
        first, second, third = asyncio.run(main())
    finally:
        cache.close()
    assert made == [0, 1] and first is None
    assert second == Response(text="ok")
    assert isinstance(third, Shared) and third.source == "twin" and third.response == second
    assert inflight.twins == 1 and not inflight._calls


#: run as ``python -c``: ``gradetrail`` with the wall clock (``time.time``) moved by
#: ``GT_SKEW_S`` seconds, as on a host whose clock runs ahead; the monotonic clock is
#: left alone, as a skewed host's is
_SKEWED = (
    "import os, sys, time\n"
    "_real = time.time\n"
    "time.time = lambda: _real() + float(os.environ['GT_SKEW_S'])\n"
    "from gradetrail.cli import main\n"
    "sys.argv = ['gradetrail', *sys.argv[1:]]\n"
    "main()\n"
)


def _start_skewed(
    spec: Path, cache: Path, results: Path, env: dict, skew_s: float
) -> subprocess.Popen:
    """``gradetrail run --json`` in a child process whose wall clock is ``skew_s`` ahead."""
    cmd = [sys.executable, "-c", _SKEWED, "run", str(spec), "--cache", str(cache)]
    cmd += ["--results-root", str(results), "--json"]
    env = {**env, "GT_SKEW_S": str(skew_s), "PYTHONPATH": str(Path(gradetrail.__file__).parents[1])}
    return subprocess.Popen(
        cmd, cwd=spec.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def _two_runs(
    tmp_path: Path, samples: int, skew_s: float | None = None
) -> tuple[list[tuple[int, str, str]], Path]:
    """Two runs of one spec on one cache, overlapping on any machine: the first one's
    calls are held until the second has started (two processes started together can
    start a second apart on a loaded machine, longer than a whole run takes). With
    ``skew_s``, the second one's wall clock runs that many seconds ahead."""
    spec = write_eval(tmp_path / "eval", samples=samples, concurrency=8)
    calls = tmp_path / "calls.txt"
    env = app_env(calls, delay=0.1, hold_after=0)
    cache = tmp_path / "shared.sqlite"
    first = start_run(spec, cache, tmp_path / "results0", env, "--json")
    try:
        wait_until(lambda: len(read_calls(calls)) >= 8, what="first run's calls", proc=first)
        if skew_s is None:
            second = start_run(spec, cache, tmp_path / "results1", env, "--json")
        else:
            second = _start_skewed(spec, cache, tmp_path / "results1", env, skew_s)
        try:
            log = tmp_path / "results1"
            wait_until(lambda: _started(log), what="second run's start", proc=second)
            release(calls)
            outs = [(p.wait(60), *p.communicate()) for p in (first, second)]
        finally:
            if second.poll() is None:
                second.kill()
                second.communicate()
    finally:
        if first.poll() is None:
            first.kill()
            first.communicate()
    return outs, calls


def _started(results: Path) -> bool:
    """True once the run under ``results`` has logged its start."""
    return any('"run_start"' in log.read_text() for log in results.glob("*/log.jsonl"))


def test_two_processes_sharing_a_cache_pay_once(tmp_path: Path) -> None:
    """Two `gradetrail run` processes with one spec and cache but different results roots:
    every request reaches the application once (before: 60 of 60 twice), both runs are
    complete, and the one that waited says so."""
    outs, calls = _two_runs(tmp_path, 60)
    assert [code for code, _, _ in outs] == [0, 0], outs
    counts = read_calls(calls)
    assert len(counts) == 60 and set(counts.values()) == {1}
    manifests = [json.loads(out) for _, out, _ in outs]
    assert [m["counts"] for m in manifests] == [{"scored": 60}] * 2
    assert sum(m["cache_hits"] for m in manifests) == 60
    shared = [m["cache"]["shared"] for m in manifests]
    assert sum(shared) > 0
    warned = [err for _, _, err in outs if "came from another gradetrail process" in err]
    assert warned, [err for _, _, err in outs]


def _plant_claims(cache_path: Path, keys: list[str], host: str, pid: int, expires: float) -> None:
    ResponseCache(cache_path).close()  # create the schema
    db = sqlite3.connect(cache_path)
    db.executemany(
        "INSERT INTO claims VALUES (?, 'someone-else', ?, ?, ?)",
        [(k, host, pid, expires) for k in keys],
    )
    db.commit()
    db.close()


def _keys(spec_path: Path) -> list[str]:
    plan = gradetrail.plan_run(gradetrail.load_spec(spec_path))
    return [p.key for p in plan.prepared]


def test_claims_of_a_dead_process_lapse_at_once(tmp_path: Path) -> None:
    """Claims left by a killed process on this host (its pid is gone), whatever expiry
    they carry, are taken over at once: each request is made once, and the run says how
    many it took over."""
    spec = write_eval(tmp_path / "eval", samples=6, concurrency=4)
    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    cache = tmp_path / "c.sqlite"
    keys = _keys(spec)
    _plant_claims(cache, keys[:3], socket.gethostname(), dead.pid, time.time() + 3600)
    _plant_claims(cache, keys[3:], socket.gethostname(), dead.pid, time.time() - 1)
    calls = tmp_path / "calls.txt"
    proc = start_run(spec, cache, tmp_path / "results", app_env(calls), "--json")
    out, err = proc.communicate(timeout=60)
    assert proc.returncode == 0, err
    assert set(read_calls(calls).values()) == {1} and len(read_calls(calls)) == 6
    assert json.loads(out)["cache"]["took_over"] == 6
    assert "6 requests claimed by a gradetrail process that died or stopped renewing" in err


_HOLD_CLAIM = """
import sys
from gradetrail.cache.store import ResponseCache
cache = ResponseCache(sys.argv[1])
assert cache.claim(sys.argv[2]) is None
print("claimed", flush=True)
sys.stdin.read()  # held until the test closes stdin
cache.close()
"""


def _in_a_new_pid_namespace() -> list[str] | None:
    """``unshare`` arguments that run a command in a new PID namespace with its own
    ``/proc`` (a container's, with this host name), or None where that cannot be done."""
    command = ["unshare", "--pid", "--fork", "--mount-proc"]
    try:
        done = subprocess.run([*command, "true"], capture_output=True, timeout=30)
    except OSError:
        return None
    return command if done.returncode == 0 else None


def test_a_live_claim_from_another_pid_namespace_is_waited_on_not_taken_over(
    tmp_path: Path,
) -> None:
    """A process in another PID namespace on this host (a container sharing the cache
    and the host name) holds a claim: another process waits on it instead of taking it
    over. Its pid means another process, or none, here, so only its heartbeat can show
    it gone (before: its claims read as a dead process's and were paid again: with two
    runs of 2,000 requests, 1,426 of them twice, and the warning said the holder died)."""
    unshare = _in_a_new_pid_namespace()
    if unshare is None:
        pytest.skip("unshare --pid needs privileges this machine does not give")
    cache_path, key = tmp_path / "c.sqlite", "k" * 64
    env = {**os.environ, "PYTHONPATH": str(Path(gradetrail.__file__).parents[1])}
    holder = subprocess.Popen(
        [*unshare, sys.executable, "-c", _HOLD_CLAIM, str(cache_path), key],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
        env=env,
    )
    try:
        assert holder.stdout is not None and holder.stdout.readline() == "claimed\n"
        waiter = ResponseCache(cache_path)
        try:
            held = waiter.claim(key)
            assert isinstance(held, Claim), held
            assert waiter.took_over == 0
            assert waiter.holder(key) is not None
        finally:
            waiter.close()
    finally:
        assert holder.stdin is not None
        holder.stdin.close()
        assert holder.wait(timeout=30) == 0


def test_two_processes_with_a_two_minute_clock_skew_pay_once(tmp_path: Path) -> None:
    """The second process's wall clock runs 2 minutes ahead of the first's: it still
    waits on the first one's live claims instead of taking them over (before: it read
    their expiry as past and paid again, 16 of 24 twice). Liveness is the claim's renewal
    seen moving on the waiter's own monotonic clock, never two wall clocks compared."""
    outs, calls = _two_runs(tmp_path, 24, skew_s=120.0)
    assert [code for code, _, _ in outs] == [0, 0], outs
    counts = read_calls(calls)
    assert len(counts) == 24 and set(counts.values()) == {1}, counts
    manifests = [json.loads(out) for _, out, _ in outs]
    assert [m["cache"]["took_over"] for m in manifests] == [0, 0]
    assert not any("stopped renewing" in err for _, _, err in outs)


def _two_caches(tmp_path: Path) -> tuple[ResponseCache, ResponseCache, FakeClock]:
    """Two opens of one cache file as two processes would have them: the first holds its
    own clocks, the second a :class:`FakeClock` as its monotonic clock."""
    clock = FakeClock()
    path = tmp_path / "c.sqlite"
    holder = ResponseCache(path)
    waiter = ResponseCache(path, monotonic=clock.now)
    return holder, waiter, clock


@pytest.mark.parametrize("lands_at", [0.05, 1.0, 2.5])
def test_a_waiter_polls_for_another_process_response_backing_off_to_the_cap(
    tmp_path: Path, lands_at: float
) -> None:
    """A request another process has claimed is not made again: the waiter polls the
    cache after 0.02 s, then twice as long each time up to 0.5 s, and returns the other
    process's response at the first poll after it lands (on the fake-time loop, at exact
    times; the waiter's own clock stands still, so the claim never lapses)."""
    polls: list[float] = [_POLL_FIRST_S]  # the poll times the backoff makes
    step = _POLL_FIRST_S
    while polls[-1] < lands_at:
        step = min(step * 2, _POLL_MAX_S)
        polls.append(round(polls[-1] + step, 9))
    expected = min(t for t in polls if t >= lands_at)
    key = "k" * 64
    request = Request("replay", "m", None, None, ({"role": "user", "content": "q"},), {})
    holder, waiter, _ = _two_caches(tmp_path)
    inflight = InFlight(waiter)

    async def call() -> Response:
        raise AssertionError("the claimed request was made again")

    async def main() -> tuple[object, float]:
        loop = asyncio.get_running_loop()
        assert holder.claim(key) is None  # the other process is calling
        loop.call_at(lands_at, holder.put, key, request, Response("theirs"))
        return await inflight.once(key, call, lambda r: r), loop.time()

    try:
        result, at = run_on_fake_time(main())
    finally:
        holder.close()
        waiter.close()
    assert isinstance(result, Shared)
    assert (result.response, result.source) == (Response("theirs"), "other_process")
    assert abs(at - expected) < 1e-9, (at, expected, polls)
    assert inflight.waited == 1
    assert inflight.holders == {f"{holder.owner.split(':')[0]}:{os.getpid()}"}


def test_a_claim_whose_renewals_stop_lapses_after_the_ttl_on_the_waiters_clock(
    tmp_path: Path,
) -> None:
    """A live holder's claim that is not renewed for CLAIM_TTL_S, as the waiter measures
    it, lapses (its process hangs, or lives on another host and died); one renewal in
    between keeps it. The holder's wall clock, skewed by a year, changes nothing."""
    holder, waiter, clock = _two_caches(tmp_path)
    try:
        assert holder.claim("k") is None
        assert isinstance(waiter.claim("k"), Claim)
        clock.time += CLAIM_TTL_S - 1
        assert waiter.holder("k") is not None
        holder.wall = lambda: time.time() - 365 * 86400  # a holder a year behind
        holder.renew("k")
        assert waiter.holder("k") is not None  # the renewal is seen: the wait starts again
        clock.time += CLAIM_TTL_S - 1
        assert waiter.holder("k") is not None and waiter.took_over == 0
        clock.time += 2
        assert waiter.holder("k") is None
        assert waiter.claim("k") is None and waiter.took_over == 1
    finally:
        holder.close()
        waiter.close()


def test_a_claim_from_another_host_is_never_judged_by_its_expiry(tmp_path: Path) -> None:
    """A claim from another host whose expiry is long past (that host's clock runs
    behind) is waited on while it is fresh to this process, and lapses only after
    CLAIM_TTL_S without a renewal on this process's own clock."""
    cache_path = tmp_path / "c.sqlite"
    _plant_claims(cache_path, ["k"], "another-host", 1, time.time() - 3600)
    clock = FakeClock()
    waiter = ResponseCache(cache_path, monotonic=clock.now)
    try:
        assert isinstance(waiter.claim("k"), Claim)
        clock.time += CLAIM_TTL_S / 2
        assert isinstance(waiter.claim("k"), Claim)
        clock.time += CLAIM_TTL_S / 2
        assert waiter.claim("k") is None and waiter.took_over == 1
    finally:
        waiter.close()
