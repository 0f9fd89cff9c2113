"""The structured run log (log.jsonl): every provider call (each retried attempt too)
with its fields, errors as warnings, judge calls and provider events, rotation, and
-v on stderr."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from paths import GSM8K_DATA
from protocol_server import running_server
from run_support import app_env, write_eval

import gradetrail
from gradetrail.rundir import runlog
from gradetrail.rundir.layout import RunDir

CALL_FIELDS = {
    "ts",
    "level",
    "event",
    "sample_id",
    "epoch",
    "model",
    "served_model",
    "latency_ms",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
    "cached",
    "attempt",
    "outcome",
}


@pytest.fixture
def env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The recording application's environment; q1 epoch 1 fails."""
    for key, value in app_env(tmp_path / "calls", fail={"q1": [1]}).items():
        if key.startswith("GT_"):
            monkeypatch.setenv(key, value)


def _lines(path: Path) -> list[dict]:
    return [json.loads(line) for line in path.read_text().splitlines()]


def _run(spec: Path, tmp_path: Path) -> Path:
    return gradetrail.run_eval(gradetrail.load_spec(spec), results_root=tmp_path / "r").run_dir


def test_every_provider_call_is_logged_with_its_fields(tmp_path: Path, env: None) -> None:
    """One provider_call line per (sample, epoch), with model, latency_ms, tokens,
    cached, attempt and outcome; a failed call is a warning naming the error."""
    run_dir = _run(write_eval(tmp_path / "eval", samples=3, epochs=2), tmp_path)
    lines = _lines(run_dir / "log.jsonl")
    assert lines[0]["event"] == "run_start" and lines[0]["rows"] == 6
    assert lines[-1]["event"] == "run_end" and lines[-1]["status"] == "complete"
    calls = [line for line in lines if line["event"] == "provider_call"]
    assert sorted((c["sample_id"], c["epoch"]) for c in calls) == [
        (f"q{i}", e) for i in range(3) for e in (1, 2)
    ]
    ok = [c for c in calls if c["outcome"] == "ok"]
    assert all(set(c) == CALL_FIELDS for c in ok)
    assert all(c["model"] == "slow" and c["cached"] is False and c["attempt"] == 1 for c in ok)
    assert all(c["level"] == "info" and c["latency_ms"] >= 0 for c in ok)
    (failed,) = [c for c in calls if c["outcome"] == "error"]
    assert failed["sample_id"] == "q1" and failed["epoch"] == 1
    assert failed["level"] == "warning" and failed["error"] == "BadRequest"
    assert "application failed on purpose" in failed["message"]
    assert failed["attempt"] == 1 and failed["cached"] is False
    for line in calls:  # CallEvent is the one definition of a call line, in its order
        fields = {k: v for k, v in line.items() if k not in ("ts", "level", "event")}
        assert runlog.CallEvent.model_validate(fields).model_dump(exclude_none=True) == {
            k: v for k, v in fields.items() if v is not None
        }
        assert list(fields)[:12] == list(runlog.CallEvent.model_fields)[:12]


def test_cache_hits_are_logged_as_cached_with_no_attempt(tmp_path: Path, env: None) -> None:
    """On a re-run, each cached response is a provider_call line with cached true and
    attempt 0; the failed call (never cached) is attempted again."""
    spec = write_eval(tmp_path / "eval", samples=3)
    _run(spec, tmp_path)
    run_dir = _run(spec, tmp_path)
    calls = [c for c in _lines(run_dir / "log.jsonl") if c["event"] == "provider_call"]
    assert {(c["sample_id"], c["cached"], c["attempt"]) for c in calls} == {
        ("q0", True, 0),
        ("q1", False, 1),
        ("q2", True, 0),
    }


def test_each_run_starts_a_fresh_log_and_keeps_three_older(tmp_path: Path, env: None) -> None:
    """log.jsonl holds the latest invocation; log.1 to log.3 the ones before it."""
    spec = write_eval(tmp_path / "eval", samples=1)
    for _ in range(5):
        run_dir = _run(spec, tmp_path)
    names = sorted(p.name for p in run_dir.iterdir() if p.name.startswith("log"))
    assert names == ["log.1.jsonl", "log.2.jsonl", "log.3.jsonl", "log.jsonl"]
    starts = [_lines(run_dir / n)[0]["ts"] for n in ("log.3.jsonl", "log.2.jsonl", "log.1.jsonl")]
    assert starts == sorted(starts) and starts[-1] < _lines(run_dir / "log.jsonl")[0]["ts"]


