"""Crash-safe resume and interrupts on a real ``gradetrail run`` process: kill -9 then
re-run, Ctrl-C (SIGINT) once and twice, SIGTERM. The application records every call it
receives, so "nothing paid for is requested again" is checked on the serving side."""

from __future__ import annotations

import json
import os
import signal
from collections import Counter
from pathlib import Path

import pytest
import yaml
from paths import GSM8K_DATA
from protocol_server import running_server
from run_support import (
    app_env,
    count_lines,
    only_run_dir,
    read_calls,
    run_to_end,
    send,
    start_run,
    wait_until,
    write_eval,
)

import gradetrail
from gradetrail.cache import ResponseCache

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
    proc = start_run(spec, cache, results, env)
    wait_until(lambda: results.exists() and any(results.iterdir()), what="run directory", proc=proc)
    run_dir = only_run_dir(results)
    wait_until(lambda: count_lines(run_dir / "results.jsonl") >= 40, what="40 rows", proc=proc)
    send(proc, signal.SIGKILL)
    proc.wait(timeout=10)

    assert json.loads((run_dir / "manifest.json").read_text())["status"] == "running"
    first_calls = read_calls(calls)
    cached = _keys_cached(spec, cache)
    assert 40 <= len(cached) < samples * epochs
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
    with running_server(latency=0.1) as srv:
        spec = _http_spec(tmp_path / "eval", srv.openai_base_url, samples, epochs)
        proc = start_run(spec, cache, results, dict(os.environ))
        wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc)
        run_dir = only_run_dir(results)
        wait_until(lambda: count_lines(run_dir / "results.jsonl") >= 50, proc=proc)
        send(proc, signal.SIGKILL)
        proc.wait(timeout=10)
        # requests the killed process had sent may still be in the server: let them finish
        wait_until(lambda: srv.stats()["in_flight"] == 0, what="server idle")
        first = srv.stats()
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
    proc = start_run(spec, cache, results, app_env(calls, delay=0.4))
    wait_until(lambda: len(read_calls(calls)) >= 6, what="calls in flight", proc=proc)
    send(proc, signal.SIGINT)
    out, err = proc.communicate(timeout=20)

    assert proc.returncode == 130, err
    assert "SIGINT: starting no new samples" in err
    run_dir = only_run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["stop_signal"] == "SIGINT"
    rows = _rows(run_dir)
    made = read_calls(calls)
    assert 6 <= len(rows) < 40
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
    proc = start_run(spec, cache, results, app_env(calls, delay=30))
    wait_until(lambda: len(read_calls(calls)) >= 4, what="calls in flight", proc=proc)
    send(proc, signal.SIGINT)
    wait_until(lambda: "Ctrl-C again" in _peek_log(results), what="drain acknowledged", proc=proc)
    send(proc, signal.SIGINT)
    out, err = proc.communicate(timeout=10)

    assert proc.returncode == 130, err
    run_dir = only_run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["counts"] == {}
    assert (run_dir / "results.jsonl").read_bytes() == b""
    kinds = [e.get("kind") for e in map(json.loads, (run_dir / "log.jsonl").open())]
    assert kinds.count("drain") == 1 and kinds.count("abort") == 1


def _peek_log(results: Path) -> str:
    """The interrupt events logged so far (the drain message is logged before printing)."""
    try:
        run_dir = only_run_dir(results)
        text = (run_dir / "log.jsonl").read_text()
    except (FileNotFoundError, ValueError):
        return ""
    return "Ctrl-C again" if '"kind":"drain"' in text else ""


def test_sigterm_stops_at_once_and_exits_143(tmp_path: Path) -> None:
    """SIGTERM (CI timeouts) cancels at once, keeps the rows that landed, says so in the
    manifest and exits 143."""
    spec = write_eval(tmp_path / "eval", samples=12, concurrency=2)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    proc = start_run(spec, cache, results, app_env(calls, delay=0.2))
    wait_until(lambda: results.exists() and any(results.iterdir()), what="run directory", proc=proc)
    wait_until(
        lambda: count_lines(only_run_dir(results) / "results.jsonl") >= 2, what="rows", proc=proc
    )
    send(proc, signal.SIGTERM)
    out, err = proc.communicate(timeout=10)

    assert proc.returncode == 143, err
    run_dir = only_run_dir(results)
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "interrupted" and manifest["stop_signal"] == "SIGTERM"
    rows = _rows(run_dir)
    assert len(rows) >= 2 and manifest["counts"] == {"scored": len(rows)}
    ids = [(r["sample_id"], r["epoch"]) for r in rows]
    assert ids == sorted(ids, key=lambda k: int(k[0][1:])) and len(set(ids)) == len(ids)


def test_a_second_process_on_the_same_run_directory_is_refused(tmp_path: Path) -> None:
    """While a run writes its run directory, the same spec started again is refused
    before any call, naming the running pid."""
    spec = write_eval(tmp_path / "eval", samples=8, concurrency=2)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    # each call takes 3 s, so the first run is still going however slowly the second starts
    # on a loaded machine (it is killed at the end, so the delay costs no test time)
    first = start_run(spec, cache, results, app_env(calls, delay=3.0))
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
        first.wait(timeout=10)


def test_on_a_terminal_the_bar_shows_progress_and_ctrl_c_drains(tmp_path: Path) -> None:
    """In a pseudo-terminal: a rich bar with done/total, rate, ETA, cache hits, errors
    and cost; Ctrl-C prints what happens next above it, and the run exits 130."""
    import pty
    import select
    import time

    spec = write_eval(tmp_path / "eval", samples=30, concurrency=4)
    cache, results, calls = tmp_path / "cache.sqlite", tmp_path / "results", tmp_path / "c"
    master, slave = pty.openpty()
    env = {**app_env(calls, delay=0.2), "COLUMNS": "160"}
    proc = start_run(spec, cache, results, env, stdio=slave)
    os.close(slave)
    out = bytearray()

    def pump(seconds: float) -> None:
        end = time.monotonic() + seconds
        while time.monotonic() < end:
            ready, _, _ = select.select([master], [], [], 0.05)
            if ready:
                try:
                    out.extend(os.read(master, 65536))
                except OSError:  # the child closed the terminal
                    return

    try:
        deadline = time.monotonic() + 20
        while len(read_calls(calls)) < 8:  # keep reading: a full terminal blocks the run
            assert time.monotonic() < deadline and proc.poll() is None, out.decode()
            pump(0.05)
        pump(0.3)
        send(proc, signal.SIGINT)
        pump(3.0)
        assert proc.wait(timeout=10) == 130
    finally:
        os.close(master)
    text = out.decode(errors="replace")
    assert "/30" in text and "/s" in text and "eta" in text
    assert "cache hits 0" in text and "errors 0" in text and "cost n/a" in text
    assert "SIGINT: starting no new samples" in text
    assert "interrupted by SIGINT" in text
