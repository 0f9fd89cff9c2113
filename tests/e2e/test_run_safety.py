"""Safety of what a run writes and prints: planted symlinks are refused before any call is
paid for, sample ids never become paths, and printed errors carry no escape sequences."""

from __future__ import annotations

import io
import os
from contextlib import redirect_stderr
from pathlib import Path

import pytest
from run_support import app_env, read_calls, write_eval

import gradetrail
from gradetrail.cli import fail
from gradetrail.errors import DatasetError, RunError


@pytest.fixture
def calls(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The recording application's environment; returns its calls file."""
    path = tmp_path / "calls"
    for key, value in app_env(path).items():
        if key.startswith("GT_"):
            monkeypatch.setenv(key, value)
    return path


def _run_dir(spec: Path, results: Path) -> Path:
    return gradetrail.plan_run(gradetrail.load_spec(spec)).run_dir(results)


@pytest.mark.parametrize(
    "name",
    [
        "results.jsonl",
        "results.jsonl.tmp",
        "manifest.json",
        "manifest.json.tmp",
        "samples.jsonl",
        "log.jsonl",
        "log.2.jsonl",
        ".lock",
    ],
)
def test_a_planted_symlink_in_the_run_directory_is_refused_before_any_call(
    tmp_path: Path, calls: Path, name: str
) -> None:
    """A symlink at any output name stops the run before the first model call, and the
    file it points at is untouched."""
    spec = write_eval(tmp_path / "eval", samples=3)
    run_dir = _run_dir(spec, tmp_path / "results")
    run_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    (run_dir / name).symlink_to(victim)
    with pytest.raises(RunError, match=f"{name}: is a symlink; refusing"):
        gradetrail.run_eval(gradetrail.load_spec(spec), results_root=tmp_path / "results")
    assert read_calls(calls) == {}
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize(
    "name", ["results.jsonl", ".lock", "manifest.json", "samples.jsonl", "log.jsonl", "log.1.jsonl"]
)
def test_a_planted_hard_link_in_the_run_directory_is_refused_before_any_call(
    cli,  # noqa: ANN001
    tmp_path: Path,
    calls: Path,
    name: str,
) -> None:
    """A hard link at any output name (a second name for a file elsewhere, which a write
    would overwrite) stops the run before any call: one line, exit 1, the file untouched."""
    spec = write_eval(tmp_path / "eval", samples=3)
    run_dir = _run_dir(spec, tmp_path / "results")
    run_dir.mkdir(parents=True)
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    os.link(victim, run_dir / name)
    out = cli("run", str(spec), "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 1
    assert out.stderr.strip() == (
        f"error: {run_dir / name}: has 2 hard links (writing it would change another file); "
        "refusing to write results through it (remove it, or pass --results-root with "
        "another directory)"
    )
    assert read_calls(calls) == {}
    assert victim.read_text() == "precious\n"


@pytest.mark.parametrize("name", [".lock", "results.jsonl", "log.jsonl", "manifest.json.tmp"])
def test_a_fifo_or_directory_at_an_output_name_is_refused(
    cli,  # noqa: ANN001
    tmp_path: Path,
    calls: Path,
    name: str,
) -> None:
    """A FIFO (or a directory) at an output name is one line and exit 1, never a hang or
    a traceback, and no call is made."""
    spec = write_eval(tmp_path / "eval", samples=3)
    for make in (os.mkfifo, os.mkdir):
        run_dir = _run_dir(spec, tmp_path / "results")
        run_dir.mkdir(parents=True, exist_ok=True)
        make(run_dir / name)
        out = cli("run", str(spec), "--results-root", str(tmp_path / "results"))
        assert out.exit_code == 1
        assert out.stderr.strip().endswith(
            f"{run_dir / name}: is not a regular file; refusing to write results through "
            "it (remove it, or pass --results-root with another directory)"
        )
        assert len(out.stderr.strip().splitlines()) == 1
        assert read_calls(calls) == {}
        (run_dir / name).unlink() if make is os.mkfifo else (run_dir / name).rmdir()


def test_a_symlinked_run_directory_is_refused_before_any_call(tmp_path: Path, calls: Path) -> None:
    """A run directory planted as a symlink to elsewhere is refused; nothing is written
    there and no call is made."""
    spec = write_eval(tmp_path / "eval", samples=3)
    run_dir = _run_dir(spec, tmp_path / "results")
    run_dir.parent.mkdir(parents=True)
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    run_dir.symlink_to(elsewhere)
    with pytest.raises(RunError, match="the run directory is a symlink"):
        gradetrail.run_eval(gradetrail.load_spec(spec), results_root=tmp_path / "results")
    assert read_calls(calls) == {} and list(elsewhere.iterdir()) == []


def test_sample_ids_are_never_used_as_paths(tmp_path: Path, calls: Path) -> None:
    """Ids such as '../../x' or 'a/b' are data only: the run writes just its own files."""
    ids = ["../../escaped", "a/b", "/abs", "..", "\x1b[2J"]
    spec = write_eval(tmp_path / "eval", ids=ids)
    result = gradetrail.run_eval(gradetrail.load_spec(spec), results_root=tmp_path / "results")
    assert result.manifest.counts == {"scored": 5}
    written = sorted(p.name for p in result.run_dir.iterdir())
    assert written == [
        ".lock",
        "log.jsonl",
        "manifest.json",
        "progress.json",
        "results.jsonl",
        "samples.jsonl",
    ]
    assert [r["sample_id"] for r in gradetrail.read_results(result.run_dir)] == ids
    created = {p.relative_to(tmp_path) for p in tmp_path.rglob("*")}
    assert not any("escaped" in str(p) or str(p).startswith("a/") for p in created)
    assert not Path("/abs").exists() and not (tmp_path.parent / "escaped").exists()


def test_printed_errors_carry_no_escape_sequences() -> None:
    """An error quoting dataset or provider text is printed with its escape sequences
    stripped, one line per problem."""
    stderr = io.StringIO()
    with redirect_stderr(stderr):
        exit_ = fail(DatasetError("data.jsonl:3: sample 'q\x1b[2J\x1b]0;x\x07' is bad\x9b1m"))
    assert stderr.getvalue() == "error: data.jsonl:3: sample 'q' is bad\n"
    assert exit_.exit_code == 2


def test_verbose_log_on_stderr_carries_no_escape_sequences(
    tmp_path: Path, calls: Path, cli
) -> None:  # noqa: ANN001
    """Sample ids with escape sequences reach stderr (-v) stripped of them, never raw;
    log.jsonl keeps them JSON-escaped."""
    spec = write_eval(tmp_path / "eval", ids=["ok", "evil\x1b]0;owned\x07\x1b[2J"])
    out = cli("run", str(spec), "-v")
    assert out.exit_code == 0, out.stderr
    assert "\x1b" not in out.stderr and "\x1b" not in out.stdout
    assert "sample_id=evil " in out.stderr and "owned" not in out.stderr
    (run_dir,) = (tmp_path / "results").iterdir()
    assert "evil\\u001b]0;owned" in (run_dir / "log.jsonl").read_text()


def test_run_files_are_created_private_to_the_umask(tmp_path: Path, calls: Path) -> None:
    """Output files are regular files, not links, with the umask's permissions."""
    spec = write_eval(tmp_path / "eval", samples=2)
    old = os.umask(0o077)
    try:
        run_dir = gradetrail.run_eval(
            gradetrail.load_spec(spec), results_root=tmp_path / "results"
        ).run_dir
    finally:
        os.umask(old)
    for path in run_dir.iterdir():
        assert path.is_file() and not path.is_symlink()
        assert path.stat().st_mode & 0o077 == 0, path.name
