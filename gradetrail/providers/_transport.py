"""How an HTTP provider's request body reaches the server and its answer comes back: a
:class:`Transport` sends one JSON body and returns the raw :class:`Answer` (status,
headers, bytes), whatever the status. Everything else (the body, decoding, error
classification, Retry-After, normalizing) is the provider's, in one place for every
transport, so both give identical rows.

Three transports:

- :class:`AioHttpTransport` (``model.http_client: aiohttp``, the default when
  ``aiohttp`` is installed, as every provider extra installs it): one ``aiohttp``
  session POSTing the JSON body with the protocol's documented headers. It costs about
  0.1 ms of CPU a request, against 0.4 ms through the SDK's own ``client.post`` and
  0.8 ms through ``client.chat.completions.create``, and needs no SDK import at all
  (``openai`` takes 0.35 s to import, ``anthropic`` 0.8 s): that is what keeps 64
  requests of 100 ms in flight on one core, and start-up under half a second.
- :class:`SdkTransport` (``model.http_client: sdk``, and the fallback without
  ``aiohttp``): the official SDK's documented ``client.post(path, body=...,
  cast_to=<http response>)``, built with ``max_retries=0``. A 4xx/5xx the SDK raises
  is handed back as the same :class:`Answer` the lean transport would return.
- :class:`~gradetrail.providers._plain_http.PlainHttpTransport` (``auto``, for a plain
  ``http://`` endpoint without a proxy): HTTP/1.1 over asyncio's streams, answers
  parsed by httptools (llhttp): aiohttp is not imported.

Connection failures (refused, dropped, timed out connecting) raise the same
:class:`~gradetrail.errors.ProviderConnectionError` / ``ProviderTimeout`` from both, named
by the endpoint and the innermost cause (:func:`connection_error`).
"""

from __future__ import annotations

import importlib
import importlib.util
import math
import os
import re
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

from gradetrail._util.jsontext import compact_json
from gradetrail.errors import (
    InvalidResponse,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    SpecError,
)

__all__ = [
    "MAX_ANSWER_BYTES",
    "CONNECTIONS_PER_CLIENT",
    "CONNECT_TIMEOUT_S",
    "AioHttpTransport",
    "Answer",
    "ClientPool",
    "SdkTransport",
    "Transport",
    "connection_error",
    "http_module",
    "innermost",
    "sdk_env_headers",
    "split_lines",
]

#: a line end in a server-sent event stream: CRLF, LF or a lone CR (the SSE format allows
#: all three; the SDKs' HTTPX reads all three)
_LINE_END = re.compile(rb"\r\n|\r|\n")


def split_lines(buffer: bytes) -> tuple[list[bytes], bytes]:
    """The complete lines of ``buffer`` (what was pending before plus a new chunk), line
    ends removed, and what is left pending: ends are CRLF, LF or a lone CR, as the SSE
    format allows and the SDKs read them; a CR that ends ``buffer`` stays pending (an LF
    may follow in the next chunk). At the stream's end the pending rest, its CR removed,
    is the last line."""
    if b"\r" not in buffer:  # the common case, LF only: at bytes.split's speed
        *lines, rest = buffer.split(b"\n")
        return lines, rest
    held = buffer.endswith(b"\r")
    *lines, rest = _LINE_END.split(buffer[:-1] if held else buffer)
    return lines, rest + b"\r" if held else rest


#: connections per HTTPX SDK client; a run with concurrency C uses ceil(C / 8) clients
CONNECTIONS_PER_CLIENT = 8
#: seconds to open a TCP (and TLS) connection before it counts as a connection error
CONNECT_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class Answer:
    """One HTTP answer, undecoded.

    Attributes:
        status: the HTTP status code.
        headers: the response headers (a case-insensitive mapping).
        content: the body's bytes (decompressed).
    """

    status: int
    headers: Mapping[str, str]
    content: bytes


class Transport(ABC):
    """Sends one JSON body to one URL; see the module docstring."""

    @abstractmethod
    async def send(self, body: dict[str, Any]) -> Answer:
        """POST ``body`` as JSON and return the answer, whatever its status.

        Raises:
            ProviderConnectionError, ProviderTimeout: no answer (refused, dropped, a
                connect timeout), naming the endpoint and the cause.
        """

    @abstractmethod
    async def stream(self, body: dict[str, Any], on_line: Callable[[str], None]) -> Answer:
        """POST ``body`` (``stream: true``) and hand each line of a streamed answer to
        ``on_line`` (decoded, line end removed) as it arrives, calling
        :func:`gradetrail._util.progress.attempt_progress` for each, so the attempt's timeout
        counts from the last byte received. Returns the answer with an empty body for a
        stream, or the whole body of an error answer (status 400 or more).

        Raises:
            ProviderConnectionError, ProviderTimeout: no answer, or the connection broke
                mid-stream.
        """

    @abstractmethod
    async def aclose(self) -> None:
        """Close the connections."""


