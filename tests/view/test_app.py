"""The viewer over HTTP (Starlette's TestClient): pages, filters, security, robustness."""

from __future__ import annotations

import json
import os
import re
import shutil
import time
from pathlib import Path

import pytest
from paths import EXAMPLES
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture
from starlette.testclient import TestClient
from view_support import app_run, gsm8k_run, write_app_eval

from gradetrail.view import create_app

agent_server = protocol_server_fixture(
    scope="module",
    name="agent_server",
    script=str(EXAMPLES / "data" / "agent" / "server_script.json"),
)
agent_srv = fresh_protocol_server_fixture("agent_server", name="agent_srv")
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'


@pytest.fixture(scope="module")
def gsm8k_root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root holding the bundled example's two 175B runs (read-only to tests)."""
    tmp = tmp_path_factory.mktemp("view")
    root, cache = tmp / "results", tmp / "cache.sqlite"
    gsm8k_run(root, cache, "175b_verification")
    gsm8k_run(root, cache, "175b_finetuning")
    return root


def client_for(root: Path) -> TestClient:
    """A client of the viewer over ``root``, sending Host: 127.0.0.1."""
    return TestClient(create_app(root), base_url="http://127.0.0.1")


def run_named(root: Path, model: str) -> str:
    """The run directory name of ``model`` under ``root``."""
    for path in root.iterdir():
        manifest = path / "manifest.json"
        if manifest.exists() and json.loads(manifest.read_text())["requested_model"] == model:
            return path.name
    raise AssertionError(model)


@pytest.fixture
def root(tmp_path: Path, monkeypatch) -> Path:
    """A private results root with a small run whose q1 response holds markup (editable)."""
    spec = write_app_eval(tmp_path / "eval", samples=3)
    results = tmp_path / "results"
    plan = {"q1/1": "say:" + XSS, "q2/1": "wrong"}
    app_run(spec, results, tmp_path / "cache.sqlite", "base", plan, monkeypatch)
    return results


def plain(html: str) -> str:
    """A page's text as read: tags dropped, white space folded."""
    return " ".join(re.sub(r"<[^>]+>", " ", html).split())


def only_run(root: Path) -> Path:
    (path,) = [p for p in root.iterdir() if p.is_dir()]
    return path


def snapshot(root: Path) -> dict[str, tuple[int, int]]:
    """Every file under root with its size and mtime."""
    return {
        str(p.relative_to(root)): (p.lstat().st_size, p.lstat().st_mtime_ns)
        for p in root.rglob("*")
    }


# ---- pages -------------------------------------------------------------------------------


def test_runs_page_lists_each_run_with_its_figures(gsm8k_root: Path) -> None:
    """Name, identity, model, samples x epochs, mean with CI, status for both runs."""
    page = client_for(gsm8k_root).get("/")
    assert page.status_code == 200
    assert "replay:175b_verification" in page.text and "replay:175b_finetuning" in page.text
    assert "0.5625" in page.text and "[0.5356, 0.5891]" in page.text and "0.3472" in page.text
    assert "1,319 × 1" in page.text and page.text.count("status-complete") == 2


def test_runs_page_filters_and_sorts_by_the_url(gsm8k_root: Path) -> None:
    """?model= keeps the matching run; ?sort=mean&dir=asc puts the weaker run first."""
    client = client_for(gsm8k_root)
    page = client.get("/?model=finetuning")
    assert "175b_finetuning" in page.text and "175b_verification" not in page.text
    assert "1 of 2" in page.text
    page = client.get("/?sort=mean&dir=asc").text
    assert page.index("175b_finetuning") < page.index("175b_verification")
    page = client.get("/?sort=mean&dir=desc").text
    assert page.index("175b_verification") < page.index("175b_finetuning")
    assert "No run matches" in client.get("/?status=failed").text


def test_run_page_failures_filter_sort_and_pages(gsm8k_root: Path) -> None:
    """The authors' labels: 577 failures of 175b_verification; sorted and paged by URL."""
    client = client_for(gsm8k_root)
    name = run_named(gsm8k_root, "175b_verification")
    page = client.get(f"/runs/{name}")
    assert page.status_code == 200
    assert "1319 (1319 samples x 1 epoch): scored 1319" in page.text  # the CLI summary
    assert "1,319 rows" in page.text and "page 1 of 27" in page.text
    failures = client.get(f"/runs/{name}?f=failures")
    assert "577 rows match" in failures.text and "page 1 of 12" in failures.text
    assert ">3</a>" in failures.text and ">2</a>" not in failures.text  # 2 is right, 3 wrong
    last = client.get(f"/runs/{name}?f=failures&page=12")
    assert last.text.count('class="sample-link"') == 577 - 11 * 50
    chart = client.get(f"/runs/{name}/scores.svg")
    assert chart.headers["content-type"].startswith("image/svg+xml")
    assert ">577<" in chart.text and ">742<" in chart.text  # wrong and right, per sample
    by_score = client.get(f"/runs/{name}?sort=score&dir=desc&per=10").text
    assert by_score.count('class="score full"') == 10


def test_run_page_search_reads_prompt_response_and_target(gsm8k_root: Path) -> None:
    """A case-insensitive search finds the ducks problem by its prompt text."""
    name = run_named(gsm8k_root, "175b_verification")
    page = client_for(gsm8k_root).get(f"/runs/{name}", params={"q": "JANET’S DUCKS"})
    assert "1 row matches" in page.text and ">1</a>" in page.text


