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
"""

from __future__ import annotations

from typing import Any

from gradetrail.errors import QUOTAS, RunError
from gradetrail.rundir.results import Row

__all__ = ["FailFast", "QuotaExhausted", "check_quota"]


class QuotaExhausted(RunError):
    """A provider said a quota ran out that will not come back within the run: the run
    stops starting calls (those in flight land), resumable once the quota is back."""

    exit_code = 3


def check_quota(row: Row) -> None:
    """Stop the run at a row whose provider (or judge) error says a quota ran out.

    Raises:
        QuotaExhausted: one line naming the quota, the provider's own words and the fix.
    """
    detail = _permanent_error(row)
    quota = detail.get("quota") if detail is not None else None
    if quota is None:
        return
    what, fix = QUOTAS.get(quota, QUOTAS["quota"])
    kind, message = detail.get("kind") or "ProviderError", detail.get("message") or ""
    message = " ".join(str(message).split())  # one line, whatever the provider sent
    who = "the judge's provider" if row["state"] == "judge_error" else "the provider"
    raise QuotaExhausted(
        f"stopped: {who} says its {what} ran out ({kind}: {message}); {fix}, then run the "
        "same command again: responses already paid for are cached, only the rest is "
        "requested"
    )


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
                message += "; check model.base_url and that the server is up"
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
