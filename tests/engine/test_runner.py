"""End-to-end runs of the bundled GSM8K example through the CLI and the Python API."""

from __future__ import annotations

import json
import os
import subprocess
from pathlib import Path

import pytest
from paths import GSM8K_SPEC

import gradetrail

#: the dataset authors' is_correct counts (examples/data/gsm8k/README.md)
AUTHOR_LABELS = {
    "6b_finetuning": 286,
    "6b_verification": 515,
    "175b_finetuning": 458,
    "175b_verification": 742,
}


def _run_dir(stdout: str) -> Path:
    line = next(ln for ln in stdout.splitlines() if ln.strip().startswith("results "))
    return Path(line.split(None, 1)[1].strip())


def _json_run(cli, *args: str) -> dict:
    out = cli("run", *args, "--json")
    assert out.exit_code == 0, out.stderr
    return json.loads(out.stdout)


@pytest.mark.parametrize("model", sorted(AUTHOR_LABELS))
def test_bundled_example_reproduces_author_labels(cli, model: str) -> None:
    """Each recorded model's mean score equals the authors' is_correct labels exactly."""
    manifest = _json_run(cli, str(GSM8K_SPEC), "--set", f"model.name={model}")
    assert manifest["counts"] == {"scored": 1319}
    assert manifest["score"]["n"] == 1319
    assert manifest["score"]["mean"] == pytest.approx(AUTHOR_LABELS[model] / 1319, abs=1e-12)
    assert manifest["requested_model"] == model
    assert manifest["status"] == "complete"


def test_rows_agree_with_author_labels_per_sample(cli, tmp_path: Path) -> None:
    """Every row's score matches that problem's is_correct label, in input order."""
    manifest = _json_run(cli, str(GSM8K_SPEC), "--set", "model.name=175b_finetuning")
    run_dir = tmp_path / "results" / f"gsm8k-{manifest['identity_hash'][:12]}"
    rows = gradetrail.read_results(run_dir)
    labels = [
        json.loads(line)["175b_finetuning"]["is_correct"]
        for line in (GSM8K_SPEC.parent / "data/gsm8k/example_model_solutions.jsonl").open()
    ]
    assert [r["sample_id"] for r in rows] == [str(i) for i in range(1, 1320)]
    assert [r["score"] == 1.0 for r in rows] == labels
    first = rows[0]
    assert first["target"] == "18"
    assert first["scorer"]["extracted"] == "4" and first["scorer"]["marker_found"] is True


def test_second_run_is_all_cache_hits_with_no_provider_call(cli) -> None:
    """A re-run reads every response from the cache: 1319/1319 hits, zero attempts."""
    first = _json_run(cli, str(GSM8K_SPEC))
    assert first["cache_hits"] == 0
    second = _json_run(cli, str(GSM8K_SPEC))
    assert second["cache_hits"] == 1319
    assert second["identity_hash"] == first["identity_hash"]
    assert second["score"] == first["score"]


def test_scorer_change_keeps_every_cache_hit(cli) -> None:
    """Changing the scorer re-scores from the cache: new identity, every response a hit."""
    first = _json_run(cli, str(GSM8K_SPEC))
    regex = _json_run(
        cli,
        str(GSM8K_SPEC),
        "--set",
        "scorer={type: regex, pattern: 'A: {{ target }}$', ignore_case: true}",
        "--set",
        "target={{ answer.split('####')[-1] | trim }}",
    )
    assert regex["cache_hits"] == 1319
    assert regex["identity_hash"] != first["identity_hash"]
    # the regex anchored on the final line agrees with the numeric scorer on this data
    assert regex["score"]["mean"] == pytest.approx(742 / 1319, abs=0.01)


def test_prompt_edit_misses_only_changed_samples(cli) -> None:
    """Editing the prompt template misses exactly the samples whose rendered prompt changed."""
    _json_run(cli, str(GSM8K_SPEC))
    questions = [
        json.loads(line)["question"]
        for line in (GSM8K_SPEC.parent / "data/gsm8k/test.jsonl").open()
    ]
    changed = sum("Janet" in q for q in questions)
    assert 0 < changed < 1319
    edited = (
        'Solve the math word problem. End with a line "A: <answer>".\n\n'
        "Q: {{ question }}\n{% if 'Janet' in question %}Think step by step.\n{% endif %}"
    )
    second = _json_run(cli, str(GSM8K_SPEC), "--set", f"prompt={json.dumps(edited)}")
    assert second["cache_hits"] == 1319 - changed


