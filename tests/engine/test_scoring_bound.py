"""No scorer takes the process beyond the reach of signals, and none runs unbounded
(issue 15, item 8): a regex scorer whose pattern backtracks catastrophically
(``^(a|aa)+$`` on 60 a's and a c: about 10^12 steps, in the standard library's ``re``
and in the ``regex`` package alike) is stopped by a real SIGTERM or a second Ctrl-C sent
to a real ``gradetrail run`` process, and by ``run.score_timeout_s`` otherwise."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import yaml
from cli_support import run_cli
from run_support import ROOT, wait_until

APP = """\
def answer(request):
    return "a" * 60 + "c" if "evil" in request.prompt else "aaaa"
"""


def write_eval(
    directory: Path, rows: list[str], score_timeout_s: float | None, regex_timeout_s: float = 1.0
) -> Path:
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "q": q}) + "\n" for i, q in enumerate(rows))
    )
    (directory / "backtrack_app.py").write_text(APP)
    spec = {
        "name": "backtrack",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "model": {"provider": "python", "name": "app", "function": "backtrack_app:answer"},
        "scorer": {"type": "regex", "pattern": "^(a|aa)+$", "timeout_s": regex_timeout_s},
        "run": {"concurrency": 1, "score_timeout_s": score_timeout_s},
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def start(spec: Path, tmp_path: Path) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gradetrail", "run", str(spec), "--cache"]
    cmd += [str(tmp_path / "cache.sqlite"), "--results-root", str(tmp_path / "results")]
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.Popen(
        cmd, cwd=spec.parent, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


def scoring_started(tmp_path: Path):  # noqa: ANN201
    """True once the log shows the pathological sample's call answered (it is then being
    scored: the call is flushed to log.jsonl before the scorer runs)."""

    def check() -> bool:
        for log in (tmp_path / "results").glob("*/log.jsonl"):
            if '"provider_call"' in log.read_text():
                return True
        return False

    return check


def manifest(tmp_path: Path) -> dict:
    (path,) = (tmp_path / "results").glob("*/manifest.json")
    return json.loads(path.read_text())


def _stop_mid_score(tmp_path: Path, signals: list[signal.Signals]) -> subprocess.Popen:
    spec = write_eval(tmp_path / "e", ["evil"], score_timeout_s=None)  # no time bound
    proc = start(spec, tmp_path)
    try:
        wait_until(scoring_started(tmp_path), timeout=60, what="scoring", proc=proc)
        time.sleep(0.3)  # well inside the backtracking match
        for sig in signals:
            os.kill(proc.pid, sig)
            time.sleep(0.2)
        proc.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    return proc


def test_sigterm_stops_a_catastrophic_regex(tmp_path: Path) -> None:
    """SIGTERM during the match ends the run: exit 143, manifest interrupted by SIGTERM."""
    proc = _stop_mid_score(tmp_path, [signal.SIGTERM])
    assert proc.returncode == 143
    m = manifest(tmp_path)
    assert (m["status"], m["stop_signal"]) == ("interrupted", "SIGTERM")


def test_a_second_ctrl_c_stops_a_catastrophic_regex(tmp_path: Path) -> None:
    """The first Ctrl-C drains (the match would be let finish); the second stops it: exit
    130, manifest interrupted by SIGINT."""
    proc = _stop_mid_score(tmp_path, [signal.SIGINT, signal.SIGINT])
    assert proc.returncode == 130
    m = manifest(tmp_path)
    assert (m["status"], m["stop_signal"]) == ("interrupted", "SIGINT")


def test_score_timeout_records_the_row_and_the_run_goes_on(tmp_path: Path) -> None:
    """With run.score_timeout_s the pathological row is a judge_error (scorer_timeout),
    the other rows are scored, and a re-run (the response now cached) ends the same way."""
    # the bound is wall-clock time (SIGALRM): the fine rows' microseconds of scoring must
    # fit in it even when a loaded machine pauses the process, so not 0.2 s
    # and the regex scorer's own bound (scorer.timeout_s, 1 s by default) must not race it
    spec = write_eval(tmp_path / "e", ["fine", "evil", "fine too"], 1.0, regex_timeout_s=30)
    for _ in range(2):
        out = run_cli(
            "run", str(spec), "--cache", str(tmp_path / "cache.sqlite"),
            "--results-root", str(tmp_path / "results"),
        )  # fmt: skip
        assert out.code == 0, out.err
        (run_dir,) = (tmp_path / "results").iterdir()
        rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
        assert [r["state"] for r in rows] == ["scored", "judge_error", "scored"]
        assert [r["score"] for r in rows] == [1.0, None, 1.0]
        error = rows[1]["error"]
        assert (error["kind"], error["reason"]) == ("ScorerTimeout", "scorer_timeout")
        assert "run.score_timeout_s" in error["message"]
    assert rows[1]["cached"] is True


JUDGE_APP = """\
def answer(request):
    return "fine"


