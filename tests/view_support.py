"""Helpers for the viewer and diff tests: real run directories built by ``run_eval``
(the bundled GSM8K example through the replay provider, and small evals through a
``python``-provider application that answers by plan), and the GSM8K authors' labels."""

from __future__ import annotations

import contextlib
import json
import os
import shutil
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING

import pytest
import yaml
from paths import GSM8K_DATA, GSM8K_SPEC

import gradetrail
from gradetrail.view.server import BackgroundServer

if TYPE_CHECKING:
    from playwright.sync_api import Browser, Page

#: Debian's chromium and the flags that work on these machines (never `playwright install`):
#: the `chromium` on PATH, or the binary GRADETRAIL_CHROMIUM names ("" where there is none)
CHROMIUM = os.environ.get("GRADETRAIL_CHROMIUM") or shutil.which("chromium") or ""
#: why the browser tests skip where chromium is absent (a fresh clone: the README asks only
#: for Python and make); .ci/run sets GRADETRAIL_REQUIRE_CHROMIUM=1, and CI=true does the
#: same, so CI fails instead of skipping them. tests/conftest.py repeats it once, as one
#: line of the session's summary.
CHROMIUM_MISSING = (
    f"chromium is absent ({CHROMIUM} is not an executable)"
    if os.environ.get("GRADETRAIL_CHROMIUM")
    else "chromium is absent (no `chromium` on PATH)"
) + ": `sudo apt-get install chromium` runs the browser tests"


def chromium_required() -> bool:
    """Whether a missing chromium fails the browser tests instead of skipping them."""
    return os.environ.get("GRADETRAIL_REQUIRE_CHROMIUM") == "1" or os.environ.get("CI") == "true"


CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
]
#: milliseconds a browser action or expectation may wait: Playwright's defaults (5 s for
#: expect) are short for chromium on a loaded 2-core machine; this only guards a hang
WAIT_MS = 60_000


@contextlib.contextmanager
def chromium() -> Iterator[Browser]:
    """One headless chromium (:data:`CHROMIUM`, :data:`CHROMIUM_ARGS`) for a module's
    browser tests; where it is absent the test skips (fails where it is required: CI), so
    a module's HTTP-level tests still run on a fresh clone."""
    if not os.access(CHROMIUM, os.X_OK):
        if chromium_required():
            pytest.fail(CHROMIUM_MISSING + " (required here: CI)", pytrace=False)
        pytest.skip(CHROMIUM_MISSING)
    from playwright.sync_api import sync_playwright

    with sync_playwright() as p:
        launched = p.chromium.launch(executable_path=CHROMIUM, args=CHROMIUM_ARGS, timeout=WAIT_MS)
        try:
            yield launched
        finally:
            launched.close()


@contextlib.contextmanager
def viewer_page(browser: Browser, root: Path) -> Iterator[Page]:
    """A fresh 1280x900 page on a viewer of the results root ``root`` (served from a
    thread), its actions waiting up to :data:`WAIT_MS`."""
    with BackgroundServer(root) as base:
        context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=base)
        context.set_default_timeout(WAIT_MS)
        try:
            yield context.new_page()
        finally:
            context.close()


APP = """\
import json
import os


def answer(request):
    plan = json.loads(os.environ.get("GT_PLAN", "{}")).get(request.model, {})
    action = plan.get(f"{request.sample_id}/{request.epoch}", "right")
    value = request.prompt.rsplit("=", 1)[1].strip()
    if action == "fail":
        raise RuntimeError("failed on purpose")
    if action == "wrong":
        return "A: -1"
    if action == "verbose":
        return f"Adding them up. A: {value}"
    if action.startswith("say:"):
        return action[4:] + f" A: {value}"
    if action.startswith("raw:"):
        return action[4:]
    return f"A: {value}"
"""


def gsm8k_run(root: Path, cache: Path, model: str) -> Path:
    """The bundled GSM8K example for one recorded model; its run directory."""
    spec = gradetrail.load_spec(GSM8K_SPEC, overrides=[f"model.name={model}"])
    return gradetrail.run_eval(spec, results_root=root, cache_path=cache).run_dir


def gsm8k_labels() -> list[dict]:
    """The recorded solutions with the authors' is_correct labels, in dataset order (sample
    ids are 1-based line numbers)."""
    path = GSM8K_DATA / "example_model_solutions.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


def write_app_eval(directory: Path, samples: int = 5, epochs: int = 1, **dataset: object) -> Path:
    """An eval of ``samples`` sums (sample ``q<i>`` asks ``i+i``, expects ``2i``) answered by
    the planned application; return the spec's path."""
    directory.mkdir(parents=True, exist_ok=True)
    rows = [{"id": f"q{i}", "q": f"{i}+{i}", "a": 2 * i} for i in range(samples)]
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "plan_app.py").write_text(APP)
    spec = {
        "name": "arith",
        "dataset": {"path": "data.jsonl", **dataset},
        "prompt": "What is {{ q }}? = {{ a }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "base", "function": "plan_app:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"epochs": epochs, "fail_fast": 0},
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


def app_run(
    spec: Path,
    root: Path,
    cache: Path,
    model: str,
    plan: dict[str, str] | None = None,
    monkeypatch=None,  # noqa: ANN001
    overrides: list[str] | None = None,
) -> Path:
    """Run the planned eval as ``model`` (plan: "<sample id>/<epoch>" -> right, wrong,
    fail, verbose, "say:<text>" (the text, then the right answer) or "raw:<text>" (the
    text alone)); its run directory."""
    monkeypatch.setenv("GT_PLAN", json.dumps({model: plan or {}}))
    loaded = gradetrail.load_spec(spec, overrides=[f"model.name={model}", *(overrides or [])])
    return gradetrail.run_eval(loaded, results_root=root, cache_path=cache).run_dir


def as_started(run_dir: Path, pid: int) -> None:
    """Make an ended run look as it does while being written by process ``pid``: its
    manifest as the run writes it at its start (status running, every figure the rows
    decide, ended_at and wall time at their defaults) and a ``.lock`` naming ``pid``."""
    from gradetrail.rundir.manifest import Manifest
    from gradetrail.rundir.summary import Tally
    from gradetrail.spec import EvalSpec

    path = run_dir / "manifest.json"
    m = Manifest.model_validate_json(path.read_text())
    decided = [*Tally().manifest_figures(EvalSpec.model_validate(m.spec)), "ended_at"]
    fields = Manifest.model_fields
    start = {k: fields[k].get_default(call_default_factory=True) for k in decided}
    started = m.model_copy(update={**start, "status": "running", "wall_time_s": None})
    path.write_text(started.model_dump_json())
    (run_dir / ".lock").write_text(f"{pid}\n")
