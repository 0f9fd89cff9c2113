"""The run directory: writes never follow planted symlinks, atomic replace, the lock, and
file names for sample ids."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from gradetrail.errors import RunError
from gradetrail.rundir.layout import RunDir, sample_file_name


def test_create_makes_the_results_root_and_the_run_directory(tmp_path: Path) -> None:
    """A missing results root and run directory are created."""
    with RunDir.create(tmp_path / "results" / "eval-abc") as run_dir:
        assert run_dir.path.is_dir()


def test_symlinked_run_directory_is_refused(tmp_path: Path) -> None:
    """A run directory that is a symlink (even to a real directory) is refused."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "eval-abc").symlink_to(elsewhere)
    with pytest.raises(RunError, match="eval-abc: the run directory is a symlink"):
        RunDir.create(tmp_path / "results" / "eval-abc")


def test_dangling_symlink_as_run_directory_is_refused(tmp_path: Path) -> None:
    """A dangling symlink in the run directory's place is refused, not followed."""
    (tmp_path / "results").mkdir()
    (tmp_path / "results" / "eval-abc").symlink_to(tmp_path / "nowhere")
    with pytest.raises(RunError, match="symlink"):
        RunDir.create(tmp_path / "results" / "eval-abc")
    assert not (tmp_path / "nowhere").exists()


def test_symlinked_results_root_is_refused(tmp_path: Path) -> None:
    """A results root that is itself a symlink is refused with the fix."""
    (tmp_path / "real").mkdir()
    (tmp_path / "results").symlink_to(tmp_path / "real")
    with pytest.raises(RunError, match="results directory is a symlink.*--results-root"):
        RunDir.create(tmp_path / "results" / "eval-abc")


def test_write_atomic_does_not_follow_a_planted_file_symlink(tmp_path: Path) -> None:
    """write_atomic replaces a file but refuses when the name is a symlink; the target is
    untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    with RunDir.create(tmp_path / "run") as run_dir:
        (run_dir.path / "manifest.json").symlink_to(victim)
        with pytest.raises(RunError, match="manifest.json: is a symlink"):
            run_dir.check_outputs(["manifest.json"])
        (run_dir.path / "manifest.json.tmp").symlink_to(victim)
        os.unlink(run_dir.path / "manifest.json")
        run_dir.write_atomic("manifest.json", "{}\n")  # stale .tmp link is removed, not used
        assert (run_dir.path / "manifest.json").read_text() == "{}\n"
        assert not (run_dir.path / "manifest.json").is_symlink()
    assert victim.read_text() == "precious\n"


def test_open_text_refuses_a_symlink(tmp_path: Path) -> None:
    """Opening an output file that is a symlink raises RunError; the target is untouched."""
    victim = tmp_path / "victim.txt"
    victim.write_text("precious\n")
    with RunDir.create(tmp_path / "run") as run_dir:
        (run_dir.path / "log.jsonl").symlink_to(victim)
        with pytest.raises(RunError, match="log.jsonl: is a symlink"):
            run_dir.open_text("log.jsonl", append=True)
    assert victim.read_text() == "precious\n"


def test_check_outputs_refuses_a_directory_in_place_of_a_file(tmp_path: Path) -> None:
    """An output name taken by a directory is refused before anything is written."""
    with RunDir.create(tmp_path / "run") as run_dir:
        (run_dir.path / "results.jsonl").mkdir()
        with pytest.raises(RunError, match="results.jsonl: is not a regular file"):
            run_dir.check_outputs(["samples.jsonl", "results.jsonl"])


def test_writes_stay_in_the_opened_directory_after_a_swap(tmp_path: Path) -> None:
    """Files go to the directory that was opened even if its path is swapped for a link."""
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    with RunDir.create(tmp_path / "run") as run_dir:
        os.rename(tmp_path / "run", tmp_path / "moved")
        (tmp_path / "run").symlink_to(elsewhere)
        run_dir.write_atomic("manifest.json", "{}\n")
    assert (tmp_path / "moved" / "manifest.json").read_text() == "{}\n"
    assert list(elsewhere.iterdir()) == []


def test_rotate_shifts_older_files_and_drops_the_oldest(tmp_path: Path) -> None:
    """rotate moves log -> log.1 -> log.2 and drops what falls off the end."""
    with RunDir.create(tmp_path / "run") as run_dir:
        for name, text in (("log.jsonl", "new"), ("log.1.jsonl", "old"), ("log.2.jsonl", "x")):
            (run_dir.path / name).write_text(text)
        run_dir.rotate("log.jsonl", ["log.1.jsonl", "log.2.jsonl"])
        assert not (run_dir.path / "log.jsonl").exists()
        assert (run_dir.path / "log.1.jsonl").read_text() == "new"
        assert (run_dir.path / "log.2.jsonl").read_text() == "old"


def test_second_process_is_refused_the_lock(tmp_path: Path) -> None:
    """While one process holds the run directory's lock, another is refused with its pid."""
    with RunDir.create(tmp_path / "run") as run_dir:
        run_dir.lock()
        code = (
            "import sys\n"
            "from gradetrail.rundir.layout import RunDir\n"
            "from gradetrail.errors import RunError\n"
            f"d = RunDir.create({str(run_dir.path)!r})\n"
            "try:\n    d.lock()\nexcept RunError as e:\n    print(e)\n"
        )
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        assert f"another gradetrail run (pid {os.getpid()}) is writing" in out.stdout
    with RunDir.create(tmp_path / "run") as again:
        again.lock()  # released on close