def _progress() -> None:
    from gradetrail._util.progress import attempt_progress

    attempt_progress()


def innermost(exc: BaseException) -> BaseException:
    """The last exception in ``exc``'s chain of causes (or contexts)."""
    inner, seen = exc, {id(exc)}
    while True:
        nxt = inner.__cause__ or inner.__context__
        if nxt is None or id(nxt) in seen:
            return inner
        seen.add(id(nxt))
        inner = nxt


#: the largest answer body read, bytes once decompressed (a gzip bomb is cut here too); a
#: larger one is a permanent InvalidResponse, never cached
MAX_ANSWER_BYTES = 64 * 1024 * 1024


def too_large(status: int) -> InvalidResponse:
    """The error for an answer over :data:`MAX_ANSWER_BYTES`."""
    return InvalidResponse(
        f"{status} answer is larger than {MAX_ANSWER_BYTES // (1024 * 1024)} MB once "
        "decompressed; it is not read further or cached",
        status=status,
        transient=False,
        error_type="answer_too_large",
    )


def cause_text(exc: BaseException) -> str:
    """``"ConnectError: [Errno 111] Connection refused"``: the innermost cause of a
    connection error, named."""
    inner = innermost(exc)
    detail = str(inner).strip()
    return f"{type(inner).__name__}: {detail}" if detail else type(inner).__name__


def connection_error(exc: BaseException, base_url: str) -> ProviderError:
    """A ProviderTimeout or ProviderConnectionError naming the endpoint and the cause,
    decided by the innermost cause (transports map a dropped connection to a "timeout"
    class; its cause says what happened)."""
    inner = innermost(exc)
    text = cause_text(exc)
    if isinstance(inner, TimeoutError) or "Timeout" in type(inner).__name__:
        return ProviderTimeout(f"timed out talking to {base_url}: {text}")
    return ProviderConnectionError(f"cannot reach {base_url}: {text}")


class AioHttpTransport(Transport):
    """POSTs through one ``aiohttp`` session (created on first use, on the running loop).

    Args:
        url: the absolute endpoint URL.
        base_url: the endpoint's base, for error messages.
        headers: sent with every request (authentication, API version).
        connections: connections in the pool at most (the run's concurrency).
    """

    def __init__(
        self, url: str, base_url: str, headers: Mapping[str, str], connections: int
    ) -> None:
        self.url, self.base_url, self.connections = url, base_url, max(1, connections)
        self.headers = {
            "Content-Type": "application/json",
            "Accept": "application/json",
            **headers,
        }
        self._session: Any = None
        import aiohttp

        self._aiohttp = aiohttp
        self._errors = (aiohttp.ClientError, TimeoutError)

    def _open(self) -> Any:
        aiohttp = self._aiohttp
        connector = aiohttp.TCPConnector(
            limit=self.connections, limit_per_host=0, ssl=_tls_context(self.url)
        )
        proxy, proxy_auth = _env_proxy(self.url)
        return aiohttp.ClientSession(
            connector=connector,
            headers=self.headers,
            timeout=aiohttp.ClientTimeout(total=None, sock_connect=CONNECT_TIMEOUT_S),
            proxy=proxy,
            proxy_auth=proxy_auth,
        )

    async def send(self, body: dict[str, Any]) -> Answer:
        """See :meth:`Transport.send`."""
        session = self._session
        if session is None:
            session = self._session = self._open()
        try:
            # never redirected: a 307/308 would re-send the prompt and the key to another
            # host, and a 302's answer there would be cached as the model's
            async with session.post(
                self.url, data=compact_json(body).encode(), allow_redirects=False
            ) as answer:
                chunks: list[bytes] = []
                size = 0
                async for chunk in answer.content.iter_any():  # decompressed as it comes
                    size += len(chunk)
                    if size > MAX_ANSWER_BYTES:
                        raise too_large(answer.status)
                    chunks.append(chunk)
                return Answer(answer.status, answer.headers, b"".join(chunks))
        except self._errors as exc:
            raise connection_error(exc, self.base_url) from None

    async def stream(self, body: dict[str, Any], on_line: Callable[[str], None]) -> Answer:
        """See :meth:`Transport.stream`."""
        session = self._session
        if session is None:
            session = self._session = self._open()
        headers = {"Accept": "text/event-stream"}
        try:
            async with session.post(
                self.url, data=compact_json(body).encode(), headers=headers
            ) as answer:
                if answer.status >= 400:
                    return Answer(answer.status, answer.headers, await answer.read())
                _progress()
                pending = b""  # a line's start (lines may be longer than any read)
                async for chunk in answer.content.iter_any():
                    _progress()
                    lines, pending = split_lines(pending + chunk)
                    for raw in lines:
                        on_line(raw.decode("utf-8", "replace"))
                if pending:
                    on_line(pending.rstrip(b"\r").decode("utf-8", "replace"))
                return Answer(answer.status, answer.headers, b"")
        except self._errors as exc:
            raise connection_error(exc, self.base_url) from None

    async def aclose(self) -> None:
        """Close the session and its connections."""
        if self._session is not None:
            session, self._session = self._session, None
            await session.close()