def test_model_change_misses_the_cache(cli) -> None:
    """Another model name is another request: no hit."""
    _json_run(cli, str(GSM8K_SPEC))
    other = _json_run(cli, str(GSM8K_SPEC), "--set", "model.name=6b_finetuning")
    assert other["cache_hits"] == 0


def test_no_cache_flag_neither_reads_nor_writes(cli, cache_path: Path) -> None:
    """--no-cache runs without touching the cache file."""
    manifest = _json_run(cli, str(GSM8K_SPEC), "--no-cache")
    assert manifest["cache_hits"] == 0
    assert not cache_path.exists()


def test_manifest_records_identity_versions_and_totals(cli, tmp_path: Path) -> None:
    """The manifest names the hashes, models, versions, times and per-state counts."""
    m = _json_run(cli, str(GSM8K_SPEC), "--set", "run.concurrency=3")
    run_dir = tmp_path / "results" / f"gsm8k-{m['identity_hash'][:12]}"
    assert Path(m.pop("run_dir")).resolve() == run_dir.resolve()  # --json names the run dir
    on_disk = gradetrail.read_manifest(run_dir)
    assert on_disk == m
    for key in ("identity_hash", "spec_hash", "dataset_hash"):
        assert len(m[key]) == 64
    assert m["file_hashes"]["dataset"] == m["dataset_hash"]
    assert "recordings" in m["file_hashes"]
    assert m["served_models"] == {"175b_verification": 1319}
    assert m["gradetrail_version"] == gradetrail.__version__
    assert m["python_version"].startswith("3.")
    assert m["wall_time_s"] > 0 and m["started_at"] <= m["ended_at"]
    assert m["overrides"] == ["run.concurrency=3"]
    assert m["cost_usd"] is None


def test_identity_ignores_execution_settings_but_not_spec_values(cli) -> None:
    """Concurrency and retries stay out of the identity hash; a --set spec value enters it."""
    base = _json_run(cli, str(GSM8K_SPEC))["identity_hash"]
    knobs = _json_run(
        cli, str(GSM8K_SPEC), "--set", "run.concurrency=2", "--set", "run.max_retries=0"
    )
    assert knobs["identity_hash"] == base
    limited = _json_run(cli, str(GSM8K_SPEC), "--set", "dataset.limit=10")
    assert limited["identity_hash"] != base
    assert limited["n_samples"] == 10


def test_summary_names_counts_score_and_results_dir(cli) -> None:
    """The printed summary has the explicit denominator, CI, cache hits and the run dir."""
    out = cli("run", str(GSM8K_SPEC))
    assert out.exit_code == 0
    assert "scored 1319" in out.stdout and "provider_error 0" in out.stdout
    assert "0.5625" in out.stdout and "95% CI" in out.stdout
    assert "cache hits" in out.stdout
    assert _run_dir(out.stdout).name.startswith("gsm8k-")


def test_python_api_runs_and_reads_results(tmp_path: Path) -> None:
    """load_spec + run_eval + read_results work without the CLI."""
    spec = gradetrail.load_spec(GSM8K_SPEC, ["model.name=6b_verification", "dataset.limit=50"])
    result = gradetrail.run_eval(spec, results_root=tmp_path / "r")
    rows = gradetrail.read_results(result.run_dir)
    assert len(rows) == 50
    assert result.manifest.score is not None
    assert result.manifest.score.mean == pytest.approx(sum(r["score"] for r in rows) / 50)


