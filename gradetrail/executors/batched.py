"""The executor of a batched run's scoring pass: the batches have run, their successes are
in the cache (served as hits, never reaching an executor), and a request whose batch
attempts all failed is answered here with its last error, without a call. Anything else
(judge calls, and failed requests with ``--batch-fallback online``) goes to the online
executor it wraps.
"""

from __future__ import annotations

from typing import Any

from gradetrail.errors import ProviderError
from gradetrail.executors.base import Executor
from gradetrail.executors.retry import AttemptListener, CallOutcome
from gradetrail.providers.base import Provider, Request

__all__ = ["BatchedExecutor"]


class BatchedExecutor(Executor):
    """``failed`` requests answered with their batch error; the rest by ``online``.

    Args:
        online: the run's online executor (retry policy, concurrency, rate caps).
        failed: cache key -> (last error, batch attempts) of each request every batch
            attempt failed for.
        batch: what the manifest's ``executor`` records of the batches.
        unsent: why some requests were not sent (the budget), or None: then a request
            of ``batched`` that is not cached raises it instead of going online.
        batched: the cache keys the batch pass was to serve.
    """

    def __init__(
        self,
        online: Executor,
        failed: dict[str, tuple[ProviderError, int]],
        batch: dict[str, Any],
        unsent: Exception | None = None,
        batched: frozenset[str] = frozenset(),
    ) -> None:
        self.online = online
        self.failed = failed
        self.batch = batch
        self.unsent = unsent
        self.batched = batched
        self.provider: Provider = online.provider
        self.concurrency = online.concurrency

    def describe(self) -> dict[str, Any]:
        """The online executor's description, with ``batch``."""
        return {**self.online.describe(), "batch": self.batch}

    async def complete(
        self, request: Request, on_attempt: AttemptListener | None = None
    ) -> CallOutcome:
        """The batch error of a failed request; any other goes online.

        Raises:
            Exception: ``unsent``, for a request the batch pass left unsent.
        """
        if self.failed or self.unsent is not None:
            key = request.key()
            end = self.failed.get(key)
            if end is not None:
                error, attempts = end
                return CallOutcome(None, error, attempts, 0.0)
            if self.unsent is not None and key in self.batched:
                raise self.unsent
        return await self.online.complete(request, on_attempt)

    def for_provider(self, provider: Provider) -> Executor:
        """A judge's model: online, through the wrapped executor's kind."""
        return self.online.for_provider(provider)

    async def aclose(self) -> None:
        """Close the online executor."""
        await self.online.aclose()
