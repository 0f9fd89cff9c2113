"""Anthropic's Message Batches: ``POST /v1/messages/batches`` with the requests inline,
polled at ``/v1/messages/batches/{id}``, results read as JSONL from its ``results_url``.

Wire format: ``{"requests": [{"custom_id": KEY, "params": <a Messages body>}]}``;
results ``{"custom_id", "result": {"type": "succeeded", "message"} | {"type": "errored",
"error"} | {"type": "expired"} | {"type": "canceled"}}``. Limits: 100,000 requests and
256 MB a batch.

The API carries no tag of ours, so a batch whose creation was never acknowledged is found
by listing the batches: the newest one created since just before it was sent, with the
same number of requests, that the run does not know yet (a stated heuristic: two runs
sending equal-sized batches in the same second under one key could swap; the results are
keyed by custom_id, so a swapped batch's results are skipped, never mis-cached).
"""

from __future__ import annotations

from collections.abc import AsyncIterator, Mapping, Sequence
from datetime import datetime
from typing import Any

from gradetrail.errors import BadRequest, ServerError
from gradetrail.providers._batch import BatchAPI, BatchResult, BatchState, guarded, json_line
from gradetrail.providers.base import Request

__all__ = ["AnthropicBatchAPI"]

#: seconds of clock difference allowed between this machine and the API's
_SKEW_S = 300.0


class AnthropicBatchAPI(BatchAPI):
    """The Message Batches API of ``anthropic`` (see the module docstring)."""

    protocol = "anthropic"
    max_requests = 100_000
    max_bytes = 256 * 1024 * 1024

    def make_client(self) -> Any:
        """The provider's own ``anthropic.AsyncAnthropic`` (its base URL, retries off, the
        run's ``anthropic-version``, never the installed SDK's default) on the SDK's
        default HTTP client."""
        provider = self.provider
        return provider.make_client(provider._key or provider._read_key(), None)

    def entry(self, custom_id: str, request: Request) -> dict[str, Any]:
        """One request: the Messages body under ``params``."""
        return {"custom_id": custom_id, "params": self.provider.body(request)}

    async def submit(self, entries: list[dict[str, Any]], tag: str) -> str:
        """Create the batch with its requests inline."""
        batch = await guarded(
            lambda: self.client.messages.batches.create(requests=entries),
            self.provider._key,
            "creating the batch",
        )
        return str(batch.id)

    async def find(self, tag: str, count: int, since: float, taken: set[str]) -> str | None:
        """The newest unknown batch of ``count`` requests created since ``since``."""
        page = await guarded(
            lambda: self.client.messages.batches.list(limit=100),
            self.provider._key,
            "listing batches",
        )
        async for batch in page:
            created = _seconds(batch.created_at)
            if created < since - _SKEW_S:
                break
            total = sum(int(v or 0) for v in batch.request_counts.model_dump().values())
            if batch.id not in taken and total == count:
                return str(batch.id)
        return None

    def _state(self, batch: Any) -> BatchState:
        counts = {k: int(v or 0) for k, v in batch.request_counts.model_dump().items()}
        status: Any = "in_progress"
        if batch.processing_status == "ended":
            status = "ended"
            if counts.get("expired"):
                status = "expired"
            elif batch.cancel_initiated_at is not None:
                status = "cancelled"
        return BatchState(
            batch_id=str(batch.id),
            status=status,
            counts=counts,
            created_at=_seconds(batch.created_at),
            raw_status=str(batch.processing_status),
        )

    async def retrieve(self, batch_id: str) -> BatchState:
        """``GET /v1/messages/batches/{id}``."""
        batch = await guarded(
            lambda: self.client.messages.batches.retrieve(batch_id),
            self.provider._key,
            "polling",
        )
        return self._state(batch)

    async def cancel(self, batch_id: str) -> BatchState:
        """``POST /v1/messages/batches/{id}/cancel``."""
        batch = await guarded(
            lambda: self.client.messages.batches.cancel(batch_id),
            self.provider._key,
            "cancelling",
        )
        return self._state(batch)

    async def results(
        self, batch_id: str, requests: Mapping[str, Request], order: Sequence[str] = ()
    ) -> AsyncIterator[BatchResult]:
        """Every result line of an ended batch, validated as it is read off the SDK's
        streamed download (a line that is not JSON is skipped and counted, not the end
        of the others; the file is never held whole). An ``errored`` result is classified
        by its error type (``api_error``, ``overloaded_error``: retried; an
        ``invalid_request_error`` or a type not known: recorded, not sent again);
        ``expired`` and ``canceled`` requests never ran and are retried; a result type
        not known is recorded, not retried."""
        from gradetrail.errors import ProviderError
        from gradetrail.providers._batch import sdk_error

        key = self.provider._key
        self.unreadable = 0
        decoder = await guarded(
            lambda: self.client.messages.batches.results(batch_id), key, "reading results"
        )
        try:
            async for line in decoder.http_response.aiter_lines():
                item = json_line(line)
                if item is None:
                    self.unreadable += 1
                elif item:
                    result = self._result(item, requests)
                    if result is not None:
                        yield result
        except ProviderError:
            raise
        except Exception as exc:
            raise sdk_error(exc, key, "reading results") from None
        finally:
            await decoder.close()

    def _result(self, item: dict[str, Any], requests: Mapping[str, Request]) -> BatchResult | None:
        """One result line as a :class:`BatchResult`, or None (not this run's request)."""
        from gradetrail.providers._http import classify_status, error_fields, implied_status

        custom_id = item.get("custom_id")
        request = requests.get(custom_id) if isinstance(custom_id, str) else None
        result = item.get("result")
        if request is None or not isinstance(result, dict):
            return None
        assert isinstance(custom_id, str)
        kind = result.get("type")
        if kind == "succeeded":
            response, failed = self.parse(request, result.get("message"))
            return BatchResult(custom_id, response, failed)
        if kind == "errored":
            body = result.get("error") or {}
            etype, code, message = error_fields(body)
            # a type no status is known for refused the request: recorded (400), not resent
            status = implied_status(etype, code, message) or 400
            return BatchResult(custom_id, None, classify_status(status, None, body))
        word = str(kind or "unknown")
        if kind in ("expired", "canceled"):  # never ran: sent again
            error = ServerError(f"batch: the request was {word}", error_type="batch", code=word)
            return BatchResult(custom_id, None, error)
        return BatchResult(
            custom_id,
            None,
            BadRequest(
                f"batch: a result of type {word!r} (not known: recorded, not sent again)",
                error_type="batch",
                code=word,
            ),
        )


def _seconds(value: Any) -> float:
    """POSIX seconds of an SDK datetime (or ISO text)."""
    if isinstance(value, datetime):
        return value.timestamp()
    if isinstance(value, str):
        return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()
    return 0.0
