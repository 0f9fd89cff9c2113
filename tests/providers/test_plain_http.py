"""PlainHttpTransport (asyncio's streams and httptools, for plain ``http://`` endpoints) at the byte
level, against a raw socket server scripted per test: the framings and encodings a
server may answer in, keep-alive reuse, a connection closed while idle, and malformed
answers (connection errors, as through aiohttp). Rows through it against the protocol
server are compared with aiohttp's and the SDK's in test_transport.py."""

from __future__ import annotations

import asyncio
import gzip
import zlib
from collections.abc import Awaitable, Callable

import pytest

from gradetrail.errors import InvalidResponse, ProviderConnectionError
from gradetrail.providers import _transport
from gradetrail.providers._plain_http import PlainHttpTransport, plain_http_endpoint

Handler = Callable[[asyncio.StreamReader, asyncio.StreamWriter], Awaitable[None]]


async def read_request(reader: asyncio.StreamReader) -> tuple[str, bytes]:
    """The head (as text) and body of one request."""
    head = (await reader.readuntil(b"\r\n\r\n")).decode()
    length = next(
        int(line.split(":", 1)[1])
        for line in head.split("\r\n")
        if line.lower().startswith("content-length:")
    )
    return head, await reader.readexactly(length)


def run_against(handler: Handler, exchange: Callable[[PlainHttpTransport], Awaitable]):
    """Serve ``handler`` on a free local port; return what ``exchange`` returns."""

    async def main():
        server = await asyncio.start_server(handler, "127.0.0.1", 0)
        port = server.sockets[0].getsockname()[1]
        url = f"http://127.0.0.1:{port}/v1/chat/completions"
        transport = PlainHttpTransport(url, f"http://127.0.0.1:{port}/v1", {"X-Key": "k"}, 2)
        try:
            return await exchange(transport)
        finally:
            await transport.aclose()
            server.close()
            await server.wait_closed()

    return asyncio.run(main())


def answer(*answers: bytes, close: bool = False) -> Handler:
    """A handler answering each request on a connection with the next of ``answers``."""

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        for raw in answers:
            try:
                await read_request(reader)
            except asyncio.IncompleteReadError:
                break
            writer.write(raw)
            await writer.drain()
        if close:
            writer.close()
        else:
            await reader.read()  # until the client closes
            writer.close()

    return handle


def test_content_length_chunked_and_compressed_bodies_read_the_same() -> None:
    body = b'{"ok": true}'
    chunked = (
        b"5\r\n" + body[:5] + b"\r\n" + b"%x\r\n" % (len(body) - 5) + body[5:] + b"\r\n0\r\n\r\n"
    )
    gz, deflated = gzip.compress(body), zlib.compress(body)
    answers = [
        b"HTTP/1.1 200 OK\r\nContent-Length: %d\r\n\r\n%s" % (len(body), body),
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nX-Trace: a\r\n\r\n" + chunked,
        b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\n"
        b"Content-Length: %d\r\n\r\n%s" % (len(gz), gz),
        b"HTTP/1.1 200 OK\r\nContent-Encoding: deflate\r\nContent-Length: %d\r\n\r\n%s"
        % (len(deflated), deflated),
    ]
    connections = 0

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        nonlocal connections
        connections += 1
        await answer(*answers)(reader, writer)

    async def exchange(transport: PlainHttpTransport) -> list:
        return [await transport.send({"n": i}) for i in range(len(answers))]

    got = run_against(handle, exchange)
    assert [a.content for a in got] == [body] * 4
    assert [a.status for a in got] == [200] * 4
    assert got[1].headers["x-trace"] == "a" and got[1].headers.get("X-TRACE") == "a"
    assert connections == 1  # one keep-alive connection carried every request


