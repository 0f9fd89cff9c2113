"""Live progress: plain lines every few seconds off a terminal, a rich bar on one, a rate
and ETA over recent rows, and output failures that never stop the run."""

from __future__ import annotations

import io

import pytest

from gradetrail.cli.progress import RunProgress, format_duration
from gradetrail.rundir.results import Row, make_row
from gradetrail.rundir.summary import Tally


class Clock:
    """A settable monotonic clock."""

    def __init__(self) -> None:
        self.now = 100.0

    def __call__(self) -> float:
        return self.now


class TtyStream(io.StringIO):
    """A text stream that says it is a terminal."""

    def isatty(self) -> bool:
        return True


class BrokenStream(io.StringIO):
    """A stream whose reader went away (``gradetrail run 2>&1 | head``)."""

    def write(self, text: str) -> int:
        raise BrokenPipeError(32, "Broken pipe")


def _row(cached: bool = False, error: bool = False, cost: float | None = 0.001) -> Row:
    if error:
        return make_row(sample_id="s", state="provider_error")
    return make_row(sample_id="s", state="scored", score=1.0, cached=cached, cost_usd=cost)


def _feed(progress: RunProgress, tally: Tally, clock: Clock, rows: list, dt: float) -> None:
    for row in rows:
        clock.now += dt
        tally.add(row)
        progress.update(row, tally)


def test_plain_lines_every_interval_with_counts_rate_eta_and_cost() -> None:
    """Off a terminal: one line per interval with done/total, percent, rate, ETA, cache
    hits, errors and cost paid this run, and the final state when it ends."""
    stream, clock, tally = io.StringIO(), Clock(), Tally()
    with RunProgress(100, stream, interval_s=5.0, clock=clock) as progress:
        _feed(progress, tally, clock, [_row()] * 9, dt=0.5)  # 4.5 s: no line yet
        assert stream.getvalue() == ""
        _feed(progress, tally, clock, [_row(cached=True), _row(error=True)], dt=0.5)
        _feed(progress, tally, clock, [_row()] * 4, dt=0.5)
    lines = stream.getvalue().splitlines()
    assert lines == [
        "progress 10/100 (10%, 2.0/s, eta 45s) cache hits 1 errors 0 cost $0.0090",
        "progress 15/100 (15%, 2.0/s, eta 42s) cache hits 1 errors 1 cost $0.0130",
    ]


def test_rate_and_eta_follow_recent_rows_not_the_cache_burst() -> None:
    """After a burst of cache hits, the rate and ETA come from the last 30 s, so a resume
    does not promise an ETA the paid calls cannot keep."""
    stream, clock, tally = io.StringIO(), Clock(), Tally()
    progress = RunProgress(1000, stream, interval_s=1000.0, clock=clock, window_s=30.0)
    _feed(progress, tally, clock, [_row(cached=True)] * 500, dt=0.001)
    _feed(progress, tally, clock, [_row()] * 60, dt=1.0)  # then 1 row per second
    line = progress.line(tally, clock.now)
    assert "progress 560/1000 (56%, 1.0/s, eta 7m20s)" in line


def test_a_run_shorter_than_the_interval_prints_nothing() -> None:
    """A quick run (a warm re-score) adds no progress lines to a CI log."""
    stream, clock, tally = io.StringIO(), Clock(), Tally()
    with RunProgress(50, stream, interval_s=5.0, clock=clock) as progress:
        _feed(progress, tally, clock, [_row(cached=True)] * 50, dt=0.001)
    assert stream.getvalue() == ""


def test_unknown_eta_and_durations() -> None:
    """Durations print as s, m/s and h/m; an unknown ETA is '?'."""
    assert [format_duration(x) for x in (0, 59.4, 61, 3600 * 2 + 420)] == [
        "0s",
        "59s",
        "1m01s",
        "2h07m",
    ]
    assert format_duration(None) == "?" and format_duration(float("inf")) == "?"
    progress = RunProgress(10, io.StringIO(), clock=Clock())
    assert "eta ?" in progress.line(Tally(), 100.0)


def test_a_broken_output_stream_switches_progress_off_without_raising() -> None:
    """Writing progress to a closed pipe never raises; the run goes on silently."""
    clock, tally = Clock(), Tally()
    with RunProgress(10, BrokenStream(), interval_s=0.1, clock=clock) as progress:
        _feed(progress, tally, clock, [_row()] * 10, dt=1.0)
        progress.note("stopping")
    assert tally.rows == 10


def test_terminal_bar_shows_counts_and_notes_without_escapes(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """On a terminal: a rich bar with done/total, rate, ETA, cache hits, errors and cost;
    notes print above it with escape sequences from data stripped."""
    monkeypatch.setenv("COLUMNS", "200")
    stream, clock, tally = TtyStream(), Clock(), Tally()
    with RunProgress(20, stream, clock=clock) as progress:
        _feed(progress, tally, clock, [_row(), _row(cached=True), _row(error=True)], dt=0.2)
        progress._bar.refresh()
        shown = stream.getvalue()
        progress.note("sample \x1b[2Jq1\x1b]0;owned\x07 failed")
    assert "3/20" in shown and "cache hits 1" in shown and "errors 1" in shown
    assert (
        "cost $0.0010" in shown
    )  # paid this run: the cache hit cost nothing and "eta" in shown and "/s" in shown
    text = stream.getvalue()
    assert "sample q1 failed" in text
    assert "\x1b[2J" not in text and "owned" not in text


def test_progress_cost_counts_the_judge() -> None:
    """A judge run whose model calls are free (or unpriced) shows what the judge has cost
    so far, never 'cost n/a' (issue 15, item 16)."""
    from gradetrail.rundir.results import JudgeRecord

    tally = Tally()
    judged = make_row(
        sample_id="s1",
        state="scored",
        score=1.0,
        cost_usd=None,
        judge=JudgeRecord(requests=1, calls=1, attempts=1, verdicts=1, cost_usd=0.0025),
    )
    tally.add(judged)
    clock = Clock()
    line = RunProgress(10, io.StringIO(), clock=clock).line(tally, clock())
    assert line.endswith("cost $0.0025")


def test_no_eta_until_the_first_row_and_none_from_the_start_up() -> None:
    """A run whose workers take 20 s to start (Ray): no ETA while no row is done, and the
    rate after the first rows is theirs, not 1 row over 20 s (which read 'eta 8h50m')."""
    stream, clock, tally = io.StringIO(), Clock(), Tally()
    progress = RunProgress(1000, stream, interval_s=1000.0, clock=clock)
    assert "eta ?" in progress.line(tally, clock())
    clock.now += 20.0
    _feed(progress, tally, clock, [_row()], dt=0.0)  # the first row, 20 s after the start
    assert "eta ?" in progress.line(tally, clock())
    _feed(progress, tally, clock, [_row()] * 100, dt=0.1)  # then 10 rows a second
    assert "(10%, 10.0/s, eta 1m30s)" in progress.line(tally, clock())