def test_sample_page_shows_everything_to_audit(gsm8k_root: Path) -> None:
    """Prompt, response, target, what the scorer extracted, tokens and attempts."""
    name = run_named(gsm8k_root, "175b_verification")
    page = client_for(gsm8k_root).get(f"/runs/{name}/sample", params={"id": "3"})
    assert page.status_code == 200
    assert "Josh decides to try flipping a house" in page.text  # the prompt
    assert "70000" in page.text and "65000" in page.text  # target and extraction
    for label in ("extracted_value", "marker_found", "attempts", "latency", "stop reason"):
        assert label in page.text
    missing = client_for(gsm8k_root).get(f"/runs/{name}/sample", params={"id": "nope"})
    assert missing.status_code == 404 and "no row for sample id" in missing.text


def test_diff_page_shows_counts_gate_and_identity(gsm8k_root: Path) -> None:
    """76 improved, 360 regressed, the gate's FAIL with its interval, model.name differs."""
    client = client_for(gsm8k_root)
    a = run_named(gsm8k_root, "175b_verification")
    b = run_named(gsm8k_root, "175b_finetuning")
    page = client.get("/diff", params={"a": a, "b": b})
    assert page.status_code == 200
    assert 'data-kind="improved"' in page.text
    assert 'improved <b class="count">76</b>' in page.text
    assert 'regressed <b class="count">360</b>' in page.text
    assert "FAIL" in page.text and "[-0.2442, -0.1866]" in page.text
    assert "model.name" in page.text
    ticked = client.get("/diff", params=[("run", b), ("run", a)])  # older run is baseline
    assert 'regressed <b class="count">360</b>' in ticked.text
    side = client.get("/diff/sample", params={"a": a, "b": b, "id": "1", "kind": "regressed"})
    assert side.status_code == 200 and side.text.count("Janet") >= 2
    assert "id=2&amp;kind=regressed" in side.text and 'rel="prev"' not in side.text
    assert client.get("/diff", params={"run": a}).status_code == 400


def test_running_run_shows_progress_and_a_killed_one_says_so(root: Path) -> None:
    """status running with a live writer: running, progress JSON; a dead writer: killed."""
    run = only_run(root)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "running"
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / ".lock").write_text(f"{os.getpid()}\n")
    client = client_for(root)
    page = client.get(f"/runs/{run.name}")
    assert "status-running" in page.text and "data-progress" in page.text
    progress = client.get(f"/runs/{run.name}/progress").json()
    assert progress == {"status": "running", "live": True, "rows": 3, "expected": 3}
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    (run / "results.jsonl").write_text("".join(lines[:2]))
    manifest["n_samples"] = 5
    (run / "manifest.json").write_text(json.dumps(manifest))
    runs = client.get("/").text  # the progress is in the page itself, not only its script
    assert '<span class="label">2 of 5 rows</span>' in runs
    (run / ".lock").write_text("999999999\n")  # no such process
    runs = client.get("/").text
    assert "status-killed" in runs and "2 of 5 rows" in runs
    assert "process is gone" in client.get(f"/runs/{run.name}").text


# ---- robustness --------------------------------------------------------------------------


def test_malformed_manifest_gets_a_page_that_says_so(root: Path) -> None:
    """Invalid JSON, or a manifest missing a field: both listed as unreadable, run page 200."""
    run = only_run(root)
    client = client_for(root)
    (run / "manifest.json").write_text("{not json")
    assert "status-unreadable" in client.get("/").text
    page = client.get(f"/runs/{run.name}")
    assert page.status_code == 200 and "not valid JSON" in page.text
    (run / "manifest.json").write_text(json.dumps({"name": "arith"}))
    page = client.get(f"/runs/{run.name}")
    assert "manifest cannot be read" in page.text and "status: Field required" in page.text
    (run / "manifest.json").unlink()
    assert "no manifest.json" in client.get(f"/runs/{run.name}").text


def test_torn_and_malformed_lines_are_skipped_and_named(root: Path) -> None:
    """A torn last line and a garbage line: the other rows show, each problem is named."""
    run = only_run(root)
    client = client_for(root)
    with (run / "results.jsonl").open("a") as f:
        f.write("this is not json\n")
        f.write('{"sample_id": "q9", "epoch": 1, "sta')
    page = client.get(f"/runs/{run.name}")
    assert page.status_code == 200
    assert "3 rows" in page.text and "last line of results.jsonl is incomplete" in page.text
    assert "1 lines of results.jsonl are not valid rows" in page.text


def test_rows_appended_and_file_rewritten_are_seen(root: Path) -> None:
    """The index follows a growing file, and a rewritten one (new inode, new order)."""
    run = only_run(root)
    client = client_for(root)
    results = run / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    assert "3 rows" in client.get(f"/runs/{run.name}").text
    extra = json.loads(lines[0]) | {"sample_id": "q7"}
    with results.open("a") as f:
        f.write(json.dumps(extra) + "\n")
    assert "4 rows" in client.get(f"/runs/{run.name}").text
    tmp = run / "results.jsonl.new"
    tmp.write_text("".join(reversed(lines)))
    tmp.replace(results)
    page = client.get(f"/runs/{run.name}/sample", params={"id": "q2"})
    assert "A: -1" in page.text and "3 rows" in client.get(f"/runs/{run.name}").text


