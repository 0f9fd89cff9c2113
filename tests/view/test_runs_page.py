"""The runs page of a results root holding many runs: one page of runs at a time, with
links to the others, and what is shown of a run kept only while its files are unchanged.
Over HTTP, then in a real browser (Debian's chromium via Playwright)."""

from __future__ import annotations

import json
import os
import re
import shutil
from pathlib import Path

import pytest
from playwright.sync_api import Page, expect
from starlette.testclient import TestClient
from view_support import WAIT_MS, app_run, write_app_eval

from gradetrail.view.app import create_app

expect.set_options(timeout=WAIT_MS)
#: runs under the module's root: three pages of 100 (the default) and a last of 30
RUNS = 230


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root of :data:`RUNS` copies of one small ended run, ``run000`` to
    ``run229`` (read-only to tests)."""
    tmp = tmp_path_factory.mktemp("many")
    spec = write_app_eval(tmp / "eval", samples=3)
    with pytest.MonkeyPatch.context() as mp:
        run = app_run(spec, tmp / "made", tmp / "cache.sqlite", "base", {"q2/1": "wrong"}, mp)
    out = tmp / "results"
    for i in range(RUNS):
        shutil.copytree(run, out / f"run{i:03d}")
    return out


def _names(html: str) -> list[str]:
    return re.findall(r'<tr class="run-row[^"]*" data-run="([^"]+)"', html)


def test_the_runs_page_lists_one_page_of_runs(root: Path) -> None:
    """230 runs were one table of 230 rows (a root of 10,000 runs: one page of 10,000
    rows, each run's progress counted); now 100 a page, sorted over all of them, with
    links to the next and last pages, and the sort links start again at page 1."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    first = client.get("/", params={"sort": "name"})
    assert first.status_code == 200
    assert _names(first.text) == [f"run{i:03d}" for i in range(100)]
    assert "230 of 230 · 1–100 shown, page 1 of 3" in first.text
    assert 'rel="next" href="/?sort=name&amp;page=2"' in first.text
    last = client.get("/", params={"sort": "name", "page": "3"})
    assert _names(last.text) == [f"run{i:03d}" for i in range(200, 230)]
    desc = client.get("/", params={"sort": "name", "dir": "desc", "page": "99", "per": "20"})
    assert _names(desc.text) == [f"run{i:03d}" for i in range(9, -1, -1)]  # the last page
    assert 'href="?sort=name&amp;dir=asc&amp;per=20"' in desc.text  # the sort link: page 1
    filtered = client.get("/", params={"name": "run22"})
    assert sorted(_names(filtered.text)) == [f"run22{i}" for i in range(10)]
    assert "10 of 230" in filtered.text and "page 1 of" not in filtered.text


def test_a_run_changed_after_it_was_shown_is_read_again(root: Path, tmp_path: Path) -> None:
    """What the page shows of an ended run is kept while its files are unchanged: a
    results file edited since, a log linked out of the root planted since, are both seen
    on the next load."""
    mine = tmp_path / "root"
    for name in ("run000", "run001"):
        shutil.copytree(root / name, mine / name)
    client = TestClient(create_app(mine), base_url="http://127.0.0.1")
    before = client.get("/").text
    assert "rows disagree" not in before and "links outside" not in before
    results = mine / "run000" / "results.jsonl"
    rows = [json.loads(line) for line in results.read_text().splitlines()]
    rows[0]["sample_id"], rows[2]["sample_id"] = rows[2]["sample_id"], rows[0]["sample_id"]
    results.write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "elsewhere.jsonl").write_text("{}\n")
    os.remove(mine / "run001" / "log.jsonl")
    os.symlink(tmp_path / "elsewhere.jsonl", mine / "run001" / "log.jsonl")
    after = client.get("/").text
    assert "not shown: rows disagree" in after
    assert "log.jsonl links outside the results root; not read" in after


def test_in_a_browser_the_pages_of_runs_follow_each_other(page: Page) -> None:
    """From page 1 of the runs sorted by name, next shows run100 to run199, last the 30
    after them; the back button returns to page 2."""
    page.goto("/?sort=name")
    rows = page.locator("tr.run-row")
    expect(rows).to_have_count(100)
    page.get_by_role("link", name="next ›").click()
    expect(rows.first).to_have_attribute("data-run", "run100")
    expect(rows).to_have_count(100)
    page.get_by_role("link", name="last »").click()
    expect(rows).to_have_count(30)
    expect(rows.last).to_have_attribute("data-run", "run229")
    page.go_back()
    expect(rows.first).to_have_attribute("data-run", "run100")
