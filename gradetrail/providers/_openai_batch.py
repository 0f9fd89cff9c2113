"""OpenAI's Batch API for Chat Completions: a JSONL file uploaded to ``/v1/files``
(``purpose=batch``), a batch created on it at ``/v1/batches`` (``completion_window
24h``), polled, and its output and error files read back.

Wire format (one line a request)::

    {"custom_id": KEY, "method": "POST", "url": "/v1/chat/completions", "body": {...}}

Output lines: ``{"custom_id", "response": {"status_code", "body"}, "error"}``; requests
that failed are in the error file, with an HTTP status and error body, or with ``error:
{"code": "batch_expired" | "batch_cancelled"}`` and no response (any code not known to
pass is recorded as the request's error, not sent again). Both files are read line by
line off the download, never whole. Limits: 50,000
requests and 200 MB a file. The submission's tag goes in the batch's ``metadata``
(``gradetrail_submission``), so a batch whose creation was never acknowledged is found
by listing the batches.
"""

from __future__ import annotations

import json
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from gradetrail.errors import BadRequest, ProviderError, ServerError
from gradetrail.providers._batch import (
    BatchAPI,
    BatchResult,
    BatchState,
    BatchStatus,
    guarded,
    json_line,
    sdk_error,
)
from gradetrail.providers.base import Request

__all__ = ["OpenAIBatchAPI"]

ENDPOINT = "/v1/chat/completions"
TAG_KEY = "gradetrail_submission"
_STATUS: dict[str, BatchStatus] = {
    "validating": "in_progress",
    "in_progress": "in_progress",
    "finalizing": "in_progress",
    "cancelling": "in_progress",
    "completed": "ended",
    "expired": "expired",
    "cancelled": "cancelled",
    "failed": "failed",
}
#: ``errors.data[].code`` of a batch ``failed`` for a reason that passes (sending it again
#: later may succeed); any other failed batch was refused for its content
_TRANSIENT_FAILURES = frozenset({"token_limit_exceeded", "rate_limit_exceeded", "server_error"})
#: ``error.code`` of an error-file line (no response) that passes: the request never ran
#: (the batch expired or was cancelled first) or met a server-side failure; any other code
#: refused the request itself, and is recorded, not sent again by this run
_TRANSIENT_LINE_CODES = frozenset(
    {
        "batch_expired",
        "batch_cancelled",
        "batch_failed",
        "server_error",
        "internal_error",
        "rate_limit_exceeded",
        "timeout",
        "overloaded",
    }
)
#: batches listed at most when looking for an unacknowledged one
_LIST_LIMIT = 500