def test_run_deleted_while_viewed_gets_a_page(root: Path) -> None:
    """After the directory goes: 404 pages naming it, and the server still serves."""
    run = only_run(root)
    client = client_for(root)
    assert client.get(f"/runs/{run.name}").status_code == 200
    shutil.rmtree(run)
    for url in (f"/runs/{run.name}", f"/runs/{run.name}/sample?id=q0", f"/diff?a={run.name}&b=x"):
        page = client.get(url)
        assert page.status_code == 404 and "it may have been deleted" in page.text
    assert client.get("/").status_code == 200


@pytest.mark.parametrize("name", ["results.jsonl", "samples.jsonl", "manifest.json", ".lock"])
def test_a_fifo_in_a_run_directory_never_hangs_a_page(root: Path, name: str) -> None:
    """A FIFO in place of a run's file (a tar can hold one) would block its reader until
    a writer came: every page answers at once, saying what is wrong, and the diff
    refuses it (before: the page, then the server's threads, hung for good)."""
    import threading

    from gradetrail.analysis.diff import diff_runs
    from gradetrail.errors import GradetrailError

    run = only_run(root)
    manifest = json.loads((run / "manifest.json").read_text())
    manifest["status"] = "running"  # so the .lock is read
    (run / "manifest.json").write_text(json.dumps(manifest))
    (run / name).unlink(missing_ok=True)
    os.mkfifo(run / name)
    client = client_for(root)
    urls = ["/", f"/runs/{run.name}", f"/runs/{run.name}/scores.svg"]
    urls += [f"/runs/{run.name}/sample?id=q0", f"/diff?a={run.name}&b={run.name}"]
    statuses: list[int] = []

    def tour() -> None:
        statuses.extend(client.get(url).status_code for url in urls)
        try:
            diff_runs(run, run)
        except GradetrailError:
            statuses.append(0)

    worker = threading.Thread(target=tour, daemon=True)
    worker.start()
    worker.join(timeout=60)
    assert not worker.is_alive(), f"a page blocked on the FIFO {name}"
    assert len(statuses) >= len(urls) and all(s < 500 for s in statuses), statuses
    if name in ("results.jsonl", "manifest.json"):
        assert "not a regular file" in client.get(f"/runs/{run.name}").text


REASONS = {
    "outside": "{} links outside the results root; not read",
    "fifo": "{} is not a regular file (a FIFO, socket or device); not read",
    "directory": "{} is a directory, not a file; not read",
}


@pytest.mark.parametrize("kind", list(REASONS))
@pytest.mark.parametrize("name", ["log.jsonl", "results.jsonl", "samples.jsonl", "manifest.json"])
def test_a_run_file_not_read_leaves_the_run_listed_with_the_reason(
    root: Path, tmp_path: Path, name: str, kind: str
) -> None:
    """A run file linked outside the root, a FIFO or a directory in its place: the run
    stays on the runs page and its own page, with one line naming the file and what is
    wrong, and every figure that does not need the file (mean 2/3 from the manifest); the
    file is never opened (the linked copy's marker never shows)."""
    run = only_run(root)
    target = run / name
    if kind == "outside":  # a copy of the real file, marked
        copy = tmp_path / "outside" / name
        copy.parent.mkdir()
        copy.write_text(target.read_text().replace("arith", "SECRET").replace("q0", "SECRET"))
        target.unlink()
        target.symlink_to(copy)
    else:
        target.unlink(missing_ok=True)
        os.mkfifo(target) if kind == "fifo" else target.mkdir()
    reason = REASONS[kind].format(name)
    client = client_for(root)
    runs, page = client.get("/"), client.get(f"/runs/{run.name}")
    assert runs.status_code == page.status_code == 200
    assert f'href="/runs/{run.name}"' in runs.text and reason in runs.text
    assert reason in page.text and "SECRET" not in runs.text + page.text
    if name == "manifest.json":
        assert "status-unreadable" in runs.text and "manifest cannot be read" in page.text
        return
    assert "0.6667" in runs.text and "<th>mean score</th><td>0.6667" in page.text
    if name == "results.jsonl":
        assert "No row." in page.text and page.text.count(reason) == 1
        diff = client.get(f"/diff?a={run.name}&b={run.name}")
        assert diff.status_code == 409 and reason in diff.text
        assert client.get(f"/runs/{run.name}/progress").json()["rows"] == 0
        sample = client.get(f"/runs/{run.name}/sample", params={"id": "q2"})
        assert sample.status_code == 409 and reason in sample.text
    else:
        assert "3 rows" in page.text and "A: -1" in page.text


def test_results_cut_short_are_named_on_both_pages(root: Path) -> None:
    """An ended run whose results.jsonl holds fewer rows than its manifest counts (cut
    short, a torn last line): both pages say how many of how many are there; the run is
    complete, so its rows disagree with its manifest and its manifest's mean (0.6667) is
    not shown as its score (it was, before: the gate refuses such a run)."""
    run = only_run(root)
    lines = (run / "results.jsonl").read_text().splitlines(keepends=True)
    (run / "results.jsonl").write_text(lines[0] + lines[1] + lines[2][:40])
    client = client_for(root)
    said = "results.jsonl holds 2 of the 3 rows the manifest counts (cut short?)"
    runs = client.get("/").text
    assert said in runs and "not shown: rows disagree" in runs
    page = client.get(f"/runs/{run.name}").text
    assert said in page and "2 rows" in page and 'id="rows-disagree"' in page
    assert "<th>mean score</th><td>not shown: results.jsonl disagrees" in page
    assert "0.6667" not in page
    (run / "results.jsonl").write_text("".join(lines))
    assert "cut short" not in client.get("/").text


