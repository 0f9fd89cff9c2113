"""The executor interface: decides *where* ``provider.complete`` runs, nothing else.

Cache reads and writes, scoring and result writing stay in the driver process
(:mod:`gradetrail.engine.pipeline`), so every executor shares one per-sample pipeline.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from typing import Any

from gradetrail.errors import RunError
from gradetrail.executors.retry import AttemptListener, CallOutcome
from gradetrail.providers.base import Provider, Request

__all__ = ["Executor"]


class Executor(ABC):
    """Runs provider calls under the run's retry policy and concurrency bound."""

    #: requests the driver keeps in flight at most
    concurrency: int
    #: the provider whose calls this executor runs
    provider: Provider

    def start(self) -> None:
        """Acquire what calls need (Ray: import it, join the cluster) before the run's
        directory exists. The runner calls it only when some request misses the cache, so
        a fully cached run never pays for it. Default: nothing.

        Raises:
            GradetrailError: the executor cannot run here (the run is refused).
        """

    def describe(self) -> dict[str, Any]:
        """Where the calls ran, for the manifest's ``executor`` (execution only: not in
        the identity hash). Default: ``kind`` and ``concurrency``."""
        return {"kind": "local", "concurrency": self.concurrency}

    @abstractmethod
    async def complete(
        self, request: Request, on_attempt: AttemptListener | None = None
    ) -> CallOutcome:
        """Serve one request with retries; never raises a ProviderError (it is in the
        outcome). ``on_attempt`` is told of each failed attempt as it ends, when the retry
        loop runs in this process (see :data:`~gradetrail.executors.retry.AttemptListener`)."""

    def for_provider(self, provider: Provider) -> Executor:
        """An executor of the same kind, retry policy and concurrency bound that calls
        ``provider`` instead (judges call their own model through this).

        Raises:
            RunError: this executor cannot serve another provider.
        """
        raise RunError(f"the {type(self).__name__} cannot call a judge model; use --executor local")

    async def aclose(self) -> None:
        """Release the executor's resources (and its provider's)."""
