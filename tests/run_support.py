"""Helpers for tests that run ``gradetrail run`` as a real process: an eval directory
with a small arithmetic dataset and a ``python``-provider application that records
every call it receives (the "server side" count), and process helpers.

The application (``slow_app.answer``) is an async function that appends
``"<sample_id> <epoch>"`` to the file named by ``GT_CALLS`` when a call arrives, sleeps
``GT_DELAY`` seconds, and answers ``A: <answer>``; with ``GT_WRONG_EPOCHS`` set (a JSON
object sample id -> list of epochs) it answers ``A: -1`` on those epochs, and with
``GT_FAIL_EPOCHS`` (same shape) it raises, which the run records as a provider_error.
With ``GT_HOLD_AFTER=N`` every call after the N-th (counted in the ``GT_CALLS`` file)
waits until the file ``GT_CALLS + ".release"`` exists (:func:`release`): a test that
stops a run mid-way holds it there, so the run cannot finish before the signal however
fast or slow the machine is, and the test releases the calls when it wants them to land.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from collections import Counter
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]

APP_SOURCE = """\
import asyncio
import json
import os


async def answer(request):
    calls = os.environ["GT_CALLS"]
    with open(calls, "a") as f:
        f.write(f"{request.sample_id} {request.epoch}\\n")
    hold_after = os.environ.get("GT_HOLD_AFTER")
    if hold_after is not None:
        with open(calls) as f:
            made = sum(1 for _ in f)
        while made > int(hold_after) and not os.path.exists(calls + ".release"):
            await asyncio.sleep(0.01)
    await asyncio.sleep(float(os.environ.get("GT_DELAY", "0")))
    failing = json.loads(os.environ.get("GT_FAIL_EPOCHS", "{}"))
    if request.epoch in failing.get(request.sample_id, []):
        raise RuntimeError("application failed on purpose")
    wrong = json.loads(os.environ.get("GT_WRONG_EPOCHS", "{}"))
    if request.epoch in wrong.get(request.sample_id, []):
        return "A: -1"
    return "A: " + request.prompt.rsplit("=", 1)[1].strip()
"""


def write_eval(
    directory: Path,
    *,
    samples: int = 20,
    epochs: int = 1,
    concurrency: int = 4,
    run: dict | None = None,
    ids: list[str] | None = None,
) -> Path:
    """Write ``data.jsonl`` (sample i asks ``i+i`` and expects ``2i``), ``slow_app.py``
    and ``spec.yaml`` into ``directory``; return the spec's path."""
    directory.mkdir(parents=True, exist_ok=True)
    ids = ids or [f"q{i}" for i in range(samples)]
    rows = [{"id": sid, "q": f"{i}+{i}", "a": 2 * i} for i, sid in enumerate(ids)]
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "slow_app.py").write_text(APP_SOURCE)
    spec = {
        "name": "arith",
        "dataset": {"path": "data.jsonl"},
        "prompt": "What is {{ q }}? = {{ a }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "slow", "function": "slow_app:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"epochs": epochs, "concurrency": concurrency, **(run or {})},
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def app_env(
    calls: Path,
    delay: float = 0.0,
    wrong: dict | None = None,
    fail: dict | None = None,
    hold_after: int | None = None,
) -> dict[str, str]:
    """Environment for the application: where it records calls, its delay (seconds), the
    epochs it answers wrongly and those it fails on, and after how many calls it holds
    the rest until :func:`release` (None: never)."""
    env = {**os.environ, "GT_CALLS": str(calls), "GT_DELAY": str(delay)}
    env["GT_WRONG_EPOCHS"] = json.dumps(wrong or {})
    env["GT_FAIL_EPOCHS"] = json.dumps(fail or {})
    if hold_after is not None:
        env["GT_HOLD_AFTER"] = str(hold_after)
    return env


def release(calls: Path) -> None:
    """Let every call the application holds (``hold_after``) go on, and later ones pass."""
    Path(f"{calls}.release").touch()


def drain_logged(run_dir: Path) -> bool:
    """True once the run has logged a first Ctrl-C (it then starts no new sample)."""
    try:
        return '"kind":"drain"' in (run_dir / "log.jsonl").read_text()
    except FileNotFoundError:
        return False


def read_calls(calls: Path) -> Counter[tuple[str, int]]:
    """How often the application received each (sample id, epoch)."""
    if not calls.exists():
        return Counter()
    out: Counter[tuple[str, int]] = Counter()
    for line in calls.read_text().splitlines():
        sid, epoch = line.rsplit(" ", 1)
        out[(sid, int(epoch))] += 1
    return out


def start_run(
    spec: Path, cache: Path, results: Path, env: dict, *args: str, stdio: int | None = None
) -> subprocess.Popen:
    """Start ``python -m gradetrail run`` as a child process: stdout and stderr piped, or
    all three on the file descriptor ``stdio`` (a pseudo-terminal)."""
    cmd = [sys.executable, "-m", "gradetrail", "run", str(spec), "--cache", str(cache)]
    cmd += ["--results-root", str(results), *args]
    if stdio is not None:
        streams = {"stdin": stdio, "stdout": stdio, "stderr": stdio}
    else:
        streams = {"stdout": subprocess.PIPE, "stderr": subprocess.PIPE, "text": True}
    return subprocess.Popen(cmd, cwd=spec.parent, env={**env, "PYTHONPATH": str(ROOT)}, **streams)


def run_to_end(spec: Path, cache: Path, results: Path, env: dict, *args: str) -> tuple:
    """Run ``gradetrail run`` to completion; return ``(exit code, stdout, stderr)``."""
    proc = start_run(spec, cache, results, env, *args)
    out, err = proc.communicate(timeout=60)
    return proc.returncode, out, err


def wait_until(
    condition,  # noqa: ANN001
    timeout: float = 60.0,
    what: str = "condition",
    proc: subprocess.Popen | None = None,
) -> None:
    """Poll ``condition()`` every 10 ms until true; fail after ``timeout`` seconds (a hang
    guard, generous for a loaded machine), or as soon as ``proc`` has exited (showing its
    output)."""
    deadline = time.monotonic() + timeout
    while not condition():
        if proc is not None and proc.poll() is not None:
            out, err = proc.communicate()
            raise AssertionError(f"run exited {proc.returncode} before {what}: {out}{err}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def count_lines(path: Path) -> int:
    """Complete lines in a file (0 when it does not exist)."""
    try:
        return path.read_bytes().count(b"\n")
    except FileNotFoundError:
        return 0


def only_run_dir(results: Path) -> Path:
    """The single run directory under ``results``."""
    (run_dir,) = [p for p in results.iterdir() if p.is_dir()]
    return run_dir


def send(proc: subprocess.Popen, sig: signal.Signals) -> None:
    """Send ``sig`` to the child process."""
    os.kill(proc.pid, sig)
