"""Crash-safe resume and interrupts on a real ``gradetrail run`` process: kill -9 then
re-run, Ctrl-C (SIGINT) once and twice, SIGTERM. The application records every call it
receives, so "nothing paid for is requested again" is checked on the serving side."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from collections.abc import Callable
from pathlib import Path

import pytest
import yaml
from paths import GSM8K_DATA
from protocol_server import running_server
from run_support import (
    app_env,
    count_lines,
    drain_logged,
    only_run_dir,
    read_calls,
    release,
    run_to_end,
    send,
    start_run,
    wait_until,
    write_eval,
)

import gradetrail
from gradetrail.cache.store import ResponseCache

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")


def _expected_order(samples: int, epochs: int) -> list[tuple[str, int]]:
    """Input order: sample by sample, each sample's epochs in order."""
    return [(f"q{i}", e) for i in range(samples) for e in range(1, epochs + 1)]


def _rows(run_dir: Path) -> list[dict]:
    return gradetrail.read_results(run_dir)


def _keys_cached(spec: Path, cache: Path) -> set[tuple[str, int]]:
    """(sample id, epoch) pairs whose response is in the cache, by their request keys."""
    plan = gradetrail.plan_run(gradetrail.load_spec(spec))
    c = ResponseCache(cache)
    try:
        return {(p.sample.id, p.epoch) for p in plan.prepared if c.get(p.key) is not None}
    finally:
        c.close()


def test_kill_9_then_rerun_finishes_without_requesting_cached_responses(tmp_path: Path) -> None:
    """After kill -9 mid-run, a re-run gives every (sample, epoch) once in input order and
    requests exactly the responses that were not cached, each once."""
    samples, epochs = 60, 2
    spec = write_eval(tmp_path / "eval", samples=samples, epochs=epochs, concurrency=8)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    env = app_env(calls, delay=0.05)
    # calls after the 48th are held, so the run is still going when the kill arrives
    proc = start_run(spec, cache, results, app_env(calls, delay=0.05, hold_after=48))
    wait_until(lambda: results.exists() and any(results.iterdir()), what="run directory", proc=proc)
    run_dir = only_run_dir(results)
    wait_until(lambda: count_lines(run_dir / "results.jsonl") >= 40, what="40 rows", proc=proc)
    send(proc, signal.SIGKILL)
    proc.wait(timeout=60)

    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    first_calls = read_calls(calls)
    cached = _keys_cached(spec, cache)
    assert 40 <= len(cached) <= 48
    assert set(first_calls) >= cached
    with open(run_dir / "results.jsonl", "ab") as f:  # a torn last line, as a crash leaves
        f.write(b'{"sample_id": "q3", "epoch": 2, "state": "sco')

    code, out, err = run_to_end(spec, cache, results, env)

    assert code == 0, err
    rows = _rows(run_dir)
    assert [(r["sample_id"], r["epoch"]) for r in rows] == _expected_order(samples, epochs)
    assert all(r["state"] == "scored" and r["score"] == 1.0 for r in rows)
    assert {(r["sample_id"], r["epoch"]) for r in rows if r["cached"]} == cached
    second_calls = read_calls(calls) - first_calls
    assert set(second_calls) == set(_expected_order(samples, epochs)) - cached
    assert max(second_calls.values()) == 1
    raw = (run_dir / "results.jsonl").read_bytes()
    assert raw.endswith(b"\n") and b'"sco\n' not in raw and raw.count(b"\n") == len(rows)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete"
    assert manifest["cache_hits"] == len(cached)
    assert manifest["counts"] == {"scored": samples * epochs}


