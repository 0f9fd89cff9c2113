"""gcpause: `gradetrail run` pauses the cyclic collector until the run starts; nothing
else does, and the collector is on again once the command is over."""

from __future__ import annotations

import gc
import os
import subprocess
import sys

from paths import GSM8K_SPEC

from gradetrail._util import gcpause

#: prints whether the collector was on when the run started and after main() returned
PROBE = """
import gc, sys
from gradetrail._util import gcpause
gcpause.pause_for(sys.argv)
seen = []
from gradetrail.engine import runner
original = runner.run_eval
def run_eval(*args, on_start, **kwargs):
    def started(plan, run_dir):
        seen.append(("before start", gc.isenabled()))
        on_start(plan, run_dir)
        seen.append(("at start", gc.isenabled()))
    return original(*args, on_start=started, **kwargs)
runner.run_eval = run_eval
from gradetrail.cli import main
try:
    main()
except SystemExit:
    pass
seen.append(("after", gc.isenabled()))
print(seen)
"""


def test_only_run_pauses_and_resume_turns_the_collector_back_on() -> None:
    assert gc.isenabled()
    try:
        gcpause.pause_for(["gradetrail", "view", "results"])
        assert gc.isenabled()
        gcpause.pause_for(["gradetrail", "run", "spec.yaml"])
        assert not gc.isenabled()
        gcpause.resume()
        assert gc.isenabled()
        gcpause.resume()  # once only
        assert gc.isenabled()
        gc.disable()  # a caller's own choice is kept
        gcpause.pause_for(["gradetrail", "run", "spec.yaml"])
        gcpause.resume()
        assert not gc.isenabled()
    finally:
        gc.enable()


def test_a_run_collects_again_from_its_start(tmp_path) -> None:
    args = ["run", str(GSM8K_SPEC), "--results-root", str(tmp_path), "--json"]
    args += ["--set", "dataset.limit=2"]
    out = subprocess.run(
        [sys.executable, "-c", PROBE, *args],
        capture_output=True,
        text=True,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(sys.path)},
        timeout=120,
    )
    assert out.stdout.strip().splitlines()[-1] == (
        "[('before start', False), ('at start', True), ('after', True)]"
    ), out.stderr
