"""``gradetrail sweep``: the table, its outputs (--json, --markdown, --junit, --github),
--baseline, --candidate, --dry-run and exit codes, on two GSM8K recordings (300 problems)."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli, write_eval
from paths import GSM8K_SPEC

from gradetrail.engine.runner import plan_run
from gradetrail.spec import load_spec

N = 300


@pytest.fixture
def sweep_file(tmp_path: Path) -> Path:
    """Labelled variants: prod (175b_finetuning) and two candidates, first 300 problems."""
    path = tmp_path / "sweep.yaml"
    path.write_text(
        yaml.safe_dump(
            {
                "name": "migrate",
                "spec": str(GSM8K_SPEC),
                "axes": {
                    "model": {
                        "prod": {"model.name": "175b_finetuning", "dataset.limit": N},
                        "big": {"model.name": "175b_verification", "dataset.limit": N},
                        "small": {"model.name": "6b_finetuning", "dataset.limit": N},
                    }
                },
                "baseline": "prod",
            },
            sort_keys=False,
        )
    )
    return path


def _sweep(sweep_file: Path, *args: str):  # noqa: ANN202
    root = sweep_file.parent / "results"
    return run_cli("sweep", str(sweep_file), "--results-root", str(root), *args)


def test_table_json_and_exit_codes(sweep_file: Path, tmp_path: Path) -> None:
    """big passes (non-inferior: superiority is not tested while small fails the Holm
    family), small fails (inferior): exit 0 for any, 1 with --candidate small, 0 with
    --candidate big; the second sweep runs nothing (every cell existing)."""
    out = _sweep(sweep_file, "--json")
    assert out.code == 0, out.err
    table = json.loads(out.out)
    assert table["passed"] is True and table["best"] == "big"
    cells = {c["name"]: c for c in table["cells"]}
    assert [cells[n]["verdict"] for n in ("prod", "big", "small")] == [
        "baseline",
        "non-inferior",
        "inferior",
    ]
    assert cells["big"]["gate"]["family"] == "Holm over 2 comparisons"
    assert cells["big"]["label_gate"] is None
    assert cells["small"]["label_gate"]["family"] == "Holm over 2 comparisons"
    assert "superior not tested while small fails the family" in table["labels"]
    assert all(c["n"] == N and c["outcome"] == "ran" for c in table["cells"])
    assert "cell prod: ran" in out.err
    again = _sweep(sweep_file, "--candidate", "small")
    assert again.code == 1, again.err
    assert "cached (complete)" in again.out and "FAIL inferior" in again.out
    assert "best passing cell: big" in again.out
    assert _sweep(sweep_file, "--candidate", "big").code == 0


def test_other_baseline_and_outputs(sweep_file: Path, tmp_path: Path) -> None:
    """--baseline big: no candidate passes (exit 1); the Markdown report and the JUnit
    file (one suite a comparison, as ``gradetrail gate`` writes it) are written."""
    md, junit = tmp_path / "sweep.md", tmp_path / "sweep.xml"
    out = _sweep(sweep_file, "--baseline", "big", "--markdown", str(md), "--junit", str(junit))
    assert out.code == 1, out.err
    assert "passed: none" in out.out
    report = md.read_text()
    assert report.startswith("## gradetrail sweep `migrate`: no candidate passed")
    assert "| prod | replay:175b_finetuning |" in report
    suites = ET.parse(junit).getroot().findall("testsuite")
    assert len(suites) == 2
    verdicts = [s.find("testcase[@classname='gradetrail.analysis.gate']") for s in suites]
    assert all(v.find("failure") is not None for v in verdicts)


def test_github_output(sweep_file: Path, tmp_path: Path, monkeypatch) -> None:  # noqa: ANN001
    """--github appends the Markdown table to the step summary and prints one notice."""
    summary = tmp_path / "summary.md"
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(summary))
    out = _sweep(sweep_file, "--github")
    assert out.code == 0, out.err
    assert "::notice title=gradetrail sweep migrate::any candidate passed" in out.out
    assert "| big | replay:175b_verification |" in summary.read_text()


def test_dry_run_calls_nothing(sweep_file: Path) -> None:
    """--dry-run lists the requests each cell would make and writes no run directory."""
    out = _sweep(sweep_file, "--dry-run", "--json")
    assert out.code == 0, out.err
    cells = json.loads(out.out)
    assert [(c["name"], c["requests"], c["to_call"]) for c in cells] == [
        ("prod", N, N),
        ("big", N, N),
        ("small", N, N),
    ]
    assert all(c["est_cost_usd"] is None for c in cells)  # replay has no price
    assert not (sweep_file.parent / "results").exists()
    text = _sweep(sweep_file, "--dry-run")
    assert "would call 900 requests" in text.out


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"baseline": "nope"}, "baseline 'nope' is not a cell; the cells are prod, big, small"),
        ({"axes": {}}, "axes"),
        ({"axes": {"model.name": []}}, "has no values"),
        ({"axes": {"model.name": ["a/b"]}}, "may not be empty or hold '/'"),
        ({"spec": "missing.yaml"}, "spec file not found"),
        ({"gate": {"correction": "fdr"}}, "gate.correction"),
        ({"slices": {"field": "level"}}, "slices.field 'level' is not in sample"),
        ({"colour": "red"}, "colour"),
    ],
)
def test_bad_sweep_files_exit_2_with_one_line(
    sweep_file: Path, change: dict, expected: str
) -> None:
    """Each mistake is one ``error:`` line naming the fix, exit 2, nothing run."""
    raw = yaml.safe_load(sweep_file.read_text())
    raw.update(change)
    sweep_file.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = _sweep(sweep_file)
    assert out.code == 2, out.out + out.err
    assert len(out.err_lines) == 1 and out.err_lines[0].startswith("error: ")
    assert expected in out.err_lines[0]
    assert not (sweep_file.parent / "results").exists() or "spec" not in change


def test_bad_options_exit_2(sweep_file: Path) -> None:
    """An unknown --baseline cell or --correction: one line, exit 2."""
    out = _sweep(sweep_file, "--baseline", "nope")
    assert out.code == 2 and "--baseline 'nope' is not a cell" in out.err
    out = _sweep(sweep_file, "--correction", "fdr")
    assert out.code == 2 and "holm, bonferroni or none" in out.err
    assert run_cli("sweep", "/nonexistent/sweep.yaml").code == 2


def test_labels_name_runs_without_changing_their_identity(sweep_file: Path) -> None:
    """A run made by hand with --label is the sweep's prod cell (same identity: the sweep
    finds it complete and runs it not again); `gradetrail runs` shows each run's labels,
    the sweep's cells labelled migrate:<cell>."""
    root = sweep_file.parent / "results"
    by_hand = run_cli(
        "run", str(GSM8K_SPEC), "--set", "model.name=175b_finetuning", "--set",
        f"dataset.limit={N}", "--label", "prod today", "--label", "TICKET-12",
        "--results-root", str(root), "--json",
    )  # fmt: skip
    assert by_hand.code == 0, by_hand.err
    manifest = json.loads(by_hand.out)
    assert manifest["spec"]["run"]["labels"] == ["prod today", "TICKET-12"]
    plain = load_spec(GSM8K_SPEC, ["model.name=175b_finetuning", f"dataset.limit={N}"])
    assert plan_run(plain).identity_hash == manifest["identity_hash"]
    out = _sweep(sweep_file, "--json")
    assert out.code == 0, out.err
    outcomes = {c["name"]: c["outcome"] for c in json.loads(out.out)["cells"]}
    assert outcomes == {"prod": "existing", "big": "ran", "small": "ran"}
    listing = run_cli("runs", "--results-root", str(root))
    lines = listing.out.splitlines()
    assert lines[0].rstrip().endswith("labels")
    assert any(line.rstrip().endswith("migrate:big") for line in lines)
    assert any(line.rstrip().endswith("prod today, TICKET-12") for line in lines)


