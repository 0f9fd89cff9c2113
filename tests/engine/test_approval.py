"""The approved harness, on a copy of examples/hill_climb (a python app answering GSM8K
with the authors' recorded solutions, a scorer module listed under harness:, a split
file): a run requiring approval refuses to start without one, runs once approved, and
refuses again (exit 2, before any call) naming the file an edit changed, appeared or went,
with the approved hash."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
from cli_support import run_cli
from paths import EXAMPLES

import gradetrail
from gradetrail.engine.approval import ApprovalError, approve, check_approval, harness_files


@pytest.fixture
def project(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """A project: examples/hill_climb and the GSM8K data beside it, and a lockfile; the
    example's modules (``app``, ``grading``) imported afresh from this copy, not taken
    from ``sys.modules`` where another test's module of that name may sit."""
    for name in ("app", "grading"):
        monkeypatch.delitem(sys.modules, name, raising=False)
    shutil.copytree(EXAMPLES / "hill_climb", tmp_path / "hill_climb")
    shutil.copytree(EXAMPLES / "data" / "gsm8k", tmp_path / "data" / "gsm8k")
    (tmp_path / ".git").mkdir()  # the repository root: the lockfile search stops here
    (tmp_path / "uv.lock").write_text("version = 1\n")
    for stale in ("spec.approval.json", "progress.json", "splits.looks.jsonl"):
        (tmp_path / "hill_climb" / stale).unlink(missing_ok=True)
    return tmp_path / "hill_climb"


def _run(project: Path, *extra: str):  # noqa: ANN202
    return run_cli(
        "run",
        str(project / "spec.yaml"),
        "--no-cache",
        "--results-root",
        str(project.parent / "results"),
        "--set",
        "dataset.split.name=test",
        *extra,
    )


def test_the_harness_is_the_spec_what_it_names_and_the_lockfile(project: Path) -> None:
    spec = gradetrail.load_spec(project / "spec.yaml")
    names = sorted(p.relative_to(project.parent).as_posix() for p in harness_files(spec))
    assert names == [
        "data/gsm8k/test.jsonl",  # dataset.path
        "hill_climb/app.py",  # model.function app:answer
        "hill_climb/grading.py",  # harness:
        "hill_climb/loop.py",  # harness:
        "hill_climb/spec.yaml",
        "hill_climb/splits.json",  # dataset.split.file
        "uv.lock",
    ]


def test_a_run_requiring_approval_refuses_a_changed_harness(project: Path) -> None:
    results = project.parent / "results"
    unapproved = _run(project)
    assert unapproved.code == 2 and not results.exists()
    assert "run.require_approval is set but the harness has no approval" in unapproved.err
    assert "gradetrail approve" in unapproved.err

    approved = run_cli("approve", str(project / "spec.yaml"))
    assert approved.code == 0, approved.err
    record = json.loads((project / "spec.approval.json").read_text())
    assert len(record["files"]) == 7
    assert record["files"]["grading.py"] == _sha256(project / "grading.py")
    assert f"harness {record['harness_sha256'][:12]}" in approved.out

    first = _run(project)
    assert first.code == 0, first.err
    (run_dir,) = results.iterdir()
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["n_samples"] == 248 and manifest["counts"] == {"scored": 248}
    # the app answers as the replay provider serves the same recorded solutions
    split = project / "splits.json"
    replay = gradetrail.load_spec(
        EXAMPLES / "gsm8k.yaml",
        ["model.name=6b_finetuning", f"dataset.split={{file: {split}, name: test}}"],
    )
    replayed = gradetrail.run_eval(replay, results_root=project.parent / "replay", use_cache=False)
    assert manifest["score"]["mean"] == pytest.approx(replayed.manifest.score.mean)

    # a loop edits the scorer module: refused before any call, the file named
    grading = project / "grading.py"
    before = _sha256(grading)
    grading.write_text(grading.read_text().replace("got == want", "True"))
    refused = _run(project)
    assert refused.code == 2
    assert len(refused.err_lines) == 1
    line = refused.err_lines[0]
    assert "the harness changed since its approval" in line
    assert f"harness {record['harness_sha256'][:12]}" in line
    assert f"changed grading.py (sha256 {before[:12]} -> {_sha256(grading)[:12]})" in line
    assert len(list(results.iterdir())) == 1  # no run directory for the refused run

    # the app, the lockfile, a new file under a harness glob: each named
    (project / "app.py").write_text((project / "app.py").read_text() + "\n# tuned\n")
    (project.parent / "uv.lock").write_text("version = 2\n")
    line = _run(project).err_lines[0]
    assert "changed app.py" in line and "changed ../uv.lock" in line

    # a person reviews and approves again: the run goes
    assert run_cli("approve", str(project / "spec.yaml")).code == 0
    assert _run(project).code == 0