def test_a_live_run_shows_the_figures_of_its_rows_so_far(root: Path) -> None:
    """A run being written: its page and the runs page show figures computed from the
    rows written so far, marked partial (not its start manifest's zeros); with every row
    written they are the runner's final figures; once its process is gone they stay,
    marked partial, on its page."""
    from view_support import as_started

    from gradetrail.report.run import manifest_lines
    from gradetrail.rundir.manifest import Manifest

    run = only_run(root)
    final = Manifest.model_validate_json((run / "manifest.json").read_text())
    results = run / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)  # q0 right, q1 right, q2 wrong
    as_started(run, os.getpid())
    results.write_text(lines[0] + lines[2])
    client = client_for(root)
    page = client.get(f"/runs/{run.name}").text
    assert "figures below are partial, from the 2 rows written so far (of 3)" in plain(page)
    assert "<th>mean score</th><td>0.5000 ± 0.5000 SE, 95% CI [0.0945, 0.9055] (Wilson)" in page
    assert '<td class="num" data-state="scored">2</td>' in page
    runs = client.get("/").text
    assert "partial</span> <b>0.5000</b>" in runs
    with results.open("a") as f:
        f.write(lines[1])
    figures = client.get(f"/runs/{run.name}/progress", params={"figures": "1"}).json()
    assert figures["rows"] == 3 and figures["partial"]["rows"] == 3
    done = [[label, text] for label, text in manifest_lines(final, run) if label != "wall time"]
    shown = [pair for pair in figures["partial"]["lines"] if pair[0] != "wall time"]
    assert shown == [p if p[0] != "status" else ["status", "running"] for p in done]
    assert "from the 3 rows written so far" in plain(client.get(f"/runs/{run.name}").text)
    (run / ".lock").write_text("999999999\n")  # no such process
    page = plain(client.get(f"/runs/{run.name}").text)
    assert "process is gone: the figures below are partial, from the 3 rows" in page
    assert "not ended: its figures so far are on its run page" in client.get("/").text


def test_a_large_live_run_is_counted_in_the_background(root: Path, monkeypatch) -> None:
    """A live run too large to count at once (above STREAM_BYTES): its page is sent at
    once, saying its rows are being counted and asking its poll for the figures; they
    come, partial, once counted."""
    from view_support import as_started

    import gradetrail.view.run_pages as view_app

    run = only_run(root)
    as_started(run, os.getpid())
    monkeypatch.setattr(view_app, "STREAM_BYTES", 0)
    client = client_for(root)
    page = client.get(f"/runs/{run.name}").text
    assert "The rows written so far are being counted" in page
    assert "/progress?figures=1" in page and "partial</span>" not in page
    progress = f"/runs/{run.name}/progress?figures=1"
    for _ in range(1000):  # the count runs in a thread; this waits for it, bounds nothing
        partial = client.get(progress).json()["partial"]
        if partial is not None:
            break
        time.sleep(0.01)
    assert partial is not None and partial["rows"] == 3
    assert partial["counts"] == {"scored": 3, "provider_error": 0, "judge_error": 0}
    assert dict(partial["lines"])["mean score"].startswith("0.6667 ± 0.3333 SE")
    page = plain(client.get(f"/runs/{run.name}").text)
    assert "partial, from the 3 rows written so far (of 3)" in page


def test_results_file_deleted_leaves_the_summary(root: Path) -> None:
    """A run whose results.jsonl vanished still shows its manifest, and says what is missing."""
    run = only_run(root)
    (run / "results.jsonl").unlink()
    page = client_for(root).get(f"/runs/{run.name}")
    assert page.status_code == 200 and "has no results.jsonl" in page.text


# ---- security ----------------------------------------------------------------------------


def test_markup_in_a_response_is_escaped_everywhere(root: Path) -> None:
    """The run page, the sample page and the diff page show the markup as text."""
    run = only_run(root)
    client = client_for(root)
    pages = [
        client.get(f"/runs/{run.name}"),
        client.get(f"/runs/{run.name}/sample", params={"id": "q1"}),
        client.get("/diff/sample", params={"a": run.name, "b": run.name, "id": "q1"}),
        client.get(f"/runs/{run.name}", params={"q": "<script>"}),
    ]
    for page in pages:
        assert "<script>window" not in page.text and "<img src=x" not in page.text
        assert "&lt;script&gt;window.__xss = 1&lt;/script&gt;" in page.text
    assert "script-src 'self'" in pages[0].headers["content-security-policy"]
    assert pages[0].headers["x-content-type-options"] == "nosniff"