def test_bad_label_exits_2(tmp_path: Path) -> None:
    """An empty label is refused in one line."""
    out = run_cli("run", str(GSM8K_SPEC), "--label", " ", "--results-root", str(tmp_path))
    assert out.code == 2 and "run.labels" in out.err and len(out.err_lines) == 1


def test_run_with_models_is_a_sweep(tmp_path: Path) -> None:
    """`gradetrail run SPEC --models a,b,c`: one cell a model, the first the baseline,
    the same table and exit codes as `gradetrail sweep`."""
    root = tmp_path / "results"
    out = run_cli(
        "run", str(GSM8K_SPEC), "--models", "175b_finetuning,175b_verification,6b_finetuning",
        "--results-root", str(root), "--json",
    )  # fmt: skip
    assert out.code == 0, out.err
    table = json.loads(out.out)
    assert table["name"] == "gsm8k" and table["baseline"] == "175b_finetuning"
    verdicts = [c["verdict"] for c in table["cells"]]
    assert verdicts == ["baseline", "non-inferior", "inferior"]
    assert (root / "sweep-gsm8k" / "sweep.json").is_file()
    refused = run_cli("run", str(GSM8K_SPEC), "--models", "a,a", "--results-root", str(root))
    assert refused.code == 2 and "repeats a value" in refused.err
    # pydantic's "Value error, " prefix is not part of the line (it was)
    assert refused.err_lines == [
        "error: --models: axis 'model.name' repeats a value; give each once"
    ]
    refused = run_cli("run", str(GSM8K_SPEC), "--models", "a", "--set", "x=1")
    assert refused.code == 2 and "write a sweep file" in refused.err


