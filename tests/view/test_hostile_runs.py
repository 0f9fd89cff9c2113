"""Run directories nobody here wrote, through the real HTTP server and the real CLI: JSON
nested past Python's recursion limit, a run directory whose name is not UTF-8, rows whose
fields have the wrong types. Each one is named where it is; every other run and page
still works."""

from __future__ import annotations

import json
import os
import shutil
from pathlib import Path

import httpx
import pytest
from cli_support import run_cli
from view_support import app_run, write_app_eval

from gradetrail.view.server import BackgroundServer

#: deeper than any recursion limit Python runs with
DEEP = 100_000


def deep_array() -> str:
    return "[" * DEEP + "]" * DEEP


@pytest.fixture(scope="module")
def base(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A small ended run (three samples, q2 answered wrong), read-only to tests."""
    tmp = tmp_path_factory.mktemp("hostile")
    spec = write_app_eval(tmp / "eval", samples=3)
    with pytest.MonkeyPatch.context() as mp:
        return app_run(spec, tmp / "results", tmp / "cache.sqlite", "base", {"q2/1": "wrong"}, mp)


@pytest.fixture
def root(tmp_path: Path, base: Path) -> Path:
    """A results root holding a copy of ``base`` named ``good``."""
    shutil.copytree(base, tmp_path / "root" / "good")
    return tmp_path / "root"


def copy(root: Path, name: str) -> Path:
    return Path(shutil.copytree(root / "good", root / name))


def unhashed(run_dir: Path) -> Path:
    """Drop ``results_sha256`` and ``figures_sha256`` from the run's manifest, as a run
    from before they were recorded: its rows, not its file's hash, are then held against
    the manifest (a file with another hash than the recorded one is refused outright)."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest.pop("results_sha256", None)
    manifest.pop("figures_sha256", None)
    path.write_text(json.dumps(manifest))
    return run_dir


def test_json_nested_past_the_recursion_limit_is_malformed(root: Path) -> None:
    """A manifest, a results line and a samples line nested 100,000 deep (each a
    RecursionError before: the runs page, the run page, the chart, the diff, the export,
    the gate and `runs` failed with a traceback or a 500): the manifest is named as
    unreadable, the line is one malformed line, the samples line is skipped."""
    (copy(root, "deepmanifest") / "manifest.json").write_text(deep_array())
    deeprow = unhashed(copy(root, "deeprow"))
    with (deeprow / "results.jsonl").open("a") as f:
        f.write('{"sample_id": ' + deep_array() + "}\n")
    deepsamples = copy(root, "deepsamples")
    with (deepsamples / "samples.jsonl").open("a") as f:
        f.write(deep_array() + "\n[1]\n")
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        runs = client.get("/")
        assert runs.status_code == 200
        assert "deepmanifest/manifest.json: not a gradetrail manifest (nested too deeply)" in (
            runs.text
        )
        assert 'href="/runs/good"' in runs.text
        page = client.get("/runs/deeprow")
        assert page.status_code == 200
        assert "1 lines of results.jsonl are not valid rows" in page.text
        assert client.get("/runs/deeprow", params={"sort": "score"}).status_code == 200
        chart = client.get("/runs/deepsamples/scores.svg")
        assert chart.status_code == 200 and "<svg" in chart.text
        assert client.get("/diff", params={"a": "good", "b": "deeprow"}).status_code == 200

    diff = run_cli("diff", str(root / "good"), str(deeprow), "--json")
    assert diff.code == 0 and not diff.err, diff.err
    assert json.loads(diff.out)["counts"]["same"] == 3
    out = root.parent / "deep.csv"
    export = run_cli("export", str(deeprow), "--out", str(out))
    assert export.code == 0 and export.out.startswith("wrote 3 rows"), export.err
    listed = run_cli("runs", "--results-root", str(root))
    assert listed.code == 0 and "Traceback" not in listed.err
    assert "good" in listed.out and "deeprow" in listed.out
    gate = run_cli("gate", str(root / "good"), str(root / "deepmanifest"))
    assert gate.code == 2
    assert gate.err_lines == [
        f"error: candidate {root / 'deepmanifest' / 'manifest.json'}: not a gradetrail manifest "
        "(nested too deeply)"
    ]


def test_a_run_directory_name_that_is_not_utf8_is_listed(root: Path) -> None:
    """A run directory named with the byte 0xff (a tar from a Latin-1 machine): the runs
    page was a 500 for the whole root (Jinja2's urlencode raised UnicodeEncodeError on the
    name); it is listed as refused, with its name's escape, and the other runs still show."""
    shutil.copytree(root / "good", root / os.fsdecode(b"bad\xffname"))
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/")
        assert page.status_code == 200
        assert 'href="/runs/good"' in page.text
        assert 'href="/runs/bad%ED%B3%BFname"' in page.text
        assert "&#39;bad\\udcffname&#39; is not a run directory name" in page.text
        assert client.get("/runs/bad%ED%B3%BFname").status_code == 404


WRONG_TYPES = [
    {"score": "1"},
    {"epoch": "one"},
    {"sample_id": 7},
    {"error": [1], "scorer": "matched"},
    {"tool_calls": [1, "x"]},
    {"latency_s": "fast", "input_tokens": "12"},
]


@pytest.mark.parametrize("change", WRONG_TYPES, ids=lambda c: ",".join(c))
def test_a_row_whose_fields_have_the_wrong_types_is_malformed(root: Path, change: dict) -> None:
    """q1's row with a field of the wrong JSON type (an edited or foreign results.jsonl):
    the run page, the sample page, the diff page and `gradetrail diff` raised TypeError or
    ValueError (a 500, a traceback); the row is now a malformed line, skipped and counted
    like one, and the other rows show (the complete run then lacks a row its manifest
    counts: diff refuses it, --allow-partial compares what is there)."""
    edited = copy(root, "edited")
    results = edited / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    lines[1] = json.dumps(json.loads(lines[1]) | change) + "\n"
    results.write_text("".join(lines))
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        for query in ({}, {"f": "failures"}, {"sort": "latency", "dir": "desc"}):
            page = client.get("/runs/edited", params=query)
            assert page.status_code == 200
            assert "1 lines of results.jsonl are not valid rows" in page.text
        assert client.get("/runs/edited/sample", params={"id": "q2"}).status_code == 200
        assert client.get("/runs/edited/sample", params={"id": "q1"}).status_code == 404
        # a complete run missing a row disagrees with its manifest: refused, never a 500
        assert client.get("/diff", params={"a": "good", "b": "edited"}).status_code == 409
        pair = client.get("/diff/sample", params={"a": "good", "b": "edited", "id": "q1"})
        assert pair.status_code in (200, 409)
    assert run_cli("diff", str(root / "good"), str(edited), "--json").code == 2
    diff = run_cli("diff", str(root / "good"), str(edited), "--json", "--allow-partial")
    assert diff.code == 0, diff.err
    assert json.loads(diff.out)["counts"] == {
        "improved": 0,
        "regressed": 0,
        "changed": 0,
        "error": 0,
        "only_baseline": 1,
        "only_candidate": 0,
        "same": 2,
    }


RLO = "\u202e"  # right-to-left override: "evil" + RLO + "gpj.exe" reads "evilexe.jpg"


def test_hidden_characters_outside_responses_are_shown_as_tokens(root: Path) -> None:
    """A run directory name, the spec's name, model and labels, a served model, a stop
    reason and an error message holding a bidi override reached the page as the raw
    character (reordering what follows it); responses and ids already showed U+202E.
    Every one is now a marked token."""
    hidden = copy(root, f"run{RLO}lmth")
    manifest = json.loads((hidden / "manifest.json").read_text())
    manifest["requested_model"] = f"gpt{RLO}4"
    manifest["served_models"] = {f"srv{RLO}x": 3}
    manifest["name"] = manifest["spec"]["name"] = f"name{RLO}x"
    manifest["spec"]["run"]["labels"] = [f"label{RLO}x"]
    (hidden / "manifest.json").write_text(json.dumps(manifest))
    (copy(root, "plain") / "manifest.json").write_text(json.dumps(manifest))
    results = root / "plain" / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    row = json.loads(lines[0]) | {"stop_reason": f"stop{RLO}x", "raw_stop_reason": f"raw{RLO}x"}
    lines[0] = json.dumps(row) + "\n"
    results.write_text("".join(lines))
    unhashed(root / "plain")  # its diff is shown: its rows, not its hash, are checked
    token = '<span class="hidden-char" title="U+202E">U+202E</span>'
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        pages = {
            "runs": client.get("/").text,
            "run": client.get("/runs/plain").text,
            "sample": client.get("/runs/plain/sample", params={"id": "q0"}).text,
            "diff": client.get("/diff", params={"a": "good", "b": "plain"}).text,
            "refused": client.get(f"/runs/run{RLO}lmth").text,
        }
    for name, text in pages.items():
        body = text.split("<body", 1)[1]
        assert RLO not in body.replace(f'data-run="run{RLO}lmth"', ""), name
    assert f"run{token}lmth" in pages["runs"] and f"label{token}x" in pages["runs"]
    assert f"srv{token}x" in pages["runs"] and f"replay:gpt{token}4" not in pages["runs"]
    assert f"name{token}x" in pages["run"] and f"gpt{token}4" in pages["run"]
    assert f"stop{token}x" in pages["sample"] and f"raw{token}x" in pages["sample"]
    assert f"gpt{token}4" in pages["diff"]


def test_runs_prints_a_path_it_cannot_print_as_a_string_bash_reads(root: Path) -> None:
    """`gradetrail runs` dropped the 0xff byte and the bidi override from two run
    directories' paths (terminal safety), printing paths that do not exist, one the same
    as a real run's (badname); each is now a $'...' string naming its directory."""
    import subprocess

    copy(root, "badname")
    shutil.copytree(root / "good", root / os.fsdecode(b"bad\xffname"))
    copy(root, f"run{RLO}x")
    out = run_cli("runs", "--results-root", str(root))
    assert out.code == 0, out.err
    firsts = sorted(line.split("  ")[0] for line in out.out.splitlines()[1:])
    assert firsts == sorted(
        [
            f"$'{root}/bad\\xffname'",
            f"$'{root}/run\\xe2\\x80\\xaex'",
            f"{root}/badname",
            f"{root}/good",
        ]
    )
    for cell in firsts[:2]:
        assert subprocess.run(["bash", "-c", f"test -d {cell}"]).returncode == 0, cell


def test_a_run_name_longer_than_the_file_system_takes_is_not_found(root: Path) -> None:
    """/runs/<300 characters> and a diff naming it answered 500 (OSError: File name too
    long, from is_dir); they answer 404, no run directory of that name."""
    name = "a" * 300
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        for page in (
            client.get(f"/runs/{name}"),
            client.get(f"/runs/{name}/sample", params={"id": "q0"}),
            client.get("/diff", params={"a": "good", "b": name}),
        ):
            assert page.status_code == 404
            assert f"no run directory &#39;{name}&#39; under" in page.text


def test_a_sweep_whose_cell_names_a_run_outside_the_root_is_refused(
    root: Path, tmp_path: Path
) -> None:
    """A sweep.json (from a tar, say) whose cell's run_dir is an absolute path or climbs
    with ..: the sweep page read that run's manifest and rows from outside the results
    root and showed its figures; it now answers 403 naming the cell's run directory."""
    from gradetrail.rundir.sweep import CellRecord, SweepRecord, write_sweep_record

    outside = Path(shutil.copytree(root / "good", tmp_path / "elsewhere" / "secret-run"))
    for run_dir in (str(outside), "../elsewhere/secret-run"):
        cells = [
            CellRecord(name=name, labels=[name], overrides=[], run_dir=where,
                       identity_hash="0" * 12, model="python:base")
            for name, where in (("base", "good"), ("other", run_dir))
        ]  # fmt: skip
        record = SweepRecord(
            name="s", sweep_path="s.yaml", spec_path="e.yaml", axes=["model.name"],
            baseline="base", gate={}, cells=cells,
        )  # fmt: skip
        (root / "sweep-s").mkdir(exist_ok=True)
        write_sweep_record(root / "sweep-s", record)
        with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
            page = client.get("/sweeps/sweep-s")
            assert page.status_code == 403, run_dir
            assert "secret-run" in page.text and "not a run directory name" in page.text
            assert client.get("/sweeps/sweep-s/sample", params={"id": "q0"}).status_code == 403
            assert client.get("/").status_code == 200


def test_a_query_that_is_not_utf8_names_no_sample(root: Path) -> None:
    """?id=%ff (or any parameter of a sample page holding such a byte, back=%ff) answered
    500: UnicodeDecodeError decoding the id with surrogatepass; the byte is now replaced
    (U+FFFD), as Starlette decodes every other parameter."""
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/runs/good/sample?id=%ff")
        assert page.status_code == 404
        assert "run good has no row for sample id &#39;\ufffd&#39;" in page.text
        assert client.get("/runs/good/sample?id=q0&back=%ff").status_code == 200
        assert client.get("/diff/sample?a=good&b=good&id=%ff").status_code == 404
        assert client.get("/diff/sample?a=good&b=good&id=q0&x=%ff").status_code == 200


def test_a_margin_the_gate_refuses_leaves_the_diff_with_its_reason(root: Path) -> None:
    """gradetrail diff --margin inf (or 5) ended in a ValueError traceback and the diff
    page with ?margin=5 answered 500: the gate's own argument check raised through the
    diff. The diff is now made, its gate line saying why it cannot compare."""
    copy(root, "other")
    cli = run_cli("diff", str(root / "good"), str(root / "other"), "--margin", "inf", "--json")
    assert cli.code == 0, cli.err
    assert json.loads(cli.out)["gate_error"] == "margin must be a finite number >= 0, got inf"
    reason = (
        "margin 5 is on the score scale, where scores lie in [0, 1] and every candidate "
        "would pass: pass a margin below 1 (0.02 is two points)"
    )
    text = run_cli("diff", str(root / "good"), str(root / "other"), "--margin", "5")
    assert text.code == 0 and f"cannot compare: {reason}" in text.out
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/diff", params={"a": "good", "b": "other", "margin": "5"})
        assert page.status_code == 200
        assert "CANNOT COMPARE</b> " + reason in page.text


def test_diff_of_a_metric_neither_run_has_is_one_error_line(root: Path) -> None:
    """gradetrail diff --metric nope listed every sample as "error or missing epoch" and
    exited 0 (only its gate line said why); it is refused as the gate refuses it, exit 2."""
    copy(root, "other")
    out = run_cli("diff", str(root / "good"), str(root / "other"), "--metric", "nope")
    assert out.code == 2 and out.out == ""
    assert out.err_lines == [
        "error: the baseline run has no metric 'nope' (its metrics: none: it was run with one "
        "scorer); name one of them, or leave out --metric to gate the primary score"
    ]


NESTED = [
    {
        "transcript": {
            "messages": "x",
            "turns": [1, "a", {"latency_s": "slow", "tool_calls": ["x"], "tool_results": [2]}],
        }
    },
    {"scorer": {"verdicts": "notalist", "orders": 5}},
    {"scorer": {"verdicts": [1, {"grade": "A"}], "orders": [{"verdicts": "x"}, 3]}},
]


@pytest.mark.parametrize("change", NESTED, ids=["transcript", "verdicts", "orders"])
def test_a_row_whose_nested_lists_hold_no_objects_shows_its_sample(
    root: Path, change: dict
) -> None:
    """Transcript turns, tool calls and results, judge verdicts and pairwise orders that
    are not lists of objects (an edited row; the row's own fields have their types) made
    the sample page a 500 ('int object' has no attribute 'get'); what is not an object is
    left out, and the whole row is still shown as JSON."""
    edited = copy(root, "edited")
    results = edited / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    row = json.loads(lines[0])
    lines[0] = json.dumps(row | {k: (row.get(k) or {}) | v for k, v in change.items()}) + "\n"
    results.write_text("".join(lines))
    unhashed(edited)  # its diff is shown: its rows, not its hash, are checked
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        page = client.get("/runs/edited/sample", params={"id": "q0"})
        assert page.status_code == 200
        assert "<summary>the whole row (JSON)</summary>" in page.text
        pair = client.get("/diff/sample", params={"a": "good", "b": "edited", "id": "q0"})
        assert pair.status_code == 200


def test_a_results_line_of_300_mb_is_one_malformed_line(root: Path) -> None:
    """A results.jsonl line over the readers' bound (300 MB, a hole on disk) was read whole
    by the run page's index, the diff and the export; now the page says one line is not a
    valid row and every reader goes on with the rows around it."""
    from gradetrail.rundir.results import MAX_LINE_BYTES

    giant = unhashed(copy(root, "giant"))
    with (giant / "results.jsonl").open("ab") as f:
        f.seek(MAX_LINE_BYTES + (44 << 20), os.SEEK_END)
        f.write(b"\n")
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=60) as client:
        page = client.get("/runs/giant")
        assert page.status_code == 200
        assert "1 lines of results.jsonl are not valid rows" in page.text
        assert client.get("/runs/giant/sample", params={"id": "q2"}).status_code == 200
    diff = run_cli("diff", str(root / "good"), str(giant), "--json")
    assert diff.code == 0 and json.loads(diff.out)["counts"]["same"] == 3, diff.err


def test_a_row_whose_state_is_not_a_state_is_malformed(root: Path) -> None:
    """A row whose state is any other string ("scored" with a bidi override and a quote
    after it) was read as a row of a fourth state: counted apart by every reader, and its
    text put in the runs page's title attribute as markup (the hidden-character token's
    quotes ended the attribute). It is now a malformed row (one of 3 rows missing), and
    the attribute holds plain text."""
    odd = unhashed(copy(root, "odd"))
    results = odd / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    lines[0] = json.dumps(json.loads(lines[0]) | {"state": f'scored{RLO}" x="1'}) + "\n"
    results.write_text("".join(lines))
    with BackgroundServer(root) as url, httpx.Client(base_url=url, timeout=30) as client:
        runs = client.get("/").text
    title = runs.split('class="badge rows-disagree" title="')[1].split('"')[0]
    assert title == (
        "its results.jsonl holds 2 rows (2 scored) where its manifest counts 3 rows (3 scored)"
    )
    listed = run_cli("diff", str(root / "good"), str(odd), "--allow-partial", "--json")
    assert listed.code == 0, listed.err
    assert json.loads(listed.out)["counts"]["only_baseline"] == 1
