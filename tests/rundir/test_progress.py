"""progress.json read mid-run by a second process: a ``gradetrail run`` process calls the
local protocol server, which answers the first 10 GSM8K requests and holds the rest; a
reader process (another Python) polls run.progress_file until it shows those 10 rows, while
the run is still going. After the held requests are released, the file holds the final
figures. Writes are atomic and refuse a planted symlink."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from http_support import gsm8k_spec
from paths import ROOT
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail
from gradetrail.errors import RunError
from gradetrail.rundir.layout import RunDir
from gradetrail.rundir.progress import ProgressFile, read_progress
from gradetrail.rundir.summary import Tally

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

N, ANSWERED, CONCURRENCY = 20, 10, 4

#: the reader: polls the progress file until it shows ``ANSWERED`` rows (a hang guard of
#: 120 s, never a timing assertion), then prints what it read
READER = """
import json, sys, time
path, want = sys.argv[1], int(sys.argv[2])
end = time.monotonic() + 120
while time.monotonic() < end:
    try:
        data = json.loads(open(path, encoding="utf-8").read())
    except (OSError, ValueError):  # not written yet: a torn read would be a ValueError here
        data = {}
    if data.get("done", 0) >= want:
        print(json.dumps(data))
        break
    time.sleep(0.05)
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT)}


def test_a_second_process_reads_the_progress_mid_run(srv, tmp_path: Path) -> None:
    srv.configure(faults=[{"kind": "hold", "after": ANSWERED}])
    progress = tmp_path / "watch" / "progress.json"
    spec = gsm8k_spec(
        tmp_path / "eval",
        srv,
        "openai_compatible",
        limit=N,
        run={"concurrency": CONCURRENCY, "progress_file": str(progress)},
    )
    run = subprocess.Popen(
        [sys.executable, "-m", "gradetrail", "run", spec.source, "--no-cache", "--json"]
        + ["--results-root", str(tmp_path / "r")],
        env=_env(),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    try:
        srv.wait_held(CONCURRENCY)  # 10 answered, the next 4 held: the run is mid-way
        reader = subprocess.run(
            [sys.executable, "-c", READER, str(progress), str(ANSWERED)],
            capture_output=True,
            text=True,
            timeout=180,
            check=True,
        )
        mid = json.loads(reader.stdout)
        assert run.poll() is None  # still running when it was read
    finally:
        srv.release()
        out, err = run.communicate(timeout=180)
    assert run.returncode == 0, err
    assert mid["status"] == "running"
    assert (mid["done"], mid["total"], mid["ok"], mid["failed"]) == (ANSWERED, N, ANSWERED, 0)
    assert mid["eta_s"] is not None and mid["eta_s"] >= 0 and mid["elapsed_s"] > 0
    assert mid["pid"] == run.pid
    final = read_progress(progress)
    run_dir = Path(json.loads(out)["run_dir"])
    assert final == read_progress(run_dir)  # the run directory's copy is the same object
    assert (final["status"], final["done"], final["ok"], final["eta_s"]) == ("complete", N, N, 0.0)
    assert mid["run_dir"] == final["run_dir"] == str(run_dir)
    assert srv.stats()["statuses"]["200"] == N


def test_a_symlink_at_the_progress_file_refuses_the_run(tmp_path: Path) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    watch = tmp_path / "watch"
    watch.mkdir()
    (watch / "progress.json").symlink_to(target)
    with RunDir.create(tmp_path / "run") as run_dir:
        writer = ProgressFile(run_dir, 3, watch / "progress.json")
        with pytest.raises(RunError, match="is a symlink"):
            writer.write(Tally(), strict=True)
        writer.write(Tally())  # mid-run: skipped, the run goes on
        writer.close()
    assert target.read_text() == "keep"
    assert read_progress(tmp_path / "run")["total"] == 3


def test_progress_counts_the_rows_as_the_tally_does(tmp_path: Path) -> None:
    spec = gradetrail.load_spec(ROOT / "examples" / "gsm8k.yaml", ["dataset.limit=50"])
    result = gradetrail.run_eval(spec, results_root=tmp_path, use_cache=False)
    final = read_progress(result.run_dir)
    m = result.manifest
    assert final["done"] == final["total"] == 50 and final["status"] == "complete"
    assert final["ok"] == m.counts["scored"] and final["failed"] == 0


def test_a_symlink_at_run_progress_file_refuses_the_run_before_its_manifest(
    tmp_path: Path,
) -> None:
    target = tmp_path / "elsewhere.txt"
    target.write_text("keep")
    (tmp_path / "progress.json").symlink_to(target)
    spec = gradetrail.load_spec(
        ROOT / "examples" / "gsm8k.yaml",
        ["dataset.limit=5", f"run.progress_file={tmp_path / 'progress.json'}"],
    )
    with pytest.raises(RunError, match="progress.json: refusing to write: is a symlink"):
        gradetrail.run_eval(spec, results_root=tmp_path / "r", use_cache=False)
    assert target.read_text() == "keep"
    (run_dir,) = (tmp_path / "r").iterdir()
    assert not (run_dir / "manifest.json").exists()


def test_a_fifo_or_device_at_run_progress_file_refuses_the_run(tmp_path: Path) -> None:
    """A named pipe (or, as root, /dev/null) named as run.progress_file was replaced by the
    rename with a regular file; the run is now refused at its first write, one line, and
    the pipe stays a pipe."""
    import stat

    from cli_support import run_cli

    pipe = tmp_path / "progress.fifo"
    os.mkfifo(pipe)
    out = run_cli(
        "run", str(ROOT / "examples" / "gsm8k.yaml"), "--results-root", str(tmp_path / "r"),
        "--no-cache", "--set", "dataset.limit=5", "--set", f"run.progress_file={pipe}",
    )  # fmt: skip
    assert out.code == 1
    assert out.err_lines == [
        f"error: {pipe}: refusing to write: a device or a FIFO, not a file; name a file for "
        "run.progress_file"
    ]
    assert stat.S_ISFIFO(os.lstat(pipe).st_mode)
    (run_dir,) = (tmp_path / "r").iterdir()
    assert not (run_dir / "manifest.json").exists()