def test_characters_that_hide_or_reorder_text_are_shown(root: Path) -> None:
    """A bidi override, a zero-width space and a control character in a response are
    shown as marked U+XXXX tokens on the run, sample and diff pages: what the auditor
    reads is what the row holds (Trojan Source)."""
    run = only_run(root)
    path = run / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["response"] = "A: 5\u202e01\u202c, in\u200bvisible\x07 \u05d0\u200d\u05d1"
    rows[0]["served_model"] = "base\u202e"  # the row's other fields too
    rows[0]["scorer"]["extracted"] = "\u200b5"
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    manifest = json.loads((run / "manifest.json").read_text())
    del manifest["results_sha256"], manifest["figures_sha256"]  # as an older run: rows checked
    (run / "manifest.json").write_text(json.dumps(manifest))
    client = client_for(root)
    pages = [
        client.get(f"/runs/{run.name}"),
        client.get(f"/runs/{run.name}/sample", params={"id": "q0"}),
        client.get("/diff", params={"a": run.name, "b": run.name, "show": "all"}),
    ]
    for page in pages:
        assert page.status_code == 200
        for hidden in ("\u202e", "\u202c", "\u200b", "\x07"):
            assert hidden not in page.text
        assert '<span class="hidden-char" title="U+202E">U+202E</span>01' in page.text
        assert 'in<span class="hidden-char" title="U+200B">U+200B</span>visible' in page.text
        assert "\u05d0\u200d\u05d1" in page.text  # a zero-width joiner is left alone


def test_text_utf8_cannot_encode_is_shown_escaped(tmp_path: Path, monkeypatch) -> None:
    """A response and a sample id holding lone surrogates (kept losslessly by the run):
    the run, sample and diff pages show them as U+XXXX tokens instead of failing, and
    the id's link opens its sample."""
    spec = write_app_eval(tmp_path / "eval", samples=2)
    data = spec.parent / "data.jsonl"
    data.write_text(data.read_text().replace('"q1"', '"q\\ud800"'))
    root = tmp_path / "results"
    plan = {"q\ud800/1": "say:odd \ud800 text \udfff"}
    run = app_run(spec, root, tmp_path / "cache.sqlite", "base", plan, monkeypatch).name
    token = '<span class="hidden-char" title="U+{0}">U+{0}</span>'.format
    text = f"odd {token('D800')} text {token('DFFF')}"
    client = client_for(root)
    listing = client.get(f"/runs/{run}")
    assert listing.status_code == 200 and text in listing.text
    (link,) = re.findall(r'href="(/runs/[^"]+/sample\?id=q%ED%A0%80[^"]*)"', listing.text)
    diff = client.get("/diff", params={"a": run, "b": run, "show": "all"})
    (pair_link,) = re.findall(r'href="(/diff/sample\?[^"]*id=q%ED%A0%80[^"]*)"', diff.text)
    for url in (link.replace("&amp;", "&"), pair_link.replace("&amp;", "&")):
        page = client.get(url)
        assert page.status_code == 200, page.text
        assert f'<span class="mono">q{token("D800")}</span>' in page.text and text in page.text


@pytest.mark.parametrize(
    "url",
    [
        "/runs/%2e%2e",
        "/runs/%2E%2E/sample?id=1",
        "/runs/..%2f..%2fetc",
        "/runs/%2e%2e%2f%2e%2e%2fetc%2fpasswd",
        "/diff?a=..&b=..",
        "/static/..%2f..%2fview%2fapp.py",
        "/static/%2e%2e/app.py",
    ],
)
def test_paths_outside_the_root_are_refused(root: Path, url: str) -> None:
    """.. in any spelling never reaches outside the results root."""
    page = client_for(root).get(url)
    assert page.status_code in (400, 403, 404)
    assert "create_app" not in page.text and "root:x:" not in page.text


def test_raw_dot_dot_paths_are_refused_by_the_real_server(root: Path) -> None:
    """Unnormalized paths sent as-is (no client tidies them) never leave the root."""
    import http.client
    from urllib.parse import urlsplit

    from gradetrail.view.server import BackgroundServer

    with BackgroundServer(root) as url:
        where = urlsplit(url)
        for path in ("/runs/..", "/runs/../../../etc/passwd", "/static/../app.py", "/runs/%2e%2e"):
            conn = http.client.HTTPConnection(where.hostname, where.port, timeout=10)
            conn.request("GET", path)
            response = conn.getresponse()
            body = response.read().decode()
            conn.close()
            assert response.status in (400, 403, 404), path
            assert "root:x:" not in body and "create_app" not in body


def test_symlinks_pointing_out_of_the_root_are_refused(root: Path, tmp_path: Path) -> None:
    """A run directory linked from elsewhere: listed as refused with the reason, its page
    403, nothing of it read; a run whose samples.jsonl links out keeps its page."""
    outside = tmp_path / "outside"
    shutil.copytree(only_run(root), outside)
    (outside / "results.jsonl").write_text('{"sample_id": "secret", "state": "scored"}\n')
    (root / "linked").symlink_to(outside, target_is_directory=True)
    run = only_run_real(root)
    (run / "samples.jsonl").unlink()
    (run / "samples.jsonl").symlink_to(outside / "results.jsonl")
    client = client_for(root)
    linked = client.get("/runs/linked")
    assert linked.status_code == 403 and "linked links outside the results root" in linked.text
    runs = client.get("/").text
    assert "secret" not in runs and 'href="/runs/linked"' in runs
    assert "linked links outside the results root; not read" in runs
    page = client.get(f"/runs/{run.name}")
    assert page.status_code == 200 and "secret" not in page.text
    assert "samples.jsonl links outside the results root; not read" in page.text
    chart = client.get(f"/runs/{run.name}/scores.svg")
    assert chart.status_code == 200 and "secret" not in chart.text