def test_a_new_file_under_a_glob_and_a_gone_file_are_named(project: Path) -> None:
    spec_path = project / "spec.yaml"
    spec_path.write_text(spec_path.read_text().replace("- grading.py", "- '*.py'"))
    spec = gradetrail.load_spec(spec_path)
    approve(spec)
    (project / "helper.py").write_text("X = 1\n")
    with pytest.raises(ApprovalError, match=r"new helper\.py"):
        check_approval(spec)
    (project / "helper.py").unlink()
    (project / "grading.py").unlink()
    with pytest.raises(ApprovalError, match=r"gone grading\.py"):
        check_approval(gradetrail.load_spec(spec_path))


def test_a_glob_matching_nothing_is_a_one_line_error(project: Path) -> None:
    spec_path = project / "spec.yaml"
    spec_path.write_text(spec_path.read_text().replace("- grading.py", "- scorers/*.py"))
    out = run_cli("approve", str(spec_path))
    assert out.code == 2
    assert "harness: 'scorers/*.py' matches no file" in out.err


@pytest.mark.parametrize("pattern", ["/etc/host*", "''"], ids=["absolute", "empty"])
def test_a_pattern_glob_cannot_take_is_a_one_line_error(project: Path, pattern: str) -> None:
    """An absolute or empty harness: pattern is refused in one line, exit 2 (it was a
    traceback: NotImplementedError "Non-relative patterns are unsupported", ValueError
    "Unacceptable pattern"), by approve and by a run alike."""
    spec_path = project / "spec.yaml"
    spec_path.write_text(spec_path.read_text().replace("- grading.py", f"- {pattern}"))
    for out in (run_cli("approve", str(spec_path)), _run(project)):
        assert out.code == 2, out.err
        assert len(out.err_lines) == 1 and "Traceback" not in out.err
        assert "harness" in out.err_lines[0] and "relative to the spec's directory" in out.err


def _sha256(path: Path) -> str:
    import hashlib

    return hashlib.sha256(path.read_bytes()).hexdigest()