def _env_proxy(url: str) -> tuple[Any, Any]:
    """``(proxy URL, proxy auth)`` for ``url`` from the environment (``HTTP_PROXY`` /
    ``HTTPS_PROXY``, ``NO_PROXY``, the proxy's credentials in ``~/.netrc``), as aiohttp's
    ``trust_env`` reads them, or ``(None, None)``.

    Read once, when the session opens: with ``trust_env=True`` aiohttp reads them again
    on every request, each time in a worker thread (twice: the proxy, and ``~/.netrc``
    for the endpoint's own Basic auth, which the SDKs' HTTPX does not send either), and
    64 requests in flight then spend their CPU on thread hand-offs and the GIL."""
    from aiohttp.helpers import get_env_proxy_for_url
    from yarl import URL

    try:
        return get_env_proxy_for_url(URL(url))
    except LookupError:  # no proxy for this URL, or NO_PROXY exempts its host
        return None, None


def _tls_context(url: str) -> Any:
    """The TLS context for ``url``: certifi's CA bundle when installed (what the SDKs'
    HTTPX trusts), else the system store; None for plain HTTP."""
    if not url.startswith("https:"):
        return None
    import ssl

    if importlib.util.find_spec("certifi") is not None:
        import certifi

        return ssl.create_default_context(cafile=certifi.where())
    return ssl.create_default_context()


def http_module() -> Any:
    """The HTTP library the installed SDKs speak: ``httpx2`` (openai >= 3, anthropic >= 2),
    else ``httpx``."""
    for name in ("httpx2", "httpx"):
        if importlib.util.find_spec(name) is not None:
            return importlib.import_module(name)
    raise SpecError("no HTTP library found for the provider SDKs; reinstall openai/anthropic")


def sdk_env_headers(variable: str) -> list[str]:
    """The names of the headers an SDK adds to every request from its environment
    variable ``variable`` (``OPENAI_CUSTOM_HEADERS``, ``ANTHROPIC_CUSTOM_HEADERS``: lines
    of ``Name: value``), parsed as the SDKs parse them; the SDK clients omit them, as the
    lean clients never send them (``model.headers`` is the run's one way to add headers,
    and enters its identity)."""
    text = os.environ.get(variable) or ""
    return [line.partition(":")[0].strip() for line in text.split("\n") if ":" in line]


class ClientPool:
    """SDK clients sharing one run's in-flight requests, each with its own connection pool
    of at most ``per_client`` connections.

    Args:
        make: builds one SDK client around an HTTP client given its connection count.
        concurrency: requests in flight at most.
        per_client: connections per client at most.
    """

    def __init__(self, make: Callable[[int], Any], concurrency: int, per_client: int) -> None:
        shards = max(1, math.ceil(concurrency / max(1, per_client)))
        per = math.ceil(concurrency / shards)
        self.clients = [make(per) for _ in range(shards)]
        self.in_flight = [0] * shards

    def take(self) -> int:
        """Index of the client with the fewest calls in flight (now counted as one more)."""
        counts = self.in_flight
        i = counts.index(min(counts)) if len(counts) > 1 else 0
        counts[i] += 1
        return i

    def give(self, i: int) -> None:
        """Return client ``i``."""
        self.in_flight[i] -= 1

    async def aclose(self) -> None:
        """Close every client and its connections."""
        for client in self.clients:
            await client.close()


