"""``gradetrail batches [RUN_DIR]``: what a batched run has in flight, as its run directory
records it (``batches.jsonl``, ``manifest.json``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

if TYPE_CHECKING:
    from gradetrail.rundir.batches import BatchLedger

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``batches`` to ``app``."""
    app.command("batches")(batches)


def batches(
    run_dir: Annotated[
        Path | None,
        typer.Argument(help="A run directory (default: every run under --results-root)."),
    ] = None,
    results_root: Annotated[
        Path, typer.Option("--results-root", help="Where run directories are.")
    ] = Path("results"),
    json_out: Annotated[bool, typer.Option("--json", help="Print JSON lines.")] = False,
    abandon: Annotated[
        str | None,
        typer.Option(
            "--abandon",
            metavar="BATCH_ID",
            help="Give up on an in-flight batch of RUN_DIR whose results are gone (expired "
            "at the API): the next run sends its requests again.",
        ),
    ] = None,
) -> None:
    """List a run's batches: id, API, requests, state, and the run's batch cost so far.

    A batch is ``in flight`` until its results are collected (re-run the same ``gradetrail
    run --batch`` command to collect it). ``--abandon BATCH_ID`` gives up on one whose
    results are gone: the next run sends its requests again; what it billed stays unknown
    and the cost line says so. Exit codes: 0 listed (or abandoned), 2 not a run directory,
    no such in-flight batch.
    """
    from gradetrail._util.terminal import clean
    from gradetrail.cli import fail
    from gradetrail.errors import GradetrailError, UsageError
    from gradetrail.rundir.batches import BATCHES_FILE, BatchLedger

    if abandon is not None:
        try:
            _abandon(run_dir, abandon)
        except GradetrailError as exc:
            raise fail(exc) from None
        return

    dirs = (
        [run_dir]
        if run_dir is not None
        else sorted(p.parent for p in results_root.glob(f"*/{BATCHES_FILE}"))
    )
    try:
        if run_dir is not None and run_dir.is_dir() and not _a_run(run_dir):
            raise UsageError(
                f"{run_dir}: not a run directory (no manifest.json); give the directory a run "
                "wrote, or none to list every run under --results-root"
            )
        ledgers = [(path, BatchLedger.read(path)) for path in dirs]
    except GradetrailError as exc:
        raise fail(exc) from None
    if not json_out and not any(ledger.submissions for _, ledger in ledgers):
        print("no batches" + ("" if run_dir is not None else f" under {clean(str(results_root))}"))
        return
    for path, ledger in ledgers:
        cost = _cost(path, ledger)
        for sub in ledger.submissions.values():
            row: dict[str, Any] = {
                "run_dir": str(path),
                "batch_id": sub.batch_id,
                "protocol": sub.protocol,
                "kind": sub.kind,
                "requests": len(sub.custom_ids),
                "state": "in flight" if sub.open else sub.state,
                "status": sub.status,
                "succeeded": sub.succeeded,
                "failed": sub.failed,
                "cost_usd": sub.cost_usd if sub.state == "collected" else None,
            }
            if json_out:
                print(json.dumps(row))
            else:
                print(
                    f"{clean(str(path))}  {sub.batch_id or '(unacknowledged)'}  {sub.protocol}  "
                    f"{row['requests']} requests  {row['state']}"
                    + (f" ({sub.status})" if sub.status else "")
                    + (f"  {sub.succeeded} ok, {sub.failed} failed" if not sub.open else "")
                    + (f"  ${sub.cost_usd:.4f}" if row["cost_usd"] is not None else "")
                )
        if not json_out:
            spent = "n/a" if cost is None else f"${cost:.4f}"
            subs = ledger.submissions.values()
            gone = [s.batch_id or s.submission for s in subs if s.state == "abandoned"]
            if gone:  # billed or not, the run cannot know: never counted as $0
                spent += f" collected, plus what abandoned {', '.join(gone)} billed (unknown)"
            print(f"{clean(str(path))}  batch cost so far: {spent}")


def _abandon(run_dir: Path | None, batch_id: str) -> None:
    """``--abandon``: record the batch abandoned in ``run_dir``'s ledger, one line saying
    what follows (and a warning when the batch was never seen to end: it may still run
    and bill at the API).

    Raises:
        UsageError: no run directory given, or no such in-flight batch in it.
    """
    import time

    from gradetrail._util.terminal import clean
    from gradetrail.errors import UsageError
    from gradetrail.rundir.batches import BatchLedger
    from gradetrail.rundir.spending import SpendingLog

    if run_dir is None or not _a_run(run_dir):
        raise UsageError(
            "--abandon needs the run directory that holds the batch: gradetrail batches "
            "RUN_DIR --abandon BATCH_ID"
        )
    ledger = BatchLedger.read(run_dir)
    before = {s.submission: s.state for s in ledger.submissions.values()}
    sub = ledger.abandon(batch_id, time.time())
    counted = ""
    if sub.worst_usd is not None:  # never lost to the ceiling: counted at its worst case
        SpendingLog(run_dir).add(sub.worst_usd, f"batch:{sub.submission}")
        counted = f"; counted at its worst case, ${sub.worst_usd:.4f}, against run.max_cost_usd"
    if before[sub.submission] != "ended":  # never seen to end: it may run on, and bill, at the API
        print(
            f"warning: batch {batch_id} was never seen to end: if it still runs at the "
            f"provider, cancel it there, or its {len(sub.custom_ids)} requests may be "
            "billed twice",
            file=sys.stderr,
        )
    print(
        f"abandoned batch {clean(batch_id)} of {clean(str(run_dir))}: its "
        f"{len(sub.custom_ids)} requests are sent again by the next run of the same command; "
        f"what it billed is not known to the run (see the provider's usage page){counted}"
    )


def _a_run(path: Path) -> bool:
    """``path`` holds what a run writes (its manifest, or a batch ledger written before it)."""
    from gradetrail.rundir.batches import BATCHES_FILE

    return (path / "manifest.json").is_file() or (path / BATCHES_FILE).is_file()


def _cost(run_dir: Path, ledger: BatchLedger) -> float | None:
    """USD the run's collected batches cost, in every process that collected one, as the
    ledger records each (None: a price unknown); a ledger written before costs were
    recorded: what the last manifest says (its process's batches only)."""
    collected = [s for s in ledger.submissions.values() if s.state == "collected"]
    if all(s.cost_usd is not None for s in collected):
        return sum(s.cost_usd or 0.0 for s in collected)
    try:
        manifest = json.loads((run_dir / "manifest.json").read_text())
        value = ((manifest.get("executor") or {}).get("batch") or {}).get("cost_usd")
    except (OSError, ValueError, AttributeError):
        return None
    return float(value) if isinstance(value, int | float) else None
