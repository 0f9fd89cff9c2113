"""The exceptions gradetrail raises to its users.

Every error a user can see derives from :class:`GradetrailError`, carries a one-line
message that says what to fix, and an ``exit_code`` the CLI returns::

    GradetrailError                 exit 1
    ├── SpecError                   exit 2   a spec file or override is invalid
    ├── DatasetError                exit 2   a dataset file is missing or malformed
    ├── UsageError                  exit 2   a bad command-line argument or run directory
    ├── CacheError                  exit 1   the response cache cannot be read or written
    │   └── CacheRefused            exit 2   the --cache path cannot be used (a symlink, not
    │                                        a file, cannot be opened, not a gradetrail cache)
    ├── RunError                    exit 1   a run cannot proceed (fail-fast, unsafe output path;
    │                                        in a sweep's cell: 2, no verdict)
    └── ProviderError               exit 1   one model call failed (recorded per sample)
        ├── ProviderTimeout                  no answer within the per-attempt or per-sample ceiling
        ├── ProviderConnectionError          the endpoint could not be reached
        ├── RateLimited                      429 / rate limit (transient unless a quota ran out:
        │                                    ``quota`` says which; the run then stops, exit 3)
        ├── ServerError                      5xx / overloaded
        ├── AuthError                        401 / 403 / missing API key (stops the run, exit 3)
        ├── BadRequest                       400 / 404 / 422 / content filter
        └── InvalidResponse                  an error body under 200, or an unparseable body
    JudgeError                      exit 1   a judge call failed or its reply could not be parsed

The CLI's exit codes are one table for every command (``gradetrail.cli.EXIT_CODES``,
docs/troubleshooting.md#exit-codes). Where a command reaches a verdict (``gate``,
``sweep``), 1 is that verdict only: an error that stops it before one exits 2 whatever its
own code (a sweep's cell that fail-fast stopped: RunError, 2).

Provider modules translate SDK exceptions into these classes at the boundary, so no
code above a provider imports an SDK. A :class:`ProviderError` says whether retrying may
help (``transient``) and how long the server asked to wait (``retry_after``, seconds, at
most :data:`MAX_RETRY_AFTER_S`), and, when a quota or spend cap ran out that will not come
back within the run (a credit balance, a spend cap, a per-day or per-month quota: not a
per-minute rate limit), which one (``quota``, a key of :data:`QUOTAS`); when every later
request of the run would fail the same way (a refused key, no access to the model, an
unknown model, a server without the memory to load it, a refused response_format
schema), why (``stops_run``, a key of :data:`RUN_STOPS`).
"""

from __future__ import annotations

import math
from typing import Any


class GradetrailError(Exception):
    """Base of every error gradetrail raises on purpose.

    Attributes:
        exit_code: the process exit code the CLI uses for this error.
    """

    exit_code: int = 1


class SpecError(GradetrailError):
    """The spec (a YAML file or a ``--set`` override) is invalid; the message names
    the file, the field and the fix.

    Attributes:
        problems: one message per problem when validation found several (the message is
            then these, newline-separated), else None.
    """

    exit_code = 2
    problems: list[str] | None = None


class DatasetError(GradetrailError):
    """A dataset or recordings file is missing, unreadable or malformed."""

    exit_code = 2


class UsageError(GradetrailError):
    """A command-line argument, path or run directory cannot be used as given."""

    exit_code = 2


class CacheError(GradetrailError):
    """The response cache database cannot be opened, read or written."""


class CacheRefused(CacheError):
    """The cache path cannot be used as given (bad input: pass another ``--cache PATH``):
    a symlink, a hard link, not a regular file, it cannot be opened or created, or the
    file is not a gradetrail cache."""

    exit_code = 2


class RunError(GradetrailError):
    """A run cannot start or continue (for example: fail-fast stopped it)."""


#: the most characters a provider error's message keeps (a provider's 20 MB message is
#: cut in its middle, so results, manifest and log stay small)
MAX_ERROR_CHARS = 4000