@pytest.mark.parametrize(
    "sample_id",
    ["../../etc/passwd", "/abs", "a/b", "..", ".", "", "x\x1b[2Jy", "a\\b", "CON", "é"],
)
def test_sample_file_name_is_a_plain_safe_name(sample_id: str) -> None:
    """Any id maps to one path component of safe characters that does not start with '.'."""
    name = sample_file_name(sample_id, ".json")
    assert "/" not in name and "\\" not in name and not name.startswith(".")
    assert all(c.isalnum() and c.isascii() or c in "._-" for c in name)
    assert Path(name).name == name


def test_sample_file_names_are_distinct_per_id() -> None:
    """Ids that differ only in unsafe characters or case still get distinct names."""
    ids = ["a/b", "a_b", "a?b", "A", "a", "x" * 200, "x" * 201]
    assert len({sample_file_name(i) for i in ids}) == len(ids)
    assert sample_file_name("gsm8k-12").startswith("gsm8k-12-")


def test_a_signal_mid_rewrite_leaves_no_tmp_file(tmp_path: Path) -> None:
    """Ctrl-C (KeyboardInterrupt) while a file is being rewritten: the old file stays
    whole and no `.tmp` is left behind (before: the `.tmp` stayed)."""
    from gradetrail.rundir.layout import RunDir

    def chunks():  # noqa: ANN202
        yield b"first half"
        raise KeyboardInterrupt

    with RunDir.create(tmp_path / "run") as run_dir:
        run_dir.write_atomic("results.jsonl", b"old\n")
        with pytest.raises(KeyboardInterrupt):
            run_dir.write_atomic("results.jsonl", chunks())
    assert sorted(p.name for p in (tmp_path / "run").iterdir()) == ["results.jsonl"]
    assert (tmp_path / "run" / "results.jsonl").read_bytes() == b"old\n"


def test_signals_are_held_during_the_final_rewrite() -> None:
    """SIGINT and SIGTERM sent during the final rewrite are held until it is done (the
    manifest cannot be left `running` by them), then consumed and named."""
    import os
    import signal

    from gradetrail.engine.interrupts import deferred_signals

    with deferred_signals() as arrived:
        os.kill(os.getpid(), signal.SIGTERM)
        os.kill(os.getpid(), signal.SIGINT)
        finished = True  # reached: neither signal cut the block
    assert finished
    assert sorted(arrived) == ["SIGINT", "SIGTERM"]
