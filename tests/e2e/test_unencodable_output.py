"""Every writer of user text survives text UTF-8 cannot encode (a lone surrogate in a
sample id or a response): export (CSV, JSONL, Parquet; to a file and to standard output),
diff and gate (text and --json), the gate's Markdown, JUnit and GitHub step summary, and
``runs``. Each runs as a real ``gradetrail`` process whose standard output is strict
UTF-8, as a pipe in CI is."""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
import pytest
from paths import ROOT

SID = "a\ud800"
REPLY = "A: 1 \udfff"


def _gt(*args: str, cwd: Path, env: dict[str, str] | None = None) -> subprocess.CompletedProcess:
    """``python -m gradetrail ARGS`` with strict UTF-8 standard streams."""
    import os

    full = {**os.environ, "PYTHONPATH": str(ROOT), "PYTHONIOENCODING": "utf-8:strict"}
    full["GRADETRAIL_CACHE"] = str(cwd / "cache.sqlite")
    return subprocess.run(
        [sys.executable, "-m", "gradetrail", *args],
        cwd=cwd,
        env={**full, **(env or {})},
        capture_output=True,
        timeout=120,
    )


def _run(tmp: Path, name: str, first_reply: str) -> Path:
    """A replay run of two samples, ``a\\ud800`` answered ``first_reply``; its directory."""
    rows = [{"id": SID, "q": "1", "t": "1"}, {"id": "b", "q": "2", "t": "2"}]
    (tmp / "d.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    recorded = [{"id": SID, "m": first_reply}, {"id": "b", "m": "A: 2"}]
    (tmp / f"{name}.jsonl").write_text("".join(json.dumps(r) + "\n" for r in recorded))
    (tmp / f"{name}.yaml").write_text(
        f"name: {name}\ndataset: {{path: d.jsonl}}\nprompt: '{{{{ q }}}}'\n"
        "target: '{{ t }}'\nscorer: {type: numeric, marker: 'A:'}\n"
        f"model: {{provider: replay, name: m, recordings: {{path: {name}.jsonl, "
        "response_field: m}}\n"
    )
    done = _gt("run", f"{name}.yaml", "--results-root", "results", "--json", cwd=tmp)
    assert done.returncode == 0, done.stderr.decode()
    return Path(json.loads(done.stdout)["run_dir"])


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path, Path]:
    """(working directory, baseline scoring both, candidate with a\\ud800 regressed)."""
    tmp = tmp_path_factory.mktemp("unencodable")
    return tmp, _run(tmp, "base", REPLY), _run(tmp, "cand", "A: 7 \udfff")


@pytest.mark.parametrize("fmt", ["csv", "jsonl", "parquet"])
def test_export_keeps_a_lone_surrogate_as_its_escape(runs, fmt: str) -> None:  # noqa: ANN001
    """To a file: exit 0; JSONL reads back the exact text (a JSON escape), CSV and
    Parquet cells hold the six characters ``\\ud800`` (before: UnicodeEncodeError)."""
    tmp, base, _ = runs
    out = tmp / f"out.{fmt}"
    done = _gt("export", str(base), "--format", fmt, "--out", str(out), cwd=tmp)
    assert done.returncode == 0, done.stderr.decode()
    if fmt == "jsonl":
        first = json.loads(out.read_text(encoding="utf-8").splitlines()[0])
        assert (first["sample_id"], first["response"]) == (SID, REPLY)
        return
    if fmt == "csv":
        first = next(csv.DictReader(io.StringIO(out.read_text(encoding="utf-8"))))
    else:
        first = pq.read_table(out).to_pylist()[0]
    assert (first["sample_id"], first["response"]) == ("a\\ud800", "A: 1 \\udfff")


@pytest.mark.parametrize("fmt", ["csv", "jsonl"])
def test_export_to_standard_output_keeps_a_lone_surrogate(runs, fmt: str) -> None:  # noqa: ANN001
    """``--out -`` through a strict UTF-8 pipe: exit 0, the same text as the file."""
    tmp, base, _ = runs
    done = _gt("export", str(base), "--format", fmt, "--out", "-", cwd=tmp)
    assert done.returncode == 0, done.stderr.decode()
    text = done.stdout.decode("utf-8")
    if fmt == "jsonl":
        assert json.loads(text.splitlines()[0])["sample_id"] == SID
    else:
        assert next(csv.DictReader(io.StringIO(text)))["sample_id"] == "a\\ud800"


def test_diff_gate_and_their_reports_keep_a_lone_surrogate(runs) -> None:  # noqa: ANN001
    """diff and gate, as text and --json, with the gate's Markdown, JUnit and step
    summary, all naming the regressed sample ``a\\ud800``: no traceback anywhere."""
    tmp, base, cand = runs
    diff = _gt("diff", str(base), str(cand), "--json", cwd=tmp)
    assert diff.returncode == 0, diff.stderr.decode()
    (regressed,) = [s for s in json.loads(diff.stdout)["samples"] if s["kind"] == "regressed"]
    assert regressed["sample_id"] == SID
    text = _gt("diff", str(base), str(cand), "--all", cwd=tmp)
    assert text.returncode == 0 and b"Traceback" not in text.stderr, text.stderr.decode()
    summary = tmp / "summary.md"
    gate = _gt(
        "gate",
        str(base),
        str(cand),
        "--markdown",
        str(tmp / "gate.md"),
        "--junit",
        str(tmp / "gate.xml"),
        "--github",
        cwd=tmp,
        env={"GITHUB_STEP_SUMMARY": str(summary)},
    )
    assert gate.returncode == 1, gate.stderr.decode()  # a real regression: FAIL
    assert b"Traceback" not in gate.stderr
    assert "a\\ud800" in (tmp / "gate.md").read_text(encoding="utf-8")
    assert "a\\ud800" in summary.read_text(encoding="utf-8")
    as_json = _gt("gate", str(base), str(cand), "--json", cwd=tmp)
    assert as_json.returncode == 1, as_json.stderr.decode()
    assert json.loads(as_json.stdout)["passed"] is False
    listing = _gt("runs", "--results-root", "results", cwd=tmp)
    assert listing.returncode == 0 and str(base).encode() in listing.stdout
