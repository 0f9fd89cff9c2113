"""examples/hill_climb end to end, as a user runs it (real processes): approve, run the
loop of three variants (tuning on the 1,071 train ids, gating the best against the
baseline on the 248 test ids it never saw), then a round that edits the scorer module
is refused, exit 2, naming the file."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

from paths import EXAMPLES, ROOT


def _python(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=cwd,
        env={**os.environ, "PYTHONPATH": str(ROOT)},
        capture_output=True,
        text=True,
        timeout=600,
    )


def test_the_loop_tunes_on_train_gates_on_test_and_stops_on_an_edit(tmp_path: Path) -> None:
    shutil.copytree(EXAMPLES / "hill_climb", tmp_path / "hill_climb")
    shutil.copytree(EXAMPLES / "data" / "gsm8k", tmp_path / "data" / "gsm8k")
    (tmp_path / ".git").mkdir()
    for stale in ("spec.approval.json", "progress.json", "splits.looks.jsonl"):
        (tmp_path / "hill_climb" / stale).unlink(missing_ok=True)
    approve = _python("-m", "gradetrail", "approve", "hill_climb/spec.yaml", cwd=tmp_path)
    assert approve.returncode == 0, approve.stderr
    assert approve.stdout.startswith("approved 6 files")

    loop = _python("hill_climb/loop.py", "--results-root", "results", cwd=tmp_path)
    assert loop.returncode == 0, loop.stderr
    assert loop.stdout.splitlines() == [
        "train  6b_finetuning      mean 0.2092 over 1071 samples",
        "train  175b_finetuning    mean 0.3380 over 1071 samples",
        "train  175b_verification  mean 0.5472 over 1071 samples",
        "test   6b_finetuning 0.2500 -> 175b_verification 0.6290 (delta +0.3790, 95% CI "
        "[+0.3152, +0.4438], n 248): PASS",
    ]
    runs = sorted(p.name.rsplit("-", 1)[0] for p in (tmp_path / "results").iterdir())
    assert runs == ["hill-climb"] * 5  # three on train, two on test

    grading = tmp_path / "hill_climb" / "grading.py"
    grading.write_text(grading.read_text().replace("got == want", "got is not None"))
    cheat = _python("hill_climb/loop.py", "--results-root", "results", cwd=tmp_path)
    assert cheat.returncode == 2
    assert "the harness changed since its approval" in cheat.stderr
    assert "changed grading.py (sha256" in cheat.stderr
    assert cheat.stdout == ""  # refused before the first run
    assert len(list((tmp_path / "results").iterdir())) == 5
