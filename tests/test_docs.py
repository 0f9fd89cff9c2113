"""The README and the documentation site: the README stays a short front door whose
set-up commands exist; the generated reference pages are current (scripts/gen_docs.py);
every public name is documented; every page is in the site's navigation and every
relative link in the README and the pages points at a file that exists. `make docs`
(run by .ci/run) builds the site in strict mode on top of this."""

from __future__ import annotations

import os
import re
import subprocess
import sys

import yaml
from paths import ROOT

import gradetrail

DOCS = ROOT / "docs"


def test_generated_pages_are_current() -> None:
    """scripts/gen_docs.py --check: the spec reference, result rows and API reference
    match what the code generates now."""
    proc = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "gen_docs.py"), "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stderr


def test_every_public_name_is_documented() -> None:
    """Each name of gradetrail.__all__ has an entry in the API reference, and the
    hand-written pages name the ones a user meets first."""
    api = (DOCS / "reference" / "api.md").read_text()
    missing = [n for n in gradetrail.__all__ if n != "__version__" and f"## {n}\n" not in api]
    assert missing == []
    pages = "".join(p.read_text() for p in DOCS.glob("*.md"))
    for name in ("load_spec", "run_eval", "read_results", "regression_gate", "RayOptions"):
        assert name in pages


def test_every_result_field_is_in_the_reference() -> None:
    from gradetrail.rundir.results import SampleResult

    page = (DOCS / "reference" / "results.md").read_text()
    assert all(f"| `{name}` |" in page for name in SampleResult.model_fields)


def test_the_readme_is_a_short_front_door() -> None:
    """Under 8,000 characters, with the two set-up commands the Makefile defines and a
    link to every page of the site but its home page (which repeats the quickstart)."""
    readme = (ROOT / "README.md").read_text()
    assert len(readme) < 8000
    makefile = (ROOT / "Makefile").read_text()
    for target in ("example", "test", "wheel", "docs"):
        assert re.search(rf"^{target}:", makefile, flags=re.M)
    assert "make example" in readme and "make test" in readme
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    unlinked = [
        p for p in _nav_pages(config["nav"]) if p != "index.md" and f"(docs/{p})" not in readme
    ]
    assert unlinked == []


def _nav_pages(nav: list) -> list[str]:
    out = []
    for entry in nav:
        for value in entry.values() if isinstance(entry, dict) else [entry]:
            out += _nav_pages(value) if isinstance(value, list) else [value]
    return out


def test_every_page_is_in_the_navigation_and_every_link_resolves() -> None:
    config = yaml.load((ROOT / "mkdocs.yml").read_text(), Loader=yaml.BaseLoader)
    nav = _nav_pages(config["nav"])
    pages = sorted(str(p.relative_to(DOCS)) for p in DOCS.rglob("*.md"))
    assert sorted(nav) == pages
    for source in [ROOT / "README.md", *DOCS.rglob("*.md")]:
        text = re.sub(r"```.*?```", "", source.read_text(), flags=re.S)
        for target in re.findall(r"\]\(([^)\s]+)\)", text):
            if re.match(r"[a-z]+:", target) or target.startswith("#"):
                continue
            path = (source.parent / target.split("#", 1)[0]).resolve()
            assert path.exists(), f"{source.relative_to(ROOT)} links to {target}"


def test_without_chromium_the_browser_tests_skip_with_one_line(tmp_path) -> None:
    """The README's promise for `make test` on a fresh machine: with no chromium on PATH
    the browser tests skip and the session says why in one line naming the package; in
    CI (GRADETRAIL_REQUIRE_CHROMIUM=1) the same absence fails."""
    env = {k: v for k, v in os.environ.items() if k not in _CHROMIUM_ENV}
    env["PATH"] = str(tmp_path)  # no chromium anywhere on it
    command = [sys.executable, "-m", "pytest", "-p", "no:cacheprovider", _BROWSER_TESTS]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    lines = [line for line in proc.stdout.splitlines() if "apt-get install chromium" in line]
    assert proc.returncode == 0, proc.stdout[-2000:]
    assert lines == [
        "browser tests skipped: chromium is absent (no `chromium` on PATH): "
        "`sudo apt-get install chromium` runs the browser tests"
    ]
    env["GRADETRAIL_REQUIRE_CHROMIUM"] = "1"
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True)
    assert proc.returncode == 1 and "(required here: CI)" in proc.stdout


_CHROMIUM_ENV = ("CI", "GRADETRAIL_REQUIRE_CHROMIUM", "GRADETRAIL_CHROMIUM")
_BROWSER_TESTS = "tests/view/test_agreement.py"  # HTTP-level tests and a browser test
