"""The protocol server's batch APIs: OpenAI ``/v1/files`` + ``/v1/batches`` and Anthropic
``/v1/messages/batches``, in the shapes the real APIs document, for the real SDKs.

Each request of a batch is answered by the server's own inference path (the GSM8K
answers, scripts and fault rules of :mod:`protocol_server`), so a fault rule that targets
one prompt makes that one request of the batch fail, as a per-request error.

A batch's life is counted in retrieves, not seconds (tests run on the injected clock):
it stays ``in_progress`` for ``polls`` retrieves (default 1; control key ``polls``),
then ends: every request answered at that moment. ``expire_after: K`` makes a batch end
``expired`` after answering only its first K requests (the others: OpenAI error code
``batch_expired`` in the error file, Anthropic result type ``expired``). A cancel ends
the batch at once: unanswered requests are cancelled (OpenAI ``cancelled`` status with a
partial output; Anthropic ``canceled`` results).

Control: ``GET /_control/batches`` -> ``{"created": batches created, "requests":
requests received in batches, "custom_ids": {custom_id: times submitted}, "repeated":
custom_ids submitted more than once, "files": files uploaded, "retrieves": n}``;
``POST /_control/batches`` with ``{"polls": N, "expire_after": K|null, "hang": "upload" |
"create" | "results" | null, "mangle": [...], "fail": MESSAGE | null, "poll_429": N,
"results_500": N, "expire_files": true, "reset": true}``
(``"create:anthropic"``: that API's only). ``mangle`` damages the results files written
from then on (OpenAI output/error files, Anthropic results): ``reverse`` the lines,
``duplicate`` each, add an ``unknown`` custom_id's line, drop the last (``missing``),
``truncate`` the last in half, ``garbage`` (an HTML page, not JSONL), or ``odd_code``
(the first line an error no documentation lists: OpenAI error code ``odd_line_code``,
Anthropic error type ``odd_error``; with ``result_type`` too, an Anthropic result of type
``odd``). ``fail`` makes the
next OpenAI batch created end ``failed`` at validation, no files, its ``errors`` naming
line 1 with MESSAGE. ``poll_429: N`` answers the next N retrieves 429 with
``retry-after: 7``; ``results_500: N`` the next N results downloads 500. ``expire_files:
true`` answers every file download 404 (results the API expired) until set false. ``hang`` makes
that step never answer (after it took effect: the file is stored, the batch created),
until the client goes away: the moment a ``kill -9`` test kills the client in.
"""

from __future__ import annotations

import itertools
import json
import time
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

__all__ = ["BatchAPIs"]


def _odd(line: bytes, result_type: bool) -> bytes:
    """``line`` turned into a per-line error no documentation lists: an OpenAI error-file
    line with code ``odd_line_code`` and no response; an Anthropic ``errored`` result of
    error type ``odd_error``, or with ``result_type``, a result of type ``odd``."""
    item = json.loads(line)
    if "result" in item:
        error = {"type": "error", "error": {"type": "odd_error", "message": "Odd failure."}}
        odd = {"type": "odd"} if result_type else {"type": "errored", "error": error}
        item["result"] = odd
    else:
        item["response"] = None
        item["error"] = {"code": "odd_line_code", "message": "An odd failure."}
    return json.dumps(item).encode() + b"\n"


OPENAI = "openai"
ANTHROPIC = "anthropic"
#: the batch's endpoint the OpenAI API accepts here
CHAT_PATH = "/v1/chat/completions"


@dataclass
class _Batch:
    id: str
    protocol: str
    lines: list[tuple[str, dict[str, Any]]]
    headers: list[tuple[bytes, bytes]]
    created_at: int
    polls_left: int
    expire_after: int | None
    fail: str | None = None
    input_file_id: str | None = None
    metadata: dict[str, str] = field(default_factory=dict)
    status: str = "in_progress"
    #: custom_id -> (HTTP status, body) of the requests answered
    answers: dict[str, tuple[int, Any]] = field(default_factory=dict)
    output_file_id: str | None = None
    error_file_id: str | None = None
    ended_at: int | None = None
    cancelled: bool = False