def _bounded_message(message: str) -> str:
    """``message`` cut to :data:`MAX_ERROR_CHARS` (its start and end kept)."""
    if len(message) <= MAX_ERROR_CHARS:
        return message
    half = MAX_ERROR_CHARS // 2
    omitted = len(message) - 2 * half
    return f"{message[:half]} [... {omitted} characters omitted ...] {message[-half:]}"


#: the longest wait, seconds, that a server's ``Retry-After`` (or ``retry-after-ms``) can
#: impose: a larger value waits this long, an infinite one too, a NaN is ignored
MAX_RETRY_AFTER_S = 600.0


def bounded_retry_after(seconds: float | None) -> float | None:
    """``seconds`` clamped to ``[0, MAX_RETRY_AFTER_S]``; None for None or NaN (and for a
    value that is not a number)."""
    if seconds is None:
        return None
    try:
        value = float(seconds)
    except (TypeError, ValueError):
        return None
    if math.isnan(value):
        return None
    return min(max(value, 0.0), MAX_RETRY_AFTER_S)


#: the quotas that, once run out, stop a run (a re-run resumes it): the name a provider's
#: classification gives (``ProviderError.quota``) -> (what ran out, what to do), in words
QUOTAS: dict[str, tuple[str, str]] = {
    "credit": (
        "prepaid credit or balance",
        "add credit (or a payment method) at the provider",
    ),
    "spend_cap": (
        "spend cap",
        "raise the spend cap at the provider, or wait for its period to turn",
    ),
    "daily": ("per-day quota", "wait for it to reset, or raise it at the provider"),
    "monthly": ("per-month quota", "raise it at the provider, or wait for the month to turn"),
    "quota": ("quota", "check the plan, quota and billing at the provider"),
}


#: the errors that fail every later request of the run the same way, so a run stops at
#: their first row (a re-run resumes it once fixed): the name a provider's classification
#: gives (``ProviderError.stops_run``) -> (what is wrong, what to do), in words. A refusal
#: of one prompt (a moderation 403, a context window) is never one of them.
RUN_STOPS: dict[str, tuple[str, str]] = {
    "key": ("refused the API key", "set a valid key"),
    "access": (
        "refused this key access to the model or endpoint",
        "give the key access at the provider, or pick a model it may call",
    ),
    "model": (
        "does not serve this model (or nothing answers at this URL)",
        "check model.name against the provider's model list, and model.base_url",
    ),
    "memory": (
        "has too little memory to load the model",
        "free memory on the server, or pick a smaller model (or quantization)",
    ),
    "schema": (
        "refused the JSON schema of model.response_format",
        "fix model.response_format.schema as its message says",
    ),
}


