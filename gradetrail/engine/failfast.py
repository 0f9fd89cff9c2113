"""Fail fast: stop a run whose first samples all fail the same permanent way.

A wrong key, a misspelt model name or an exhausted quota fails every request the same way;
rather than write 1,319 copies of that error, the run stops once the first ``N`` completed
samples (``run.fail_fast``, default 5) have all failed with one identical permanent error
and none succeeded, and reports that error once (:class:`~gradetrail.errors.RunError`,
exit code 1). Rows already written stay on disk and the manifest says ``failed``.

"Identical" means the same error class, HTTP status, provider error type and code, and
message: a per-sample problem (one prompt too long for the context window) has its own
message and never stops a run. A connection error counts as permanent here: a row holds
it only once every retry failed, so the first ``N`` samples each failing to reach the
same endpoint mean a wrong ``base_url`` or a server that is down (the alternative is
retrying every sample of the dataset against it). Another transient error (timeouts,
5xx, a retryable 429), a success or a cache hit among the first ``N`` disarms the check
for the rest of the run. A judge's provider error counts like the model's.

A quota that will not come back within the run (the error's ``quota``: credit or a spend
cap ran out, a per-day or per-month quota; never a per-minute rate limit, which is
retried) stops the run at its first row, whenever it comes: every later request would
fail the same way. That is :class:`QuotaExhausted`, a clean stop like the budget's (exit
code 3, the manifest ``interrupted`` with the reason): the rows that landed are kept, the
responses in flight land and are cached, and the same command run again once the quota
is back requests only what has no response yet.

So does an error that every later request would repeat (the error's ``stops_run``): a
401 (a refused key), a 403 refusing the key access (not a moderation 403, which refuses
one prompt), a 404 naming the model or naming nothing (no route at the URL), a server
without the memory to load the model. That is :class:`ProviderStopped`, at the first
such row, with one line saying what to fix (before: only fail-fast stopped them, after
five rows); ``run.fail_fast: 0`` turns it off with fail-fast (a quota still stops).
"""

from __future__ import annotations

from typing import Any

from gradetrail.errors import QUOTAS, RUN_STOPS, RunError
from gradetrail.rundir.results import Row

__all__ = ["FailFast", "ProviderStopped", "QuotaExhausted", "check_stop"]


class ProviderStopped(RunError):
    """A provider's error says every later request of the run would fail the same way (a
    refused key, no access to the model, an unknown model, a server that cannot load it:
    the error's ``stops_run``): the run stops starting calls (those in flight land),
    resumable once fixed. Exit code 3, like a quota's or the budget's stop."""

    exit_code = 3


class QuotaExhausted(ProviderStopped):
    """A provider said a quota ran out that will not come back within the run: the run
    stops starting calls (those in flight land), resumable once the quota is back."""


_RESUME = (
    "then run the same command again: responses already paid for are cached, only the "
    "rest is requested"
)


def check_stop(row: Row, *, run_stops: bool = True) -> None:
    """Stop the run at a row whose provider (or judge) error says a quota ran out, or,
    with ``run_stops`` (False under ``run.fail_fast: 0``, which records every sample's
    error), that every later request would fail the same way (``stops_run``).

    Raises:
        QuotaExhausted: one line naming the quota, the provider's own words and the fix.
        ProviderStopped: one line saying what the provider refused, its own words and the
            fix.
    """
    detail = _permanent_error(row)
    if detail is None:
        return
    quota, stop = detail.get("quota"), detail.get("stops_run") if run_stops else None
    if quota is None and stop is None:
        return
    kind, message = detail.get("kind") or "ProviderError", detail.get("message") or ""
    message = " ".join(str(message).split())  # one line, whatever the provider sent
    who = "the judge's provider" if row["state"] == "judge_error" else "the provider"
    if quota is not None:
        what, fix = QUOTAS.get(quota, QUOTAS["quota"])
        raise QuotaExhausted(
            f"stopped: {who} says its {what} ran out ({kind}: {message}); {fix}, {_RESUME}"
        )
    what, fix = RUN_STOPS.get(stop, ("refused every request", "fix what its message says"))
    if row["state"] == "judge_error":  # the judge's settings, not the graded model's
        fix = fix.replace("model.", "scorer.model.")
    raise ProviderStopped(f"stopped: {who} {what} ({kind}: {message}); {fix}, {_RESUME}")


_SIGNATURE = ("kind", "status", "error_type", "code", "message")


class FailFast:
    """Watches completed rows in completion order.

    Args:
        first: how many completed samples to judge by (0: never stop).
    """

    def __init__(self, first: int) -> None:
        self.first = first
        self.armed = first > 0
        self.failed = 0
        self._signature: tuple[Any, ...] | None = None

    def observe(self, row: Row) -> None:
        """Count one completed row.

        Raises:
            RunError: the first ``first`` rows all failed with the same permanent error.
        """
        if not self.armed:
            return
        detail = _permanent_error(row)
        if detail is None:
            self.armed = False
            return
        signature = tuple(detail.get(k) for k in _SIGNATURE)
        if self._signature is None:
            self._signature = signature
        elif signature != self._signature:
            self.armed = False
            return
        self.failed += 1
        if self.failed >= self.first:
            self.armed = False
            kind, message = detail.get("kind") or "ProviderError", detail.get("message") or ""
            message = " ".join(str(message).split())  # one line, whatever the provider sent
            if kind == "ProviderConnectionError":
                field = "scorer.model" if row["state"] == "judge_error" else "model"
                message += f"; check {field}.base_url and that the server is up"
            raise RunError(
                f"stopped after the first {self.first} samples all failed with the same error "
                f"(run.fail_fast): {kind}: {message}"
            )


def _permanent_error(row: Row) -> dict[str, Any] | None:
    """The provider error detail of a row that failed permanently, else None."""
    error = row["error"]
    if not isinstance(error, dict):
        return None
    if row["state"] == "judge_error":
        error = error.get("provider_error")
        if not isinstance(error, dict):
            return None
    elif row["state"] != "provider_error":
        return None
    if error.get("transient", True) and error.get("kind") != "ProviderConnectionError":
        return None
    return error