def test_a_module_in_the_working_directory_that_the_run_would_import_is_named(
    project: Path,
) -> None:
    """The run imports a spec's module from the working directory before the spec's own
    directory: an unreviewed ``app.py`` dropped in the working directory (one that reads
    the answer from the row) would run under an unchanged approval. It is part of the
    harness, so the run refuses it, exit 2, naming it, before any call."""
    import os
    import subprocess

    from paths import ROOT

    assert run_cli("approve", str(project / "spec.yaml")).code == 0
    work = project.parent / "work"
    work.mkdir()
    (work / "app.py").write_text(
        "def answer(request, row):\n    return 'A: ' + row['answer'].split('####')[-1]\n"
    )
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    done = subprocess.run(
        [
            sys.executable,
            "-m",
            "gradetrail",
            "run",
            str(project / "spec.yaml"),
            "--no-cache",
            "--results-root",
            str(project.parent / "results"),
            "--set",
            "dataset.limit=5",
        ],
        cwd=work,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    # unfixed: exit 0, mean score 1.0000 (the cheating app ran)
    assert done.returncode == 2, done.stdout + done.stderr
    lines = done.stderr.strip().splitlines()
    assert len(lines) == 1 and "the harness changed since its approval" in lines[0]
    assert "new ../work/app.py" in lines[0]
    assert not (project.parent / "results").exists()


def test_a_local_module_the_app_imports_is_part_of_the_harness(project: Path) -> None:
    """app.py (named by model.function) imports a helper module beside it, and that one a
    package of its own (a relative import): both run with the app, so an edit to either,
    unreviewed, is refused like an edit to app.py (it ran, exit 0)."""
    (project / "tuning.py").write_text("from knobs import weights\n\nBOOST = weights.W\n")
    (project / "knobs").mkdir()
    (project / "knobs" / "__init__.py").write_text("")
    (project / "knobs" / "weights.py").write_text("from . import base\n\nW = base.B\n")
    (project / "knobs" / "base.py").write_text("B = 1\n")
    app = project / "app.py"
    app.write_text("import tuning  # noqa: F401\n" + app.read_text())
    spec = gradetrail.load_spec(project / "spec.yaml")
    names = {p.relative_to(project).as_posix() for p in harness_files(spec) if project in p.parents}
    assert {"tuning.py", "knobs/__init__.py", "knobs/weights.py", "knobs/base.py"} <= names
    assert run_cli("approve", str(project / "spec.yaml")).code == 0
    (project / "knobs" / "base.py").write_text("B = 100  # tuned by the loop\n")
    refused = _run(project)
    assert refused.code == 2, refused.err
    assert "changed knobs/base.py" in refused.err_lines[0]


def test_an_edited_app_is_not_imported_by_a_sweep_or_an_estimate(project: Path) -> None:
    """Once approved, an edit to app.py whose import has an effect (here: writing a file)
    is refused, exit 2, by ``gradetrail sweep`` (run and --dry-run) and ``gradetrail run
    --estimate`` before the module is imported. Before, they planned every run first,
    importing the unreviewed app (its top-level code ran), and --dry-run and --estimate
    never checked the approval at all."""
    assert run_cli("approve", str(project / "spec.yaml")).code == 0
    marker = project.parent / "imported"
    with (project / "app.py").open("a") as f:
        f.write(f"\nopen({str(marker)!r}, 'w').close()\n")
    sweep = project / "sweep.yaml"
    sweep.write_text(
        "name: climb\nspec: spec.yaml\naxes:\n  model.name: [6b_finetuning, 175b_finetuning]\n"
    )
    root = str(project.parent / "results")
    for args in (
        ("sweep", str(sweep), "--results-root", root, "--no-cache"),
        ("sweep", str(sweep), "--results-root", root, "--dry-run"),
        ("run", str(project / "spec.yaml"), "--estimate", "--no-cache"),
    ):
        out = run_cli(*args)
        assert out.code == 2, (args, out.err)
        assert "the harness changed since its approval" in out.err_lines[-1]
        assert "changed app.py" in out.err_lines[-1]
        assert not marker.exists(), args


def test_an_override_cannot_change_the_grading_or_lift_the_approval(project: Path) -> None:
    """With the harness approved, a --set (or a sweep's axis) that changes how answers are
    graded (target, scorer, run.truncated...) is refused, exit 2, naming the setting and
    its approved value, as is one turning run.require_approval off; an approval given
    with that --set admits it, and an approval file from before grading was recorded is
    held to the spec file's own. Before, every one of them ran: `--set target={{ 0 }}` scored
    the test split against "0", unreviewed."""
    assert run_cli("approve", str(project / "spec.yaml")).code == 0
    for override, named in (
        ("target='{{ 0 }}'", 'target set to "{{ 0 }}" (approved: "{{ answer.split('),
        ("scorer.marker='Final:'", 'scorer.marker set to "Final:" (approved: "A:")'),
        ("run.truncated=score", 'run.truncated set to "score" (approved: "exclude")'),
        ("scorer={type: exact}", 'scorer.type set to "exact" (approved: "numeric")'),
    ):
        out = _run(project, "--set", override)
        assert out.code == 2, (override, out.err)
        assert named in out.err_lines[-1] and "the harness changed since" in out.err_lines[-1]
    lifted = _run(project, "--set", "run.require_approval=false")
    assert lifted.code == 2 and "--set cannot turn it off" in lifted.err_lines[-1]
    assert not (project.parent / "results").exists()
    # approved with the override: admitted; an approval of before keeps the file's own
    assert run_cli("approve", str(project / "spec.yaml"), "--set", "run.truncated=score").code == 0
    assert _run(project, "--set", "run.truncated=score").code == 0
    record = json.loads((project / "spec.approval.json").read_text())
    del record["grading"]
    (project / "spec.approval.json").write_text(json.dumps(record))
    old = _run(project, "--set", "run.truncated=score")
    assert old.code == 2 and 'run.truncated set to "score" (approved: "exclude")' in old.err


def test_an_override_cannot_move_held_out_ids_into_the_tuning_split(project: Path) -> None:
    """A hash split approved at seed 0: `--set dataset.split.seed=1` (which would put a
    fifth of the held-out ids into train) or another id field is refused, exit 2, naming
    it; the split's name stays free (the loop reports on test). Before, any seed ran, so
    a loop trying seeds saw every held-out sample on its tuning split."""
    split = "dataset.split={name: test, seed: 0, fractions: {train: 0.8, test: 0.2}}"
    assert run_cli("approve", str(project / "spec.yaml"), "--set", split).code == 0
    for override, named in (
        ("dataset.split.seed=1", "dataset.split.seed set to 1 (approved: 0)"),
        ("dataset.id_field=question", 'dataset.id_field set to "question" (approved: "id")'),
    ):
        out = _run(project, "--set", split, "--set", override)
        assert out.code == 2 and named in out.err_lines[-1], (override, out.err)
    assert not (project.parent / "results").exists()


def test_a_module_outside_the_project_is_not_run_unapproved(
    project: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """An override pointing model.function at a module no file of the project holds (one
    elsewhere on sys.path, an installed one), with app.py kept in the harness through
    model.tools_module, is refused, exit 2, naming the module, before it is imported.
    Before, every approved file was unchanged, so the outside module ran unreviewed."""
    elsewhere = project.parent / "elsewhere"
    elsewhere.mkdir()
    marker = project.parent / "ran"
    (elsewhere / "approval_outside_app.py").write_text(
        f"open({str(marker)!r}, 'w').close()\n\ndef answer(request):\n    return 'A: 1'\n"
    )
    monkeypatch.syspath_prepend(str(elsewhere))
    monkeypatch.delitem(sys.modules, "approval_outside_app", raising=False)
    assert run_cli("approve", str(project / "spec.yaml")).code == 0
    out = _run(
        project,
        "--set",
        "model.function=approval_outside_app:answer",
        "--set",
        "model.tools_module=app",
    )
    assert out.code == 2, out.err
    assert 'modules_outside_project set to ["approval_outside_app"] (approved: [])' in out.err
    assert not marker.exists()
