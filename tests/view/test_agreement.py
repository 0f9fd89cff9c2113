"""The viewer on a complete run whose results.jsonl no longer agrees with its manifest
(every failing row re-scored 1): the runs page and the run page say so unmistakably and
never show the manifest's mean as the run's score; its diff is refused. Over HTTP, then
in a real browser (Debian's chromium via Playwright)."""

from __future__ import annotations

import html
import json
import shutil
import time
from pathlib import Path

import pytest
from cli_support import run_cli
from paths import GSM8K_SPEC
from playwright.sync_api import Page, expect
from starlette.testclient import TestClient
from view_support import WAIT_MS

import gradetrail
from gradetrail.view.app import create_app
from gradetrail.view.store import CHECK_BYTES

expect.set_options(timeout=WAIT_MS)
N = 40
#: the 6b_finetuning run's mean over the first 40 problems (6 right) as the pages show a
#: score: the runs page's mean cell, the run page's summary line (the refusal names the
#: manifest's figure, 0.150000, as what the rows disagree with, never as the score)
RECORDED = ("<b>0.1500</b>", "0.1500 ±")
DISAGREES = (
    f"its results.jsonl gives mean 1.000000 over {N} samples where its manifest records "
    f"mean 0.150000 over {N}"
)


def _edited(run_dir: Path, pad: int = 0) -> None:
    """Every row re-scored 1 (and, with ``pad``, a field of ``pad`` characters added)."""
    path = run_dir / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    extra = {"pad": "x" * pad} if pad else {}
    path.write_text("".join(json.dumps({**r, "score": 1.0, **extra}) + "\n" for r in rows))


def _swapped(run_dir: Path) -> None:
    """The first right and the first wrong row trade sample ids: every count and the
    mean still agree with the manifest, but the per-sample scores are forged."""
    path = run_dir / "results.jsonl"
    rows = [json.loads(line) for line in path.read_text().splitlines()]
    right = next(r for r in rows if r["score"] == 1.0)
    wrong = next(r for r in rows if r["score"] == 0.0)
    right["sample_id"], wrong["sample_id"] = wrong["sample_id"], right["sample_id"]
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))


def _boasted(run_dir: Path) -> None:
    """The manifest's mean and interval edited to 0.95 [0.90, 0.99], its rows untouched."""
    path = run_dir / "manifest.json"
    manifest = json.loads(path.read_text())
    manifest["score"] |= {"mean": 0.95, "ci_low": 0.9, "ci_high": 0.99}
    path.write_text(json.dumps(manifest))


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root: the first 40 GSM8K problems by 175b_verification (intact) and by
    6b_finetuning, edited (``edited``); a copy with a right and a wrong row's sample ids
    swapped (``swapped``); the intact run copied under the 6b run's directory name
    (``gsm8k-<its hash>``); and a copy edited with rows padded past
    :data:`CHECK_BYTES` (``padded``), which the viewer checks in the background."""
    tmp = tmp_path_factory.mktemp("agreement")
    out = tmp / "results"
    for model in ("175b_verification", "6b_finetuning"):
        spec = gradetrail.load_spec(
            GSM8K_SPEC, overrides=[f"model.name={model}", f"dataset.limit={N}"]
        )
        run = gradetrail.run_eval(spec, results_root=out, cache_path=tmp / "c.db").run_dir
        assert run.parent == out
        if model == "6b_finetuning":
            assert json.loads((run / "manifest.json").read_text())["score"]["mean"] == 0.15
            shutil.copytree(run, out / "padded")
            _edited(out / "padded", pad=CHECK_BYTES // N + 1)
            shutil.copytree(run, out / "swapped")
            _swapped(out / "swapped")
            shutil.copytree(run, out / "boasted")
            _boasted(out / "boasted")
            _edited(run)
            run.rename(out / "edited")
            shutil.copytree(out / "intact", run)  # the baseline under the candidate's name
        else:
            run.rename(out / "intact")
    assert (out / "padded" / "results.jsonl").stat().st_size > CHECK_BYTES
    return out


def _row(html: str, name: str) -> str:
    """The runs page's table row of run ``name`` (and its warnings row)."""
    start = html.index(f'data-run="{name}"')
    end = html.find('class="run-row', start)
    return html[start : end if end > 0 else html.index("</tbody>", start)]


