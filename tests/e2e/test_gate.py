"""The gate on real `gradetrail run` output: the GSM8K 175B pair from the authors' data."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from paths import GSM8K_SPEC


@pytest.fixture
def runs(cli, tmp_path: Path) -> dict[str, Path]:
    """Run directories of the bundled example for both 175B models."""
    out = {}
    for model in ("175b_verification", "175b_finetuning"):
        result = cli("run", str(GSM8K_SPEC), "--set", f"model.name={model}", "--json")
        assert result.exit_code == 0
        identity = json.loads(result.stdout)["identity_hash"]
        out[model] = tmp_path / "results" / f"gsm8k-{identity[:12]}"
    return out


def test_weaker_candidate_fails_the_gate(cli, runs: dict[str, Path]) -> None:
    """175b_finetuning as candidate against 175b_verification fails: exit 1, 360 vs 76."""
    out = cli("gate", str(runs["175b_verification"]), str(runs["175b_finetuning"]), "--json")
    assert out.exit_code == 1
    verdict = json.loads(out.stdout)
    assert (verdict["only_baseline"], verdict["only_candidate"]) == (360, 76)
    assert verdict["n"] == 1319 and verdict["method"] == "tango"
    assert verdict["delta"] == pytest.approx((458 - 742) / 1319)
    assert verdict["passed"] is False
    assert len(verdict["regressed"]) == 360 and len(verdict["improved"]) == 76
    assert verdict["identity_differences"] == [
        'spec model.name: "175b_verification" -> "175b_finetuning"'
    ]


def test_stronger_candidate_and_self_pass_the_gate(cli, runs: dict[str, Path]) -> None:
    """The reverse direction passes, and a run against itself passes."""
    reverse = cli("gate", str(runs["175b_finetuning"]), str(runs["175b_verification"]))
    assert reverse.exit_code == 0
    same = cli("gate", str(runs["175b_verification"]), str(runs["175b_verification"]), "--json")
    assert same.exit_code == 0
    assert json.loads(same.stdout)["identity_differences"] == []


def test_identity_differences_name_spec_keys_and_files(cli, gsm8k_copy: Path, tmp_path) -> None:
    """A changed prompt and a changed dataset file are named as where the identities differ;
    execution-only settings (concurrency) are not."""
    from gradetrail.rundir.manifest import identity_differences
    from gradetrail.rundir.results import read_manifest

    base = json.loads(cli("run", str(gsm8k_copy), "--json").stdout)
    data = gsm8k_copy.parent / "data" / "gsm8k" / "test.jsonl"
    data.write_text(data.read_text() + "\n")  # same rows, other bytes: another dataset hash
    cand = json.loads(
        cli(
            "run", str(gsm8k_copy), "--json", "--set", "run.concurrency=3",
            "--set", "prompt=Question: {{ question }}",
        ).stdout
    )  # fmt: skip
    diffs = identity_differences(read_manifest(base["run_dir"]), read_manifest(cand["run_dir"]))
    assert diffs[0].startswith('spec prompt: "Solve the math word problem.')
    assert "…" in diffs[0]  # a long value is cut, so the line stays one line
    assert diffs[0].endswith(' -> "Question: {{ question }}"')
    assert diffs[1] == (f"dataset hash: {base['dataset_hash'][:12]} -> {cand['dataset_hash'][:12]}")
    assert not any("concurrency" in d for d in diffs)


def test_a_candidate_scored_differently_cannot_pass_the_gate(cli, runs, tmp_path: Path) -> None:
    """The weaker model with its scorer loosened (every number within 1000 of the
    target's passes) would pass the gate on the scorer, not the answers: refused, exit 2,
    naming the setting; --allow-different-scorers compares anyway. The answers are the
    cached ones: the loosened run made no call."""
    loose = cli(
        "run",
        str(GSM8K_SPEC),
        "--set",
        "model.name=175b_finetuning",
        "--set",
        "scorer.abs_tol=1000",
        "--json",
    )
    assert loose.exit_code == 0, loose.stderr
    summary = json.loads(loose.stdout)
    assert summary["cache_hits"] == 1319 and summary["score"]["mean"] > 0.9
    loose_dir = tmp_path / "results" / f"gsm8k-{summary['identity_hash'][:12]}"
    base = str(runs["175b_verification"])
    out = cli("gate", base, str(loose_dir))
    assert out.exit_code == 2 and len(out.stderr.strip().splitlines()) == 1
    assert (
        "baseline and candidate were scored differently (spec scorer.abs_tol: 0.0 -> 1000.0)"
        in (out.stderr)
    )
    assert "--allow-different-scorers" in out.stderr
    anyway = cli("gate", base, str(loose_dir), "--allow-different-scorers", "--json")
    assert anyway.exit_code == 0 and json.loads(anyway.stdout)["passed"]
    # the same scorer on both sides: the weaker model still fails as before
    assert cli("gate", base, str(runs["175b_finetuning"])).exit_code == 1


def test_scoring_differences_name_scorer_keys_and_scorer_files_only() -> None:
    """A model or prompt change is not a scoring difference; a target, scorer setting,
    judge file or a metric's judge file is."""
    from gradetrail.rundir.manifest import scoring_differences

    spec = {"name": "e", "model": {"name": "a"}, "scorer": {"type": "numeric", "abs_tol": 0.0}}
    base = {"identity_hash": "1", "spec": spec, "file_hashes": {"dataset": "d", "judge": "j"}}

    def cand(**changes: object) -> dict:
        return {**base, **changes, "identity_hash": "2"}

    other_model = {**spec, "model": {"name": "b"}, "prompt": "new"}
    assert scoring_differences(base, cand(spec=other_model)) == []
    looser = {**spec, "scorer": {"type": "numeric", "abs_tol": 1.0}}
    assert scoring_differences(base, cand(spec=looser)) == ["spec scorer.abs_tol: 0.0 -> 1.0"]
    assert scoring_differences(base, cand(spec={**spec, "target": "{{ a }}"})) == [
        'spec target: (absent) -> "{{ a }}"'
    ]
    judged = {"dataset": "d", "judge": "k", "accuracy.judge": "m", "recordings": "r"}
    assert scoring_differences(base, cand(file_hashes=judged)) == [
        "accuracy.judge file hash: none -> m",
        "judge file hash: j -> k",
    ]
    assert scoring_differences(base, {**base}) == []  # the same identity: nothing to say


def refused_as_edited(cand: Path, disagreement: str) -> list[str]:
    """The gate's one line for a complete candidate whose results.jsonl ``disagreement``."""
    return [
        f"error: candidate run {cand} is complete but its results.jsonl {disagreement}: the "
        "file was edited or damaged since the run wrote it; run the same spec again to "
        "rewrite it from the cache"
    ]


def test_rows_deleted_from_a_complete_run_are_refused(cli, runs: dict[str, Path]) -> None:
    """A complete run whose results.jsonl lost its failing rows (861 of 1319 deleted, the
    manifest untouched) is refused, exit 2: before, --unpaired passed it (candidate mean
    1.0000 against 0.5625, superiority PASS, exit 0)."""
    cand = runs["175b_finetuning"]
    results = cand / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    kept = [line for line in lines if json.loads(line)["score"] == 1.0]
    assert (len(lines), len(kept)) == (1319, 458)
    results.write_text("".join(kept))
    base = str(runs["175b_verification"])
    out = cli("gate", base, str(cand), "--unpaired", "--test", "superiority")
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == refused_as_edited(
        cand, "holds 458 rows (458 scored) where its manifest counts 1319 rows (1319 scored)"
    )
    # --allow-partial is the way to gate what is there on purpose
    assert cli("gate", base, str(cand), "--unpaired", "--allow-partial").exit_code == 0


def test_a_damaged_line_in_both_runs_is_refused(cli, runs: dict[str, Path]) -> None:
    """The same 300 rows gone from both complete runs (the reader skips a malformed line)
    is refused rather than gated on the 1019 that are left."""
    for run in runs.values():
        results = run / "results.jsonl"
        lines = results.read_text().splitlines(keepends=True)
        lines[:300] = ["{not json\n"] * 300
        results.write_text("".join(lines))
    base, cand = runs["175b_verification"], runs["175b_finetuning"]
    out = cli("gate", str(base), str(cand), "--json")
    assert out.exit_code == 2
    assert "holds 1019 rows (1019 scored) where its manifest counts 1319" in out.stderr


def test_scores_edited_in_a_complete_run_are_refused(cli, runs: dict[str, Path]) -> None:
    """300 of the candidate's regressions re-scored 1.0 in results.jsonl (their responses
    and the manifest untouched) are refused, exit 2: before, the gate passed them (lower
    bound -0.0053 >= -0.02, exit 0) while the manifest still said 0.3472; and so with
    --allow-partial, which lets rows be missing, not re-scored (it passed them, exit 0)."""
    base, cand = runs["175b_verification"], runs["175b_finetuning"]
    before = {r["sample_id"]: r["score"] for r in map(json.loads, (base / "results.jsonl").open())}
    results = cand / "results.jsonl"
    rows = [json.loads(line) for line in results.open()]
    flipped = 0
    for row in rows:
        if row["score"] == 0.0 and before[row["sample_id"]] == 1.0 and flipped < 300:
            row["score"], flipped = 1.0, flipped + 1
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    out = cli("gate", str(base), str(cand))
    assert out.exit_code == 2
    assert out.stderr.strip().splitlines() == refused_as_edited(
        cand, "gives mean 0.574678 over 1319 samples where its manifest records mean 0.347233 "
        "over 1319",
    )  # fmt: skip
    partial = cli("gate", str(base), str(cand), "--allow-partial")
    assert partial.exit_code == 2 and "gives mean 0.574678" in partial.stderr


@pytest.mark.parametrize("score", ["NaN", "1000.0", '"1.0"', "true"])
def test_a_score_outside_0_1_is_refused(cli, runs: dict[str, Path], score: str) -> None:
    """A scored row whose score is not a number in [0, 1] is refused naming the row; a
    score that is not a JSON number makes the row malformed (skipped by every reader), so
    the run holds a row fewer than its manifest counts."""
    base, cand = runs["175b_verification"], runs["175b_finetuning"]
    results = cand / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    row = json.loads(lines[2])
    lines[2] = lines[2].replace(f'"score":{row["score"]}', f'"score":{score}', 1)
    results.write_text("".join(lines))
    out = cli("gate", str(base), str(cand))
    assert out.exit_code == 2
    if score in ('"1.0"', "true"):
        assert out.stderr.startswith(
            f"error: candidate run {cand} is complete but its results.jsonl holds 1318 rows "
            "(1318 scored) where its manifest counts 1319 rows (1319 scored): the file was "
            "edited"
        )
        return
    shown = {"NaN": "nan"}.get(score, score)
    refused = (
        f"error: candidate run {cand} is complete but sample {row['sample_id']!r} epoch 1 "
        f"has score {shown}, not a number in [0, 1]: the file was edited"
    )
    assert out.stderr.startswith(refused)
    partial = cli("gate", str(base), str(cand), "--allow-partial")  # missing rows, not this
    assert partial.exit_code == 2 and partial.stderr.startswith(refused)