def test_judge_calls_are_logged_with_their_turn_and_provider_events_followed(
    tmp_path: Path,
) -> None:
    """The log is passed to what logs (no global "current" log): a judge_call line, an
    agent turn's number, and a provider's events, those kept before the log opened first
    and none after it closed."""
    from gradetrail._util.events import Events

    assert not hasattr(runlog, "current")
    events = Events()
    events.emit("missing_usage", provider="openai", model="m")
    with RunDir.create(tmp_path / "run") as run_dir, runlog.RunLog(run_dir) as log:
        log.follow(events)
        events.emit("function_held_loop", "warning", function="f", held_s=1.5)
        log.call(
            "judge",
            sample_id="7",
            epoch=2,
            model="judge-model",
            cached=False,
            attempt=3,
            outcome="ok",
            latency_ms=812.34,
            input_tokens=350,
            output_tokens=12,
            turn=4,
        )
    events.emit("after_close")
    kept, held, line = _lines(tmp_path / "run" / "log.jsonl")
    assert (kept["event"], kept["level"], kept["model"]) == ("missing_usage", "info", "m")
    assert (held["event"], held["level"], held["held_s"]) == ("function_held_loop", "warning", 1.5)
    assert line["event"] == "judge_call" and line["latency_ms"] == 812.3 and line["turn"] == 4
    assert (line["model"], line["attempt"], line["input_tokens"]) == ("judge-model", 3, 350)


def test_control_characters_from_data_are_escaped_in_the_log(tmp_path: Path) -> None:
    """Dataset and provider text in a log line is JSON-escaped: no raw escape byte, so
    echoing the log to a terminal cannot drive it."""
    with RunDir.create(tmp_path / "run") as run_dir, runlog.RunLog(run_dir) as log:
        log.call(
            "provider",
            sample_id="evil\x1b[2J\x9b1m",
            epoch=1,
            model="m",
            cached=False,
            attempt=1,
            outcome="error",
            latency_ms=1.0,
            error="BadRequest",
            message="\x1b]52;c;cGF5bG9hZA==\x07" + "x" * 600,
        )
    raw = (tmp_path / "run" / "log.jsonl").read_bytes()
    assert b"\x1b" not in raw and b"\x9b" not in raw and b"\xc2\x9b" not in raw
    line = json.loads(raw)
    assert line["sample_id"] == "evil\x1b[2J\x9b1m"
    assert len(line["message"]) == 500


def test_verbose_shows_the_log_on_stderr(tmp_path: Path, env: None, cli) -> None:  # noqa: ANN001
    """gradetrail run -v shows each event on stderr (structlog's console rendering) as
    well as writing it to log.jsonl; without -v stderr has none."""
    spec = write_eval(tmp_path / "eval", samples=2)
    out = cli("run", str(spec), "-v")
    assert out.exit_code == 0, out.stderr
    # by sample, not by time: q1's error is logged as it happens, q0's success once its
    # response is committed with the rest of its event-loop pass (the cache's group commit)
    shown = sorted(
        (x for x in out.stderr.splitlines() if "provider_call" in x),
        key=lambda x: x.split("sample_id=")[1],
    )
    assert len(shown) == 2
    assert all("cached=False" in x and "model=slow" in x for x in shown)
    assert "[info" in shown[0] and "sample_id=q0" in shown[0]
    assert "[warning" in shown[1] and "error=BadRequest" in shown[1] and "sample_id=q1" in shown[1]
    assert any("run_start" in x for x in out.stderr.splitlines())
    quiet = cli("run", str(spec))
    assert "provider_call" not in quiet.stderr


def test_each_retried_attempt_against_the_http_server_is_a_line(tmp_path: Path) -> None:
    """Two 429s then an answer from the protocol server are three provider_call lines:
    attempts 1 and 2 as RateLimited warnings with status 429 and their backoff, then
    attempt 3 ok."""
    with running_server(latency=0.0) as srv:
        srv.configure(faults=[{"kind": "rate_limit", "first": 2, "retry_after": 0}])
        spec = tmp_path / "spec.yaml"
        spec.write_text(
            yaml.safe_dump(
                {
                    "name": "gsm8k-http",
                    "dataset": {"path": str(GSM8K_DATA / "test.jsonl"), "limit": 1},
                    "prompt": "Q: {{ question }}",
                    "target": "{{ answer.split('####')[-1] | trim }}",
                    "model": {
                        "provider": "openai_compatible",
                        "name": "175b_verification",
                        "base_url": srv.openai_base_url,
                        "api_key_required": False,
                    },
                    "scorer": {"type": "numeric"},
                }
            )
        )
        run_dir = _run(spec, tmp_path)
        assert srv.stats()["statuses"] == {"429": 2, "200": 1}
    calls = [c for c in _lines(run_dir / "log.jsonl") if c["event"] == "provider_call"]
    assert [(c["attempt"], c["outcome"], c.get("error"), c.get("status")) for c in calls] == [
        (1, "error", "RateLimited", 429),
        (2, "error", "RateLimited", 429),
        (3, "ok", None, None),
    ]
    assert [c.get("retry_in_s") for c in calls] == [0.0, 0.0, None]
    assert all(c["latency_ms"] >= 0 and c["sample_id"] == "1" for c in calls)
    assert calls[2]["output_tokens"] > 0 and calls[2]["served_model"] == "175b_verification"
