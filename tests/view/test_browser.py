"""The viewer in a real browser: Debian's chromium driven by Playwright (no JS mocks)."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path

import pytest
from view_support import (
    CHROMIUM,
    CHROMIUM_ARGS,
    CHROMIUM_MISSING,
    app_run,
    as_started,
    chromium_required,
    gsm8k_run,
    write_app_eval,
)

if not os.access(CHROMIUM, os.X_OK):
    if chromium_required():
        pytest.fail(CHROMIUM_MISSING + " (required here: CI)", pytrace=False)
    pytest.skip(CHROMIUM_MISSING, allow_module_level=True)

from playwright.sync_api import Browser, Page, expect, sync_playwright  # noqa: E402

from gradetrail.view.server import BackgroundServer

#: answers a degenerate model gives: a 1,482-digit number, 3,000 characters without a
#: space, and right-to-left text with a bidi override before its answer
LONG_NUMBER = "7" * 1482
PATHOLOGICAL = {
    "q0/1": "raw:A: " + LONG_NUMBER,
    "q1/1": "raw:" + "x" * 3000 + " A: -5",
    "q2/1": "raw:\u05e9\u05dc\u05d5\u05dd \u202eA: 9 \u0645\u0631\u062d\u0628\u0627",
}
XSS = '<script>window.__xss = 1</script><img src=x onerror="window.__xss = 2">'
#: milliseconds an expectation or a page action may wait: Playwright's defaults (5 s for
#: expect) are short for chromium on a loaded 2-core machine; these only guard a hang
WAIT_MS = 60_000
expect.set_options(timeout=WAIT_MS)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Path]:
    """A results root with the two 175B GSM8K runs, a run whose response holds markup, a
    run whose log.jsonl links outside the root, a run being written by this process
    (``live``: one row of three so far; the others in ``runs["live_rest"]``),
    ``counted``, ended (a test makes it look live), and ``pathological``, whose three
    answers are :data:`PATHOLOGICAL`."""
    tmp = tmp_path_factory.mktemp("browser")
    root, cache = tmp / "results", tmp / "cache.sqlite"
    out = {
        "verification": gsm8k_run(root, cache, "175b_verification"),
        "finetuning": gsm8k_run(root, cache, "175b_finetuning"),
    }
    spec = write_app_eval(tmp / "eval", samples=2)
    with pytest.MonkeyPatch.context() as mp:
        out["xss"] = app_run(spec, root, cache, "xss", {"q1/1": "say:" + XSS}, mp)
        three = write_app_eval(tmp / "eval3", samples=3)
        out["refused"] = app_run(three, root, cache, "refused", {"q2/1": "wrong"}, mp)
        out["live"] = app_run(three, root, cache, "live", {"q2/1": "wrong"}, mp)
        out["counted"] = app_run(three, root, cache, "counted", {"q2/1": "wrong"}, mp)
        out["pathological"] = app_run(three, root, cache, "pathological", PATHOLOGICAL, mp)
    (tmp / "outside.jsonl").write_text('{"secret": "SECRET"}\n')
    (out["refused"] / "log.jsonl").unlink()
    (out["refused"] / "log.jsonl").symlink_to(tmp / "outside.jsonl")
    results = out["live"] / "results.jsonl"
    first, *rest = results.read_text().splitlines(keepends=True)  # q0 right, q1, q2 wrong
    results.write_text(first)
    as_started(out["live"], os.getpid())
    out["live_rest"] = tmp / "live_rest.jsonl"
    out["live_rest"].write_text("".join(rest))
    out["root"] = root
    return out


@pytest.fixture(scope="module")
def url(runs: dict[str, Path]) -> Iterator[str]:
    """The viewer's base URL, served from a thread on a free port."""
    with BackgroundServer(runs["root"]) as base:
        yield base


@pytest.fixture(scope="module")
def browser(url: str) -> Iterator[Browser]:
    """One headless chromium for the module (after the runs are built: Playwright's sync
    API keeps an event loop on this thread, where run_eval could not start its own)."""
    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=WAIT_MS)
        yield launched
        launched.close()


@pytest.fixture
def page(browser: Browser) -> Iterator[Page]:
    """A fresh page; any dialog (alert) it opens is recorded in page.dialogs."""
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(WAIT_MS)
    context.set_default_navigation_timeout(WAIT_MS)
    opened = context.new_page()
    opened.dialogs = []  # type: ignore[attr-defined]
    opened.on("dialog", lambda d: (opened.dialogs.append(d.message), d.dismiss()))  # type: ignore[attr-defined]
    yield opened
    context.close()


