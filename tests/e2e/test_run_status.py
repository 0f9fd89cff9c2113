"""The manifest always says whether a run is complete: running while it goes, complete,
interrupted (see e2e/test_resume.py), or failed when an error stops it, with the rows that
landed kept in input order."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from run_support import write_eval

import gradetrail
from gradetrail.errors import CacheError, RunError
from gradetrail.executors.base import Executor
from gradetrail.executors.retry import CallOutcome
from gradetrail.providers.base import Request, Response


class BreaksAfter(Executor):
    """An executor that answers ``n`` requests, then fails the run with a CacheError (as
    a full disk would), and records the manifest status it saw while running."""

    concurrency = 1

    def __init__(self, n: int, manifest: Path) -> None:
        self.n = n
        self.manifest = manifest
        self.seen: list[str] = []

    async def complete(self, request: Request, on_attempt: object = None) -> CallOutcome:
        """Answer correctly, or raise once ``n`` requests were answered."""
        self.seen.append(json.loads(self.manifest.read_text())["status"])
        if len(self.seen) > self.n:
            raise CacheError("cache /x: write failed (disk full)")
        answer = request.prompt.rsplit("=", 1)[1].strip()
        return CallOutcome(Response(text=f"A: {answer}"), None, 1, 0.0)


def test_an_error_mid_run_leaves_status_failed_and_the_rows_in_order(tmp_path: Path) -> None:
    """A run stopped by an error raises it, and its manifest says failed (not running,
    not complete) while the rows that landed stay on disk in input order."""
    spec_path = write_eval(tmp_path / "eval", samples=10, epochs=2)
    spec = gradetrail.load_spec(spec_path)
    run_dir = gradetrail.plan_run(spec).run_dir(tmp_path / "results")
    executor = BreaksAfter(13, run_dir / "manifest.json")
    with pytest.raises(CacheError, match="disk full"):
        gradetrail.run_eval(spec, results_root=tmp_path / "results", executor=executor)

    assert set(executor.seen) == {"running"}
    manifest = gradetrail.read_manifest(run_dir)
    assert manifest["status"] == "failed" and manifest["counts"] == {"scored": 13}
    rows = gradetrail.read_results(run_dir)
    pairs = [(r["sample_id"], r["epoch"]) for r in rows]
    assert pairs == sorted(pairs, key=lambda p: (int(p[0][1:]), p[1])) and len(pairs) == 13
    events = [json.loads(x)["event"] for x in (run_dir / "log.jsonl").read_text().splitlines()]
    assert events[-1] == "run_end"
    assert json.loads((run_dir / "log.jsonl").read_text().splitlines()[-1])["status"] == "failed"


class Answers(Executor):
    """An executor that answers every request correctly and runs ``hook`` on each."""

    concurrency = 1

    def __init__(self, hook) -> None:  # noqa: ANN001
        self.hook = hook

    async def complete(self, request: Request, on_attempt: object = None) -> CallOutcome:
        """Answer correctly after calling the hook."""
        self.hook()
        answer = request.prompt.rsplit("=", 1)[1].strip()
        return CallOutcome(Response(text=f"A: {answer}"), None, 1, 0.0)


def test_a_failure_writing_the_outputs_says_failed_not_running(tmp_path: Path) -> None:
    """When samples.jsonl cannot be written at the end (here a directory is in the way),
    the error is raised and the manifest says failed; results.jsonl is complete."""
    spec_path = write_eval(tmp_path / "eval", samples=4)
    spec = gradetrail.load_spec(spec_path)
    run_dir = gradetrail.plan_run(spec).run_dir(tmp_path / "results")

    def block_samples_file() -> None:
        (run_dir / "samples.jsonl.tmp").mkdir(exist_ok=True)

    with pytest.raises(RunError, match=r"samples.jsonl: cannot write \(Is a directory\)"):
        gradetrail.run_eval(
            spec, results_root=tmp_path / "results", executor=Answers(block_samples_file)
        )
    assert gradetrail.read_manifest(run_dir)["status"] == "failed"
    assert [r["sample_id"] for r in gradetrail.read_results(run_dir)] == ["q0", "q1", "q2", "q3"]
