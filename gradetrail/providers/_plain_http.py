"""HTTP/1.1 over asyncio's own streams, for a plain ``http://`` endpoint (a local vLLM or
llama.cpp server, the test and benchmark protocol server): what ``model.http_client:
auto`` uses there when no proxy is configured, instead of aiohttp.

Importing aiohttp costs about as much CPU as the rest of a run's start-up to its first
request (its two TLS contexts, built at import, load the CA store twice; a plain HTTP
endpoint needs neither). Answers are parsed by `httptools <https://github.com/MagicStack/httptools>`_
(Node.js's llhttp parser, as uvicorn uses it: ``Content-Length``, ``chunked`` or to the
end of the connection, informational answers, keep-alive); h11, pure Python, cost more
CPU a request than the rest of a row. This module writes each request (a fixed head,
its headers checked once, and ``Content-Length``) and adds the sockets (asyncio's
streams), keep-alive connections (at most ``connections``), ``gzip`` and ``deflate``
content encodings, no redirects (as :class:`AioHttpTransport`), a connect timeout, and
the same :class:`~gradetrail.providers._transport.Answer` and connection errors as the
aiohttp transport. TLS and proxies stay aiohttp's
(:func:`plain_http_endpoint` says when this one applies).
"""

from __future__ import annotations

import asyncio
import os
import urllib.parse
import zlib
from collections.abc import AsyncIterator, Callable, Mapping
from typing import Any

import httptools

from gradetrail._util.jsontext import compact_json
from gradetrail._version import __version__
from gradetrail.providers._transport import (
    CONNECT_TIMEOUT_S,
    MAX_ANSWER_BYTES,
    Answer,
    Transport,
    _progress,
    connection_error,
    split_lines,
    too_large,
)

__all__ = [
    "InvalidHttpAnswer",
    "PlainHttpTransport",
    "ServerDisconnectedError",
    "plain_http_endpoint",
]

#: the largest status line and header block read (a longer one is a broken server)
_MAX_HEAD_BYTES = 1024 * 1024
#: bytes read from the socket at a time
_READ_BYTES = 64 * 1024
#: the content encodings decompressed (those asked for in ``Accept-Encoding``)
_COMPRESSED = ("gzip", "x-gzip", "deflate")


class ServerDisconnectedError(ConnectionError):
    """The server closed the connection before its answer was complete (aiohttp's name
    and wording, so an error row reads the same through either client)."""

    def __init__(self, message: str = "Server disconnected") -> None:
        super().__init__(message)


class InvalidHttpAnswer(ConnectionError):
    """The server's answer is not well-formed HTTP/1.1 (a status line, a header, a chunk
    size or a length that does not parse, a head over a megabyte)."""


def plain_http_endpoint(url: str) -> bool:
    """Whether :class:`PlainHttpTransport` can reach ``url``: plain ``http``, an ASCII
    host, no credentials in the URL, and no proxy in the environment (``HTTP_PROXY`` /
    ``ALL_PROXY``, any case: aiohttp's proxy handling then applies)."""
    parts = urllib.parse.urlsplit(url)
    if parts.scheme != "http" or not parts.hostname or not parts.netloc.isascii():
        return False
    if "@" in parts.netloc:  # credentials: aiohttp sends them as Basic auth
        return False
    return not any(name.lower() in ("http_proxy", "all_proxy") for name in os.environ)


class _Headers(dict[str, str]):
    """Response headers, looked up case-insensitively (stored lower-cased; repeated
    headers joined with ``", "``)."""

    def __getitem__(self, key: str) -> str:
        return super().__getitem__(key.lower())

    def get(self, key: str, default: Any = None) -> Any:  # type: ignore[override]
        return super().get(key.lower(), default)

    def __contains__(self, key: object) -> bool:
        return isinstance(key, str) and super().__contains__(key.lower())


