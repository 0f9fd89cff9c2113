"""gradetrail.rundir.agreement: a complete run's rows held against its manifest, on rows
moved about so that every count and the mean still agree."""

from __future__ import annotations

from gradetrail.rundir.agreement import rows_disagree

#: a complete run of 2 samples x 2 epochs, reducer max: a scores 1 then 0, b 0 then 1
MANIFEST = {
    "status": "complete",
    "n_samples": 2,
    "epochs": 2,
    "counts": {"scored": 4},
    "score": {"mean": 1.0, "n": 2},
    "spec": {"run": {"reducer": "max"}},
}


def _row(sample_id: str, epoch: int, score: float) -> dict:
    return {"sample_id": sample_id, "epoch": epoch, "state": "scored", "score": score}


ROWS = [_row("a", 1, 1.0), _row("a", 2, 0.0), _row("b", 1, 0.0), _row("b", 2, 1.0)]


def test_rows_as_written_agree() -> None:
    """The rows the run wrote agree with its manifest."""
    assert rows_disagree(MANIFEST, ROWS) is None


def test_a_row_copied_over_another_epochs_place_disagrees() -> None:
    """a's right epoch copied over its wrong one keeps 4 scored rows and the max-reduced
    mean of 1.0 over 2 (the check passed it): one (sample, epoch) with two rows now
    disagrees, naming it; so does an epoch past the run's two."""
    copied = [ROWS[0], ROWS[0], *ROWS[2:]]
    assert rows_disagree(MANIFEST, copied) == (
        "sample 'a' epoch 1 has two rows (one copied over another's)"
    )
    assert rows_disagree(MANIFEST, copied, partial=True) is not None
    renumbered = [*ROWS[:3], _row("b", 3, 1.0)]
    assert rows_disagree(MANIFEST, renumbered) == (
        "sample 'b' has a row for epoch 3, past the run's 2"
    )