class SdkTransport(Transport):
    """POSTs through the official SDK's ``client.post`` with the SDK's own transport:
    ``DefaultAioHttpClient`` when ``aiohttp`` is installed (one client), else HTTPX
    clients split into shards of :data:`CONNECTIONS_PER_CLIENT` connections (HTTPX's pool
    probes each idle connection on every request it assigns, so one pool of 64 costs
    more per call than eight pools of eight), each call going to the shard with the
    fewest in flight.

    Args:
        sdk: the SDK's module name (``openai`` or ``anthropic``; both share the exception
            names used here).
        make_client: builds one SDK client (``max_retries=0``) around an HTTP client.
        url: the absolute endpoint URL (spares the SDK merging it per call).
        base_url: the endpoint's base, for error messages.
        connections: requests in flight at most.
        headers: sent with every request over the client's own (``model.headers``; an
            SDK ``Omit()`` value removes the client's header of that name).
    """

    def __init__(
        self,
        sdk: str,
        make_client: Callable[[Any], Any],
        url: str,
        base_url: str,
        connections: int,
        headers: Mapping[str, Any] | None = None,
    ) -> None:
        self.url, self.base_url = url, base_url
        self._options: dict[str, Any] = {"headers": dict(headers)} if headers else {}
        self._sdk = importlib.import_module(sdk)
        http = http_module()
        self._raw_type = http.Response
        aio = getattr(self._sdk, "DefaultAioHttpClient", None)
        use_aio = aio is not None and importlib.util.find_spec("aiohttp") is not None
        client_class = aio if use_aio else http.AsyncClient
        # one TLS context for every client: loading the CA store costs ~30 ms each time
        make_tls = getattr(http, "create_ssl_context", None)
        verify: Any = make_tls() if make_tls is not None else True

        def make(n: int) -> Any:
            limits = http.Limits(max_connections=n, max_keepalive_connections=n)
            return make_client(
                client_class(
                    limits=limits,
                    timeout=http.Timeout(None, connect=CONNECT_TIMEOUT_S),
                    follow_redirects=False,  # as the lean client: see AioHttpTransport.send
                    verify=verify,
                )
            )

        # aiohttp's pool hands out idle connections in O(1): one client is enough
        per_client = connections if use_aio else CONNECTIONS_PER_CLIENT
        self.pool = ClientPool(make, max(1, connections), per_client)

    async def send(self, body: dict[str, Any]) -> Answer:
        """See :meth:`Transport.send`; an SDK status error becomes its :class:`Answer`."""
        pool, sdk = self.pool, self._sdk
        i = pool.take()
        try:
            raw = await pool.clients[i].post(
                self.url, body=body, cast_to=self._raw_type, options=self._options
            )
        except sdk.APIStatusError as exc:
            response = exc.response
            if len(response.content) > MAX_ANSWER_BYTES:
                raise too_large(response.status_code) from None
            return Answer(response.status_code, response.headers, response.content)
        except sdk.APIConnectionError as exc:  # APITimeoutError included
            raise connection_error(exc, self.base_url) from None
        finally:
            pool.give(i)
        if len(raw.content) > MAX_ANSWER_BYTES:  # read whole by the SDK's client first
            raise too_large(raw.status_code)
        return Answer(raw.status_code, raw.headers, raw.content)

    async def stream(self, body: dict[str, Any], on_line: Callable[[str], None]) -> Answer:
        """See :meth:`Transport.stream`: the SDK's ``client.post(..., stream=True)`` with
        the raw HTTP response, read line by line; ``model.headers`` sent as by
        :meth:`send`."""
        pool, sdk = self.pool, self._sdk
        i = pool.take()
        try:
            raw = await pool.clients[i].post(
                self.url, body=body, cast_to=self._raw_type, options=self._options, stream=True
            )
            try:
                _progress()
                async for line in raw.aiter_lines():
                    _progress()
                    on_line(line)
            finally:
                await raw.aclose()
        except sdk.APIStatusError as exc:
            response = exc.response
            return Answer(response.status_code, response.headers, response.content)
        except sdk.APIConnectionError as exc:  # APITimeoutError included
            raise connection_error(exc, self.base_url) from None
        except Exception as exc:  # the HTTP library's own error mid-stream (a cut)
            if isinstance(exc, ProviderError):
                raise
            raise connection_error(exc, self.base_url) from None
        finally:
            pool.give(i)
        return Answer(raw.status_code, raw.headers, b"")

    async def aclose(self) -> None:
        """Close every SDK client."""
        await self.pool.aclose()