class _Answer:
    """httptools' callbacks for one answer on a connection: its status, headers and body
    chunks as they are parsed (an informational ``1xx`` answer is skipped)."""

    __slots__ = (
        "chunks",
        "complete",
        "head_bytes",
        "headers",
        "keep_alive",
        "parser",
        "status",
        "whole_head",
    )

    def __init__(self) -> None:
        self.parser = httptools.HttpResponseParser(self)
        self.head_bytes = 0  # read before the head was whole
        self.status = 0
        self.headers = _Headers()
        self.whole_head = False
        self.chunks: list[bytes] = []
        self.complete = False
        self.keep_alive = False

    def on_message_begin(self) -> None:
        self.status, self.headers, self.whole_head = 0, _Headers(), False

    def on_header(self, name: bytes, value: bytes) -> None:
        key, text = name.decode("latin-1").lower(), value.decode("latin-1")
        headers = self.headers
        headers[key] = f"{dict.get(headers, key)}, {text}" if key in headers else text

    def on_headers_complete(self) -> None:
        self.status = self.parser.get_status_code()
        self.whole_head = not 100 <= self.status < 200

    def on_body(self, body: bytes) -> None:
        self.chunks.append(body)

    def on_message_complete(self) -> None:
        if self.whole_head:
            self.complete = True
            self.keep_alive = self.parser.should_keep_alive()  # llhttp forgets it after


class _Connection:
    """One keep-alive connection: its streams and the answer being read on it."""

    __slots__ = ("answer", "reader", "writer")

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.reader, self.writer = reader, writer
        self.answer = _Answer()

    def usable(self) -> bool:
        """Whether the connection can carry another request (the server has not closed
        it while it was idle)."""
        return not self.writer.is_closing() and not self.reader.at_eof()

    def close(self) -> None:
        self.writer.close()

    async def read(self) -> bool:
        """Read from the socket and parse what came; False at the end of the connection
        (the answer is then over only when it had no declared length).

        Raises:
            InvalidHttpAnswer: what the server sent is not HTTP/1.x (llhttp's reason).
        """
        data = await self.reader.read(_READ_BYTES)
        if not data:
            return False
        answer = self.answer
        if not answer.whole_head:
            answer.head_bytes += len(data)
            if answer.head_bytes > _MAX_HEAD_BYTES + _READ_BYTES:  # a read may hold body too
                raise InvalidHttpAnswer("an answer's head is over a megabyte")
        broken: httptools.HttpParserError | None = None
        try:
            answer.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            broken = httptools.HttpParserError("an upgrade answer to a POST")
        except httptools.HttpParserError as exc:
            broken = exc
        if broken is not None:  # raised here: the error names no cause but its own
            raise InvalidHttpAnswer(f"not a valid HTTP/1.1 answer ({broken})")
        return True