def test_the_request_carries_the_headers_and_the_json_body() -> None:
    seen: list[tuple[str, bytes]] = []

    async def handle(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        seen.append(await read_request(reader))
        writer.write(b"HTTP/1.1 204 No Content\r\n\r\n")
        await writer.drain()
        writer.close()

    async def exchange(transport: PlainHttpTransport):
        return await transport.send({"prompt": "é"})

    got = run_against(handle, exchange)
    assert got.status == 204 and got.content == b""
    head, body = seen[0]
    assert head.startswith("POST /v1/chat/completions HTTP/1.1\r\n")
    assert "\r\nX-Key: k\r\n" in head and "\r\nContent-Type: application/json\r\n" in head
    assert body == '{"prompt":"é"}'.encode()


def test_a_connection_the_server_closed_while_idle_is_not_reused() -> None:
    ok = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"

    async def exchange(transport: PlainHttpTransport) -> list:
        first = await transport.send({})
        await asyncio.sleep(0.05)  # the server has closed the connection meanwhile
        return [first, await transport.send({})]

    got = run_against(answer(ok, close=True), exchange)
    assert [a.content for a in got] == [b"{}", b"{}"]


def test_an_answer_to_the_end_of_the_connection_and_http_1_0() -> None:
    async def exchange(transport: PlainHttpTransport) -> list:
        return [await transport.send({}), await transport.send({})]

    got = run_against(answer(b'HTTP/1.0 200 OK\r\n\r\n{"a": 1}', close=True), exchange)
    assert [a.content for a in got] == [b'{"a": 1}'] * 2


@pytest.mark.parametrize(
    ("raw", "says"),
    [
        (b"", "ServerDisconnectedError: Server disconnected"),
        (b"HTTP/1.1 200 OK\r\nContent-Length: 10\r\n\r\n{}", "Server disconnected"),
        (b"SMTP ready\r\n\r\n", "InvalidHttpAnswer: not a valid HTTP/1.1 answer"),
        (b"HTTP/1.1 200 OK\r\nX-Pad: " + b"a" * 1_200_000 + b"\r\n", "head is over a megabyte"),
        (
            b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nzz\r\n",
            "InvalidHttpAnswer: not a valid HTTP/1.1 answer",
        ),
        (
            b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc",
            "InvalidHttpAnswer: a gzip body that does not decompress",
        ),
    ],
)
def test_a_broken_answer_is_a_connection_error(raw: bytes, says: str) -> None:
    async def exchange(transport: PlainHttpTransport):
        return await transport.send({})

    with pytest.raises(ProviderConnectionError) as caught:
        run_against(answer(raw, close=True), exchange)
    assert str(caught.value).startswith("cannot reach http://127.0.0.1:")
    assert says in str(caught.value)


def test_a_gzip_bomb_is_cut(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_transport, "MAX_ANSWER_BYTES", 1000)
    monkeypatch.setattr("gradetrail.providers._plain_http.MAX_ANSWER_BYTES", 1000)
    bomb = gzip.compress(b"a" * 100_000)
    raw = b"HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: %d\r\n\r\n%s" % (
        len(bomb),
        bomb,
    )

    async def exchange(transport: PlainHttpTransport):
        return await transport.send({})

    with pytest.raises(InvalidResponse, match="larger than"):
        run_against(answer(raw), exchange)


def test_a_stream_hands_over_its_lines() -> None:
    events = b"data: 1\n\ndata: 2\r\n\r\n"
    raw = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    raw += b"".join(b"%x\r\n%s\r\n" % (len(p), p) for p in (events[:9], events[9:])) + b"0\r\n\r\n"
    lines: list[str] = []

    async def exchange(transport: PlainHttpTransport):
        return await transport.stream({"stream": True}, lines.append)

    got = run_against(answer(raw), exchange)
    assert got.status == 200 and got.content == b""
    assert lines == ["data: 1", "", "data: 2", ""]


def test_plain_http_endpoint(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in ("HTTP_PROXY", "http_proxy", "ALL_PROXY", "all_proxy"):
        monkeypatch.delenv(name, raising=False)
    assert plain_http_endpoint("http://localhost:8000/v1/chat/completions")
    assert not plain_http_endpoint("https://api.openai.com/v1/chat/completions")
    assert not plain_http_endpoint("http://user:pw@localhost:8000/v1")
    monkeypatch.setenv("http_proxy", "http://proxy:3128")
    assert not plain_http_endpoint("http://localhost:8000/v1")