def test_land_open_a_run_tick_failures_open_a_sample_go_back(
    page: Page, url: str, runs: dict[str, Path]
) -> None:
    """Failures are two clicks from landing, the filter is in the URL, back restores it."""
    page.goto(url + "/")
    page.get_by_role("row").filter(has_text="175b_verification").get_by_role("link").first.click()
    expect(page.locator("p.count")).to_contain_text("1,319 rows")
    page.get_by_label("failures").check()  # applies at once (JS), or with Apply without it
    page.wait_for_url("**f=failures**")
    expect(page.locator("p.count")).to_contain_text("577 rows match")
    page.locator("a.sample-link").first.click()
    expect(page.locator("h1")).to_contain_text("Sample 3")
    expect(page.locator("section.response")).to_contain_text("A: 65000")
    page.go_back()
    expect(page.locator("p.count")).to_contain_text("577 rows match")
    expect(page.get_by_label("failures")).to_be_checked()


def test_tick_two_runs_and_read_the_diff(page: Page, url: str) -> None:
    """Ticking the baseline then the candidate opens the diff: 76 improved, 360 regressed."""
    page.goto(url + "/")
    rows = page.get_by_role("row")
    rows.filter(has_text="175b_verification").get_by_role("checkbox").check()
    rows.filter(has_text="175b_finetuning").get_by_role("checkbox").click()  # navigates
    page.wait_for_url("**/diff?**")
    expect(page.locator('[data-kind="improved"] .count')).to_have_text("76")
    expect(page.locator('[data-kind="regressed"] .count')).to_have_text("360")
    expect(page.locator("section.gate")).to_contain_text("FAIL")
    page.locator('[data-kind="improved"]').click()
    expect(page.locator("table.diff tbody tr")).to_have_count(50)
    page.locator("table.diff tbody a").first.click()
    expect(page.locator("article.side")).to_have_count(2)


def test_markup_in_a_response_is_shown_as_text_and_never_runs(
    page: Page, url: str, runs: dict[str, Path]
) -> None:
    """The sample page shows <script> literally; no script ran, no dialog opened."""
    name = runs["xss"].name
    page.goto(f"{url}/runs/{name}/sample?id=q1")
    expect(page.locator("section.response pre")).to_contain_text("<script>window.__xss = 1")
    page.goto(f"{url}/runs/{name}")
    expect(page.locator("td.snippet").nth(1)).to_contain_text("<img src=x")
    assert page.evaluate("window.__xss") is None
    assert page.locator("img[src=x]").count() == 0 and page.dialogs == []  # type: ignore[attr-defined]


def test_path_traversal_shows_a_refusal(page: Page, url: str) -> None:
    """Encoded dots in a run name get a page saying it is outside the root."""
    response = page.goto(url + "/runs/%2e%2e%2f%2e%2e%2f%2e%2e%2fetc%2fpasswd")
    assert response is not None and response.status in (403, 404)
    expect(page.locator("h1")).to_have_text("Outside the results root")
    assert "root:x:" not in page.content()
    response = page.goto(url + "/diff?a=..&b=%2e%2e%2fetc")  # names in a query string
    assert response is not None and response.status == 403
    expect(page.locator("p.message")).to_contain_text("is not a run directory name")


def test_every_step_works_without_javascript(browser: Browser, url: str) -> None:
    """JavaScript off: filter with Apply, open a sample, diff two ticked runs with the
    button (the older run is the baseline)."""
    context = browser.new_context(java_script_enabled=False)
    context.set_default_timeout(WAIT_MS)
    context.set_default_navigation_timeout(WAIT_MS)
    page = context.new_page()
    try:
        page.goto(url + "/")
        page.get_by_role("row").filter(has_text="175b_verification").get_by_role(
            "link"
        ).first.click()
        page.get_by_label("failures").check()
        page.get_by_role("button", name="Apply").click()
        expect(page.locator("p.count")).to_contain_text("577 rows match")
        page.locator("a.sample-link").first.click()
        expect(page.locator("section.response")).to_contain_text("A: 65000")
        page.goto(url + "/")
        rows = page.get_by_role("row")
        rows.filter(has_text="175b_finetuning").get_by_role("checkbox").check()
        rows.filter(has_text="175b_verification").get_by_role("checkbox").check()
        page.get_by_role("button", name="Diff the two ticked runs").click()
        expect(page.locator('[data-kind="regressed"] .count')).to_have_text("360")
    finally:
        context.close()