def test_runs_page_marks_the_run_and_shows_no_mean(root: Path) -> None:
    """The edited run's row has the rows-disagree badge, says what disagrees and what to
    do, and its mean cell reads "not shown" (it showed the manifest's 0.1500 before); the
    intact run keeps its mean."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    page = client.get("/")
    assert page.status_code == 200
    edited = _row(page.text, "edited")
    assert '<span class="badge rows-disagree"' in edited
    assert f"ROWS DISAGREE: complete, but {DISAGREES}" in edited
    assert "not shown: rows disagree" in edited and RECORDED[0] not in edited
    intact = _row(page.text, "intact")
    assert "rows disagree" not in intact and "<b>0." in intact


def test_run_page_warns_and_withholds_the_score(root: Path) -> None:
    """The run page opens with an alert naming what disagrees; its summary's score line
    reads "not shown" and no figure of the manifest's score is on the page."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    page = client.get("/runs/edited")
    assert page.status_code == 200
    assert '<div class="rows-disagree alert" role="alert" id="rows-disagree">' in page.text
    assert f"The run is complete, but {DISAGREES}." in page.text
    assert "not shown: results.jsonl disagrees with the manifest" in page.text
    assert all(shown not in page.text for shown in RECORDED)
    intact = client.get("/runs/intact")
    assert "rows-disagree" not in intact.text and "not shown" not in intact.text


def test_a_large_run_is_checked_in_the_background_and_never_shows_its_mean_meanwhile(
    root: Path,
) -> None:
    """The padded copy (past CHECK_BYTES) is checked in a thread: until it is, its pages
    say its rows are being checked and show no mean; then they say the rows disagree."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    first = client.get("/runs/padded")
    assert first.status_code == 200 and RECORDED[1] not in first.text
    assert 'id="rows-checking"' in first.text or 'id="rows-disagree"' in first.text
    deadline = time.monotonic() + 60
    while 'id="rows-disagree"' not in (page := client.get("/runs/padded")).text:
        assert RECORDED[1] not in page.text and time.monotonic() < deadline
        time.sleep(0.2)
    assert f"The run is complete, but {DISAGREES}." in page.text
    assert "not shown: rows disagree" in _row(client.get("/").text, "padded")


def test_the_diff_of_such_a_run_is_refused(root: Path) -> None:
    """The diff page refuses the pair (409), saying which run disagrees and what to do."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    page = client.get("/diff?a=intact&b=edited")
    assert page.status_code == 409
    assert f"is complete but {DISAGREES}" in page.text
    assert "run the same spec again to rewrite it from the cache" in page.text


def test_in_a_browser_the_warning_is_the_first_thing_on_the_run_page(page: Page) -> None:
    """From the runs page (the edited run's badge and "not shown" mean) to its run page,
    where a visible alert leads and the summary shows no score."""
    page.goto("/")
    row = page.locator('tr[data-run="edited"]')
    expect(row.locator(".badge.rows-disagree")).to_be_visible()
    expect(row.locator(".score-withheld")).to_have_text("not shown: rows disagree")
    row.get_by_role("link").first.click()
    alert = page.get_by_role("alert")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text("Rows disagree with the manifest")
    expect(alert).to_contain_text(DISAGREES)
    box = alert.bounding_box()
    summary = page.locator("section.summary").bounding_box()
    assert box is not None and summary is not None and box["y"] < summary["y"]
    expect(page.locator("table.summary-lines")).to_contain_text("not shown")
    expect(page.locator("table.summary-lines")).not_to_contain_text(RECORDED[1])


CHANGED = "its results.jsonl is not the file the run wrote (its SHA-256 is not the manifest's"