def test_unwritable_results_root_exits_with_one_line(sweep_file: Path, tmp_path: Path) -> None:
    """A results root that is a file: one error line naming it, no traceback, exit 2 (bad
    input), as `gradetrail run` refuses it (before: exit 1, the code of "no candidate
    passed", once the sweep record could not be written)."""
    blocker = tmp_path / "blocker"
    blocker.write_text("")
    out = run_cli("sweep", str(sweep_file), "--results-root", str(blocker))
    assert out.code == 2 and len(out.err_lines) == 1, out.err
    assert out.err_lines[0] == (
        f"error: results root {blocker}: {blocker} is not a directory; pass another --results-root"
    )
    assert not any((tmp_path / "results").glob("*"))


@pytest.mark.parametrize(
    ("variant", "gate_flag", "kept"),
    [
        ({"dataset.limit": 20}, "--unpaired", "pass --allow-partial to gate the shared ones"),
        ({"dataset.limit": 10, "dataset.shuffle_seed": 3}, "--unpaired", "share no sample ids"),
        ({"dataset.path": "edited.jsonl"}, "--allow-different-data", "different datasets"),
    ],
    ids=["more-samples", "other-samples", "other-data"],
)
def test_a_cell_the_gate_refuses_is_told_only_what_a_sweep_can_do(
    tmp_path: Path, variant: dict, gate_flag: str, kept: str
) -> None:
    """A cell on more samples, other samples or other dataset content cannot be gated
    against the baseline: one line, exit 2, before any call (before, every cell ran and
    paid, then the table refused), without the ``gradetrail gate`` flags that
    ``gradetrail sweep`` does not take (``--unpaired``, ``--allow-different-data``); the
    one it takes (``--allow-partial``) is still named."""
    rows = (GSM8K_SPEC.parent / "data" / "gsm8k" / "test.jsonl").read_text().splitlines()[:10]
    edited = [json.loads(line) for line in rows]
    edited[0]["answer"] = edited[0]["answer"].replace("#### 18", "#### 19")
    (tmp_path / "edited.jsonl").write_text("".join(json.dumps(r) + "\n" for r in edited))
    variant = {k: str(tmp_path / v) if k == "dataset.path" else v for k, v in variant.items()}
    path = tmp_path / "sweep.yaml"
    axes = {"v": {"base": {"dataset.limit": 10}, "other": variant}}
    raw = {"name": "odd", "spec": str(GSM8K_SPEC), "axes": axes, "baseline": "base"}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    out = _sweep(path)
    assert out.code == 2, out.err
    line = out.err_lines[-1]
    assert line.startswith(f"error: {path}: cell other: ") and line.endswith("no call made)")
    assert gate_flag not in line  # unfixed: the gate's flag was named
    assert kept in line
    assert not list((tmp_path / "results").glob("gsm8k-*"))  # no cell ran