def only_run_real(root: Path) -> Path:
    (path,) = [p for p in root.iterdir() if p.is_dir() and not p.is_symlink()]
    return path


def test_host_header_must_name_this_server(root: Path) -> None:
    """DNS rebinding: a request for another site's name is refused; localhost is served."""
    app = create_app(root)
    assert TestClient(app, base_url="http://evil.example").get("/").status_code == 400
    assert TestClient(app, base_url="http://localhost:8765").get("/").status_code == 200
    assert TestClient(app, base_url="http://127.0.0.1:1").get("/").status_code == 200


def test_only_get_and_nothing_is_written(root: Path) -> None:
    """POST, PUT, DELETE are refused; a tour of every page leaves the root untouched."""
    run = only_run(root)
    client = client_for(root)
    before = snapshot(root)
    for method in ("post", "put", "delete", "patch"):
        assert getattr(client, method)(f"/runs/{run.name}").status_code == 405
    for url in (
        "/",
        f"/runs/{run.name}?f=failures&sort=latency",
        f"/runs/{run.name}/sample?id=q0",
        f"/runs/{run.name}/progress",
        f"/diff?a={run.name}&b={run.name}&show=all",
    ):
        assert client.get(url).status_code == 200
    assert snapshot(root) == before


def test_large_runs_stream_their_first_pages_with_the_same_rows(root: Path, monkeypatch) -> None:
    """Streamed unfiltered pages (a large file, no index yet) show what the index shows."""
    import gradetrail.view.run_pages as view_app

    run = only_run(root)
    indexed = client_for(root).get(f"/runs/{run.name}?per=10&page=1").text
    monkeypatch.setattr(view_app, "STREAM_BYTES", 0)
    streamed = client_for(root).get(f"/runs/{run.name}?per=10&page=1").text
    assert "3 rows" in streamed
    for sid in ("q0", "q1", "q2"):
        assert f">{sid}</a>" in streamed and f">{sid}</a>" in indexed


def test_sample_page_shows_the_judge_prompts_of_both_pairwise_orders(tmp_path: Path) -> None:
    """A pairwise row: each order's judge prompt (escaped) and reply, and the outcome."""
    from judge_evals import run
    from pairwise_support import ROWS  # the pairwise tests' own eval
    from pairwise_support import baseline_run as _baseline
    from pairwise_support import pairwise_spec as _pairwise

    baseline = _baseline(tmp_path, ROWS)
    result, _ = run(_pairwise(tmp_path, ROWS, baseline), tmp_path / "results")
    client = client_for(tmp_path / "results")
    page = client.get(f"/runs/{result.run_dir.name}/sample", params={"id": "s1"}).text
    assert "order 1: candidate shown as A" in page and "order 2: candidate shown as B" in page
    assert "&lt;&lt;A&gt;&gt;GOOD s1&lt;&lt;B&gt;&gt;bad s1" in page  # order 1's prompt
    assert "&lt;&lt;A&gt;&gt;bad s1&lt;&lt;B&gt;&gt;GOOD s1" in page  # order 2's prompt
    assert "Compared both.\nWINNER: A" in page and "Compared both.\nWINNER: B" in page
    assert ">win<" in page


def test_sample_page_shows_a_transcript_with_tool_calls_and_results(
    agent_srv, tmp_path: Path
) -> None:
    """The calculator agent (scripted model, local server): every turn, call and result."""
    import gradetrail

    overrides = [
        "model.provider=openai_compatible",
        "model.name=scripted-agent",
        f"model.base_url={agent_srv.openai_base_url}",
        "model.api_key_required=false",
    ]
    spec = gradetrail.load_spec(EXAMPLES / "agent-calculator.yaml", overrides)
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    client = client_for(tmp_path / "results")
    page = client.get(f"/runs/{result.run_dir.name}/sample", params={"id": "1"}).text
    assert "transcript: 2 model turns, stopped: answered" in page
    assert "tools offered: calculate" in page and "turn 2" in page
    assert page.count(">tool call<") == 2 and page.count(">tool result<") == 2
    assert "Use the calculate tool for every computation" in page  # the system message
    robe = client.get(f"/runs/{result.run_dir.name}/sample", params={"id": "2"}).text
    assert "ZeroDivisionError" in robe or "division by zero" in robe


def test_a_run_being_written_shows_progress_then_its_final_rows(tmp_path: Path) -> None:
    """A real `gradetrail run` process in flight: running with its rows so far, then
    complete with every row once it rewrites results.jsonl (a new file) at the end."""
    from run_support import app_env, count_lines, release, start_run, wait_until
    from run_support import write_eval as write_slow_eval

    spec = write_slow_eval(tmp_path / "slow", samples=12, concurrency=2)
    results = tmp_path / "results"
    calls = tmp_path / "calls.txt"
    # calls after the 4th are held until the running page has been read
    env = app_env(calls, delay=0.02, hold_after=4)
    proc = start_run(spec, tmp_path / "cache.sqlite", results, env)
    try:
        wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc, what="dir")
        (run,) = list(results.iterdir())
        wait_until(lambda: count_lines(run / "results.jsonl") >= 4, proc=proc, what="rows")
        client = client_for(results)
        progress = client.get(f"/runs/{run.name}/progress").json()
        assert progress["status"] == "running" and progress["live"] is True
        assert progress["rows"] == 4 and progress["expected"] == 12
        page = client.get(f"/runs/{run.name}")
        assert page.status_code == 200 and "still being written" in page.text
        # the summary is the 4 rows' (every call held after the 4th), not the start's
        assert "figures below are partial, from the 4 rows written so far (of 12)" in plain(
            page.text
        )
        assert "<th>mean score</th><td>1.0000" in page.text and "over 4 scored" in page.text
        assert "status-running" in client.get("/").text
        release(calls)
        assert proc.wait(timeout=60) == 0
        done = client.get(f"/runs/{run.name}")
        assert "status-complete" in done.text and "12 rows" in done.text
        assert client.get(f"/runs/{run.name}/progress").json()["rows"] == 12
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()


