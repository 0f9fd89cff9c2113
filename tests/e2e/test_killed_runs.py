"""A run whose process was killed (``kill -9``) reads ``killed`` everywhere a run's status
is reported or decided on: ``gradetrail runs``, gate, diff, export, the viewer and
:func:`gradetrail.read_manifest`, all through :func:`gradetrail.rundir.layout.run_status`.
While its process lives, the same run reads ``running``."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import run_support as rs
from paths import ROOT

import gradetrail
from gradetrail.view.store import RunStore

pytestmark = pytest.mark.skipif(not hasattr(signal, "SIGKILL"), reason="POSIX signals")


def _cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """``python -m gradetrail ARGS`` in a process of its own."""
    return subprocess.run(
        [sys.executable, "-m", "gradetrail", *args],
        cwd=cwd,
        env={**rs.app_env(cwd / "unused"), "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=120,
    )


def _status_cell(listing: str, run_dir: Path) -> str:
    """The status column of ``run_dir``'s line in ``gradetrail runs``."""
    (line,) = [ln for ln in listing.splitlines() if ln.startswith(str(run_dir))]
    header = listing.splitlines()[0]
    start = header.index("status")
    return line[start:].split()[0]


def test_a_killed_run_reads_killed_and_the_gate_says_how_to_resume(tmp_path: Path) -> None:
    """Baseline complete; candidate killed with 4 of 8 rows: ``runs`` said ``running``
    while it lived and ``killed`` after; gate and diff refuse it as killed, naming the
    re-run and --allow-partial; export warns; the viewer and the API agree."""
    samples = 8
    base_spec = rs.write_eval(tmp_path / "base", samples=samples, concurrency=2)
    cand_spec = rs.write_eval(tmp_path / "cand", samples=samples, concurrency=2)
    cache, calls = tmp_path / "cache.sqlite", tmp_path / "calls"
    base_results, results = tmp_path / "base-results", tmp_path / "results"
    code, _, err = rs.run_to_end(
        base_spec, tmp_path / "base-cache.sqlite", base_results, rs.app_env(calls)
    )
    assert code == 0, err
    base_dir = rs.only_run_dir(base_results)

    proc = rs.start_run(
        cand_spec, cache, results, rs.app_env(tmp_path / "cand-calls", hold_after=4)
    )
    try:
        rs.wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc)
        run_dir = rs.only_run_dir(results)
        rs.wait_until(
            lambda: rs.count_lines(run_dir / "results.jsonl") >= 4, what="4 rows", proc=proc
        )
        live = _cli("runs", "--results-root", str(results), cwd=tmp_path)
        assert _status_cell(live.stdout, run_dir) == "running", live.stdout
        assert gradetrail.read_manifest(run_dir)["status"] == "running"
    finally:
        rs.send(proc, signal.SIGKILL)
        proc.wait(timeout=60)

    assert gradetrail.read_manifest(run_dir)["status"] == "killed"
    assert gradetrail.read_manifest(run_dir, as_written=True)["status"] == "running"
    assert dict(gradetrail.list_runs(results))[run_dir]["status"] == "killed"
    listing = _cli("runs", "--results-root", str(results), cwd=tmp_path)
    assert _status_cell(listing.stdout, run_dir) == "killed", listing.stdout

    gate = _cli("gate", str(base_dir), str(run_dir), cwd=tmp_path)
    assert gate.returncode == 2, gate.stderr
    (line,) = gate.stderr.splitlines()
    assert "candidate run was killed" in line and "running" not in line
    assert "re-run the same command" in line and "--allow-partial" in line
    with pytest.raises(gradetrail.GateError, match="candidate run was killed"):
        gradetrail.regression_gate(base_dir, run_dir)
    partial = _cli("gate", str(base_dir), str(run_dir), "--allow-partial", "--json", cwd=tmp_path)
    verdict = json.loads(partial.stdout)
    assert verdict["n"] == rs.count_lines(run_dir / "results.jsonl")
    assert any("candidate run is killed" in w for w in verdict["warnings"])

    diff = _cli("diff", str(base_dir), str(run_dir), "--json", cwd=tmp_path)
    assert diff.returncode == 0, diff.stderr
    assert "candidate run was killed" in json.loads(diff.stdout)["gate_error"]

    export = _cli("export", str(run_dir), "--out", str(tmp_path / "out.csv"), cwd=tmp_path)
    assert export.returncode == 0, export.stderr
    assert "run was killed" in export.stderr

    info = RunStore(results).info(run_dir.name)
    assert (info.status, info.live) == ("killed", False)

    code, _, err = rs.run_to_end(cand_spec, cache, results, rs.app_env(tmp_path / "cand-calls"))
    assert code == 0, err
    assert gradetrail.read_manifest(run_dir)["status"] == "complete"
    resumed = _cli("gate", str(base_dir), str(run_dir), "--json", cwd=tmp_path)
    assert json.loads(resumed.stdout)["n"] == samples  # compared: 8 pairs are too few to pass


def test_a_tmp_file_left_by_a_killed_rewrite_is_gone_after_a_complete_rerun(
    tmp_path: Path,
) -> None:
    """A kill -9 during the final rewrite leaves `results.jsonl.tmp` (and the like): the
    next complete run of the same command removes it (before: it survived)."""
    spec = rs.write_eval(tmp_path / "eval", samples=3, concurrency=1)
    cache, results = tmp_path / "c.sqlite", tmp_path / "results"
    code, _, err = rs.run_to_end(spec, cache, results, rs.app_env(tmp_path / "calls"))
    assert code == 0, err
    run_dir = gradetrail.plan_run(gradetrail.load_spec(spec)).run_dir(results)
    for name in ("results.jsonl.tmp", "samples.jsonl.tmp", "manifest.json.tmp"):
        (run_dir / name).write_text("half a file")
    code, _, err = rs.run_to_end(spec, cache, results, rs.app_env(tmp_path / "calls"))
    assert code == 0, err
    assert sorted(p.name for p in run_dir.iterdir() if p.name.endswith(".tmp")) == []