def test_a_cell_whose_rows_were_damaged_is_run_again(sweep_file: Path) -> None:
    """A complete cell whose results.jsonl lost a line since (a malformed line) is run
    again, its rows rewritten from the cache, and the sweep is gated as before. Before, it
    was reported cached (complete) and every later sweep stopped at the gate's refusal,
    exit 2, whose fix (run the same spec again) the sweep never did."""
    first = _sweep(sweep_file, "--json")
    assert first.code == 0, first.err
    cells = {c["name"]: c for c in json.loads(first.out)["cells"]}
    results = Path(cells["big"]["run_dir"]) / "results.jsonl"
    intact = results.read_bytes()
    lines = intact.splitlines(keepends=True)
    lines[9] = b"{broken\n"
    results.write_bytes(b"".join(lines))
    again = _sweep(sweep_file, "--json")
    assert again.code == 0, again.err
    cells = {c["name"]: c for c in json.loads(again.out)["cells"]}
    assert [cells[n]["outcome"] for n in ("prod", "big", "small")] == [
        "existing",
        "ran",
        "existing",
    ]
    assert cells["big"]["verdict"] == "non-inferior"

    def scores(data: bytes) -> list[tuple[str, float]]:
        return [(r["sample_id"], r["score"]) for r in map(json.loads, data.splitlines())]

    assert scores(results.read_bytes()) == scores(intact)  # rewritten from the cache


def test_an_app_printing_leaves_the_sweeps_json_whole(tmp_path: Path) -> None:
    """What a python provider's function prints goes to stderr under ``sweep --json``
    (before, its lines came before the JSON on stdout)."""
    (tmp_path / "d.jsonl").write_text('{"id": "a", "q": "1"}\n{"id": "b", "q": "2"}\n')
    (tmp_path / "chatty_sweep_app.py").write_text(
        "def loud(request):\n    print('debug', request.prompt)\n    return request.prompt\n"
        "def quiet(request):\n    return request.prompt\n"
    )
    (tmp_path / "s.yaml").write_text(
        "name: s\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\ntarget: '{{ q }}'\n"
        "model: {provider: python, name: m, function: 'chatty_sweep_app:quiet'}\n"
        "scorer: {type: exact}\n"
    )
    sweep = tmp_path / "sw.yaml"
    sweep.write_text(
        "name: sw\nspec: s.yaml\naxes:\n  app: {loud: {model.function: 'chatty_sweep_app:loud'},"
        " quiet: {}}\nbaseline: quiet\n"
    )
    out = run_cli("sweep", str(sweep), "--results-root", str(tmp_path / "r"), "--json")
    assert [c["name"] for c in json.loads(out.out)["cells"]] == ["loud", "quiet"], out.err
    assert "debug 1" in out.err


def _toy(tmp_path: Path, axes: dict, **sweep: object) -> Path:
    """A python-provider eval over 12 rows (an app echoing the answer) and a sweep of it."""
    rows = [{"id": f"r{i}", "q": f"{i}+0", "a": str(i)} for i in range(12)]
    (tmp_path / "splits.json").write_text(
        json.dumps({"train": [f"r{i}" for i in range(8)], "test": [f"r{i}" for i in range(8, 12)]})
    )
    write_eval(tmp_path, rows, name="toy")
    path = tmp_path / "sweep.yaml"
    raw = {"name": "toy", "spec": "spec.yaml", "axes": axes, **sweep}
    path.write_text(yaml.safe_dump(raw, sort_keys=False))
    return path


