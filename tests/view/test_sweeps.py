"""The viewer's sweep pages: over HTTP (the matrix, the sample across cells, refusals) and
in a real browser (Debian's chromium via Playwright): runs page -> sweep -> a cell's diff
against the baseline -> one sample in every cell."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from paths import GSM8K_SPEC
from playwright.sync_api import Page, expect
from starlette.testclient import TestClient
from view_support import WAIT_MS

from gradetrail.engine.sweep import run_sweep
from gradetrail.spec.sweep import load_sweep
from gradetrail.view.app import create_app

expect.set_options(timeout=WAIT_MS)
N = 200


@pytest.fixture(scope="module")
def root(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A results root holding a three-cell GSM8K sweep (first 200 problems), baseline
    175b_finetuning."""
    tmp = tmp_path_factory.mktemp("sweep-view")
    sweep = tmp / "sweep.yaml"
    models = ["175b_verification", "175b_finetuning", "6b_finetuning"]
    sweep.write_text(
        yaml.safe_dump(
            {
                "name": "view",
                "spec": str(GSM8K_SPEC),
                "axes": {"model.name": models, "dataset.limit": [N]},
                "baseline": "175b_finetuning",
            },
            sort_keys=False,
        )
    )
    run_sweep(load_sweep(sweep), results_root=tmp / "results", cache_path=tmp / "c.db")
    return tmp / "results"


def test_matrix_page_over_http(root: Path) -> None:
    """The sweep is listed on the runs page (and not as a broken run); its page shows each
    cell coloured by verdict with links to its run and its diff."""
    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    runs = client.get("/")
    assert runs.status_code == 200
    assert 'href="/sweeps/sweep-view"' in runs.text
    assert runs.text.count('class="run-row') == 3  # the sweep's directory is not a run
    assert '<span class="badge run-label">view:175b_verification/200</span>' in runs.text
    page = client.get("/sweeps/sweep-view")
    assert page.status_code == 200
    assert 'data-cell="175b_verification/200"' in page.text
    assert "verdict-non-inferior" in page.text and "verdict-inferior" in page.text
    assert "superior not tested while 6b_finetuning/200 fails the family" in page.text
    assert "verdict-baseline" in page.text
    assert page.text.count("diff against the baseline") == 2
    other = client.get("/sweeps/sweep-view?baseline=175b_verification")
    assert other.status_code == 200 and other.text.count("verdict-inferior") == 2
    sample = client.get("/sweeps/sweep-view/sample?id=3")
    assert sample.status_code == 200 and sample.text.count('class="epoch answer"') == 3
    assert client.get("/sweeps/sweep-view/sample?id=nope").status_code == 404
    assert client.get("/sweeps/nope").status_code == 404
    for path in ("/sweeps/%2e%2e", "/sweeps/%2e%2e%2f%2e%2e%2fetc/sample?id=1"):
        refused = client.get(path)
        assert refused.status_code in (403, 404) and "root:x:" not in refused.text
    run_name = next(p.name for p in root.iterdir() if p.name.startswith("gsm8k-"))
    assert client.get(f"/sweeps/{run_name}").status_code == 409  # a run, not a sweep


def test_runs_page_to_matrix_to_diff_to_sample(page: Page) -> None:
    """From the runs page to the sweep, to a cell's diff against the baseline and back,
    then one sample in every cell side by side."""
    page.goto("/")
    page.locator("#sweeps").get_by_role("link", name="view").click()
    expect(page.locator("h1")).to_contain_text("Sweep view")
    expect(page.locator("#best")).to_have_text("175b_verification/200")
    cell = page.locator('td[data-cell="6b_finetuning/200"]')
    expect(cell).to_have_class("sweep-cell verdict-inferior failed")
    expect(cell).to_contain_text("FAIL inferior")
    page.locator('td[data-cell="175b_verification/200"]').get_by_role(
        "link", name="diff against the baseline"
    ).click()
    expect(page).to_have_url(re.compile(r"/diff\?a="))
    expect(page.locator("h1")).to_be_visible()
    page.go_back()
    page.get_by_placeholder("sample id").fill("3")
    page.get_by_role("button", name="Show").click()
    answers = page.locator("#answers article")
    expect(answers).to_have_count(3)
    expect(answers.first).to_contain_text("175b_verification/200")


def test_a_sweep_record_linked_outside_the_root_is_never_read(root: Path, tmp_path: Path) -> None:
    """A sweep directory whose sweep.json links to a record outside the results root was
    read: its name (and cells) showed on the runs page, something outside the root. It is
    now left off the runs page, and its page says why (409); a FIFO in its place neither
    blocks a page nor is listed."""
    import os
    import shutil

    mine = tmp_path / "results"
    shutil.copytree(root, mine, symlinks=True)
    outside = tmp_path / "outside.json"
    record = (root / "sweep-view" / "sweep.json").read_text()
    outside.write_text(record.replace('"name": "view"', '"name": "SECRET"'))
    (mine / "sweep-out").mkdir()
    (mine / "sweep-out" / "sweep.json").symlink_to(outside)
    (mine / "sweep-fifo").mkdir()
    os.mkfifo(mine / "sweep-fifo" / "sweep.json")
    client = TestClient(create_app(mine), base_url="http://127.0.0.1")
    runs = client.get("/")
    assert runs.status_code == 200 and "SECRET" not in runs.text
    assert 'href="/sweeps/sweep-view"' in runs.text and "sweep-out" not in runs.text
    page = client.get("/sweeps/sweep-out")
    assert page.status_code == 409 and "SECRET" not in page.text
    assert "sweep-out: sweep.json links outside the results root; not read" in page.text