class PlainHttpTransport(Transport):
    """POSTs over keep-alive HTTP/1.1 connections of asyncio streams; see the module
    docstring.

    Args:
        url: the absolute endpoint URL (``http://``; see :func:`plain_http_endpoint`).
        base_url: the endpoint's base, for error messages.
        headers: sent with every request (authentication, API version).
        connections: connections open at most (the run's concurrency); more requests
            wait for one.
    """

    def __init__(
        self, url: str, base_url: str, headers: Mapping[str, str], connections: int
    ) -> None:
        parts = urllib.parse.urlsplit(url)
        self.url, self.base_url = url, base_url
        self.host, self.port = parts.hostname or "", parts.port or 80
        self.target = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
        self.connections = max(1, connections)
        defaults = {
            "Host": parts.netloc,
            "User-Agent": f"gradetrail/{__version__}",
            "Accept-Encoding": "gzip, deflate",
            "Content-Type": "application/json",
            "Accept": "application/json",
        }
        # one value a header name, whatever its case: the given headers win
        merged = {name.lower(): (name, value) for name, value in defaults.items()}
        merged |= {name.lower(): (name, value) for name, value in headers.items()}
        self.headers = dict(merged.values())
        self._idle: list[_Connection] = []
        self._slots: asyncio.Semaphore | None = None  # made on the running loop
        self._heads: dict[str | None, bytes] = {}

    def _head(self, accept: str | None) -> bytes:
        """The request line and headers of a POST, but its ``Content-Length``.

        Raises:
            ValueError: a line break in a header (it would end the head early).
        """
        lines = [f"POST {self.target} HTTP/1.1"]
        for name, value in self.headers.items():
            if accept is not None and name.lower() == "accept":
                value = accept
            if any(c in name or c in value for c in "\r\n\0") or not name:
                raise ValueError(f"a line break in the header {name!r}")
            lines.append(f"{name}: {value}")
        return ("\r\n".join(lines) + "\r\nContent-Length: ").encode("latin-1")

    async def _connection(self) -> _Connection:
        """An idle connection that is still open, else a new one."""
        while self._idle:
            conn = self._idle.pop()
            if conn.usable():
                return conn
            conn.close()
        reader, writer = await asyncio.wait_for(
            asyncio.open_connection(self.host, self.port),
            CONNECT_TIMEOUT_S,
        )
        return _Connection(reader, writer)

    async def _exchange(
        self,
        body: dict[str, Any],
        accept: str | None,
        use: Callable[[int, _Headers, _Body], Any],
    ) -> Answer:
        """Send ``body`` on a connection and hand the status, headers and body (read by
        ``use``) to ``use``; the connection goes back to the pool when the answer was read
        whole and the server keeps it open."""
        payload = compact_json(body).encode()
        if self._slots is None:
            self._slots = asyncio.Semaphore(self.connections)
        async with self._slots:
            try:
                conn = await self._connection()
            except (OSError, TimeoutError) as exc:
                raise connection_error(exc, self.base_url) from None
            reusable = False
            try:
                head = self._heads.get(accept)
                if head is None:
                    head = self._heads[accept] = self._head(accept)
                conn.writer.write(b"%s%d\r\n\r\n%s" % (head, len(payload), payload))
                await conn.writer.drain()
                status, headers = await _read_head(conn)
                answer = await use(status, headers, _Body(conn, headers, status))
                done = conn.answer
                if done.complete and done.keep_alive and not conn.reader.at_eof():
                    reusable = True  # the server keeps it open
                    conn.answer = _Answer()
                return answer
            except OSError as exc:  # InvalidHttpAnswer and ServerDisconnectedError included
                raise connection_error(exc, self.base_url) from None
            finally:
                if reusable:
                    self._idle.append(conn)
                else:
                    conn.close()

    async def send(self, body: dict[str, Any]) -> Answer:
        """See :meth:`Transport.send`."""

        async def whole(status: int, headers: _Headers, body: _Body) -> Answer:
            return Answer(status, headers, await body.whole())

        return await self._exchange(body, None, whole)

    async def stream(self, body: dict[str, Any], on_line: Callable[[str], None]) -> Answer:
        """See :meth:`Transport.stream`."""

        async def lines(status: int, headers: _Headers, body: _Body) -> Answer:
            chunks = body.decoded()
            if status >= 400:
                return Answer(status, headers, b"".join([c async for c in chunks]))
            _progress()
            pending = b""  # a line's start (lines may be longer than any read)
            async for chunk in chunks:
                _progress()
                complete, pending = split_lines(pending + chunk)
                for raw in complete:
                    on_line(raw.decode("utf-8", "replace"))
            if pending:
                on_line(pending.rstrip(b"\r").decode("utf-8", "replace"))
            return Answer(status, headers, b"")

        return await self._exchange(body, "text/event-stream", lines)

    async def aclose(self) -> None:
        """Close the idle connections (one in use closes when its request ends)."""
        idle, self._idle = self._idle, []
        self._slots = None  # a later run may use another event loop
        for conn in idle:
            conn.close()