def test_a_run_with_two_samples_scores_swapped_is_refused_everywhere(root: Path) -> None:
    """A right and a wrong row trading sample ids keep every count and the mean (the rows
    check passed): the diff listed one regression and one improvement that never
    happened, and the gate paired the forged scores. The file's SHA-256 is not the one
    its manifest records: the runs page marks it, the diff and the gate refuse it (exit
    2), naming the file."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    row = _row(client.get("/").text, "swapped")
    assert "not shown: rows disagree" in row and RECORDED[0] not in row
    page = client.get("/diff?a=intact&b=swapped")
    assert page.status_code == 409 and CHANGED in html.unescape(page.text)
    for command in ("diff", "gate"):
        done = run_cli(command, str(root / "intact"), str(root / "swapped"))
        assert done.code == 2, done.out
        assert f"candidate run {root / 'swapped'} is complete but {CHANGED}" in done.err


def test_in_a_browser_the_swapped_run_page_withholds_its_score(page: Page) -> None:
    """The swapped run's page leads with the alert naming results.jsonl, and shows no
    score."""
    page.goto("/runs/swapped")
    alert = page.get_by_role("alert")
    expect(alert).to_be_visible()
    expect(alert).to_contain_text(CHANGED)
    expect(page.locator("table.summary-lines")).not_to_contain_text(RECORDED[1])


def test_in_a_browser_a_baseline_copied_under_the_candidates_name_is_named(
    page: Page, root: Path
) -> None:
    """The intact run copied in place of the candidate's directory (its name carrying the
    6b run's identity hash) was listed and diffed as the candidate, the diff saying only
    "identity same"; the runs page now warns that the name and the manifest disagree,
    and the diff page says the candidate is a copy of the baseline."""
    (copy,) = [p.name for p in root.iterdir() if p.name.startswith("gsm8k-")]
    page.goto("/")
    warning = page.locator(f'tr[data-run="{copy}"] + tr.warnings-row')
    expect(warning).to_contain_text(f"its directory's name says identity {copy[-12:]}")
    page.goto(f"/diff?a=intact&b={copy}")
    expect(page.locator("main")).to_contain_text("is a copy of the baseline run")


def test_in_a_browser_the_chart_counts_the_rows_not_a_planted_samples_file(
    page: Page, root: Path
) -> None:
    """The intact run's samples.jsonl rewritten to score all 40 samples 1: the run page's
    chart drew 40 right; it now counts the rows (the mean's own), loaded as an image."""
    rows = [json.loads(x) for x in (root / "intact" / "results.jsonl").read_text().splitlines()]
    right = sum(r["score"] == 1.0 for r in rows)
    assert 0 < right < N
    samples = root / "intact" / "samples.jsonl"
    planted = [json.loads(x) | {"score": 1.0} for x in samples.read_text().splitlines()]
    samples.write_text("".join(json.dumps(s) + "\n" for s in planted))
    page.goto("/runs/intact")
    chart = page.locator("img.chart")
    expect(chart).to_be_visible()
    page.wait_for_function("document.querySelector('img.chart').naturalWidth > 0")
    page.goto("/runs/intact/scores.svg")
    counts = page.locator('text[fill="#1d2430"]').all_text_contents()
    assert counts == [str(N - right), str(right)]


def test_in_a_browser_a_mean_edited_in_the_manifest_is_never_the_score(page: Page) -> None:
    """The 6b run's manifest edited to a mean of 0.95 (its results.jsonl, and so its
    SHA-256, untouched): the runs page showed 0.9500 as its score. Its figures' SHA-256
    no longer matches: the mean reads "not shown" and the run page leads with why."""
    page.goto("/")
    row = page.locator('tr[data-run="boasted"]')
    expect(row.locator(".score-withheld")).to_have_text("not shown: rows disagree")
    expect(row).not_to_contain_text("0.9500")
    page.goto("/runs/boasted")
    alert = page.get_by_role("alert")
    expect(alert).to_contain_text("its manifest's figures are not the ones the run wrote")
    expect(page.locator("table.summary-lines")).not_to_contain_text("0.9500")
