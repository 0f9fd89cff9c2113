"""gradetrail.analysis.diff and `gradetrail diff`: two runs joined on sample id, classified,
gated."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest
from view_support import app_run, gsm8k_labels, gsm8k_run, write_app_eval

from gradetrail.analysis.diff import diff_runs, identity_diff
from gradetrail.analysis.gate import regression_gate


@pytest.fixture(scope="module")
def gsm8k(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, Path]:
    """Run directories of the bundled example: 175b_verification, 175b_finetuning."""
    tmp = tmp_path_factory.mktemp("diff")
    root, cache = tmp / "results", tmp / "cache.sqlite"
    return gsm8k_run(root, cache, "175b_verification"), gsm8k_run(root, cache, "175b_finetuning")


def test_gsm8k_pair_matches_the_authors_labels(gsm8k: tuple[Path, Path]) -> None:
    """76 improved and 360 regressed, exactly the problems the labels say flipped."""
    d = diff_runs(*gsm8k)
    labels = gsm8k_labels()
    flips = {
        kind: {
            str(i)
            for i, p in enumerate(labels, 1)
            if p["175b_verification"]["is_correct"] == (kind == "regressed")
            and p["175b_finetuning"]["is_correct"] == (kind == "improved")
        }
        for kind in ("improved", "regressed")
    }
    assert d.counts["improved"] == 76 and d.counts["regressed"] == 360
    for kind, ids in flips.items():
        assert {s.sample_id for s in d.shown(kinds=frozenset({kind}))} == ids
    assert d.paired == 1319 and d.counts["only_baseline"] == d.counts["only_candidate"] == 0
    assert sum(d.counts.values()) == 1319
    assert d.counts["changed"] + d.counts["same"] == 1319 - 76 - 360
    assert len(d.shown()) == 1319 - d.counts["same"] and len(d.shown(show_all=True)) == 1319


def test_listed_regressions_first_with_extracted_answers(gsm8k: tuple[Path, Path]) -> None:
    """The list leads with the 360 regressions, then the 76 improvements, then the 882
    same-score response changes, each in the baseline's order; every row carries the
    answer its scorer extracted."""
    d = diff_runs(*gsm8k)
    listed = d.shown()
    kinds = [s.kind for s in listed]
    assert kinds == ["regressed"] * 360 + ["improved"] * 76 + ["changed"] * d.counts["changed"]
    first = [s.sample_id for s in listed[:3]]
    assert first == sorted(first, key=int)
    pair = listed[0].epochs[0]
    assert pair.baseline.extracted == "18" and pair.candidate.extracted == "4"
    assert pair.baseline.to_dict()["extracted"] == "18"


def test_gate_is_the_gates_own_result(gsm8k: tuple[Path, Path]) -> None:
    """The diff's verdict and interval are regression_gate's, field for field."""
    d = diff_runs(*gsm8k, margin=0.05)
    assert d.gate == regression_gate(*gsm8k, margin=0.05)
    assert d.gate is not None and not d.gate.passed and d.gate_error is None
    assert (d.gate.only_baseline, d.gate.only_candidate) == (360, 76)


def test_identity_names_the_spec_key_that_differs(gsm8k: tuple[Path, Path]) -> None:
    """Only model.name differs; same dataset, same files; a run against itself is same."""
    ident = diff_runs(*gsm8k).identity
    assert not ident.same
    assert ident.differences == ('spec model.name: "175b_verification" -> "175b_finetuning"',)
    assert not ident.dataset_differs
    assert diff_runs(gsm8k[0], gsm8k[0]).identity.same


def test_identity_diff_names_files_and_leaves_execution_settings_out() -> None:
    """Dataset and judge file hashes are named; concurrency and paths are not identity."""
    a = {
        "identity_hash": "a" * 64,
        "file_hashes": {"dataset": "d1", "judge": "j1"},
        "spec": {"dataset": {"path": "x.jsonl"}, "run": {"concurrency": 4, "epochs": 1}},
    }
    b = {
        "identity_hash": "b" * 64,
        "file_hashes": {"dataset": "d2", "judge": "j2"},
        "spec": {"dataset": {"path": "y.jsonl"}, "run": {"concurrency": 64, "epochs": 3}},
    }
    ident = identity_diff(a, b)
    assert ident.differences == (
        "spec run.epochs: 1 -> 3",
        "dataset hash: d1 -> d2",
        "judge file hash: j1 -> j2",
    )
    assert ident.dataset_differs and not ident.same


def test_epochs_errors_changed_and_unpaired(tmp_path: Path, monkeypatch) -> None:
    """Two epochs: a half-wrong sample regressed, a failed epoch is an error, a reworded
    right answer is changed, a sample the candidate lacks is only_baseline."""
    spec = write_app_eval(tmp_path / "eval", samples=5, epochs=2)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    base = app_run(spec, root, cache, "base", {"q0/1": "wrong", "q0/2": "wrong"}, monkeypatch)
    plan = {"q1/2": "wrong", "q2/1": "fail", "q3/1": "verbose"}
    cand = app_run(spec, root, cache, "cand", plan, monkeypatch, ["dataset.limit=4"])
    d = diff_runs(base, cand)
    kinds = {s.sample_id: s.kind for s in d.samples}
    assert kinds == {
        "q0": "improved",
        "q1": "regressed",
        "q2": "error",
        "q3": "changed",
        "q4": "only_baseline",
    }
    q1 = d.sample("q1")
    assert q1 is not None and (q1.baseline_score, q1.candidate_score) == (1.0, 0.5)
    assert [p.response_changed for p in q1.epochs] == [False, True]
    q2 = d.sample("q2")
    assert q2 is not None and q2.epochs[0].candidate.state == "provider_error"
    assert d.gate is None and "provider_error" in d.gate_error  # the gate refuses errors
    excluded = diff_runs(base, cand, errors="exclude", allow_partial=True)
    assert excluded.gate is not None and excluded.gate.n == 3  # q2 out, q4 unpaired
    assert "spec dataset.limit: null -> 4" in d.identity.differences
    assert d.counts["same"] == 0 and d.paired == 4


def test_cli_prints_counts_gate_and_identity(cli, gsm8k: tuple[Path, Path]) -> None:
    """The table names the counts, the verdict with its interval and the key that differs."""
    out = cli("diff", str(gsm8k[0]), str(gsm8k[1]), "--kind", "improved")
    assert out.exit_code == 0, out.stderr
    assert "76 improved, 360 regressed" in out.stdout
    assert "FAIL: mean difference -0.2153" in out.stdout and "Tango" in out.stdout
    assert 'spec model.name: "175b_verification" -> "175b_finetuning"' in out.stdout
    assert out.stdout.count(" improved ") >= 76


def test_cli_json_lists_disagreements_or_all(cli, gsm8k: tuple[Path, Path]) -> None:
    """--json: disagreements by default with whole responses; --all lists every sample."""
    default = json.loads(cli("diff", str(gsm8k[0]), str(gsm8k[1]), "--json").stdout)
    assert default["counts"]["improved"] == 76 and default["counts"]["regressed"] == 360
    assert default["gate"]["passed"] is False and default["gate_error"] is None
    assert all(s["kind"] != "same" for s in default["samples"])
    first = default["samples"][0]["epochs"][0]
    assert first["baseline"]["response"].endswith("A: 18")  # whole, not a head
    every = json.loads(cli("diff", str(gsm8k[0]), str(gsm8k[1]), "--json", "--all").stdout)
    assert len(every["samples"]) == 1319


def test_cli_refuses_a_directory_that_is_not_a_run(cli, tmp_path: Path, gsm8k) -> None:
    """Not a run directory: one error line, exit 2; an unknown --kind too."""
    out = cli("diff", str(tmp_path / "nope"), str(gsm8k[1]))
    assert out.exit_code == 2 and out.stderr.count("error:") == 1 and "nope" in out.stderr
    out = cli("diff", str(gsm8k[0]), str(gsm8k[1]), "--kind", "better")
    assert out.exit_code == 2 and "unknown kind 'better'" in out.stderr


@pytest.mark.parametrize("width", [50, 60, 80, 120])
def test_cli_table_keeps_every_sample_id_at_any_width(
    tmp_path: Path, monkeypatch, width: int
) -> None:
    """Long kind names (only in candidate) and a narrow terminal never squeeze the sample
    id column away: each listed id is printed whole; answers and responses only where
    they fit."""
    from rich.console import Console

    from gradetrail.cli.diff import print_diff

    spec = write_app_eval(tmp_path / "eval", samples=4)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    base = app_run(spec, root, cache, "base", {}, monkeypatch, ["dataset.limit=3"])
    cand = app_run(spec, root, cache, "cand", {"q0/1": "wrong"}, monkeypatch)
    d = diff_runs(base, cand)
    console = Console(width=width, record=True, highlight=False)
    print_diff(d, d.shown(), console)
    table = console.export_text().split("┏", 1)[1]
    assert [line.split("│")[1].strip() for line in table.splitlines() if "│" in line] == [
        "q0",
        "q3",
    ]
    # the extracted answers beside the scores from 80 columns, the responses where room is left
    assert ("│ -1 " in table) == (width >= 80)
    assert ("A: -1" in table) == (width >= 120)


@pytest.fixture
def other_data(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """Two runs whose samples q0..q3 are different questions (``i+i`` in the baseline's
    dataset, ``i+(i+1)`` in the candidate's): q2 wrong in the baseline, q1 in the
    candidate."""
    spec = write_app_eval(tmp_path / "eval", samples=4)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    base = app_run(spec, root, cache, "base", {"q2/1": "wrong"}, monkeypatch)
    rows = [{"id": f"q{i}", "q": f"{i}+{i + 1}", "a": 2 * i + 1} for i in range(4)]
    (tmp_path / "eval" / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    cand = app_run(spec, root, cache, "cand", {"q1/1": "wrong"}, monkeypatch)
    return base, cand


def test_runs_on_different_datasets_are_not_paired(cli, other_data: tuple[Path, Path]) -> None:
    """Two runs whose sample ids name different questions were joined by id: `diff`
    listed q1 as regressed and q2 as improved (exit 0), a different question answered
    counted as a regression. Now it is refused, exit 2, one line naming the two dataset
    hashes; --allow-different-data pairs them by id (the gate still refuses them)."""
    from gradetrail.errors import UsageError

    base, cand = other_data
    hashes = [
        json.loads((r / "manifest.json").read_text())["dataset_hash"][:12] for r in other_data
    ]
    said = (
        f"baseline and candidate ran on different datasets (dataset hash {hashes[0]} vs "
        f"{hashes[1]}): a sample id may name a different question in each"
    )
    with pytest.raises(UsageError, match=re.escape(said)):
        diff_runs(base, cand)
    out = cli("diff", str(base), str(cand))
    assert out.exit_code == 2 and out.stdout == ""
    assert out.stderr.startswith(f"error: {said}") and len(out.stderr.splitlines()) == 1
    assert "pass --allow-different-data to pair them by id anyway" in out.stderr
    anyway = diff_runs(base, cand, allow_different_data=True)
    assert {s.sample_id: s.kind for s in anyway.shown()} == {
        "q1": "regressed",
        "q2": "improved",
        "q0": "changed",
        "q3": "changed",
    }
    assert anyway.gate is None and "different datasets" in str(anyway.gate_error)


def test_in_a_browser_the_diff_of_different_datasets_says_so(other_data) -> None:
    """The viewer's diff page of the two runs says why they are not paired (409) and how
    to pair them anyway; with different_data=1 it lists them."""
    from playwright.sync_api import expect
    from view_support import chromium, viewer_page

    base, cand = other_data
    with chromium() as browser, viewer_page(browser, base.parent) as page:
        response = page.goto(f"/diff?a={base.name}&b={cand.name}")
        assert response is not None and response.status == 409
        expect(page.locator("main")).to_contain_text("ran on different datasets")
        expect(page.locator("main")).to_contain_text("add &different_data=1 to the address")
        page.goto(f"/diff?a={base.name}&b={cand.name}&different_data=1")
        expect(page.locator("main")).to_contain_text("1 regressed")


def test_runs_of_different_epochs_are_compared_on_reduced_scores(cli, tmp_path, monkeypatch):
    """A 1-epoch baseline against a 3-epoch candidate: every sample was `error` (epochs 2
    and 3 were only in the candidate) while the gate compared the means. Now each sample's
    mean is compared as the gate compares it: q1 (0 -> 1) improved, q2 (1 -> 2/3)
    regressed, and the gate's difference is the mean of those, (1 - 1/3) / 4."""
    spec = write_app_eval(tmp_path / "eval", samples=4)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    base = app_run(spec, root, cache, "base", {"q1/1": "wrong"}, monkeypatch)
    cand = app_run(spec, root, cache, "cand", {"q2/2": "wrong"}, monkeypatch, ["run.epochs=3"])
    d = diff_runs(base, cand)
    got = {s.sample_id: (s.kind, s.baseline_score, s.candidate_score) for s in d.samples}
    assert got == {
        "q0": ("same", 1.0, 1.0),
        "q1": ("improved", 0.0, 1.0),
        "q2": ("regressed", 1.0, pytest.approx(2 / 3)),
        "q3": ("same", 1.0, 1.0),
    }
    assert d.gate is not None and d.gate.delta == pytest.approx((1 - 1 / 3) / 4)
    assert d.gate.epochs == (1, 3)
    out = cli("diff", str(base), str(cand), "--json")
    assert out.exit_code == 0 and json.loads(out.stdout)["counts"]["error"] == 0


def test_an_epoch_a_run_should_have_is_still_an_error(tmp_path, monkeypatch) -> None:
    """Runs of 2 epochs where the candidate lacks q1's second row (an incomplete run): q1
    is an error, not a sample compared on its one epoch."""
    spec = write_app_eval(tmp_path / "eval", samples=3, epochs=2)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    base = app_run(spec, root, cache, "base", {}, monkeypatch)
    cand = app_run(spec, root, cache, "cand", {"q1/1": "wrong"}, monkeypatch)
    results = cand / "results.jsonl"
    kept = [
        line
        for line in results.read_text().splitlines(keepends=True)
        if not (json.loads(line)["sample_id"] == "q1" and json.loads(line)["epoch"] == 2)
    ]
    results.write_text("".join(kept))
    d = diff_runs(base, cand, allow_partial=True)
    assert {s.sample_id: s.kind for s in d.samples} == {"q0": "same", "q1": "error", "q2": "same"}


def test_max_over_different_epochs_is_refused_as_the_gate_refuses_it(
    cli, tmp_path, monkeypatch
) -> None:
    """run.reducer max over 1 and 3 epochs measures different quantities: the gate
    refuses, and so does diff (one line, exit 2); --reducer mean compares the means."""
    spec = write_app_eval(tmp_path / "eval", samples=3)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    over = ["run.reducer=max"]
    base = app_run(spec, root, cache, "base", {"q1/1": "wrong"}, monkeypatch, over)
    cand = app_run(spec, root, cache, "cand", {}, monkeypatch, [*over, "run.epochs=3"])
    out = cli("diff", str(base), str(cand))
    assert out.exit_code == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1
    assert "reducer max over 1 baseline vs 3 candidate epochs" in out.stderr
    out = cli("diff", str(base), str(cand), "--reducer", "mean", "--json")
    assert out.exit_code == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["counts"]["improved"] == 1 and got["gate"]["reducer"] == "mean"
    from starlette.testclient import TestClient

    from gradetrail.view import create_app

    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    page = client.get(f"/diff?a={base.name}&b={cand.name}")
    assert page.status_code == 409 and "reducer max over 1 baseline vs 3" in page.text
    page = client.get(f"/diff?a={base.name}&b={cand.name}&reducer=mean")
    shown = " ".join(re.sub(r"<[^>]+>", " ", page.text).split())
    assert page.status_code == 200 and "improved 1 " in shown and "regressed 0" in shown


@pytest.fixture
def other_scorer(tmp_path: Path, monkeypatch) -> tuple[Path, Path]:
    """Two runs of the same answers, the candidate's target template changed to ``a + 1``
    (every right answer now scores 0)."""
    spec = write_app_eval(tmp_path / "eval", samples=3)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    base = app_run(spec, root, cache, "base", {}, monkeypatch)
    cand = app_run(spec, root, cache, "cand", {}, monkeypatch, ["target={{ a + 1 }}"])
    return base, cand


def test_runs_scored_differently_are_refused_as_the_gate_refuses_them(cli, other_scorer):
    """The same answers scored against another target were listed as 3 regressions (exit
    0) while the gate refused the pair. Now diff refuses them: one line naming the
    target's change, exit 2; --allow-different-scorers classifies them anyway."""
    from gradetrail.errors import UsageError

    base, cand = other_scorer
    said = (
        'baseline and candidate were scored differently (spec target: "{{ a }}" -> "{{ a + 1 }}")'
    )
    with pytest.raises(UsageError, match=re.escape(said)):
        diff_runs(base, cand)
    out = cli("diff", str(base), str(cand))
    assert out.exit_code == 2 and out.stdout == "" and len(out.stderr.splitlines()) == 1
    assert out.stderr.startswith(f"error: {said}")
    assert "pass --allow-different-scorers to compare them anyway" in out.stderr
    out = cli("diff", str(base), str(cand), "--allow-different-scorers", "--json")
    assert out.exit_code == 0, out.stderr
    got = json.loads(out.stdout)
    assert got["counts"]["regressed"] == 3 and got["gate"]["passed"] is False


def test_in_a_browser_the_diff_of_runs_scored_differently_says_so(other_scorer) -> None:
    """The viewer's diff page refuses the pair as the CLI does (409, the target named) and
    says how to compare them anyway; with different_scorers=1 it lists them."""
    from playwright.sync_api import expect
    from view_support import chromium, viewer_page

    base, cand = other_scorer
    with chromium() as browser, viewer_page(browser, base.parent) as page:
        response = page.goto(f"/diff?a={base.name}&b={cand.name}")
        assert response is not None and response.status == 409
        expect(page.locator("main")).to_contain_text("were scored differently")
        expect(page.locator("main")).to_contain_text("add &different_scorers=1 to the address")
        page.goto(f"/diff?a={base.name}&b={cand.name}&different_scorers=1")
        expect(page.locator("main")).to_contain_text("3 regressed")


TRUNCATING_APP = """\
from gradetrail.providers.base import Response


def answer(request):
    value = request.prompt.rsplit("=", 1)[1].strip()
    cut = request.model == "cand" and request.sample_id == "q1"
    return Response(text=f"A: {value}", stop_reason="max_tokens" if cut else "end_turn")
"""


def test_a_truncated_answer_counts_as_run_truncated_says(tmp_path: Path) -> None:
    """Under run.truncated: zero the candidate's right answer cut at max_tokens counts 0,
    in the summary and the gate (a difference of -1/3); diff listed q1 as `same` (1.0 ->
    1.0, its scorer's score). Now q1 is regressed, 1.0 -> 0.0, as the gate pairs it."""
    import gradetrail

    spec = write_app_eval(tmp_path / "eval", samples=3)
    (tmp_path / "eval" / "trunc_app.py").write_text(TRUNCATING_APP)
    root, cache = tmp_path / "results", tmp_path / "cache.sqlite"
    runs = []
    for model in ("base", "cand"):
        over = [f"model.name={model}", "model.function=trunc_app:answer", "run.truncated=zero"]
        loaded = gradetrail.load_spec(spec, overrides=over)
        runs.append(gradetrail.run_eval(loaded, results_root=root, cache_path=cache).run_dir)
    d = diff_runs(*runs)
    q1 = d.sample("q1")
    assert q1 is not None and q1.kind == "regressed"
    assert (q1.baseline_score, q1.candidate_score) == (1.0, 0.0)
    assert d.gate is not None and d.gate.delta == pytest.approx(-1 / 3)
    assert d.counts["regressed"] == 1 and d.counts["same"] == 2