async def _read_head(conn: _Connection) -> tuple[int, _Headers]:
    """The status and headers of the answer (informational ``1xx`` answers skipped).

    Raises:
        ServerDisconnectedError: the connection closed before the head was complete.
        InvalidHttpAnswer: the head is not HTTP/1.x.
    """
    answer = conn.answer
    while not answer.whole_head:
        if not await conn.read():
            raise ServerDisconnectedError()
    return answer.status, answer.headers


class _Body:
    """An answer's body as llhttp hands it over (de-chunked, to its declared end), then
    decompressed."""

    def __init__(self, conn: _Connection, headers: _Headers, status: int) -> None:
        self.conn, self.headers, self.status = conn, headers, status

    def _encoding(self) -> str:
        """The body's content encoding, lower-cased (empty for none)."""
        return self.headers.get("content-encoding", "").strip().lower()

    def _check_length(self) -> None:
        """Refuse at once an uncompressed body whose declared length is too large.

        Raises:
            ProviderError: :func:`too_large`.
        """
        length = self.headers.get("content-length")
        if (
            length is not None
            and length.isdigit()
            and int(length) > MAX_ANSWER_BYTES
            and "content-encoding" not in self.headers
        ):
            raise too_large(self.status)

    async def _more(self) -> list[bytes] | None:
        """The body chunks parsed since the last call (reading the socket until there is
        one), or None at the body's end.

        Raises:
            ServerDisconnectedError: the connection ended before the body's declared end.
            InvalidHttpAnswer: see :meth:`_Connection.read`.
        """
        answer = self.conn.answer
        while True:
            if answer.chunks:
                chunks, answer.chunks = answer.chunks, []
                return chunks
            if answer.complete:
                return None
            if not await self.conn.read():  # the end of the connection
                if "content-length" not in self.headers and "chunked" not in self.headers.get(
                    "transfer-encoding", ""
                ):
                    answer.complete = True  # a body to the end of the connection: whole
                    continue
                raise ServerDisconnectedError()

    async def _raw(self) -> AsyncIterator[bytes]:
        self._check_length()
        while (chunks := await self._more()) is not None:
            for chunk in chunks:
                yield chunk

    async def whole(self) -> bytes:
        """The whole body, decompressed; an uncompressed one read without the generators
        of :meth:`decoded` (most answers: a chunk or two).

        Raises:
            ProviderError: over :data:`MAX_ANSWER_BYTES` (:func:`too_large`).
            ServerDisconnectedError, InvalidHttpAnswer: see :meth:`_more`.
        """
        parts: list[bytes] = []
        size = 0

        def keep(chunks: list[bytes]) -> None:
            nonlocal size
            for chunk in chunks:
                size += len(chunk)
                if size > MAX_ANSWER_BYTES:
                    raise too_large(self.status)
                parts.append(chunk)

        if self._encoding() in _COMPRESSED:
            keep([chunk async for chunk in self.decoded()])  # decoded() stops past the bound
        else:
            self._check_length()
            while (chunks := await self._more()) is not None:
                keep(chunks)
        return b"".join(parts)

    async def decoded(self) -> AsyncIterator[bytes]:
        """The body's bytes, decompressed (``gzip``, ``deflate``) as they come; never
        more than one byte past :data:`MAX_ANSWER_BYTES` (a gzip bomb is cut)."""
        encoding = self._encoding()
        if encoding not in _COMPRESSED:  # identity (or one not asked for)
            async for chunk in self._raw():
                yield chunk
            return
        wbits = 16 + zlib.MAX_WBITS if encoding != "deflate" else zlib.MAX_WBITS
        inflate = zlib.decompressobj(wbits)
        room = MAX_ANSWER_BYTES + 1
        broken: zlib.error | None = None
        try:
            async for chunk in self._raw():
                data = inflate.decompress(chunk, room)
                room -= len(data)
                if room <= 0:
                    raise too_large(self.status)
                if data:
                    yield data
            data = inflate.flush()
        except zlib.error as exc:
            broken = exc
        if broken is not None:  # raised here: the error names no cause but its own
            raise InvalidHttpAnswer(f"a {encoding} body that does not decompress: {broken}")
        if data:
            yield data
