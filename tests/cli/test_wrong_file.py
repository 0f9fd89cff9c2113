"""A new user's first mistakes with the command line: the wrong kind of file for the
command (a sweep file to `run`, an eval spec to `sweep`, a dataset to either) and a typo
in a sweep file's keys. Each is one line saying what the file is and the command that
reads it, exit 2, and no run directory."""

from __future__ import annotations

from pathlib import Path

from paths import GSM8K_DATA, GSM8K_SPEC, ROOT

SWEEP = ROOT / "examples" / "gsm8k-sweep.yaml"


def test_a_sweep_file_given_to_run_names_the_sweep_command(cli, tmp_path: Path) -> None:
    """Before: six lines (spec, axes, baseline, gate: unknown key; dataset, model:
    required field is missing), none saying the file is a sweep."""
    out = cli("run", str(SWEEP))
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [
        f"error: {SWEEP}: a sweep file (it has spec and axes), not an eval spec; "
        f"run it with gradetrail sweep {SWEEP}"
    ]
    assert not (tmp_path / "results").exists()


def test_an_eval_spec_given_to_sweep_names_the_run_command(cli, tmp_path: Path) -> None:
    """Before: seven lines, among them "dataset: unknown key; did you mean 'dataset'?"."""
    out = cli("sweep", str(GSM8K_SPEC), "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [
        f"error: {GSM8K_SPEC}: an eval spec, not a sweep file (a sweep names a spec and its "
        f"axes); run it with gradetrail run {GSM8K_SPEC}, or gradetrail run {GSM8K_SPEC} "
        f"--models A,B to compare models (docs/sweeps.md)"
    ]
    assert not (tmp_path / "results").exists()


def test_a_dataset_given_to_run_says_to_name_it_in_a_spec(cli, tmp_path: Path) -> None:
    """Before: "line 2: expected '<document start>', but found '{'; fix the YAML syntax"."""
    data = GSM8K_DATA / "test.jsonl"
    out = cli("run", str(data))
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [
        f"error: {data}: a dataset file, not a spec file; name it in a spec's dataset.path "
        f"and run the spec (docs/spec.md)"
    ]


def test_a_typo_in_a_sweep_file_suggests_the_sweep_key(cli, tmp_path: Path) -> None:
    """Before: the suggestion was drawn from an eval spec's keys (`axs: unknown key;
    allowed: ci, dataset, ...` and `axes: required field is missing`)."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: s\nspec: {GSM8K_SPEC}\naxs: {{model.name: [6b_finetuning]}}\n")
    out = cli("sweep", str(sweep), "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [f"error: {sweep}: axs: unknown key; did you mean 'axes'?"]


def test_a_typo_in_a_sweep_axis_names_the_axis(cli, tmp_path: Path) -> None:
    """An axis is applied as an override of the spec: its error names the cell and the
    axis (`axis model.nam`), never a `--set` nobody typed."""
    sweep = tmp_path / "sweep.yaml"
    sweep.write_text(f"name: s\nspec: {GSM8K_SPEC}\naxes: {{model.nam: [a]}}\n")
    out = cli("sweep", str(sweep), "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [
        f"error: {sweep}: cell a: {GSM8K_SPEC}: axis model.nam: unknown key; did you mean 'name'?"
    ]


def test_a_results_root_or_a_missing_run_given_as_a_run_is_named(
    cli, tmp_path: Path, monkeypatch
) -> None:
    """Before: `gate results results` and a mistyped run directory both said
    "not a run directory (no manifest.json)"; now the root names one of its runs and
    `gradetrail runs`, and a path that does not exist says so (gate, diff, export)."""
    monkeypatch.chdir(tmp_path)
    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=3").exit_code == 0
    (run,) = [p.name for p in (tmp_path / "results").iterdir()]
    root_line = (
        "results: a results root, not a run directory; name one of its 1 runs, "
        f"e.g. results/{run} (gradetrail runs results lists them)"
    )
    out = cli("gate", "results", "results")
    assert (out.exit_code, out.stderr.splitlines()) == (2, [f"error: baseline {root_line}"])
    out = cli("diff", f"results/{run}", "results")
    assert (out.exit_code, out.stderr.splitlines()) == (2, [f"error: {root_line}"])
    out = cli("export", "results", "--format", "csv")
    assert (out.exit_code, out.stderr.splitlines()) == (2, [f"error: {root_line}"])
    out = cli("gate", "results/gsm8k-0000", f"results/{run}")
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [
        "error: baseline results/gsm8k-0000: no such run directory; "
        "gradetrail runs lists the run directories"
    ]


def test_a_spec_path_given_from_the_working_directory_says_where_it_is_read_from(
    cli, gsm8k_copy: Path, monkeypatch
) -> None:
    """`--set dataset.path=example/data/gsm8k/test.jsonl` typed beside the spec's
    directory: the file exists from here but a spec path is read from the spec's
    directory. Before: "not found; check the path in the spec"; now the line says so and
    gives the path that reaches it. A path that names nothing keeps the old fix."""
    root = gsm8k_copy.parent.parent
    monkeypatch.chdir(root)
    spec = "example/gsm8k.yaml"
    out = cli("run", spec, "--set", "dataset.path=example/data/gsm8k/test.jsonl")
    assert out.exit_code == 2
    assert out.stderr.splitlines() == [
        f"error: {spec}: dataset.path: {root}/example/example/data/gsm8k/test.jsonl not found; "
        f"spec paths are relative to the spec's directory ({root}/example): "
        "example/data/gsm8k/test.jsonl from the working directory is data/gsm8k/test.jsonl "
        "from there"
    ]
    recordings = "example/data/gsm8k/example_model_solutions.jsonl"
    out = cli("run", spec, "--set", f"model.recordings.path={recordings}")
    assert out.exit_code == 2
    assert "is data/gsm8k/example_model_solutions.jsonl from there" in out.stderr
    out = cli("run", spec, "--set", "dataset.path=nope.jsonl")
    assert out.stderr.splitlines() == [
        f"error: {spec}: dataset.path: {root}/example/nope.jsonl not found; "
        "check the path in the spec"
    ]


def test_one_run_given_as_baseline_and_candidate_is_warned_of(cli, tmp_path: Path) -> None:
    """Before: `gate R R` (a pasted path, a CI variable never set to the new run) passed
    without a word: a run always passes against itself. Now it still gives its verdict
    (the suite gates runs against themselves on purpose) with a warning saying so, in
    the text and in --github; a copy of the run is another directory, with no warning."""
    import shutil

    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=5").exit_code == 0
    (run,) = (tmp_path / "results").iterdir()
    warning = (
        "baseline and candidate are the same run directory: a run passes against itself, "
        "so this says nothing about a candidate; gate the candidate's run"
    )
    out = cli("gate", str(run), f"{run}/", "--github")
    assert out.exit_code == 1  # n = 5: too few samples for a pass
    assert f"::warning title=gradetrail gate::{warning}" in out.stdout.splitlines()
    copy = shutil.copytree(run, tmp_path / "copy")
    out = cli("gate", str(run), str(copy), "--json")
    assert out.exit_code == 1 and "same run directory" not in out.stdout