def test_a_large_diff_is_computed_in_the_background(gsm8k_root: Path, monkeypatch) -> None:
    """Above the size threshold: a page that refreshes itself, then the diff."""
    import time

    import gradetrail.view.diff_pages as view_app

    monkeypatch.setattr(view_app, "DIFF_BYTES", 0)
    client = client_for(gsm8k_root)
    params = {
        "a": run_named(gsm8k_root, "175b_verification"),
        "b": run_named(gsm8k_root, "175b_finetuning"),
    }
    first = client.get("/diff", params=params)
    assert first.status_code == 202 and 'http-equiv="refresh"' in first.text
    for _ in range(600):  # the page's own refresh, done by hand
        page = client.get("/diff", params=params)
        if page.status_code == 200:
            break
        time.sleep(0.1)
    assert 'regressed <b class="count">360</b>' in page.text


def test_identical_errors_are_grouped_with_a_count(tmp_path: Path, monkeypatch) -> None:
    """Seven rows failing with one error and one with a wrong answer: with the errors (or
    failures) filter, the run page shows one group, 7 ×, its message once and the first
    sample ids; an error row shows its known target, not ∅."""
    spec = write_app_eval(tmp_path / "eval", samples=8)
    results = tmp_path / "results"
    plan = {f"q{i}/1": "fail" for i in range(1, 8)} | {"q0/1": "wrong"}
    app_run(spec, results, tmp_path / "cache.sqlite", "base", plan, monkeypatch)
    client = client_for(results)
    name = only_run(results).name
    for filters in ("f=errors", "f=failures"):
        page = client.get(f"/runs/{name}?{filters}")
        assert page.status_code == 200
        text = plain(page.text)
        assert page.text.count('class="group-count"') == 1  # one group for the seven
        assert "Identical errors, grouped" in text
        assert re.search(r"7 × provider_error", text)
        assert re.search(r"q1 ?, q2 ?, q3 ?, q4 ?, q5 ?…", text)
    assert "∅ / 2" in plain(client.get(f"/runs/{name}?f=errors").text)
    assert "Identical errors" not in client.get(f"/runs/{name}").text


def test_sample_steps_follow_the_filtered_list_across_table_pages(gsm8k_root: Path) -> None:
    """The last failure of the table's first page links to the first failure of its
    second page, and that sample's way back is to the second page; the first failure has
    no previous one; a sample outside the filtered list gets no steps."""
    client = client_for(gsm8k_root)
    name = run_named(gsm8k_root, "175b_verification")
    ids = {
        n: re.findall(
            r'class="sample-link" href="[^"]*\?id=([^&"]+)',
            client.get(f"/runs/{name}?f=failures&page={n}").text,
        )
        for n in (1, 2)
    }
    assert len(ids[1]) == 50 and ids[2]
    last = client.get(f"/runs/{name}/sample", params={"id": ids[1][-1], "back": "?f=failures"})
    text = plain(last.text)
    assert "50 of 577 shown" in text
    (nxt,) = re.findall(r'rel="next" href="([^"]+)"', last.text)
    after = client.get(nxt.replace("&amp;", "&"))
    assert f"Sample {ids[2][0]}" in plain(after.text) and "51 of 577 shown" in plain(after.text)
    (back,) = re.findall(r'class="back" href="([^"]+)"', after.text)
    assert back.replace("&amp;", "&").endswith("?f=failures&page=2#samples")
    first = client.get(f"/runs/{name}/sample", params={"id": ids[1][0], "back": "?f=failures"})
    assert 'rel="prev"' not in first.text and "1 of 577 shown" in plain(first.text)
    right = client.get(f"/runs/{name}/sample", params={"id": "1", "back": "?f=failures"})
    assert right.status_code == 200 and "shown" not in plain(right.text).split("Sample 1")[1][:80]


def test_every_invisible_character_is_marked_in_the_body_and_the_title(root: Path) -> None:
    """Characters outside the first marked set (a no-break space, an invisible
    separator, a variation selector, a Hangul filler, a tag character) are marked too,
    so two ids that look identical are told apart, and the page title shows a sample
    id's bidi and zero-width characters as plain [U+XXXX] text (before: raw)."""
    run = only_run(root)
    path = run / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    sneaky = "A:\u00a05\u2063\ufe0f\u3164\U000e0041"
    rows[0]["response"] = sneaky
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    client = client_for(root)
    page = client.get(f"/runs/{run.name}/sample", params={"id": "q0"})
    assert page.status_code == 200
    for ch in "\u00a0\u2063\ufe0f\u3164\U000e0041":
        assert ch not in page.text
        assert f'title="U+{ord(ch):04X}"' in page.text
    from gradetrail.view.text import titled

    assert titled("q\u202e0\u200b") == "q[U+202E]0[U+200B]"