class OpenAIBatchAPI(BatchAPI):
    """The Batch API of ``openai`` (see the module docstring)."""

    protocol = "openai"
    max_requests = 50_000
    max_bytes = 200 * 1024 * 1024

    def make_client(self) -> Any:
        """The provider's own ``openai.AsyncOpenAI`` (its base URL, retries off, its key
        whatever the SDK's environment says) on the SDK's default HTTP client."""
        provider = self.provider
        return provider.make_client(provider._key or provider._read_key(), None)

    def entry(self, custom_id: str, request: Request) -> dict[str, Any]:
        """One input line: the Chat Completions body under ``body``."""
        body = self.provider.body(request)
        return {"custom_id": custom_id, "method": "POST", "url": ENDPOINT, "body": body}

    async def submit(self, entries: list[dict[str, Any]], tag: str) -> str:
        """Upload the lines, then create the batch (tagged in its metadata)."""
        data = b"".join(
            json.dumps(e, ensure_ascii=False).encode("utf-8", "surrogatepass") + b"\n"
            for e in entries
        )
        key = self.provider._key
        uploaded = await guarded(
            lambda: self.client.files.create(file=("batch.jsonl", data), purpose="batch"),
            key,
            "uploading the batch file",
        )
        batch = await guarded(
            lambda: self.client.batches.create(
                input_file_id=uploaded.id,
                endpoint=ENDPOINT,
                completion_window="24h",
                metadata={TAG_KEY: tag},
            ),
            key,
            "creating the batch",
        )
        return str(batch.id)

    async def find(self, tag: str, count: int, since: float, taken: set[str]) -> str | None:
        """The batch whose metadata carries ``tag`` (newest first, the last 500)."""
        seen = 0
        page = await guarded(
            lambda: self.client.batches.list(limit=100), self.provider._key, "listing batches"
        )
        async for batch in page:
            seen += 1
            if (batch.metadata or {}).get(TAG_KEY) == tag and batch.id not in taken:
                return str(batch.id)
            if seen >= _LIST_LIMIT or (batch.created_at or 0) < since - 3600:
                break
        return None

    def _state(self, batch: Any) -> BatchState:
        counts = batch.request_counts.model_dump() if batch.request_counts else {}
        return BatchState(
            batch_id=str(batch.id),
            status=_STATUS.get(batch.status, "in_progress"),
            counts={k: int(v) for k, v in counts.items() if isinstance(v, int)},
            created_at=float(batch.created_at or 0),
            tag=(batch.metadata or {}).get(TAG_KEY),
            raw_status=str(batch.status),
        )

    async def retrieve(self, batch_id: str) -> BatchState:
        """``GET /v1/batches/{id}``."""
        batch = await guarded(
            lambda: self.client.batches.retrieve(batch_id), self.provider._key, "polling"
        )
        return self._state(batch)

    async def cancel(self, batch_id: str) -> BatchState:
        """``POST /v1/batches/{id}/cancel``."""
        batch = await guarded(
            lambda: self.client.batches.cancel(batch_id), self.provider._key, "cancelling"
        )
        return self._state(batch)

    async def _lines(self, file_id: str | None) -> AsyncIterator[dict[str, Any]]:
        """The JSON objects of a results file, read line by line off the download
        (``GET /v1/files/{id}/content`` streamed): never held whole."""
        if not file_id:
            return
        key = self.provider._key
        try:
            async with self.client.files.with_streaming_response.content(file_id) as answer:
                async for line in answer.iter_lines():
                    item = json_line(line)
                    if item is None:
                        self.unreadable += 1
                    elif item:
                        yield item
        except ProviderError:
            raise
        except Exception as exc:
            raise sdk_error(exc, key, "reading results") from None

    async def results(
        self, batch_id: str, requests: Mapping[str, Request], order: Sequence[str] = ()
    ) -> AsyncIterator[BatchResult]:
        """The output and error files of an ended batch, each line validated as it is
        read; a batch ``failed`` at validation (no files) answers each request with its
        ``errors``: the lines they name refused for the reason given, the others left out
        (never run: sent again). An error-file line's code is retried only when it is
        one of :data:`_TRANSIENT_LINE_CODES` (expired, cancelled, a server or rate-limit
        error); any other code (a request the batch refused: ``invalid_request``, an
        unknown code) is recorded, not sent again and again."""
        from gradetrail.providers._http import classify_status

        self.unreadable = 0
        batch = await guarded(
            lambda: self.client.batches.retrieve(batch_id), self.provider._key, "polling"
        )
        if batch.status == "failed":
            for result in _failed(batch, requests, order):
                yield result
            return
        for file_id in (batch.output_file_id, batch.error_file_id):
            async for line in self._lines(file_id):
                custom_id = line.get("custom_id")
                request = requests.get(custom_id) if isinstance(custom_id, str) else None
                if request is None:
                    continue
                assert isinstance(custom_id, str)
                answer = line.get("response") if isinstance(line.get("response"), dict) else None
                error = line.get("error") if isinstance(line.get("error"), dict) else None
                if answer is not None and answer.get("status_code") == 200:
                    response, failed = self.parse(request, answer.get("body"))
                    yield BatchResult(custom_id, response, failed)
                elif answer is not None:
                    status = int(answer.get("status_code") or 500)
                    yield BatchResult(
                        custom_id, None, classify_status(status, None, answer.get("body"))
                    )
                else:
                    yield BatchResult(custom_id, None, _line_error(error or {}))


def _line_error(error: Mapping[str, Any]) -> ProviderError:
    """An error-file line's ``error`` (no response): transient for a code of
    :data:`_TRANSIENT_LINE_CODES`, else a permanent :class:`BadRequest`."""
    code = str(error.get("code") or "batch_error")
    message = str(error.get("message") or "no message")
    text = f"batch: {code}: {message}"
    if code in _TRANSIENT_LINE_CODES:
        return ServerError(text, error_type="batch", code=code)
    return BadRequest(
        f"{text} (a code the batch API does not retry: recorded, not sent again)",
        error_type="batch",
        code=code,
    )


def _failed(batch: Any, requests: Mapping[str, Request], order: Sequence[str]) -> list[BatchResult]:
    """The results of a batch ``failed`` before running any request: each request a line
    of ``errors`` names is refused with its message (permanent, or transient for a limit
    that passes); with no line named, every request is (the batch as a whole)."""
    items = list(getattr(batch.errors, "data", None) or [])
    if not items:
        items = [None]
    named: dict[str, ProviderError] = {}
    whole: ProviderError | None = None
    for item in items:
        code = str(getattr(item, "code", None) or "batch_failed")
        message = str(getattr(item, "message", None) or "the batch failed with no reason given")
        line = getattr(item, "line", None)
        where = f"line {line}: " if isinstance(line, int) else ""
        text = f"batch failed at validation: {where}{message} ({code})"
        error: ProviderError = (
            ServerError(text, error_type="batch", code=code)
            if code in _TRANSIENT_FAILURES
            else BadRequest(text, status=400, error_type="batch", code=code)
        )
        if isinstance(line, int) and 1 <= line <= len(order):
            named.setdefault(order[line - 1], error)
        elif whole is None:
            whole = error
    return [
        BatchResult(key, None, named.get(key, whole))
        for key in requests
        if key in named or whole is not None
    ]
