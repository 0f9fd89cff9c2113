"""An executor that makes no call: it records each request it is asked for and answers
with a permanent ``deferred`` error. A batched run scores its cached answers once through
it to learn the judge requests the scoring will make, so they can go in batches of their
own before the real scoring pass (the scores of that first pass are thrown away)."""

from __future__ import annotations

from typing import Any

from gradetrail.errors import ProviderError
from gradetrail.executors.base import Executor
from gradetrail.executors.retry import AttemptListener, CallOutcome
from gradetrail.providers.base import Provider, Request

__all__ = ["RecordingExecutor"]


class RecordingExecutor(Executor):
    """Records ``(provider, request)`` for each call, shared with every executor made by
    :meth:`for_provider`; never calls.

    Args:
        provider: the provider its requests are for.
        recorded: the shared record (a new one when None).
    """

    concurrency = 1

    def __init__(
        self, provider: Provider, recorded: dict[str, tuple[Provider, Request]] | None = None
    ) -> None:
        self.provider = provider
        #: cache key -> (provider, request), every request asked for
        self.recorded: dict[str, tuple[Provider, Request]] = {} if recorded is None else recorded
        #: the providers :meth:`for_provider` was asked for (a judge's, when there is one)
        self.others: list[Provider] = []

    def describe(self) -> dict[str, Any]:
        """``kind: recording``."""
        return {"kind": "recording", "concurrency": 1}

    async def complete(
        self, request: Request, on_attempt: AttemptListener | None = None
    ) -> CallOutcome:
        """Record ``request``; answer with a permanent ``deferred`` error."""
        self.recorded.setdefault(request.key(), (self.provider, request))
        return CallOutcome(None, ProviderError("deferred", code="deferred"), 0, 0.0)

    def for_provider(self, provider: Provider) -> Executor:
        """A recorder for ``provider``, sharing this one's record."""
        self.others.append(provider)
        return RecordingExecutor(provider, self.recorded)