def test_a_run_whose_log_links_out_is_listed_with_the_reason(
    page: Page, url: str, runs: dict[str, Path]
) -> None:
    """The runs page lists the run with its figures and one line saying which file is not
    read and why; its page says the same and shows every figure and row."""
    name = runs["refused"].name
    reason = "log.jsonl links outside the results root; not read"
    page.goto(url + "/")
    expect(page.locator(f'tr[data-run="{name}"]')).to_contain_text("0.6667")
    expect(page.locator(f'tr[data-run="{name}"] + tr.warnings-row')).to_contain_text(reason)
    page.locator(f'tr[data-run="{name}"] td.name a').click()
    expect(page.locator("ul.warnings")).to_contain_text(reason)
    expect(page.locator("table.summary-lines")).to_contain_text("0.6667")
    expect(page.locator("p.count")).to_contain_text("3 rows")
    assert "SECRET" not in page.content()


def test_a_live_run_shows_partial_figures_that_follow_its_rows(
    page: Page, url: str, runs: dict[str, Path]
) -> None:
    """A run being written: its summary is marked partial and computed from the rows so
    far; rows appended while the page is open update it in place (no reload)."""
    name = runs["live"].name
    page.goto(url + "/")
    expect(page.locator(f'tr[data-run="{name}"]')).to_contain_text("partial 1.0000")
    page.goto(f"{url}/runs/{name}")
    expect(page.locator("section.summary h2")).to_contain_text("partial")
    expect(page.locator("p.partial")).to_contain_text("partial, from the 1 rows written so far")
    summary = page.locator("table.summary-lines")
    expect(summary).to_contain_text("1.0000")
    page.evaluate("window.__same_page = 1")
    with (runs["live"] / "results.jsonl").open("a") as f:
        f.write(runs["live_rest"].read_text())
    expect(page.locator(".partial-rows")).to_have_text("3")
    expect(summary).to_contain_text("0.6667")
    expect(page.locator('td[data-state="scored"]')).to_have_text("3")
    assert page.evaluate("window.__same_page") == 1


def test_a_large_live_run_fills_its_figures_in_once_counted(
    page: Page, url: str, runs: dict[str, Path], monkeypatch: pytest.MonkeyPatch
) -> None:
    """A live run too large to count before its page is sent: the page says its rows are
    being counted, then its poll fills in the partial figures."""
    import gradetrail.view.run_pages as view_app

    monkeypatch.setattr(view_app, "STREAM_BYTES", 0)
    as_started(runs["counted"], os.getpid())  # never indexed before: nothing counted yet
    response = page.goto(f"{url}/runs/{runs['counted'].name}")
    assert response is not None and "The rows written so far are being counted" in response.text()
    expect(page.locator("p.partial")).to_contain_text("partial, from the 3 rows written so far")
    expect(page.locator("section.summary h2 .badge")).to_have_text("partial")
    expect(page.locator("table.summary-lines")).to_contain_text("0.6667")


def _fits(page: Page) -> None:
    """Nothing on the page is wider than the window (no horizontal scrolling)."""
    width = page.evaluate("document.documentElement.scrollWidth")
    assert width <= page.viewport_size["width"], width  # type: ignore[index]


def test_pathological_answers_never_widen_the_failures_table(
    page: Page, url: str, runs: dict[str, Path], tmp_path_factory: pytest.TempPathFactory
) -> None:
    """A 1,482-digit answer, 3,000 characters without a space and bidi text: the failures
    table stays within the window, each long cell cut with an ellipsis, every column on
    screen; the sample page has the whole value, and the extracted answer marked."""
    name = runs["pathological"].name
    page.goto(f"{url}/runs/{name}?f=failures")
    expect(page.locator("p.count")).to_contain_text("3 rows match")
    _fits(page)
    cells = page.locator("td.answer div.cut")
    expect(cells.first).to_contain_text("7777")
    box = cells.first.bounding_box()
    assert box is not None and box["width"] <= 240
    assert page.evaluate("(el) => el.scrollWidth > el.clientWidth", cells.first.element_handle())
    assert (
        page.evaluate("getComputedStyle(document.querySelector('td.answer div.cut')).textOverflow")
        == "ellipsis"
    )
    cost = page.locator("table.samples thead th").filter(has_text="response").bounding_box()
    assert cost is not None and cost["x"] + cost["width"] <= 1280
    expect(page.locator("table.samples")).to_contain_text("U+202E")  # the override shown
    page.screenshot(path=str(tmp_path_factory.getbasetemp() / "failures-pathological.png"))
    page.locator("a.sample-link").first.click()
    expect(page.locator("section.scorer")).to_contain_text(LONG_NUMBER)
    expect(page.locator("section.response mark.extracted")).to_have_text(LONG_NUMBER)
    _fits(page)
    page.keyboard.press("j")
    expect(page.locator("h1")).to_contain_text("Sample q1")
    _fits(page)
    page.keyboard.press("j")
    expect(page.locator("h1")).to_contain_text("Sample q2")
    expect(page.locator("section.response")).to_contain_text("U+202E")
    _fits(page)