def test_runs_lists_run_directories_with_their_models(cli, tmp_path: Path) -> None:
    """`gradetrail runs` tells which run directory holds which model and score."""
    for model in ("6b_finetuning", "175b_verification"):
        assert cli("run", str(GSM8K_SPEC), "--set", f"model.name={model}").exit_code == 0
    out = cli("runs", "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 0
    lines = out.stdout.splitlines()
    assert lines[0].split() == [
        "run", "directory", "identity", "model", "base", "url", "dataset",
        "status", "samples", "errors", "mean", "started", "labels",
    ]  # fmt: skip
    assert len(lines) == 3
    by_model = {line.split()[2]: line.split() for line in lines[1:]}
    fine = by_model["replay:6b_finetuning"]
    assert fine[3:5] == ["default", "data/gsm8k/test.jsonl"]
    assert fine[6:10] == ["complete", "1319", "0", "0.2168"]
    assert by_model["replay:175b_verification"][9] == "0.5625"
    assert Path(fine[0]).is_dir() and Path(fine[0]).name.endswith(fine[1])


def test_runs_survives_a_malformed_manifest(cli, tmp_path: Path) -> None:
    """One run directory with a manifest of the wrong shape does not hide the others."""
    assert cli("run", str(GSM8K_SPEC), "--set", "dataset.limit=5").exit_code == 0
    bad = tmp_path / "results" / "bad-000000000000"
    bad.mkdir()
    (bad / "manifest.json").write_text(json.dumps({"score": "x", "n_samples": [1]}))
    out = cli("runs", "--results-root", str(tmp_path / "results"))
    assert out.exit_code == 0
    assert "replay:175b_verification" in out.stdout and "bad-000000000000" in out.stdout


def test_the_git_probe_leaves_the_repository_as_it_was(tmp_path: Path) -> None:
    """The manifest's git probe only reads: ``git status`` refreshes no index (a probe a
    refused run ends early must not leave ``.git/index.lock`` behind, nor rewrite it)."""
    from gradetrail.rundir.manifest import GitProbe

    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "notes.txt").write_text("one\n")
    for args in (["init", "-q"], ["add", "notes.txt"], ["commit", "-q", "-m", "one"]):
        ident = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
        subprocess.run(["git", *ident, *args], cwd=repo, check=True, capture_output=True)
    os.utime(repo / "notes.txt", ns=(1_000_000_000, 1_000_000_000))  # stat differs, text not
    index = (repo / ".git" / "index").read_bytes()
    with GitProbe(repo) as probe:
        sha, dirty = probe.result()
    assert sha and dirty is False
    assert (repo / ".git" / "index").read_bytes() == index
    assert not (repo / ".git" / "index.lock").exists()
    GitProbe(repo).close()  # ended before it answered: nothing left behind either
    assert not (repo / ".git" / "index.lock").exists()


def test_manifest_records_the_git_state_of_the_working_directory(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Run from a git repository, the manifest has its HEAD and whether tracked files
    changed (git runs while the run is planned); run from elsewhere, neither."""
    repo = tmp_path / "repo"
    repo.mkdir()
    (repo / "notes.txt").write_text("one\n")

    def git(*args: str) -> str:
        ident = ["-c", "user.name=t", "-c", "user.email=t@example.org"]
        done = subprocess.run(["git", *ident, *args], cwd=repo, capture_output=True, text=True)
        assert done.returncode == 0, done.stderr
        return done.stdout.strip()

    git("init", "-q")
    git("add", "notes.txt")
    git("commit", "-q", "-m", "one")
    head = git("rev-parse", "HEAD")
    spec = gradetrail.load_spec(GSM8K_SPEC, ["dataset.limit=2"])
    monkeypatch.chdir(repo)
    clean = gradetrail.run_eval(spec, results_root=tmp_path / "clean", use_cache=False)
    (repo / "notes.txt").write_text("two\n")
    dirty = gradetrail.run_eval(spec, results_root=tmp_path / "dirty", use_cache=False)
    monkeypatch.chdir(tmp_path)  # not a repository
    outside = gradetrail.run_eval(spec, results_root=tmp_path / "out", use_cache=False)
    got = [(r.manifest.git_sha, r.manifest.git_dirty) for r in (clean, dirty, outside)]
    assert got == [(head, False), (head, True), (None, None)]
    assert gradetrail.read_manifest(clean.run_dir)["git_sha"] == head
