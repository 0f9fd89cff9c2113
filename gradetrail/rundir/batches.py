"""The run directory's batch ledger, ``batches.jsonl``: what a batched run sent, so a
restart (after Ctrl-C, ``--detach`` or ``kill -9``) collects it instead of sending it
again.

One JSON object a line, appended and fsynced before the step it records goes on:

- ``{"event": "intent", "submission": S, "protocol", "kind", "custom_ids": [...],
  "sent_at": POSIX seconds, "worst_usd": USD}``: written *before* the batch is sent
  (``worst_usd``, what it could cost at most, only under ``run.max_cost_usd``). A submission with an
  intent and nothing after it may or may not have reached the API: the driver asks the
  API (``find``) before sending it again.
- ``{"event": "submitted", "submission": S, "batch_id": B}``: the API acknowledged it.
- ``{"event": "ended", "submission": S, "status", "counts"}``: the batch ended.
- ``{"event": "collected", "submission": S, "succeeded": n, "failed": n, "cost_usd":
  USD | null}``: its results
  are in the cache (successes) or sent on to the retry policy (failures).
- ``{"event": "lost", "submission": S}``: the API has no batch for an unacknowledged
  submission: it was never created (its requests may be sent again).
- ``{"event": "abandoned", "submission": S, "at": POSIX seconds}``: the user gave up on
  it (``gradetrail batches RUN_DIR --abandon ID``: its results are gone, expired at the
  API): it is no longer collected, and its requests are sent again by the next run. What
  it billed is unknown to the run, and said so wherever its cost is summed; when its
  worst case is recorded, that is counted as paid against ``run.max_cost_usd``.

A torn last line (a kill mid-write) is ignored: the step it recorded had not gone on.
"""

from __future__ import annotations

import json
import math
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from gradetrail.errors import RunError, UsageError

#: never follow a symlink planted in the run directory
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)

__all__ = ["BATCHES_FILE", "BatchLedger", "Submission"]

BATCHES_FILE = "batches.jsonl"

SubmissionState = Literal["intent", "submitted", "ended", "collected", "lost", "abandoned"]


@dataclass
class Submission:
    """One batch as the ledger knows it.

    Attributes:
        submission: the run's own id for it (also the tag sent where the API takes one).
        protocol: ``openai`` or ``anthropic``.
        kind: ``provider`` or ``judge``.
        custom_ids: its requests' custom_ids (their cache keys).
        sent_at: POSIX seconds just before it was sent.
        state: how far it got (see the module docstring).
        batch_id: the API's id, once acknowledged or found.
        status: the API's end state (``ended``, ``expired``, ``cancelled``, ``failed``).
        counts: the API's request counts at its end.
        succeeded, failed: requests collected each way.
        cost_usd: what its results cost, USD at the batch price (None: unknown).
    """

    submission: str
    protocol: str
    kind: str
    custom_ids: list[str]
    sent_at: float
    state: SubmissionState = "intent"
    batch_id: str | None = None
    status: str | None = None
    counts: dict[str, int] = field(default_factory=dict)
    succeeded: int = 0
    failed: int = 0
    #: USD its results cost at the batch price, once collected (None: unknown, or a
    #: ledger written before costs were recorded)
    cost_usd: float | None = None
    #: USD it could cost at most, when sent under run.max_cost_usd (else None)
    worst_usd: float | None = None

    @property
    def open(self) -> bool:
        """True while its results are still to be collected."""
        return self.state in ("intent", "submitted", "ended")