def test_a_huge_response_makes_a_page_of_bounded_size(root: Path) -> None:
    """A 5 MB response is shown up to MAX_SHOWN_CHARS with a note saying how much is cut
    (before: a 200 MB response made a 419 MB page)."""
    from gradetrail.view.text import MAX_SHOWN_CHARS

    run = only_run(root)
    path = run / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    rows[0]["response"] = "x" * 5_000_000
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    page = client_for(root).get(f"/runs/{run.name}/sample", params={"id": "q0"})
    assert page.status_code == 200
    assert len(page.text) < 3 * MAX_SHOWN_CHARS + 200_000
    assert f"{5_000_000 - MAX_SHOWN_CHARS:,} more characters not shown" in page.text


def test_the_score_chart_is_drawn_from_the_checked_rows(root: Path) -> None:
    """samples.jsonl edited to score every sample 1 (nothing checks it against the
    manifest) drew 3 samples at 1 beside the run's mean of 0.6667; the chart is now drawn
    from results.jsonl, the rows the agreement check holds to the manifest (2 at 1, 1 at
    0), and a run whose rows disagree gets no chart."""
    run = only_run(root)
    samples = run / "samples.jsonl"
    lines = [json.loads(line) for line in samples.read_text().splitlines()]
    samples.write_text(
        "".join(json.dumps(s | {"score": 1.0, "scores": [1.0]}) + "\n" for s in lines)
    )
    client = client_for(root)
    chart = client.get(f"/runs/{run.name}/scores.svg").text
    bars = re.findall(r'monospace">([^<]+)</text>.*?fill="#1d2430">(\d+)<', chart, re.S)
    assert bars == [("0", "1"), ("1", "2")]
    results = run / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    results.write_text("".join(json.dumps(r | {"score": 1.0}) + "\n" for r in rows))
    page = client.get(f"/runs/{run.name}").text
    assert 'src="/runs/' not in page.split('<section class="chart">')[1].split("</section>")[0]
    assert "Not shown: results.jsonl disagrees with the manifest" in page
    withheld = client.get(f"/runs/{run.name}/scores.svg").text
    assert "no per-sample scores" in withheld and 'fill="#1d2430"' not in withheld


def test_progress_polls_count_rows_without_building_the_row_index(root: Path) -> None:
    """A live run's progress poll counted its rows by building the run's row index, every
    row parsed inside the request (the first poll of a 100,000-row run waited for all of
    it). Now the rows are counted as lines, only those appended since the last poll: no
    index is built, and appended rows, a torn last line, an in-place truncation and a
    replaced file are each counted right."""
    from starlette.applications import Starlette
    from starlette.routing import Route
    from view_support import as_started

    from gradetrail.view.render import Renderer
    from gradetrail.view.run_pages import RunPages
    from gradetrail.view.store import RunStore

    run = only_run(root)
    as_started(run, os.getpid())
    store = RunStore(root)
    runs = RunPages(store, Renderer(store.root))
    app = Starlette(routes=[Route("/runs/{run:str}/progress", runs.progress)])
    client = TestClient(app)

    def rows() -> int:
        return client.get(f"/runs/{run.name}/progress").json()["rows"]

    results = run / "results.jsonl"
    lines = results.read_text().splitlines(keepends=True)
    assert rows() == 3
    assert store.fresh_index(run) is None  # nothing parsed
    with results.open("a") as f:
        f.write(lines[0] + lines[1] + lines[2][:20])  # two rows and a torn third
    assert rows() == 5
    with results.open("a") as f:
        f.write(lines[2][20:])
    assert rows() == 6
    with results.open("r+") as f:  # cut in place: the same inode, shorter
        f.truncate(len("".join(lines[:2])))
    assert rows() == 2
    replaced = run / "results.new"
    replaced.write_text("".join(lines * 3))
    replaced.replace(results)  # a new file (the run's final rewrite)
    assert rows() == 9
    assert store.fresh_index(run) is None


def test_a_kept_run_notices_a_file_becoming_unreadable_through_its_link(root: Path) -> None:
    """An ended run is kept between page loads while its directory, results file and
    manifest are unchanged; its samples.jsonl, a link to a file elsewhere in the results
    root, then had its target replaced by a FIFO: the runs page kept saying nothing (no
    name in the run directory changed), and went on so until one did. Now every file the
    viewer refuses or reads is part of what the kept run is checked by (each one's type,
    inode, size, times, and its link's target's), so the next load names the FIFO, and
    names nothing again once the target is a file."""
    run = only_run(root)
    shared = root / ".shared"
    shared.mkdir()
    target = shared / "samples.jsonl"
    (run / "samples.jsonl").replace(target)
    (run / "samples.jsonl").symlink_to(target)
    client = client_for(root)
    said = "samples.jsonl is not a regular file (a FIFO, socket or device); not read"
    assert said not in plain(client.get("/").text)
    target.unlink()
    os.mkfifo(target)
    assert said in plain(client.get("/").text)
    assert said in plain(client.get(f"/runs/{run.name}").text)
    target.unlink()
    target.write_text("")
    assert said not in plain(client.get("/").text)
