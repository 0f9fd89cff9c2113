"""The batch ledger (batches.jsonl): durable steps, a torn last line, damage named."""

from __future__ import annotations

from pathlib import Path

import pytest

from gradetrail.errors import RunError, UsageError
from gradetrail.rundir.batches import BATCHES_FILE, BatchLedger


def test_steps_fold_into_submissions(tmp_path: Path) -> None:
    ledger = BatchLedger(tmp_path)
    ledger.intent("s1", "openai", "provider", ["a", "b"], 10.0)
    ledger.intent("s2", "openai", "provider", ["c"], 11.0)
    assert ledger.in_flight() == {"a", "b", "c"}
    ledger.submitted("s1", "batch_1")
    ledger.ended("s1", "ended", {"completed": 2})
    ledger.collected("s1", 2, 0)
    ledger.lost("s2")
    again = BatchLedger.read(tmp_path)
    assert again.in_flight() == set() and again.batch_ids() == ["batch_1"]
    first = again.submissions["s1"]
    assert (first.state, first.succeeded, first.counts) == ("collected", 2, {"completed": 2})
    assert again.submissions["s2"].state == "lost"


def test_a_torn_last_line_is_a_step_that_never_went_on(tmp_path: Path) -> None:
    ledger = BatchLedger(tmp_path)
    ledger.intent("s1", "anthropic", "provider", ["a"], 1.0)
    with (tmp_path / BATCHES_FILE).open("ab") as handle:
        handle.write(b'{"event":"submitted","submission":"s1","batch_')
    again = BatchLedger.read(tmp_path)
    assert again.submissions["s1"].state == "intent" and again.in_flight() == {"a"}


def test_a_damaged_line_is_named(tmp_path: Path) -> None:
    (tmp_path / BATCHES_FILE).write_text('{"event":"intent"\nnot json\n')
    with pytest.raises(RunError, match="line 1 is not JSON; the ledger is damaged"):
        BatchLedger.read(tmp_path)


def test_not_a_directory(tmp_path: Path) -> None:
    with pytest.raises(UsageError, match="not a run directory"):
        BatchLedger.read(tmp_path / "missing")
