"""``kill -9`` a batched run at each step, then run it again: every request is submitted
to the batch API exactly once (counted by the protocol server) and every row is scored.

The run is a real child process (``gradetrail.run_eval`` with a batch), killed with
SIGKILL once the server shows it inside the step: uploading the file (the server holds
its answer), creating the batch (created, never acknowledged: the re-run must find it at
the API), polling (in progress), reading the results (held), and after collecting."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
from http_support import SECRET_KEY, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.engine.batching import BatchOptions
from gradetrail.rundir.batches import BatchLedger
from gradetrail.testing import FakeClock

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

ROOT = Path(__file__).resolve().parents[2]
CHILD = textwrap.dedent(
    """
    import sys
    import gradetrail
    from gradetrail.engine.batching import BatchOptions

    spec = gradetrail.load_spec(sys.argv[1])
    gradetrail.run_eval(
        spec,
        results_root=sys.argv[2],
        cache_path=sys.argv[3],
        batch=BatchOptions(max_requests=4, first_poll_s=0.05, max_poll_s=0.05),
    )
    """
)
ROWS = 10


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)
    monkeypatch.setenv("OPENAI_API_KEY", SECRET_KEY)


def _ledger_has(tmp_path: Path, event: str) -> Callable[[Any], bool]:
    def seen(_: Any) -> bool:
        return any(
            json.loads(line).get("event") == event
            for path in (tmp_path / "results").glob("*/batches.jsonl")
            for line in path.read_text().splitlines()
            if line.strip()
        )

    return seen


#: moment -> (server settings while the child runs, when to kill it)
MOMENTS: dict[str, tuple[dict[str, Any], Callable[[Path], Callable[[Any], bool]]]] = {
    "upload": ({"hang": "upload"}, lambda _: lambda s: s["files"] >= 1),
    "create": ({"hang": "create"}, lambda _: lambda s: s["created"] >= 1),
    "polling": ({"polls": 10**6}, lambda _: lambda s: s["retrieves"] >= 3),
    "results": ({"hang": "results", "polls": 0}, lambda _: lambda s: _ended(s)),
    "scoring": ({"polls": 0}, lambda tmp: _ledger_has(tmp, "collected")),
}


def _ended(stats: dict[str, Any]) -> bool:
    return any(state != "in_progress" for state in stats["states"].values())


@pytest.mark.parametrize(
    ("protocol", "moment"),
    [("openai", m) for m in MOMENTS] + [("anthropic", m) for m in MOMENTS if m != "upload"],
)
def test_kill_9_then_rerun_submits_every_request_exactly_once(
    srv, tmp_path: Path, protocol: str, moment: str
) -> None:
    settings, kill_when = MOMENTS[moment]
    spec = gsm8k_spec(tmp_path / "spec", srv, protocol, limit=ROWS)
    srv.batches(**settings)
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    child = subprocess.Popen(
        [
            sys.executable,
            "-c",
            CHILD,
            spec.source,
            str(tmp_path / "results"),
            str(tmp_path / "cache.sqlite"),
        ],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait(srv, kill_when(tmp_path), child)
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        assert child.stderr is not None
        child.stderr.close()
    srv.batches(hang=None, polls=0)
    result = gradetrail.run_eval(
        spec,
        results_root=tmp_path / "results",
        cache_path=tmp_path / "cache.sqlite",
        batch=BatchOptions(max_requests=4, sleep=FakeClock().sleep),
    )
    assert result.manifest.status == "complete"
    assert result.manifest.counts == {"scored": ROWS}
    counts = srv.batches()
    assert counts["repeated"] == 0, counts["custom_ids"]
    assert counts["requests"] == ROWS and len(counts["custom_ids"]) == ROWS
    ledger = BatchLedger.read(result.run_dir)
    assert not ledger.open_submissions()


def _wait(srv: Any, done: Callable[[dict[str, Any]], bool], child: subprocess.Popen) -> None:
    """Until ``done(batch stats)``; a hang guard of 60 s (never a timing assert)."""
    deadline = time.monotonic() + 60
    while not done(stats := srv.batches()):
        if child.poll() is not None:
            assert child.stderr is not None
            raise AssertionError(f"the run ended first: {child.stderr.read().decode()[-2000:]}")
        if time.monotonic() > deadline:
            raise TimeoutError(f"never reached the moment; server: {stats}")
        time.sleep(0.02)


def test_ctrl_c_while_waiting_leaves_the_batches_running_and_says_how_to_collect(
    srv, tmp_path: Path
) -> None:
    """SIGINT to ``gradetrail run --batch`` while it waits (its poll interval is 15 s):
    it stops waiting at once, exits 130 naming the batches and how to collect them; the
    same command then collects them without sending anything again."""
    spec = gsm8k_spec(tmp_path / "spec", srv, "anthropic", limit=3)
    srv.batches(polls=10**6)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "GRADETRAIL_CACHE": str(tmp_path / "c.sqlite")}
    argv = [sys.executable, "-m", "gradetrail", "run", spec.source, "--batch"]
    argv += ["--results-root", str(tmp_path / "results")]
    child = subprocess.Popen(argv, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    try:
        _wait(srv, lambda s: s["retrieves"] >= 1, child)
        child.send_signal(signal.SIGINT)
        _, err = child.communicate(timeout=60)
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    text = err.decode()
    assert child.returncode == 130, text
    assert "1 batches are still running" in text and "run the same command again" in text
    srv.batches(polls=0)
    again = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert again.returncode == 0, again.stderr.decode()
    counts = srv.batches()
    assert counts["created"] == 1 and counts["repeated"] == 0


def test_kill_9_while_the_judge_batch_is_created_then_rerun(srv, tmp_path: Path) -> None:
    """Answers batched through OpenAI, judges through Anthropic: killed as the judge
    batch is created (never acknowledged), the re-run finds it and sends nothing twice."""
    import yaml

    root = tmp_path / "judged"
    root.mkdir()
    (root / "judge.j2").write_text("Grade this response.\nResponse: {{ response }}\n")
    data = yaml.safe_load(
        Path(gsm8k_spec(tmp_path / "spec", srv, "openai", limit=ROWS).source).read_text()
    )
    data["scorer"] = {
        "type": "judge",
        "file": "judge.j2",
        "model": {
            "provider": "anthropic",
            "name": "175b_verification",
            "base_url": srv.anthropic_base_url,
        },
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(data))
    srv.configure(script=[{"contains": "Grade this response", "reply": "GRADE: C"}])
    srv.batches(polls=0, hang="create:anthropic")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    argv = [sys.executable, "-c", CHILD, str(root / "spec.yaml"), str(tmp_path / "results")]
    child = subprocess.Popen(
        [*argv, str(tmp_path / "cache.sqlite")],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
    )
    try:
        _wait(srv, lambda s: s["created"] >= 1 + -(-ROWS // 4), child)  # answers, then judges
    finally:
        if child.poll() is None:
            child.send_signal(signal.SIGKILL)
        child.wait(timeout=60)
        assert child.stderr is not None
        child.stderr.close()
    srv.batches(hang=None)
    result = gradetrail.run_eval(
        gradetrail.load_spec(root / "spec.yaml"),
        results_root=tmp_path / "results",
        cache_path=tmp_path / "cache.sqlite",
        batch=BatchOptions(max_requests=4, sleep=FakeClock().sleep),
    )
    assert result.manifest.counts == {"scored": ROWS} and result.manifest.score.mean == 1.0
    counts = srv.batches()
    assert counts["repeated"] == 0 and counts["requests"] == 2 * ROWS