def test_step_through_the_filtered_failures_with_keys_and_links(page: Page, url: str) -> None:
    """From the first failure, j and the right arrow open the next failure of the filtered
    list, k and the left arrow the previous; the links say where the sample is; a key
    typed in a field does not step."""
    name = "175b_verification"
    page.goto(url + "/")
    page.get_by_role("row").filter(has_text=name).get_by_role("link").first.click()
    page.get_by_label("failures").check()
    page.wait_for_url("**f=failures**")
    ids = page.locator("a.sample-link").all_inner_texts()[:3]
    page.locator("a.sample-link").first.click()
    expect(page.locator("h1")).to_contain_text(f"Sample {ids[0]}")
    expect(page.locator("nav.steps .position")).to_have_text("1 of 577 shown")
    expect(page.locator("section.response mark.extracted")).to_have_text("65000")
    page.keyboard.press("j")
    expect(page.locator("h1")).to_contain_text(f"Sample {ids[1]}")
    page.keyboard.press("ArrowRight")
    expect(page.locator("h1")).to_contain_text(f"Sample {ids[2]}")
    expect(page.locator("nav.steps .position")).to_have_text("3 of 577 shown")
    page.keyboard.press("k")
    expect(page.locator("h1")).to_contain_text(f"Sample {ids[1]}")
    page.keyboard.press("ArrowLeft")
    expect(page.locator("h1")).to_contain_text(f"Sample {ids[0]}")
    page.locator("nav.steps a[rel=next]").click()
    expect(page.locator("h1")).to_contain_text(f"Sample {ids[1]}")
    page.locator("nav.steps a.back").click()
    expect(page.locator("p.count")).to_contain_text("577 rows match")


def test_the_diff_leads_with_regressions_and_their_answers(
    page: Page, url: str, tmp_path_factory: pytest.TempPathFactory
) -> None:
    """The diff's default list opens on the 360 regressions, then the 76 improvements,
    before any same-score response change; each row shows both extracted answers; the
    sample page steps on with j; a diff being computed says so at once."""
    page.goto(url + "/")
    rows = page.get_by_role("row")
    rows.filter(has_text="175b_verification").get_by_role("checkbox").check()
    rows.filter(has_text="175b_finetuning").get_by_role("checkbox").click()
    page.wait_for_url("**/diff?**")
    table = page.locator("table.diff tbody tr")
    expect(table).to_have_count(50)
    kinds = page.locator("table.diff tbody td .badge").all_inner_texts()
    assert set(kinds) == {"regressed"}
    first = table.first.locator("td")
    expect(first.nth(0)).to_have_text("1")
    expect(first.nth(3)).to_have_text("18")
    expect(first.nth(5)).to_have_text("4")
    _fits(page)
    page.screenshot(path=str(tmp_path_factory.getbasetemp() / "diff-regressions-first.png"))
    # a link to another diff says at once that it is being computed (the navigation is
    # cancelled here, after the viewer's own handler, to see the page before it goes)
    page.evaluate("window.addEventListener('click', (e) => e.preventDefault())")
    page.get_by_role("link", name="swap baseline and candidate").click()
    expect(page.locator(".busy")).to_have_text("Computing the diff\u2026")
    page.goto(page.url + "&page=8")  # rows 351-400: the last regressions, then improvements
    kinds = page.locator("table.diff tbody td .badge").all_inner_texts()
    assert kinds == ["regressed"] * 10 + ["improved"] * 40
    page.locator("table.diff tbody a").nth(9).click()  # the last regression
    expect(page.locator("article.side")).to_have_count(2)
    expect(page.locator(".nav-line .badge")).to_have_text("regressed")
    page.keyboard.press("j")
    expect(page.locator(".nav-line .badge")).to_have_text("improved")
