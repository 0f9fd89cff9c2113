"""`gradetrail runs` and `gradetrail diff` on a complete run whose results.jsonl no longer
agrees with its manifest (rows deleted, scores edited): `runs` marks it and shows no
mean, `diff` refuses it (exit 2) as `gradetrail gate` does."""

from __future__ import annotations

import hashlib
import json
import shutil
from pathlib import Path

import pytest
from cli_support import run_cli
from paths import GSM8K_SPEC

N = 40


@pytest.fixture(scope="module")
def made(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """Two complete runs of the first 40 GSM8K problems (175b_verification, then
    6b_finetuning), kept aside: each test copies them into its own results root."""
    tmp = tmp_path_factory.mktemp("runs")
    out = {}
    for model in ("175b_verification", "6b_finetuning"):
        done = run_cli(
            "run", str(GSM8K_SPEC), "--set", f"model.name={model}", "--set",
            f"dataset.limit={N}", "--results-root", str(tmp / model), "--cache",
            str(tmp / "c.db"),
        )  # fmt: skip
        assert done.code == 0, done.err
        out[model] = next((tmp / model).iterdir())
    return out


def copied(made: dict[str, Path], root: Path) -> tuple[Path, Path]:
    """The two runs copied under ``root``: (baseline, candidate)."""
    return tuple(  # type: ignore[return-value]
        Path(shutil.copytree(made[m], root / made[m].name))
        for m in ("175b_verification", "6b_finetuning")
    )


def rewrite(run_dir: Path, change) -> list[dict]:  # noqa: ANN001
    """Apply ``change`` (rows -> rows) to the run's results.jsonl, as an editor would."""
    path = run_dir / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows = change(rows)
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return rows


def manifest_mean(run_dir: Path) -> float:
    return json.loads((run_dir / "manifest.json").read_text())["score"]["mean"]


def test_runs_marks_a_run_whose_scores_were_edited(made: dict[str, Path], tmp_path: Path) -> None:
    """Every failing row of the 6b_finetuning run re-scored 1: `runs` reads ROWS DISAGREE
    with mean n/a for it (it printed complete and the manifest's 0.1500 before) and says on
    stderr what disagrees and what to do; the intact run keeps its mean; exit 0."""
    base, cand = copied(made, tmp_path / "results")
    recorded = manifest_mean(cand)
    assert recorded == pytest.approx(6 / N)
    rewrite(cand, lambda rows: [{**r, "score": 1.0} for r in rows])
    out = run_cli("runs", "--results-root", str(tmp_path / "results"))
    assert out.code == 0, out.err
    lines = {line.split()[0]: line for line in out.out.splitlines()[1:]}
    assert "ROWS DISAGREE" in lines[str(cand)] and f"{recorded:.4f}" not in lines[str(cand)]
    assert lines[str(cand)].split()[-2] == "n/a"  # the mean column (no labels after it)
    assert "complete" in lines[str(base)] and f"{manifest_mean(base):.4f}" in lines[str(base)]
    assert out.err.splitlines() == [
        f"warning: {cand}: ROWS DISAGREE: complete but its results.jsonl gives mean "
        f"1.000000 over {N} samples where its manifest records mean {recorded:.6f} over "
        f"{N}: the file was edited or damaged since the run wrote it; run the same spec "
        "again to rewrite it from the cache"
    ]


def test_runs_marks_a_run_whose_failing_rows_were_deleted(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """The 34 failing rows deleted (6 left, all right): marked, counts named."""
    _, cand = copied(made, tmp_path / "results")
    kept = rewrite(cand, lambda rows: [r for r in rows if r["score"] == 1.0])
    assert len(kept) == 6
    out = run_cli("runs", "--results-root", str(tmp_path / "results"))
    assert out.code == 0 and "ROWS DISAGREE" in out.out
    assert (
        f"its results.jsonl holds 6 rows (6 scored) where its manifest counts {N} rows "
        f"({N} scored)" in out.err
    )


def test_diff_refuses_a_run_whose_rows_disagree(made: dict[str, Path], tmp_path: Path) -> None:
    """`diff` refuses the edited run, exit 2, one line naming it, what disagrees and the
    fix (it printed the join of the edited rows and exit 0 before, the gate line saying
    it could not compare); --allow-partial refuses it too (rows re-scored are not a
    partial run: it let them through before), and lets missing rows through."""
    base, cand = copied(made, tmp_path / "results")
    intact = run_cli("diff", str(base), str(cand))
    assert intact.code == 0, intact.err
    recorded = manifest_mean(cand)
    rewrite(cand, lambda rows: [{**r, "score": 1.0} for r in rows])
    out = run_cli("diff", str(base), str(cand))
    assert out.code == 2 and out.out == ""
    assert out.err.splitlines() == [
        f"error: candidate run {cand} is complete but its results.jsonl gives mean 1.000000 "
        f"over {N} samples where its manifest records mean {recorded:.6f} over {N}: the "
        "file was edited or damaged since the run wrote it; run the same spec again to "
        "rewrite it from the cache"
    ]
    swapped = run_cli("diff", str(cand), str(base), "--json")
    assert swapped.code == 2 and swapped.err.startswith(f"error: baseline run {cand} ")
    partial = run_cli("diff", str(base), str(cand), "--allow-partial", "--json")
    assert partial.code == 2 and partial.err.splitlines() == out.err.splitlines()
    lacking_dir = copied(made, tmp_path / "again")[1]
    kept = rewrite(lacking_dir, lambda rows: rows[1:])  # one row missing, none re-scored
    assert run_cli("diff", str(base), str(lacking_dir)).code == 2
    lacking = run_cli("diff", str(base), str(lacking_dir), "--allow-partial", "--json")
    assert lacking.code == 0, lacking.err
    assert json.loads(lacking.out)["gate"]["candidate_mean"] == pytest.approx(
        sum(r["score"] for r in kept) / len(kept)
    )


def test_a_run_records_the_sha256_of_its_results_and_runs_trusts_only_that_file(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """Every run records ``results_sha256``, the SHA-256 of its results.jsonl as written
    (rewritten in input order after a cold run; appended in order by a warm one), so
    `runs` need not read the rows of an unedited run; a run written before the field
    existed (none in its manifest) is still read and held against its manifest."""
    warm = run_cli(
        "run", str(GSM8K_SPEC), "--set", f"dataset.limit={N}", "--results-root",
        str(tmp_path / "warm"), "--cache", str(made["175b_verification"].parent.parent / "c.db"),
    )  # fmt: skip
    assert warm.code == 0, warm.err
    warm_dir = next((tmp_path / "warm").iterdir())
    assert json.loads((warm_dir / "manifest.json").read_text())["cache_hits"] == N
    for run_dir in (*made.values(), warm_dir):
        recorded = json.loads((run_dir / "manifest.json").read_text())["results_sha256"]
        assert recorded == hashlib.sha256((run_dir / "results.jsonl").read_bytes()).hexdigest()

    base, cand = copied(made, tmp_path / "results")
    for run_dir in (base, cand):  # as a run before the fields wrote it
        manifest = json.loads((run_dir / "manifest.json").read_text())
        del manifest["results_sha256"], manifest["figures_sha256"]
        (run_dir / "manifest.json").write_text(json.dumps(manifest))
    intact = run_cli("runs", "--results-root", str(tmp_path / "results"))
    assert intact.code == 0 and intact.err == "" and "ROWS DISAGREE" not in intact.out
    rewrite(cand, lambda rows: [{**r, "score": 1.0} for r in rows])
    edited = run_cli("runs", "--results-root", str(tmp_path / "results"))
    assert "ROWS DISAGREE" in edited.out and str(cand) in edited.err


def test_export_warns_of_a_run_whose_rows_disagree(made: dict[str, Path], tmp_path: Path) -> None:
    """`export` of the re-scored run writes its rows and says on stderr, as `runs` does,
    that they disagree with its manifest (it exported them without a word before); an
    intact run exports with no warning."""
    base, cand = copied(made, tmp_path / "results")
    rewrite(cand, lambda rows: [{**r, "score": 1.0} for r in rows])
    intact = run_cli("export", str(base), "--out", str(tmp_path / "base.csv"))
    assert intact.code == 0 and intact.err == ""
    out = run_cli("export", str(cand), "--out", str(tmp_path / "cand.csv"))
    assert out.code == 0 and (tmp_path / "cand.csv").is_file()
    assert out.err.splitlines() == [
        f"warning: {cand}: ROWS DISAGREE: complete but its results.jsonl gives mean 1.000000 "
        f"over {N} samples where its manifest records mean {manifest_mean(cand):.6f} over "
        f"{N}: the file was edited or damaged since the run wrote it; run the same spec "
        "again to rewrite it from the cache"
    ]


def test_runs_takes_the_results_root_as_view_does(made: dict[str, Path], tmp_path: Path) -> None:
    """`gradetrail runs results`, as `gradetrail view results`: before, "Got unexpected
    extra argument(s)", exit 2; now the same listing as `--results-root results`, and
    two different roots at once are one line, exit 2."""
    root = tmp_path / "results"
    copied(made, root)
    positional = run_cli("runs", str(root))
    option = run_cli("runs", "--results-root", str(root))
    assert positional.code == option.code == 0
    assert positional.out == option.out and len(positional.out.splitlines()) == 3
    both = run_cli("runs", str(root), "--results-root", str(tmp_path / "other"))
    assert both.code == 2
    assert both.err.splitlines() == [
        f"error: give the results root once: {root} or --results-root {tmp_path / 'other'}"
    ]


def test_a_baseline_copied_under_the_candidates_name_is_named(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """The baseline's run directory copied in place of the candidate's (named for the
    candidate's identity hash, as a CI step finds it): `gate` and `diff` compared the run
    with itself and said nothing (identity "same", exit 0 or 1 on a run's own scores), and
    `runs` listed the copy under the candidate's name. Each now says the directory is a
    copy of the baseline and that its name carries another identity than its manifest."""
    base, cand = copied(made, tmp_path / "results")
    wrong = cand.name.rsplit("-", 1)[1]
    right = base.name.rsplit("-", 1)[1]
    shutil.rmtree(cand)
    shutil.copytree(base, cand)
    named = (
        f"its directory's name says identity {wrong} but its manifest records {right}: a run "
        "copied or renamed from another directory (the manifest's identity is the run's)"
    )
    copy = (
        f"candidate {cand} is a copy of the baseline run (the same identity, start time and "
        "results.jsonl): a run passes against itself, so this says nothing about a "
        "candidate; gate the candidate's run"
    )
    listed = run_cli("runs", str(tmp_path / "results"))
    assert listed.code == 0 and listed.err.splitlines() == [f"warning: {cand}: {named}"]
    gate = run_cli("gate", str(base), str(cand), "--json")
    assert gate.code == 1
    warnings = json.loads(gate.out)["warnings"]
    assert warnings == [copy, f"candidate run {cand}: {named}"]
    diff = run_cli("diff", str(base), str(cand))
    assert diff.code == 0
    assert (
        f"warning      {copy}" in diff.out
        and f"warning      candidate run {cand}: {named}" in diff.out
    )


def test_a_mean_edited_in_the_manifest_alone_is_named(
    made: dict[str, Path], tmp_path: Path
) -> None:
    """The candidate's manifest.json edited to a mean of 0.95 (its results.jsonl
    untouched, so its SHA-256 still matched and no row was read): `runs` listed 0.9500 as
    the run's mean. The figures' own SHA-256 (figures_sha256) no longer matches: `runs`
    reads ROWS DISAGREE and says the manifest's figures were edited; `diff` refuses it."""
    base, cand = copied(made, tmp_path / "results")
    path = cand / "manifest.json"
    manifest = json.loads(path.read_text())
    assert isinstance(manifest["figures_sha256"], str)
    manifest["score"] |= {"mean": 0.95, "ci_low": 0.9, "ci_high": 0.99}
    path.write_text(json.dumps(manifest))
    edited = (
        "its manifest's figures are not the ones the run wrote (their SHA-256 is not its "
        "figures_sha256: a mean, count or interval edited since)"
    )
    listed = run_cli("runs", str(tmp_path / "results"))
    assert "0.9500" not in listed.out and "ROWS DISAGREE" in listed.out
    assert listed.err.splitlines() == [
        f"warning: {cand}: ROWS DISAGREE: complete but {edited}: the file was edited or "
        "damaged since the run wrote it; run the same spec again to rewrite it from the cache"
    ]
    diff = run_cli("diff", str(base), str(cand))
    assert diff.code == 2 and f"candidate run {cand} is complete but {edited}" in diff.err