class BatchAPIs:
    """The batch endpoints of one :class:`protocol_server.ProtocolServer`."""

    def __init__(self, server: Any) -> None:
        self.server = server
        self.reset()

    def reset(self) -> None:
        """Forget every batch, file and counter; back to one poll in progress."""
        self.batches: dict[str, _Batch] = {}
        self.files: dict[str, bytes] = {}
        self.custom_ids: dict[str, int] = {}
        self.polls = 1
        self.expire_after: int | None = None
        self.hang: str | None = None
        self.mangle: list[str] = []
        self.fail: str | None = None
        self.poll_429 = 0
        self.results_500 = 0
        self.expire_files = False
        self.retrieves = 0
        self.uploads = 0
        self._ids = itertools.count(1)

    def routes(self) -> list[Any]:
        """The Starlette routes."""
        from starlette.routing import Route

        return [
            Route("/v1/files", self.upload, methods=["POST"]),
            Route("/v1/files/{file_id}/content", self.file_content, methods=["GET"]),
            Route("/v1/batches", self.openai_create, methods=["POST"]),
            Route("/v1/batches", self.openai_list, methods=["GET"]),
            Route("/v1/batches/{batch_id}", self.openai_retrieve, methods=["GET"]),
            Route("/v1/batches/{batch_id}/cancel", self.openai_cancel, methods=["POST"]),
            Route("/v1/messages/batches", self.anthropic_create, methods=["POST"]),
            Route("/v1/messages/batches", self.anthropic_list, methods=["GET"]),
            Route("/v1/messages/batches/{batch_id}", self.anthropic_retrieve, methods=["GET"]),
            Route(
                "/v1/messages/batches/{batch_id}/cancel", self.anthropic_cancel, methods=["POST"]
            ),
            Route(
                "/v1/messages/batches/{batch_id}/results",
                self.anthropic_results,
                methods=["GET"],
            ),
            Route("/_control/batches", self.control, methods=["GET", "POST"]),
        ]

    # -- shared --------------------------------------------------------------------------

    def _next(self, prefix: str) -> str:
        return f"{prefix}{next(self._ids):08d}gt"

    def _json(self, body: Any, status: int = 200) -> Response:
        from starlette.responses import Response

        return Response(json.dumps(body), status, media_type="application/json")

    def _not_found(self, protocol: str, what: str) -> Response:
        return self.server._error(protocol, 404, _not_found_type(protocol), f"{what} not found")

    async def _hang(self, request: Request, step: str, protocol: str) -> None:
        """Never answer ``step`` (when told to: ``hang`` is the step, or ``STEP:PROTOCOL``
        for one API's only) until the client goes away."""
        import asyncio

        steps = (step, f"{step}:{protocol}")
        while self.hang in steps and not await request.is_disconnected():
            await asyncio.sleep(0.05)

    def _throttled(self, protocol: str) -> Response:
        """A 429 with ``retry-after: 7`` (one of the ``poll_429`` retrieves refused)."""
        self.poll_429 -= 1
        self.retrieves += 1
        etype = "rate_limit_error" if protocol == ANTHROPIC else "rate_limit_exceeded"
        msg = "Too many requests"
        return self.server._error(protocol, 429, etype, msg, headers={"retry-after": "7"})

    def _count(self, lines: list[tuple[str, dict[str, Any]]]) -> None:
        for custom_id, _ in lines:
            self.custom_ids[custom_id] = self.custom_ids.get(custom_id, 0) + 1

    async def _advance(self, batch: _Batch) -> None:
        """One retrieve of ``batch``: in progress until its polls are spent, then ended."""
        self.retrieves += 1
        if batch.status != "in_progress":
            return
        if batch.polls_left > 0:
            batch.polls_left -= 1
            return
        if batch.fail is not None:
            batch.status = "failed"
            batch.ended_at = int(time.time())
            return
        todo = batch.lines
        if batch.expire_after is not None:
            todo = todo[: batch.expire_after]
        for custom_id, body in todo:
            batch.answers[custom_id] = await self._answer(batch, body)
        expired = len(todo) < len(batch.lines)
        self._end(batch, "expired" if expired else "completed")

    def _end(self, batch: _Batch, status: str) -> None:
        batch.status = status
        batch.ended_at = int(time.time())
        if batch.protocol == OPENAI:
            out, err = [], []
            for n, (custom_id, _) in enumerate(batch.lines):
                line: dict[str, Any] = {"id": f"batch_req_{batch.id}_{n}", "custom_id": custom_id}
                answer = batch.answers.get(custom_id)
                if answer is None:
                    code = "batch_expired" if status == "expired" else "batch_cancelled"
                    what = "expired" if status == "expired" else "cancelled"
                    line |= {
                        "response": None,
                        "error": {"code": code, "message": f"This request {what}."},
                    }
                    err.append(line)
                    continue
                code, body = answer
                line |= {
                    "response": {"status_code": code, "request_id": f"req_{n}", "body": body},
                    "error": None,
                }
                (out if code == 200 else err).append(line)
            if out:
                batch.output_file_id = self._store_file(out)
            if err:
                batch.error_file_id = self._store_file(err)

    def _store_file(self, lines: list[dict[str, Any]]) -> str:
        file_id = self._next("file-out")
        self.files[file_id] = self._mangled([json.dumps(x).encode() + b"\n" for x in lines])
        return file_id

    def _mangled(self, lines: list[bytes]) -> bytes:
        """A results file as told by ``mangle`` (see the module docstring)."""
        if "reverse" in self.mangle:
            lines = lines[::-1]
        if "duplicate" in self.mangle:
            lines = [x for line in lines for x in (line, line)]
        if "unknown" in self.mangle:
            lines = [
                b'{"custom_id": "' + b"f" * 64 + b'", "result": {"type": "expired"}, '
                b'"response": null, "error": {"code": "batch_expired"}}\n',
                *lines,
            ]
        if "odd_code" in self.mangle and lines:
            lines[0] = _odd(lines[0], "result_type" in self.mangle)
        if "missing" in self.mangle:
            lines = lines[:-1]
        if "truncate" in self.mangle and lines:
            lines[-1] = lines[-1][: len(lines[-1]) // 2]
        data = b"".join(lines)
        if "garbage" in self.mangle:
            data = b"<html><body>502 Bad Gateway</body></html>\n"
        return data

    async def _answer(self, batch: _Batch, body: dict[str, Any]) -> tuple[int, Any]:
        """The server's own answer to one request of ``batch``: (status, decoded body)."""
        from starlette.requests import Request

        raw = json.dumps(body).encode()
        path = CHAT_PATH if batch.protocol == OPENAI else "/v1/messages"
        scope = {
            "type": "http",
            "method": "POST",
            "path": path,
            "headers": batch.headers,
            "query_string": b"",
        }
        sent = False

        async def receive() -> dict[str, Any]:
            nonlocal sent
            if sent:
                return {"type": "http.disconnect"}
            sent = True
            return {"type": "http.request", "body": raw, "more_body": False}

        response = await self.server._inference(Request(scope, receive), batch.protocol)
        status = response.status_code
        if status == 499 or not response.body:  # dropped or held: the server's own failure
            return 500, {"error": {"type": "server_error", "message": "request failed"}}
        return status, json.loads(bytes(response.body))

    # -- OpenAI: files -------------------------------------------------------------------

    async def upload(self, request: Request) -> Response:
        """``POST /v1/files`` (multipart: ``file`` and ``purpose``)."""
        boundary = request.headers.get("content-type", "").partition("boundary=")[2]
        parts = _multipart(await request.body(), boundary.strip('"'))
        content = parts.get("file")
        if content is None or parts.get("purpose") != b"batch":
            return self.server._error(
                OPENAI, 400, "invalid_request_error", "file and purpose=batch are required"
            )
        file_id = self._next("file-")
        self.files[file_id] = content
        self.uploads += 1
        await self._hang(request, "upload", OPENAI)
        return self._json(
            {
                "id": file_id,
                "object": "file",
                "bytes": len(content),
                "created_at": int(time.time()),
                "filename": "batch.jsonl",
                "purpose": "batch",
                "status": "processed",
                "status_details": None,
            }
        )

    async def file_content(self, request: Request) -> Response:
        """``GET /v1/files/{id}/content``."""
        from starlette.responses import Response

        content = self.files.get(request.path_params["file_id"])
        if content is None or self.expire_files:
            return self._not_found(OPENAI, "file")
        if self.results_500 > 0:
            self.results_500 -= 1
            return self.server._error(OPENAI, 500, "server_error", "The server had an error")
        await self._hang(request, "results", OPENAI)
        return Response(content, media_type="application/octet-stream")

    # -- OpenAI: batches -----------------------------------------------------------------

    def _openai_object(self, batch: _Batch) -> dict[str, Any]:
        answered = [code for code, _ in batch.answers.values()]
        ended = batch.status != "in_progress"
        failed = len(batch.lines) - answered.count(200) if ended else 0
        return {
            "id": batch.id,
            "object": "batch",
            "endpoint": CHAT_PATH,
            "errors": None
            if batch.fail is None or batch.status != "failed"
            else {
                "object": "list",
                "data": [
                    {"code": "invalid_request", "message": batch.fail, "param": "body", "line": 1}
                ],
            },
            "input_file_id": batch.input_file_id,
            "completion_window": "24h",
            "status": batch.status,
            "output_file_id": batch.output_file_id,
            "error_file_id": batch.error_file_id,
            "created_at": batch.created_at,
            "in_progress_at": batch.created_at,
            "expires_at": batch.created_at + 86400,
            "completed_at": batch.ended_at if batch.status == "completed" else None,
            "expired_at": batch.ended_at if batch.status == "expired" else None,
            "cancelled_at": batch.ended_at if batch.status == "cancelled" else None,
            "failed_at": batch.ended_at if batch.status == "failed" else None,
            "finalizing_at": None,
            "cancelling_at": None,
            "request_counts": {
                "total": len(batch.lines),
                "completed": answered.count(200),
                "failed": failed,
            },
            "metadata": batch.metadata,
        }

    async def openai_create(self, request: Request) -> Response:
        """``POST /v1/batches``: the input file's lines become the batch's requests."""
        body = json.loads(await request.body())
        content = self.files.get(body.get("input_file_id", ""))
        if content is None:
            return self._not_found(OPENAI, "input file")
        if body.get("endpoint") != CHAT_PATH or body.get("completion_window") != "24h":
            msg = f"endpoint must be {CHAT_PATH} and completion_window 24h"
            return self.server._error(OPENAI, 400, "invalid_request_error", msg)
        lines: list[tuple[str, dict[str, Any]]] = []
        seen: set[str] = set()
        for number, text in enumerate(content.splitlines(), start=1):
            if not text.strip():
                continue
            item = json.loads(text)
            custom_id = item.get("custom_id")
            if item.get("url") != CHAT_PATH or item.get("method") != "POST" or not custom_id:
                msg = f"line {number}: needs custom_id, method POST and url {CHAT_PATH}"
                return self.server._error(OPENAI, 400, "invalid_request_error", msg)
            if custom_id in seen:
                msg = f"line {number}: duplicate custom_id {custom_id}"
                return self.server._error(OPENAI, 400, "invalid_request_error", msg)
            seen.add(custom_id)
            lines.append((custom_id, item["body"]))
        batch = self._new(OPENAI, lines, request)
        batch.input_file_id = body["input_file_id"]
        batch.metadata = dict(body.get("metadata") or {})
        await self._hang(request, "create", OPENAI)
        return self._json(self._openai_object(batch))

    def _new(self, protocol: str, lines: list[tuple[str, Any]], request: Request) -> _Batch:
        prefix = "batch_" if protocol == OPENAI else "msgbatch_"
        batch = _Batch(
            id=self._next(prefix),
            protocol=protocol,
            lines=lines,
            headers=list(request.scope["headers"]),
            created_at=int(time.time()),
            polls_left=self.polls,
            expire_after=self.expire_after,
            fail=self.fail if protocol == OPENAI else None,
        )
        if protocol == OPENAI:
            self.fail = None  # one batch fails
        self.batches[batch.id] = batch
        self._count(lines)
        return batch

    def _find(self, request: Request, protocol: str) -> _Batch | None:
        batch = self.batches.get(request.path_params["batch_id"])
        return batch if batch is not None and batch.protocol == protocol else None

    async def openai_retrieve(self, request: Request) -> Response:
        """``GET /v1/batches/{id}``."""
        batch = self._find(request, OPENAI)
        if batch is None:
            return self._not_found(OPENAI, "batch")
        if self.poll_429 > 0:
            return self._throttled(OPENAI)
        await self._advance(batch)
        return self._json(self._openai_object(batch))

    async def openai_cancel(self, request: Request) -> Response:
        """``POST /v1/batches/{id}/cancel``: ends at once as ``cancelled``."""
        batch = self._find(request, OPENAI)
        if batch is None:
            return self._not_found(OPENAI, "batch")
        if batch.status == "in_progress":
            self._end(batch, "cancelled")
        return self._json(self._openai_object(batch))

    async def openai_list(self, request: Request) -> Response:
        """``GET /v1/batches`` (newest first, ``after`` and ``limit``)."""
        return self._json(
            _page(
                [self._openai_object(b) for b in self._listed(OPENAI)],
                request,
                {"object": "list"},
            )
        )

    def _listed(self, protocol: str) -> list[_Batch]:
        return [b for b in reversed(self.batches.values()) if b.protocol == protocol]

    # -- Anthropic -----------------------------------------------------------------------

    def _anthropic_object(self, batch: _Batch, base: str) -> dict[str, Any]:
        ended = batch.status != "in_progress"
        counts = {"processing": 0, "succeeded": 0, "errored": 0, "canceled": 0, "expired": 0}
        for custom_id, _ in batch.lines:
            answer = batch.answers.get(custom_id)
            if not ended:
                counts["processing"] += 1
            elif answer is None:
                counts["expired" if batch.status == "expired" else "canceled"] += 1
            else:
                counts["succeeded" if answer[0] == 200 else "errored"] += 1
        stamp = _iso(batch.created_at)
        return {
            "id": batch.id,
            "type": "message_batch",
            "processing_status": "ended" if ended else "in_progress",
            "request_counts": counts,
            "ended_at": _iso(batch.ended_at) if batch.ended_at else None,
            "created_at": stamp,
            "expires_at": _iso(batch.created_at + 86400),
            "archived_at": None,
            "cancel_initiated_at": _iso(batch.ended_at) if batch.cancelled else None,
            "results_url": f"{base}/v1/messages/batches/{batch.id}/results" if ended else None,
        }

    def _base(self, request: Request) -> str:
        return str(request.base_url).rstrip("/")

    async def anthropic_create(self, request: Request) -> Response:
        """``POST /v1/messages/batches``."""
        body = json.loads(await request.body())
        requests = body.get("requests")
        if not isinstance(requests, list) or not requests:
            msg = "requests: a non-empty list is required"
            return self.server._error(ANTHROPIC, 400, "invalid_request_error", msg)
        lines: list[tuple[str, dict[str, Any]]] = []
        seen: set[str] = set()
        for n, item in enumerate(requests):
            custom_id = item.get("custom_id") if isinstance(item, dict) else None
            if not isinstance(custom_id, str) or not 1 <= len(custom_id) <= 64:
                msg = f"requests.{n}.custom_id: 1 to 64 characters are required"
                return self.server._error(ANTHROPIC, 400, "invalid_request_error", msg)
            if custom_id in seen:
                msg = f"requests.{n}.custom_id: duplicate {custom_id}"
                return self.server._error(ANTHROPIC, 400, "invalid_request_error", msg)
            seen.add(custom_id)
            lines.append((custom_id, item.get("params") or {}))
        batch = self._new(ANTHROPIC, lines, request)
        await self._hang(request, "create", ANTHROPIC)
        return self._json(self._anthropic_object(batch, self._base(request)))

    async def anthropic_retrieve(self, request: Request) -> Response:
        """``GET /v1/messages/batches/{id}``."""
        batch = self._find(request, ANTHROPIC)
        if batch is None:
            return self._not_found(ANTHROPIC, "batch")
        if self.poll_429 > 0:
            return self._throttled(ANTHROPIC)
        await self._advance(batch)
        return self._json(self._anthropic_object(batch, self._base(request)))

    async def anthropic_cancel(self, request: Request) -> Response:
        """``POST /v1/messages/batches/{id}/cancel``: ends at once, unanswered canceled."""
        batch = self._find(request, ANTHROPIC)
        if batch is None:
            return self._not_found(ANTHROPIC, "batch")
        if batch.status == "in_progress":
            batch.cancelled = True
            self._end(batch, "cancelled")
        return self._json(self._anthropic_object(batch, self._base(request)))

    async def anthropic_list(self, request: Request) -> Response:
        """``GET /v1/messages/batches`` (newest first)."""
        base = self._base(request)
        items = [self._anthropic_object(b, base) for b in self._listed(ANTHROPIC)]
        return self._json(_page(items, request, {}))

    async def anthropic_results(self, request: Request) -> Response:
        """``GET /v1/messages/batches/{id}/results`` (JSONL, once ended)."""
        from starlette.responses import Response

        batch = self._find(request, ANTHROPIC)
        if batch is None:
            return self._not_found(ANTHROPIC, "batch")
        if batch.status == "in_progress":
            msg = "results are not available until the batch has ended"
            return self.server._error(ANTHROPIC, 404, "not_found_error", msg)
        if self.results_500 > 0:
            self.results_500 -= 1
            return self.server._error(ANTHROPIC, 500, "api_error", "Internal server error")
        await self._hang(request, "results", ANTHROPIC)
        out = []
        for custom_id, _ in batch.lines:
            answer = batch.answers.get(custom_id)
            result: dict[str, Any]
            if answer is None:
                result = {"type": "expired" if batch.status == "expired" else "canceled"}
            elif answer[0] == 200:
                result = {"type": "succeeded", "message": answer[1]}
            else:
                result = {"type": "errored", "error": answer[1]}
            out.append(json.dumps({"custom_id": custom_id, "result": result}).encode() + b"\n")
        return Response(self._mangled(out), media_type="application/binary")

    # -- control -------------------------------------------------------------------------

    async def control(self, request: Request) -> Response:
        """``GET``/``POST /_control/batches`` (see the module docstring)."""
        if request.method == "POST":
            update = json.loads(await request.body() or b"{}")
            if update.pop("reset", False):
                self.reset()
            unknown = set(update) - {
                "polls",
                "expire_after",
                "hang",
                "mangle",
                "fail",
                "poll_429",
                "results_500",
                "expire_files",
            }
            if unknown:
                return self._json({"error": f"unknown keys {sorted(unknown)}"}, 400)
            if "polls" in update:  # batches in progress too: at most this many more
                self.polls = int(update["polls"])
                for batch in self.batches.values():
                    batch.polls_left = min(batch.polls_left, self.polls)
            if "expire_after" in update:
                self.expire_after = update["expire_after"]
            if "hang" in update:
                self.hang = update["hang"]
            if "mangle" in update:
                self.mangle = list(update["mangle"] or [])
            if "fail" in update:
                self.fail = update["fail"]
            if "poll_429" in update:
                self.poll_429 = int(update["poll_429"])
            if "results_500" in update:
                self.results_500 = int(update["results_500"])
            if "expire_files" in update:  # every file gone, as the API expires them
                self.expire_files = bool(update["expire_files"])
        return self._json(
            {
                "created": len(self.batches),
                "requests": sum(len(b.lines) for b in self.batches.values()),
                "custom_ids": self.custom_ids,
                "repeated": sum(1 for n in self.custom_ids.values() if n > 1),
                "files": self.uploads,
                "retrieves": self.retrieves,
                "states": {b.id: b.status for b in self.batches.values()},
            }
        )


def _not_found_type(protocol: str) -> str:
    return "not_found_error" if protocol == ANTHROPIC else "invalid_request_error"


def _iso(stamp: int) -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(stamp))


def _page(items: list[dict[str, Any]], request: Request, extra: dict[str, Any]) -> dict[str, Any]:
    """One page of a newest-first list: ``after_id``/``after`` and ``limit`` honoured."""
    after = request.query_params.get("after_id") or request.query_params.get("after")
    limit = int(request.query_params.get("limit") or 20)
    if after:
        ids = [x["id"] for x in items]
        items = items[ids.index(after) + 1 :] if after in ids else []
    page = items[:limit]
    return {
        **extra,
        "data": page,
        "first_id": page[0]["id"] if page else None,
        "last_id": page[-1]["id"] if page else None,
        "has_more": len(items) > limit,
    }


def _multipart(body: bytes, boundary: str) -> dict[str, bytes]:
    """The named parts of a ``multipart/form-data`` body."""
    parts: dict[str, bytes] = {}
    for chunk in body.split(b"--" + boundary.encode()):
        head, sep, content = chunk.partition(b"\r\n\r\n")
        if not sep:
            continue
        name = head.partition(b'name="')[2].partition(b'"')[0].decode()
        parts[name] = content.removesuffix(b"\r\n")
    return parts
