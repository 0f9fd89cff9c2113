"""What a provider's batch API client offers the batch driver: one interface, two wire
formats (:mod:`~gradetrail.providers._openai_batch`,
:mod:`~gradetrail.providers._anthropic_batch`).

A batch is a list of requests, each named by a ``custom_id`` (the request's cache key:
64 hex characters, which both APIs accept), sent at once and answered within a day at
the batch tier (half the online price). The driver (:mod:`gradetrail.engine.batching`)
records each submission in the run directory before it is sent, so a submission whose
acknowledgement was lost (a ``kill -9`` between the request and its answer) can be found
again with :meth:`BatchAPI.find` instead of being sent twice.

Control-plane failures (upload, create, retrieve) raise a classified
:class:`~gradetrail.errors.ProviderError`, so the run's one retry policy decides.
"""

from __future__ import annotations

import json
from abc import ABC, abstractmethod
from collections.abc import AsyncIterator, Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from gradetrail.errors import InvalidResponse, ProviderError, ServerError

if TYPE_CHECKING:
    from gradetrail.providers._http import HttpProvider
    from gradetrail.providers.base import Request, Response

__all__ = ["BatchAPI", "BatchResult", "BatchState", "BatchStatus", "json_line", "sdk_error"]

#: where a batch is: still working, ended (every request has a result), or ended early
BatchStatus = Literal["in_progress", "ended", "expired", "cancelled", "failed"]


@dataclass(frozen=True, slots=True)
class BatchState:
    """One look at a batch.

    Attributes:
        batch_id: the API's id.
        status: see :data:`BatchStatus`.
        counts: the API's request counts (its own names: ``completed``/``failed`` or
            ``succeeded``/``errored``/``expired``/``canceled``/``processing``).
        created_at: POSIX seconds the API says it was created.
        tag: the submission tag it carries (OpenAI metadata), or None.
        raw_status: the API's own word for its state.
    """

    batch_id: str
    status: BatchStatus
    counts: dict[str, int] = field(default_factory=dict)
    created_at: float = 0.0
    tag: str | None = None
    raw_status: str = ""

    @property
    def done(self) -> bool:
        """True once the batch has ended, however (results can be read)."""
        return self.status != "in_progress"


@dataclass(frozen=True, slots=True)
class BatchResult:
    """One request's end in a batch: a response or a classified error.

    Attributes:
        custom_id: the request's custom_id (its cache key).
        response: the validated response (priced at the batch tier), or None.
        error: why not: transient for an expired, cancelled or server-failed request
            (the retry policy may send it again), permanent for a bad request.
    """

    custom_id: str
    response: Response | None
    error: ProviderError | None


class BatchAPI(ABC):
    """A provider's batch API client (built by ``provider.batch_api()``).

    Args:
        provider: the provider whose requests, parser and prices the batches use.
    """

    #: the API's name, for the ledger and messages
    protocol: str
    #: requests a batch may hold at most
    max_requests: int
    #: bytes a batch's requests may take at most (their JSON lines)
    max_bytes: int

    def __init__(self, provider: HttpProvider) -> None:
        self.provider = provider
        self._client: Any = None
        #: non-blank lines of the last results read that were not JSON objects (skipped)
        self.unreadable = 0

    @property
    def client(self) -> Any:
        """The official SDK's async client (retries off), built on first use."""
        if self._client is None:
            self._client = self.make_client()
        return self._client

    @abstractmethod
    def make_client(self) -> Any:
        """A new SDK client for the provider's base URL and key, ``max_retries=0``."""

    @abstractmethod
    def entry(self, custom_id: str, request: Request) -> dict[str, Any]:
        """One request as the batch API takes it (built with the provider's one body
        builder)."""

    @staticmethod
    def size(entry: dict[str, Any]) -> int:
        """Bytes ``entry`` takes in the batch (its JSON line)."""
        return len(json.dumps(entry, ensure_ascii=False).encode("utf-8", "surrogatepass")) + 1

    @abstractmethod
    async def submit(self, entries: list[dict[str, Any]], tag: str) -> str:
        """Send one batch; return its id. ``tag`` names the submission where the API
        can carry it (see :meth:`find`).

        Raises:
            ProviderError: classified (the retry policy decides).
        """

    @abstractmethod
    async def find(self, tag: str, count: int, since: float, taken: set[str]) -> str | None:
        """The id of a batch this run submitted under ``tag`` whose acknowledgement was
        lost, or None when the API has none (it was never created: send it again).

        Args:
            tag: the submission's tag.
            count: its number of requests.
            since: POSIX seconds just before it was sent.
            taken: batch ids already known to the run (never adopted twice).
        """

    @abstractmethod
    async def retrieve(self, batch_id: str) -> BatchState:
        """Where the batch is now."""

    @abstractmethod
    def results(
        self, batch_id: str, requests: Mapping[str, Request], order: Sequence[str] = ()
    ) -> AsyncIterator[BatchResult]:
        """Every result of an ended batch, validated and priced, yielded as its line is
        read off the download (a results file can be gigabytes: it is never held whole;
        ``requests``: custom_id -> the request it stands for; ``order``: the batch's
        custom_ids as sent, line N of its input being ``order[N - 1]``). A result for a
        custom_id the run never sent is skipped, and so is a line that is not JSON (a
        truncated or damaged results file: the lines that are read are kept, counted in
        :attr:`unreadable` once the iteration ends); a request without a result is left
        out (the driver sends it again). Results may come in any order and more than once.

        Raises:
            ProviderError: the results could not be read (classified), also mid-way.
        """

    @abstractmethod
    async def cancel(self, batch_id: str) -> BatchState:
        """Ask the API to cancel the batch."""

    def parse(self, request: Request, body: Any) -> tuple[Response | None, ProviderError | None]:
        """A successful answer's body through the provider's one parser."""
        if not isinstance(body, dict):
            return None, InvalidResponse("a batch result has no response body", status=200)
        try:
            return self.provider.batch_response(request, body), None
        except ProviderError as exc:
            return None, exc

    async def aclose(self) -> None:
        """Close the client."""
        if self._client is not None:
            client, self._client = self._client, None
            await client.close()


def json_line(line: bytes | str) -> dict[str, Any] | None:
    """One line of a JSONL results file as its JSON object; None for a line that is not
    one (torn, truncated or not JSON at all); a blank line is ``{}``."""
    if not line.strip():
        return {}
    try:
        item = json.loads(line)
    except ValueError:
        return None
    return item if isinstance(item, dict) else None


def sdk_error(exc: Exception, key: str | None, what: str) -> ProviderError:
    """A batch control call's SDK exception as a classified ProviderError: an answer
    with a status by :func:`~gradetrail.providers._http.classify_status`, anything else
    (no connection, a timeout) a transient :class:`ServerError`."""
    from gradetrail.providers._http import classify_status, redact

    status = getattr(exc, "status_code", None)
    response = getattr(exc, "response", None)
    if isinstance(status, int):
        headers = getattr(response, "headers", None)
        return classify_status(status, headers, getattr(exc, "body", None), key=key)
    return ServerError(redact(f"{what}: {type(exc).__name__}: {exc}", key))


async def guarded(call: Callable[[], Any], key: str | None, what: str) -> Any:
    """Await ``call()``; an SDK exception becomes a classified ProviderError."""
    try:
        return await call()
    except ProviderError:
        raise
    except Exception as exc:
        raise sdk_error(exc, key, what) from None
