"""The browser fixtures of the viewer's modules that build a results root (``root``): one
headless chromium a module, launched after the root is built (Playwright's sync API keeps
an event loop on this thread, where ``run_eval`` could not start its own), and a fresh page
a test. test_browser.py defines its own."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
from view_support import chromium, viewer_page

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page


@pytest.fixture(scope="module")
def browser(root: Path) -> Iterator[Browser]:
    """One headless chromium for the module (skips where chromium is absent)."""
    with chromium() as launched:
        yield launched


@pytest.fixture
def page(browser: Browser, root: Path) -> Iterator[Page]:
    """A fresh page on a viewer of the module's results root."""
    with viewer_page(browser, root) as opened:
        yield opened
