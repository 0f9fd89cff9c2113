"""Take the documentation's screenshots of every viewer page into docs/ (docs/viewer.md).

Builds the bundled GSM8K example for the two 175B models (replay provider, a private
cache in a temporary directory), serves the viewer on a free loopback port and drives
Debian's chromium through Playwright. Run it from the repository root after `make test`
(which installs Playwright; `apt-get install chromium` brings the browser):

    .venv/bin/python scripts/screenshots.py
"""

from __future__ import annotations

import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
sys.path.insert(0, str(ROOT / "tests"))

from view_support import CHROMIUM, CHROMIUM_ARGS, gsm8k_run  # noqa: E402 - the tests' runs


def build_runs(root: Path, cache: Path) -> dict[str, str]:
    """Run the GSM8K example for both 175B models; model name -> run directory name."""
    return {m: gsm8k_run(root, cache, m).name for m in ("175b_verification", "175b_finetuning")}


def main() -> int:
    """Write docs/view-*.png; return the exit code."""
    from playwright.sync_api import sync_playwright

    from gradetrail.view.server import BackgroundServer

    DOCS.mkdir(exist_ok=True)
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp) / "results"
        names = build_runs(root, Path(tmp) / "cache.sqlite")
        base, cand = names["175b_verification"], names["175b_finetuning"]
        shots = {
            "view-runs.png": "/",
            "view-run.png": f"/runs/{base}?f=failures",
            "view-sample.png": f"/runs/{base}/sample?id=2",
            "view-diff.png": f"/diff?a={base}&b={cand}&kind=regressed",
            "view-diff-sample.png": f"/diff/sample?a={base}&b={cand}&id=1",
        }
        with BackgroundServer(root) as url, sync_playwright() as p:
            browser = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS)
            page = browser.new_page(viewport={"width": 1360, "height": 900})
            for name, path in shots.items():
                page.goto(url + path)
                page.screenshot(path=str(DOCS / name), full_page=False)
                print(f"docs/{name}: {path}")
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