def _usd_or_none(value: object) -> float | None:
    """``value`` as USD when it is a finite number >= 0, else None."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value >= 0 else None


class BatchLedger:
    """``batches.jsonl`` of one run directory, read at open, appended durably.

    Args:
        path: the run directory.
    """

    def __init__(self, path: Path) -> None:
        self.path = Path(path) / BATCHES_FILE
        self.submissions: dict[str, Submission] = {}
        if self.path.exists():
            self._read()

    @classmethod
    def read(cls, run_dir: str | Path) -> BatchLedger:
        """The ledger of ``run_dir`` (empty when it has none).

        Raises:
            UsageError: ``run_dir`` is not a directory.
        """
        path = Path(run_dir)
        if not path.is_dir():
            raise UsageError(f"{path}: not a run directory; give the directory a run wrote")
        return cls(path)

    def _read(self) -> None:
        with self.path.open("rb") as handle:
            for number, raw in enumerate(handle, start=1):
                try:
                    line = json.loads(raw)
                except ValueError:
                    if raw.endswith(b"\n"):
                        raise RunError(
                            f"{self.path}: line {number} is not JSON; the ledger is damaged "
                            "(move it away to send the batches again)"
                        ) from None
                    break  # a torn last line: its step never went on
                self._apply(line)

    def _apply(self, line: dict[str, Any]) -> None:
        event, name = line.get("event"), line.get("submission")
        if event == "intent":
            self.submissions[name] = Submission(
                submission=name,
                protocol=line["protocol"],
                kind=line.get("kind", "provider"),
                custom_ids=list(line["custom_ids"]),
                sent_at=float(line["sent_at"]),
                worst_usd=_usd_or_none(line.get("worst_usd")),
            )
            return
        sub = self.submissions.get(name)
        if sub is None:
            return
        if event == "submitted":
            sub.state, sub.batch_id = "submitted", line["batch_id"]
        elif event == "ended":
            sub.state, sub.status = "ended", line.get("status")
            sub.counts = dict(line.get("counts") or {})
        elif event == "collected":
            sub.state = "collected"
            sub.succeeded, sub.failed = int(line["succeeded"]), int(line["failed"])
            cost = line.get("cost_usd")
            sub.cost_usd = float(cost) if isinstance(cost, int | float) else None
        elif event == "lost":
            sub.state = "lost"
        elif event == "abandoned":
            sub.state = "abandoned"

    def _append(self, line: dict[str, Any]) -> None:
        """Append one line and fsync it (and the directory, the first time)."""
        data = json.dumps(line, separators=(",", ":")).encode() + b"\n"
        new = not self.path.exists()
        fd = os.open(self.path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW, 0o644)
        try:
            os.write(fd, data)
            os.fsync(fd)
        finally:
            os.close(fd)
        if new:
            dir_fd = os.open(self.path.parent, os.O_RDONLY)
            try:
                os.fsync(dir_fd)
            finally:
                os.close(dir_fd)
        self._apply(line)

    # -- the steps -----------------------------------------------------------------------

    def intent(
        self,
        submission: str,
        protocol: str,
        kind: str,
        custom_ids: list[str],
        sent_at: float,
        worst_usd: float | None = None,
    ) -> Submission:
        """Record a batch about to be sent (before it is); ``worst_usd``: what it could
        cost at most, under a budget."""
        line: dict[str, Any] = {
            "event": "intent",
            "submission": submission,
            "protocol": protocol,
            "kind": kind,
            "custom_ids": custom_ids,
            "sent_at": sent_at,
        }
        if worst_usd is not None:
            line["worst_usd"] = round(worst_usd, 12)
        self._append(line)
        return self.submissions[submission]

    def submitted(self, submission: str, batch_id: str) -> None:
        """The API acknowledged (or was found to hold) the batch ``batch_id``."""
        self._append({"event": "submitted", "submission": submission, "batch_id": batch_id})

    def ended(self, submission: str, status: str, counts: dict[str, int]) -> None:
        """The batch ended with ``status``."""
        self._append(
            {"event": "ended", "submission": submission, "status": status, "counts": counts}
        )

    def collected(
        self, submission: str, succeeded: int, failed: int, cost_usd: float | None = None
    ) -> None:
        """Its results are cached (successes) or handed on (failures); ``cost_usd``: what
        its results cost at the batch price (None: a price unknown)."""
        self._append(
            {
                "event": "collected",
                "submission": submission,
                "succeeded": succeeded,
                "failed": failed,
                "cost_usd": cost_usd,
            }
        )

    def lost(self, submission: str) -> None:
        """The API holds no batch for an unacknowledged submission."""
        self._append({"event": "lost", "submission": submission})

    def abandon(self, batch: str, at: float) -> Submission:
        """Give up on the open submission whose batch id (or submission id) is ``batch``:
        it is no longer collected, and its requests are sent again by the next run.

        Raises:
            UsageError: no submission has that id, or it is not open (collected, lost or
                abandoned already: nothing to give up on).
        """
        found = [s for s in self.submissions.values() if batch in (s.batch_id, s.submission)]
        if not found:
            known = ", ".join(s.batch_id or s.submission for s in self.open_submissions())
            raise UsageError(
                f"{self.path.parent}: no batch {batch!r} in {BATCHES_FILE}; its open "
                f"batches: {known or 'none'} (see gradetrail batches)"
            )
        sub = found[0]
        if not sub.open:
            raise UsageError(
                f"batch {batch} is {sub.state}: only a batch still to be collected can be abandoned"
            )
        self._append({"event": "abandoned", "submission": sub.submission, "at": at})
        return sub

    # -- reading -------------------------------------------------------------------------

    def open_submissions(self) -> list[Submission]:
        """Submissions whose results are still to be collected, in the order sent."""
        return [s for s in self.submissions.values() if s.open]

    def in_flight(self) -> set[str]:
        """custom_ids of every open submission (never sent again while open)."""
        return {c for s in self.open_submissions() for c in s.custom_ids}

    def batch_ids(self) -> list[str]:
        """Every batch id the run knows, in the order sent."""
        return [s.batch_id for s in self.submissions.values() if s.batch_id]