def _http_spec(directory: Path, base_url: str, samples: int, epochs: int) -> Path:
    """The GSM8K example against an OpenAI-compatible server (the local protocol server)."""
    directory.mkdir(parents=True)
    spec = {
        "name": "gsm8k-http",
        "dataset": {"path": str(GSM8K_DATA / "test.jsonl"), "limit": samples},
        "prompt": 'Solve the math word problem. End with a line "A: <answer>".\n\n'
        "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {
            "provider": "openai_compatible",
            "name": "175b_verification",
            "base_url": base_url,
            "api_key_required": False,
        },
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"epochs": epochs, "concurrency": 8},
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_kill_9_against_the_http_server_then_rerun_pays_only_for_what_was_not_cached(
    tmp_path: Path,
) -> None:
    """kill -9 of a real run against the protocol server (100 ms latency), then a re-run:
    every (sample, epoch) once in input order, and the server receives exactly one request
    per response that was not cached, none for a cached one."""
    samples, epochs = 80, 2
    cache, results = tmp_path / "cache.sqlite", tmp_path / "results"
    # requests after the 60th are held: the run cannot finish before the kill, and once 8
    # (its concurrency) are held, every request it made has reached the server
    with running_server(latency=0.02, faults=[{"kind": "hold", "after": 60}]) as srv:
        spec = _http_spec(tmp_path / "eval", srv.openai_base_url, samples, epochs)
        proc = start_run(spec, cache, results, dict(os.environ))
        wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc)
        run_dir = only_run_dir(results)
        wait_until(lambda: count_lines(run_dir / "results.jsonl") >= 50, proc=proc)
        srv.wait_held(8)
        send(proc, signal.SIGKILL)
        proc.wait(timeout=60)
        first = srv.settled_stats(68)  # the held requests leave as their client is gone
        assert first["total"] == 68 and first["statuses"]["disconnected"] == 8
        srv.configure(faults=[])
        before = Counter(first["fingerprints"])
        cached = _keys_cached(spec, cache)
        per_sample_missing = Counter(sid for sid, e in _all_pairs(spec) if (sid, e) not in cached)

        code, _, err = run_to_end(spec, cache, results, dict(os.environ))
        after = srv.stats()

    assert code == 0, err
    assert 50 <= len(cached) < samples * epochs
    delta = Counter(after["fingerprints"]) - before
    assert after["total"] - first["total"] == samples * epochs - len(cached)
    assert sorted(delta.values()) == sorted(per_sample_missing.values())
    assert after["unmatched"] == 0
    rows = _rows(run_dir)
    pairs = [(r["sample_id"], r["epoch"]) for r in rows]
    assert pairs == _all_pairs(spec)
    assert {(r["sample_id"], r["epoch"]) for r in rows if r["cached"]} == cached
    assert all(r["state"] == "scored" for r in rows)
    by_sample: dict[str, set] = {}
    for r in rows:  # the server is deterministic: both epochs of a sample score alike
        by_sample.setdefault(r["sample_id"], set()).add(r["score"])
    assert all(len(v) == 1 for v in by_sample.values())
    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "complete"


def _all_pairs(spec: Path) -> list[tuple[str, int]]:
    """Every (sample id, epoch) of the spec in input order."""
    plan = gradetrail.plan_run(gradetrail.load_spec(spec))
    return sorted(
        ((p.sample.id, p.epoch) for p in plan.prepared),
        key=lambda k: (int(k[0]), k[1]),
    )


def test_sigint_lets_in_flight_rows_land_and_exits_130(tmp_path: Path) -> None:
    """Ctrl-C: no new call starts, every call already made lands as a row, the manifest
    says interrupted (SIGINT) and the exit code is 130."""
    spec = write_eval(tmp_path / "eval", samples=40, concurrency=4)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    # 8 calls answered, then 4 (the concurrency) held in flight until the drain is logged
    proc = start_run(spec, cache, results, app_env(calls, delay=0.05, hold_after=8))
    wait_until(lambda: sum(read_calls(calls).values()) >= 12, what="calls in flight", proc=proc)
    send(proc, signal.SIGINT)
    wait_until(lambda: drain_logged(only_run_dir(results)), what="drain", proc=proc)
    release(calls)
    out, err = proc.communicate(timeout=60)

    assert proc.returncode == 130, err
    assert "SIGINT: starting no new samples" in err
    run_dir = only_run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["stop_signal"] == "SIGINT"
    rows = _rows(run_dir)
    made = read_calls(calls)
    assert len(rows) == 12 and sum(made.values()) == 12  # no call started after Ctrl-C
    assert {(r["sample_id"], r["epoch"]) for r in rows} == set(made)  # in-flight rows landed
    assert [r["sample_id"] for r in rows] == [f"q{i}" for i in range(40)][: len(rows)]
    assert manifest["counts"] == {"scored": len(rows)}
    assert len(gradetrail.read_samples(run_dir)) == len(rows)
    assert "interrupted by SIGINT" in out
    events = [json.loads(line)["event"] for line in (run_dir / "log.jsonl").open()]
    assert events.count("provider_call") == len(rows)
    assert "interrupt" in events and events[-1] == "run_end"

    code, _, err = run_to_end(spec, cache, results, app_env(calls))
    assert code == 0, err
    assert len(_rows(run_dir)) == 40
    assert max(read_calls(calls).values()) == 1  # the re-run asked only for the rest