def test_two_cells_that_are_one_run_are_refused_before_any_call(tmp_path: Path) -> None:
    """Cells whose settings decide no number differently (the spec's own prompt again, an
    execution-only knob) share one identity hash and run directory: exit 2 naming both,
    nothing run. Before, the sweep gated the run against itself (+0.0000, counted in the
    Holm family as a comparison of its own) and exited 1."""
    path = _toy(
        tmp_path,
        {
            "v": {
                "plain": {},
                "same": {"prompt": "What is {{ q }}? = {{ a }}"},
                "other": {"prompt": "Compute {{ q }} = {{ a }}"},
            }
        },
    )
    for args in ((), ("--dry-run",)):
        out = _sweep(path, *args)
        assert out.code == 2, out.err
        assert out.err_lines[-1].startswith(f"error: {path}: cells plain and same are the same run")
    assert not (tmp_path / "results").exists()
    path = _toy(tmp_path, {"run.concurrency": [1, 4]})
    out = _sweep(path)
    assert out.code == 2 and "cells 1 and 4 are the same run" in out.err


def test_cells_on_other_splits_are_refused_before_any_call(tmp_path: Path) -> None:
    """A cell on another dataset.split than the baseline's could never be paired with it:
    exit 2 before any call, whatever --allow-partial says (before, both cells ran and the
    table refused them)."""
    split = {"file": "splits.json", "name": "train"}
    path = _toy(tmp_path, {"dataset.split.name": ["train", "test"]})
    spec = yaml.safe_load((tmp_path / "spec.yaml").read_text())
    spec["dataset"]["split"] = split
    (tmp_path / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = _sweep(path, "--allow-partial")
    assert out.code == 2, out.err
    assert out.err_lines[-1] == (
        f"error: {path}: cell test: runs on split 'test' but the baseline train on split "
        "'train': every cell must run on the same dataset.split (no call made)"
    )
    assert not (tmp_path / "results").exists()


def test_a_cell_whose_run_stops_is_named_and_the_others_still_run(tmp_path: Path) -> None:
    """A cell whose every call fails stops at run.fail_fast; the cells after it still run,
    and the error line names the cell (before, the line said only "stopped after the
    first 5 samples...", leaving a sweep of many models to guess which one, and no later
    cell ran: each sweep stopped at the same cell again). The sweep reached no verdict:
    exit 2, never 1, which says no candidate passed (docs/troubleshooting.md#exit-codes)."""
    variants = {
        "fine": {},
        "broken": {"prompt": "boom {{ q }} = {{ a }}"},
        "later": {"prompt": "Compute {{ q }} = {{ a }}"},
    }
    path = _toy(tmp_path, {"v": variants})
    out = _sweep(path)
    assert out.code == 2, out.err
    assert out.err_lines[-1].startswith("error: cell broken: stopped after the first ")
    record = json.loads((tmp_path / "results" / "sweep-toy" / "sweep.json").read_text())
    assert [c["outcome"] for c in record["cells"]] == ["ran", "failed", "ran"]
    again = _sweep(path, "--json")  # --json: what was done, with no verdict (was: nothing)
    record = json.loads((tmp_path / "results" / "sweep-toy" / "sweep.json").read_text())
    assert [c["outcome"] for c in record["cells"]] == ["existing", "failed", "existing"]
    assert again.code == 2 and again.err_lines[-1].startswith("error: cell broken: ")
    shown = json.loads(again.out)
    assert (shown["passed"], shown["status"], shown["stop_signal"]) == (None, "failed", None)
    assert shown["stop_reason"] == again.err_lines[-1].removeprefix("error: ")
    assert [(c["name"], c["outcome"]) for c in shown["cells"]] == [
        ("fine", "existing"),
        ("broken", "failed"),
        ("later", "existing"),
    ]
    assert [c["run_dir"] for c in shown["cells"]] == [c["run_dir"] for c in record["cells"]]


def test_run_with_models_keeps_the_runs_flags_or_refuses_them(tmp_path: Path) -> None:
    """`gradetrail run --models` gives every cell --label and --max-cost (the whole
    sweep's ceiling: a model without max_tokens cannot be bounded, exit 2) and refuses a
    flag a sweep cannot honour (--min-score, --batch), exit 2. Before, all of them were
    dropped without a word: the sweep ran unbounded and exited 0."""
    spec = write_eval(tmp_path, [{"id": "a", "q": "1+1", "a": "2"}], name="toy")
    root = str(tmp_path / "r")
    out = run_cli("run", str(spec), "--models", "m1,m2", "--max-cost", "1", "--results-root", root)
    assert out.code == 2, out.err
    assert out.err_lines[-1].startswith("error: cell m1: ")
    assert "a budgeted run needs a bound on each response's length" in out.err_lines[-1]
    for flag in (["--min-score", "0.5"], ["--batch"]):
        out = run_cli("run", str(spec), "--models", "m1,m2", *flag, "--results-root", root)
        assert out.code == 2 and f"{flag[0]} is for a run of one model" in out.err, out.err
    out = run_cli(
        "run", str(spec), "--models", "m1,m2", "--label", "nightly", "--results-root", root
    )
    assert out.code in (0, 1), out.err
    manifests = [json.loads(p.read_text()) for p in sorted(Path(root).glob("toy-*/manifest.json"))]
    labels = sorted(tuple(m["spec"]["run"]["labels"]) for m in manifests)
    assert labels == [("nightly", "toy:m1"), ("nightly", "toy:m2")]


@pytest.mark.parametrize(
    ("errors", "baseline", "line"),
    [
        (
            "exclude",
            "fine",
            "error: cell broken: no sample is left to compare: errors exclude dropped every "
            "sample with an error row (0 of the baseline's, 12 of the candidate's), and that "
            "is all of them: re-run to complete them, or count them as failures (errors "
            "as-fail)",
        ),
        (
            "as-fail",
            "broken",
            "error: cell fine: no sample is left to compare: errors as-fail leaves out the "
            "samples the run it does not charge has no scored epoch on (12 of the baseline's, "
            "0 of the candidate's samples have error rows), and that is all of them: re-run "
            "to complete them",
        ),
    ],
)
def test_a_cell_whose_every_row_failed_says_why_nothing_compares(
    tmp_path: Path, errors: str, baseline: str, line: str
) -> None:
    """A cell whose every call failed, dropped by gate.errors exclude (or, as the
    baseline, left out by as-fail): exit 2 saying the policy left no sample, not "share no
    sample ids (0 vs 0 samples): gate two runs of the same samples", a fix that was none."""
    path = _toy(
        tmp_path,
        {"v": {"fine": {}, "broken": {"prompt": "boom {{ q }} = {{ a }}", "run.fail_fast": 0}}},
        gate={"errors": errors},
        baseline=baseline,
    )
    out = _sweep(path)
    assert out.code == 2, out.err
    assert out.err_lines[-1] == line


def test_a_candidate_that_is_the_baseline_is_refused_before_any_run(sweep_file: Path) -> None:
    """--candidate naming the baseline cell (the file's, or --baseline's) exits 2 before
    any cell runs; before, the cells ran and the sweep exited 1, "did not pass", for a
    cell that is never gated."""
    for args in (("--candidate", "prod"), ("--baseline", "big", "--candidate", "big")):
        out = _sweep(sweep_file, *args)
        assert out.code == 2, out.err
        assert out.err_lines[-1].startswith(f"error: --candidate {args[-1]} is the baseline cell")
    assert not (sweep_file.parent / "results").exists()


def test_the_ci_check_refuses_a_candidate_that_is_the_baseline(sweep_file: Path) -> None:
    """gradetrail.ci.sweep.check_sweep (the pytest plugin's) refuses candidate=baseline
    before any cell runs, as the CLI does (before: every cell ran, then "did not pass")."""
    from gradetrail.ci.sweep import check_sweep
    from gradetrail.errors import SpecError

    with pytest.raises(SpecError, match="candidate prod is the baseline cell"):
        check_sweep(sweep_file, candidate="prod", results_root=sweep_file.parent / "results")
    assert not (sweep_file.parent / "results").exists()