def judge(request):
    return "a" * 60 + "c" if "evil" in request.prompt else "GRADE: aaaa"
"""


def write_judged(directory: Path, rows: list[str], score_timeout_s: float | None) -> Path:
    """A judge eval whose parse.pattern (``^(a|aa)+$`` around the grade) backtracks
    catastrophically on the judge's reply to an ``evil`` row."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "q": q}) + "\n" for i, q in enumerate(rows))
    )
    (directory / "judge_app.py").write_text(JUDGE_APP)
    (directory / "judge.j2").write_text("Grade: {{ response }} for {{ q }}\n")
    spec = {
        "name": "judged-backtrack",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "model": {"provider": "python", "name": "app", "function": "judge_app:answer"},
        "scorer": {
            "type": "judge",
            "file": "judge.j2",
            "model": {"provider": "python", "name": "judge", "function": "judge_app:judge"},
            "parse": {
                "kind": "grade",
                "pattern": "^(?:GRADE: )?((?:a|aa)+)$",
                "grades": {"aaaa": 1},
            },
        },
        "run": {"concurrency": 1, "score_timeout_s": score_timeout_s},
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def test_a_judge_pattern_that_backtracks_is_stopped_by_score_timeout(tmp_path: Path) -> None:
    """A judge's parse.pattern that backtracks catastrophically on one reply is stopped
    after run.score_timeout_s: that row is a judge_error naming the bound, the others are
    scored (before: the verdict parser ran outside the scoring bound and hung the run)."""
    spec = write_judged(tmp_path / "e", ["fine", "evil", "fine too"], 1.0)
    out = run_cli(
        "run", str(spec), "--cache", str(tmp_path / "cache.sqlite"),
        "--results-root", str(tmp_path / "results"),
    )  # fmt: skip
    assert out.code == 0, out.err
    (run_dir,) = (tmp_path / "results").iterdir()
    rows = [json.loads(line) for line in (run_dir / "results.jsonl").read_text().splitlines()]
    assert [r["state"] for r in rows] == ["scored", "judge_error", "scored"]
    assert rows[1]["error"]["reason"] == "unparseable"
    assert "run.score_timeout_s" in rows[1]["error"]["message"]


def test_sigterm_stops_a_judge_pattern_that_backtracks(tmp_path: Path) -> None:
    """With no time bound, SIGTERM still stops the judge's backtracking pattern: exit 143."""
    spec = write_judged(tmp_path / "e", ["evil"], None)
    proc = start(spec, tmp_path)
    try:
        wait_until(judge_called(tmp_path), timeout=60, what="judging", proc=proc)
        time.sleep(0.3)  # well inside the backtracking match
        os.kill(proc.pid, signal.SIGTERM)
        proc.communicate(timeout=60)  # a hang guard, not a timing assertion
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 143
    m = manifest(tmp_path)
    assert (m["status"], m["stop_signal"]) == ("interrupted", "SIGTERM")


def judge_called(tmp_path: Path):  # noqa: ANN201
    """True once the log shows the judge's call answered (its verdict is then read)."""

    def check() -> bool:
        for log in (tmp_path / "results").glob("*/log.jsonl"):
            if '"judge_call"' in log.read_text():
                return True
        return False

    return check