def test_second_sigint_stops_at_once(tmp_path: Path) -> None:
    """A second Ctrl-C cancels the calls in flight: the run ends in well under their
    latency, exit 130, manifest interrupted, the results file intact."""
    spec = write_eval(tmp_path / "eval", samples=8, concurrency=4)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    proc = start_run(spec, cache, results, app_env(calls, hold_after=0))  # every call held
    try:
        wait_until(lambda: len(read_calls(calls)) >= 4, what="calls in flight", proc=proc)
        send(proc, signal.SIGINT)
        wait_until(lambda: drain_logged(only_run_dir(results)), what="drain", proc=proc)
        send(proc, signal.SIGINT)
        out, err = proc.communicate(timeout=60)  # a hang guard: the held calls never end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 130, err
    run_dir = only_run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["counts"] == {}
    assert (run_dir / "results.jsonl").read_bytes() == b""
    kinds = [e.get("kind") for e in map(json.loads, (run_dir / "log.jsonl").open())]
    assert kinds.count("drain") == 1 and kinds.count("abort") == 1


def test_sigterm_stops_at_once_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM (CI timeouts) cancels at once, keeps the rows that landed, says so in the
    manifest and exits 143."""
    spec = write_eval(tmp_path / "eval", samples=12, concurrency=2)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    # calls after the 4th are held: the run is still going when SIGTERM arrives
    proc = start_run(spec, cache, results, app_env(calls, delay=0.05, hold_after=4))
    try:
        wait_until(lambda: results.exists() and any(results.iterdir()), what="dir", proc=proc)
        wait_until(
            lambda: count_lines(only_run_dir(results) / "results.jsonl") >= 2,
            what="rows",
            proc=proc,
        )
        send(proc, signal.SIGTERM)
        out, err = proc.communicate(timeout=60)  # a hang guard: the held calls never end
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()

    assert proc.returncode == 143, err
    run_dir = only_run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["stop_signal"] == "SIGTERM"
    rows = _rows(run_dir)
    assert 2 <= len(rows) <= 4 and manifest["counts"] == {"scored": len(rows)}
    ids = [(r["sample_id"], r["epoch"]) for r in rows]
    assert ids == sorted(ids, key=lambda k: int(k[0][1:])) and len(set(ids)) == len(ids)


def test_a_second_process_on_the_same_run_directory_is_refused(tmp_path: Path) -> None:
    """While a run writes its run directory, the same spec started again is refused
    before any call, naming the running pid."""
    spec = write_eval(tmp_path / "eval", samples=8, concurrency=2)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    # every call of the first run is held, so it is still going however slowly the second
    # starts on a loaded machine (it is killed at the end)
    first = start_run(spec, cache, results, app_env(calls, hold_after=0))
    try:
        wait_until(lambda: len(read_calls(calls)) >= 1, what="first run calling", proc=first)
        before = sum(read_calls(calls).values())
        code, _, err = run_to_end(spec, cache, results, app_env(tmp_path / "other"))
        assert code == 1
        assert f"another gradetrail run (pid {first.pid}) is writing this run directory" in err
        assert read_calls(tmp_path / "other") == Counter()
        assert sum(read_calls(calls).values()) >= before
    finally:
        send(first, signal.SIGKILL)
        first.communicate(timeout=60)


def test_on_a_terminal_the_bar_shows_progress_and_ctrl_c_drains(tmp_path: Path) -> None:
    """In a pseudo-terminal: a rich bar with done/total, rate, ETA, cache hits, errors
    and cost; Ctrl-C prints what happens next above it, and the run exits 130."""
    import pty
    import select
    import time

    spec = write_eval(tmp_path / "eval", samples=30, concurrency=4)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    master, slave = pty.openpty()
    # 8 calls answered, the next 4 held until Ctrl-C is acknowledged: the run is under way
    # when the signal comes, however loaded the machine
    env = {**app_env(calls, delay=0.05, hold_after=8), "COLUMNS": "160"}
    proc = start_run(spec, cache, results, env, stdio=slave)
    os.close(slave)
    out = bytearray()

    def pump_until(done, what: str, timeout: float = 60.0) -> None:  # noqa: ANN001
        """Read the terminal (a full one blocks the run) until ``done()``; fail after
        ``timeout`` seconds (a hang guard) or when the child closes the terminal first."""
        deadline = time.monotonic() + timeout
        while not done():
            assert time.monotonic() < deadline, f"no {what}: {out.decode(errors='replace')}"
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    out.extend(os.read(master, 65536))
                except OSError:  # the child closed the terminal
                    assert done(), f"exited before {what}: {out.decode(errors='replace')}"

    def shown(*parts: str) -> Callable[[], bool]:
        return lambda: all(p in out.decode(errors="replace") for p in parts)

    def closed() -> bool:
        try:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                data = os.read(master, 65536)
                out.extend(data)
                return not data
        except OSError:
            return True
        return False

    try:
        pump_until(lambda: sum(read_calls(calls).values()) >= 12, "calls in flight")
        pump_until(shown("/30", "/s", "eta", "cache hits 0", "errors 0"), "progress bar")
        send(proc, signal.SIGINT)
        pump_until(shown("SIGINT: starting no new samples"), "drain message")
        release(calls)
        deadline = time.monotonic() + 60
        while not closed():
            assert time.monotonic() < deadline, out.decode(errors="replace")
        assert proc.wait(timeout=60) == 130
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        os.close(master)
    text = out.decode(errors="replace")
    assert "/30" in text and "/s" in text and "eta" in text
    assert "cache hits 0" in text and "errors 0" in text and "cost n/a" in text
    assert "SIGINT: starting no new samples" in text
    assert "interrupted by SIGINT" in text


@pytest.mark.parametrize("waiting_in", ["rate-cap", "backoff"])
def test_a_first_ctrl_c_sends_nothing_that_waits_for_admission(
    tmp_path: Path, waiting_in: str
) -> None:
    """Ctrl-C while requests wait in the rate limiter (6 a minute: one admitted every
    10 s) or in a retry's backoff: none of them is sent after it, the in-flight one lands
    and the run ends interrupted at once (before: the waiting requests were sent one by
    one as the limiter admitted them, 37-269 s after Ctrl-C)."""
    run = {"requests_per_minute": 6} if waiting_in == "rate-cap" else {"max_retries": 8}
    spec = write_eval(tmp_path / "eval", samples=8, concurrency=8, run=run)
    if waiting_in == "backoff":  # every call fails with a transient 503: each one backs off
        (spec.parent / "slow_app.py").write_text(_FAILING_APP)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    proc = start_run(spec, cache, results, app_env(calls, delay=0.05, hold_after=1))
    wait_until(lambda: sum(read_calls(calls).values()) >= 1, what="first call", proc=proc)
    if waiting_in == "backoff":
        release(calls)
        wait_until(lambda: _retried(results), what="a retry's backoff", proc=proc)
    send(proc, signal.SIGINT)
    wait_until(lambda: drain_logged(only_run_dir(results)), what="drain", proc=proc)
    # counted once the drain is logged, not before the signal: a call the run started in
    # between (a backoff that ended) was started before Ctrl-C took effect; the app
    # records a call as it starts, on the run's own loop, so none after this is legitimate
    made = sum(read_calls(calls).values())
    release(calls)
    try:
        out, err = proc.communicate(timeout=30)  # a hang guard: one admission per 10 s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 130, err
    assert sum(read_calls(calls).values()) == made  # nothing sent after Ctrl-C
    manifest = json.loads((only_run_dir(results) / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"


_FAILING_APP = """\
import os

from gradetrail.errors import ServerError


async def answer(request):
    with open(os.environ["GT_CALLS"], "a") as f:
        f.write(f"{request.sample_id} {request.epoch}\\n")
    raise ServerError("overloaded", status=503)
"""


def _retried(results: Path) -> bool:
    """True once the run under ``results`` has logged a failed attempt it will retry."""
    try:
        return '"retry_in_s"' in (only_run_dir(results) / "log.jsonl").read_text()
    except (AssertionError, FileNotFoundError, StopIteration, ValueError):
        return False