class ProviderError(GradetrailError):
    """One model call failed.

    Attributes:
        transient: True when retrying the same request may succeed (timeouts,
            connection errors, 408/409/429, 5xx, overloaded).
        retry_after: seconds the server asked to wait before retrying, or None.
        status: the HTTP status code, when there was one.
        error_type: the provider's own error type (e.g. ``rate_limit_error``).
        code: the provider's own error code (e.g. ``insufficient_quota``).
        quota: which quota ran out (a key of :data:`QUOTAS`: ``credit``, ``spend_cap``,
            ``daily``, ``monthly``, ``quota``) when the failure is one that will not come
            back within the run, else None. Such an error is permanent, and a run stops
            at it (:class:`~gradetrail.engine.failfast.QuotaExhausted`).
        stops_run: why every later request of the run would fail the same way (a key of
            :data:`RUN_STOPS`: ``key``, ``access``, ``model``, ``memory``, ``schema``), else
            None. The
            error is permanent, and the run stops at its first row
            (:class:`~gradetrail.engine.failfast.ProviderStopped`).
        billed: the response the provider answered, and billed, before the call was
            refused on this side (a :class:`~gradetrail.providers.base.Response`: a served
            model other than the requested one under ``require_served_model``), or None
            when nothing was billed. Its tokens and cost (USD) stay on the error row.
        maybe_billed: True when the request reached the provider and its answer was lost
            on this side (the Ray worker holding the call died): the provider may still
            finish it and bill it, and will never say, as for an attempt cut off by its
            timeout. ``run.max_cost_usd`` counts such an attempt at its worst case.
    """

    transient: bool = False
    billed: Any = None
    maybe_billed: bool = False
    stops_run: str | None = None

    def __init__(
        self,
        message: str,
        *,
        transient: bool | None = None,
        retry_after: float | None = None,
        status: int | None = None,
        error_type: str | None = None,
        code: str | None = None,
        billed: Any = None,
        quota: str | None = None,
        stops_run: str | None = None,
    ) -> None:
        super().__init__(_bounded_message(message))
        if billed is not None:
            self.billed = billed
        if transient is not None:
            self.transient = transient
        self.retry_after = bounded_retry_after(retry_after)
        self.status = status
        self.error_type = error_type
        self.code = code
        self.quota = quota
        self.stops_run = stops_run

    def __reduce__(self) -> tuple[Any, ...]:
        """Pickle as class, ``args`` and fields, rebuilt without calling ``__init__``: a
        subclass with an ``__init__`` of its own (``Refused(who, why)``, raised by a
        ``python`` provider on a Ray worker) unpickles whole in the driver."""
        return (_rebuilt_error, (type(self), self.args, self.__dict__))

    def portable(self) -> ProviderError:
        """This error, or, when it does not survive pickling (a field holding a lock or a
        socket), a copy of the nearest gradetrail class with the same message and fields
        (``billed`` kept when it survives pickling itself): what a Ray worker sends back."""
        import pickle

        try:
            pickle.loads(pickle.dumps(self))
            return self
        except Exception:
            base = next(c for c in type(self).__mro__ if c.__module__ == __name__)
            billed = self.billed
            try:  # a Response; anything else a user set there may not travel
                pickle.loads(pickle.dumps(billed))
            except Exception:
                billed = None
            return base(
                str(self),
                transient=self.transient,
                retry_after=self.retry_after,
                status=self.status,
                error_type=self.error_type,
                code=self.code,
                billed=billed,
                quota=self.quota,
                stops_run=self.stops_run,
            )

    def detail(self) -> dict[str, Any]:
        """The error as a JSON-ready dict for a result row: ``kind``, ``message``,
        ``status``, ``error_type``, ``code``, ``transient`` (whether a retry could have
        helped) and ``retry_after`` (seconds the server asked to wait, or None); ``quota``
        (which quota ran out) only when one did, and ``stops_run`` (why the whole run
        cannot go on) only when set, so other rows keep their bytes."""
        detail = {
            "kind": type(self).__name__,
            "message": str(self),
            "status": self.status,
            "error_type": self.error_type,
            "code": self.code,
            "transient": self.transient,
            "retry_after": self.retry_after,
        }
        if self.quota is not None:
            detail["quota"] = self.quota
        if self.stops_run is not None:
            detail["stops_run"] = self.stops_run
        return detail


def _rebuilt_error(
    cls: type[ProviderError], args: tuple[Any, ...], state: dict[str, Any]
) -> ProviderError:
    """A pickled :class:`ProviderError` again (see its ``__reduce__``)."""
    error = Exception.__new__(cls)
    error.args = args
    error.__dict__.update(state)
    return error


class ProviderTimeout(ProviderError):
    """No response within the per-attempt timeout or the per-sample wall-clock ceiling."""

    transient = True


class ProviderConnectionError(ProviderError):
    """The endpoint could not be reached (refused, reset, DNS failure)."""

    transient = True


class RateLimited(ProviderError):
    """The provider refused the call for rate (429); transient unless the quota is
    exhausted, in which case ``transient`` is False."""

    transient = True


class ServerError(ProviderError):
    """The provider failed on its side (5xx, overloaded)."""

    transient = True


class AuthError(ProviderError):
    """The credentials are missing, invalid or not allowed (401, 403)."""


class BadRequest(ProviderError):
    """The provider rejected the request itself (400, 404, 422, content filter)."""


class InvalidResponse(ProviderError):
    """The provider answered 200 with an error body, or a body that cannot be parsed."""


class JudgeError(GradetrailError):
    """A judge call failed, or its reply could not be parsed into a verdict."""
