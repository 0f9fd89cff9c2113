"""What the HTTP providers share: API keys, pooled SDK clients, error classification,
served-model checks, cost and the missing-usage warning.

Every SDK call goes through the SDK's documented ``client.post(path, body=...,
cast_to=<http response>)``: the SDK builds, authenticates and sends the request and
raises its own errors for 4xx/5xx, and gradetrail reads the JSON body itself. That skips
the SDK's per-call parameter transformation and model parsing, about a third of its CPU
per call, which is what the harness needs to keep 64 requests in flight on one core. The
body is checked here instead: an error under status 200, or a body that is not JSON, is
an :class:`~gradetrail.errors.InvalidResponse`, never cached.

Clients are built with ``max_retries=0`` (gradetrail's retry engine is the only loop) and
send through the SDK's own aiohttp transport (``DefaultAioHttpClient``, the SDKs'
documented choice "for improved concurrency performance") when ``aiohttp`` is installed,
as ``pip install 'gradetrail[openai]'`` does: it costs about 40% less CPU per call than
the default HTTPX2 transport. Without it, HTTPX2 clients are split into shards of at most
:data:`CONNECTIONS_PER_CLIENT` connections (its connection pool probes each idle
connection on every request it assigns, so one pool of 64 connections costs more per
call than eight pools of eight), each call going to the shard with the fewest in flight.
"""

from __future__ import annotations

import email.utils
import importlib
import importlib.util
import json
import logging
import math
import os
import re
import time
from abc import abstractmethod
from collections.abc import Callable, Mapping
from dataclasses import replace
from datetime import UTC
from typing import Any, ClassVar

from gradetrail.errors import (
    AuthError,
    BadRequest,
    InvalidResponse,
    ProviderConnectionError,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    SpecError,
)
from gradetrail.pricing import Price, price_for
from gradetrail.providers.base import Provider, Request, Response

__all__ = [
    "CONNECTIONS_PER_CLIENT",
    "ClientPool",
    "HttpProvider",
    "classify_status",
    "error_fields",
    "implied_status",
    "parse_retry_after",
    "redact",
    "served_model_matches",
]

log = logging.getLogger("gradetrail.providers")

#: connections per SDK client; a run with concurrency C uses ceil(C / 8) clients
CONNECTIONS_PER_CLIENT = 8
#: seconds to open a TCP (and TLS) connection before it counts as a connection error
CONNECT_TIMEOUT_S = 10.0
#: placeholder key for openai_compatible servers that check none (vLLM's documented value)
PLACEHOLDER_KEY = "EMPTY"

_KEY_SHAPES = re.compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_*.\-]{3,}|\bBearer\s+\S+", re.IGNORECASE)
_QUOTA = re.compile(r"quota|credit balance|billing|insufficient.?funds|spend limit", re.I)
_QUOTA_CODES = {"insufficient_quota", "billing_hard_limit_reached", "billing_not_active"}
_SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")
_ALIAS_SUFFIXES = ("-latest", "-0")


def redact(text: str, key: str | None) -> str:
    """``text`` with the API key, and anything shaped like a key or bearer token, masked:
    provider error messages can echo part of a key (OpenAI's 401 shows a masked key)."""
    if key and len(key) >= 4:
        text = text.replace(key, "***")
    return _KEY_SHAPES.sub("***", text)


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms`` (milliseconds, sent by OpenAI),
    else ``retry-after`` as seconds or an HTTP date (RFC 9110, section 10.2.3); None when
    absent or unparseable; never negative.

    Args:
        headers: the response headers (case-insensitive mapping, or a plain dict with
            lower-case keys).
        now: the current POSIX time for HTTP dates (default: ``time.time()``).
    """
    if not headers:
        return None
    ms = headers.get("retry-after-ms")
    if ms is not None:
        try:
            return max(float(ms) / 1000.0, 0.0)
        except ValueError:
            pass
    value = headers.get("retry-after")
    if value is None:
        return None
    try:
        seconds = float(value)
    except ValueError:
        try:
            when = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError):
            return None
        if when.tzinfo is None:
            when = when.replace(tzinfo=UTC)
        seconds = when.timestamp() - (time.time() if now is None else now)
    return max(seconds, 0.0) if math.isfinite(seconds) else None


def error_fields(body: Any) -> tuple[str | None, str | None, str | None]:
    """``(error_type, code, message)`` from an error body in either protocol's shape:
    OpenAI ``{"error": {"type", "code", "message"}}`` (or the inner object alone, as the
    SDK passes it), Anthropic ``{"type": "error", "error": {"type", "message",
    "details": {"error_code"}}}``, and the plain-string form some gateways send,
    ``{"error": "rate limit exceeded"}`` (the string is the message). Numeric codes
    (``"code": 429``) come back as text."""
    if not isinstance(body, dict):
        return None, None, body.strip()[:300] if isinstance(body, str) and body.strip() else None
    error = body.get("error")
    if isinstance(error, str) and error.strip():
        inner: dict[str, Any] = {**body, "message": body.get("message") or error}
    else:
        inner = error if isinstance(error, dict) else body
    etype, code, message = inner.get("type"), inner.get("code"), inner.get("message")
    details = inner.get("details")
    if code is None and isinstance(details, dict):
        code = details.get("error_code")
    if etype == "error":
        etype = None
    return (
        None if etype is None else str(etype),
        None if code is None else str(code),
        None if message is None else str(message),
    )


_RATE_WORDS = re.compile(r"rate.?limit|too many requests|throttl", re.I)
_OVERLOAD_WORDS = re.compile(
    r"overloaded|internal (?:server )?error|server error|temporarily unavailable|"
    r"service unavailable|bad gateway|gateway time-?out|try again later",
    re.I,
)
_TIMEOUT_WORDS = re.compile(r"timed? ?out|timeout", re.I)
_AUTH_WORDS = re.compile(r"invalid.{0,20}(?:api.?key|token|credential)|unauthori[sz]ed", re.I)
#: (status, words in an error type or code that mean it), checked in order
_STATUS_WORDS = (
    (529, ("overloaded",)),
    (500, ("api_error", "server_error", "internal", "unavailable", "bad_gateway")),
    (408, ("timeout",)),
    (401, ("authentication", "permission", "invalid_api_key", "unauthorized")),
    (400, ("invalid_request", "not_found", "bad_request", "invalid_model")),
)


def implied_status(etype: str | None, code: str | None, message: str | None) -> int | None:
    """The HTTP status an error body means, read from its type, code and message alike
    (for error bodies that arrive under status 200): a code that is itself a status
    (``429``, ``"503"``), else the type's or code's words (``rate_limit_error``,
    ``insufficient_quota``, ``overloaded_error``, ``server_error``, ``invalid_api_key``,
    ``invalid_request_error``), else the message's (``rate limit exceeded``, ``you
    exceeded your quota``, ``overloaded``, ``internal server error``, ``timed out``).

    Returns:
        the code's own 4xx/5xx status, or 429, 529 (overloaded), 500, 408, 401 or 400;
        None when nothing says (such a body is a permanent :class:`InvalidResponse`).
    """
    if code is not None and code.isdigit() and 400 <= int(code) <= 599:
        return int(code)
    words = f"{etype or ''} {code or ''}".lower()
    if code in _QUOTA_CODES or etype in _QUOTA_CODES or _RATE_WORDS.search(words):
        return 429
    for status, names in _STATUS_WORDS:
        if any(name in words for name in names):
            return status
    text = message or ""
    if _RATE_WORDS.search(text) or _QUOTA.search(text):
        return 429
    if "overloaded" in text.lower():
        return 529
    for status, pattern in ((500, _OVERLOAD_WORDS), (408, _TIMEOUT_WORDS), (401, _AUTH_WORDS)):
        if pattern.search(text):
            return status
    return None


def classify_status(
    status: int,
    headers: Mapping[str, str] | None,
    body: Any,
    *,
    key: str | None = None,
    hint: str = "",
) -> ProviderError:
    """The gradetrail error for an HTTP error answer.

    Transient: 408 (timeout), 409, 429 (unless the quota or credit is exhausted), 5xx,
    529, and any body whose error type says overloaded. Permanent: 400, 401, 403, 404, 422
    and every other 4xx. A server's ``x-should-retry: true/false`` header overrides the
    status (both official SDKs honour it). The provider's error type and code are kept;
    the message is redacted of keys.

    Args:
        status: the HTTP status code.
        headers: the response headers.
        body: the decoded JSON body, or the raw text.
        key: the API key to redact from the message.
        hint: appended to auth errors (which variable holds the key).
    """
    etype, code, message = error_fields(body)
    text = redact(f"{status} {etype or 'error'}: {message or 'no message'}", key)
    retry_after = parse_retry_after(headers)
    fields: dict[str, Any] = {
        "status": status,
        "error_type": etype,
        "code": code,
        "retry_after": retry_after,
    }
    overloaded = "overloaded" in (etype or "")
    if status == 429:
        exhausted = code in _QUOTA_CODES or etype in _QUOTA_CODES or bool(_QUOTA.search(text))
        error: ProviderError = RateLimited(text, transient=not exhausted, **fields)
    elif status in (401, 403):
        error = AuthError(f"{text.rstrip('. ')}{hint}", **fields)
    elif status == 408:
        error = ProviderTimeout(text, **fields)
    elif status == 409 or status >= 500 or overloaded:
        error = ServerError(text, **fields)
    else:
        error = BadRequest(text, **fields)
    should_retry = (headers or {}).get("x-should-retry")
    if should_retry in ("true", "false"):
        error.transient = should_retry == "true"
    return error


def served_model_matches(requested: str, served: str | None) -> bool:
    """True when ``served`` is ``requested`` or its documented alias-to-snapshot form:
    ``foo`` served as ``foo-20250101`` or ``foo-2025-01-01``, and ``foo-latest`` /
    ``foo-0`` served as ``foo-<date>`` (Anthropic's aliases for pre-4.6 models)."""
    if served is None:
        return False
    if served == requested:
        return True
    base = _SNAPSHOT_SUFFIX.sub("", served)
    if base == served:
        return False
    if base == requested:
        return True
    return any(requested == base + suffix for suffix in _ALIAS_SUFFIXES)


def http_module() -> Any:
    """The HTTP library the installed SDKs speak: ``httpx2`` (openai >= 3, anthropic >= 2),
    else ``httpx``."""
    for name in ("httpx2", "httpx"):
        if importlib.util.find_spec(name) is not None:
            return importlib.import_module(name)
    raise SpecError("no HTTP library found for the provider SDKs; reinstall openai/anthropic")


class ClientPool:
    """SDK clients sharing one run's in-flight requests, each with its own connection pool
    of at most :data:`CONNECTIONS_PER_CLIENT` connections.

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


class HttpProvider(Provider):
    """Base of the providers that call an HTTP API through an official SDK.

    Subclasses set the class attributes and implement :meth:`make_client`,
    :meth:`body` and :meth:`normalize`; this class owns keys, pooling, error translation,
    the served-model check, cost and the missing-usage warning.
    """

    #: SDK module name (also the pip extra that installs it)
    sdk: ClassVar[str]
    #: environment variable read when the spec names none (None: the spec must name one)
    default_key_env: ClassVar[str | None]
    #: the endpoint's path, relative to the base URL
    path: ClassVar[str]
    #: the API's base URL when the spec gives none
    default_base_url: ClassVar[str]
    #: provider name prices are looked up under
    price_provider: ClassVar[str]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._key: str | None = None
        self._pool: ClientPool | None = None
        self._pool_size = 16
        self._missing_usage = 0
        self._price_override = (
            Price.from_dict(self.model.price.model_dump()) if self.model.price else None
        )
        self._prices: dict[str | None, Price | None] = {}

    # -- readiness ---------------------------------------------------------------------

    @property
    def base_url(self) -> str:
        """The endpoint requests go to (``model.base_url``, else the API's own)."""
        return self.model.base_url or self.default_base_url

    @property
    def key_env(self) -> str | None:
        """The environment variable the API key is read from."""
        return self.model.api_key_env or self.default_key_env

    def check_ready(self) -> None:
        """Check that the SDK is installed and the API key is set, in milliseconds: the
        SDK is only found, not imported (a fully cached run never imports it; see
        :meth:`warm_up`).

        Raises:
            SpecError: the SDK is not installed (the message names the pip command).
            AuthError: the key's variable is unset or empty.
        """
        if importlib.util.find_spec(self.sdk) is None:
            raise SpecError(
                f"model.provider {self.model.provider!r} needs the {self.sdk} package; "
                f"pip install 'gradetrail[{self.sdk}]'"
            )
        self._key = self._read_key()

    def warm_up(self) -> None:
        """Import the SDK (up to a second), so the run's first samples do not pay it."""
        importlib.import_module(self.sdk)

    def key_hint(self) -> str:
        """What to fix after an auth error: which variable holds the key, or that none
        was sent (``model.api_key_required: false`` sends a placeholder)."""
        if getattr(self, "_key", None) == PLACEHOLDER_KEY:
            return (
                f"; no key was sent (model.api_key_required is false, so {PLACEHOLDER_KEY!r} "
                "was): name the key's variable in model.api_key_env"
            )
        return f"; check the key in {self.key_env}" if self.key_env else ""

    def _read_key(self) -> str:
        env = self.key_env
        value = os.environ.get(env, "").strip() if env else ""
        if value:
            return value
        if not self.model.api_key_required:
            return PLACEHOLDER_KEY
        raise AuthError(
            f"{env} is not set; export {env}=<your API key> "
            "(or name another variable in model.api_key_env)"
        )

    def size_pool(self, concurrency: int) -> None:
        """Size the connection pools for ``concurrency`` requests in flight."""
        self._pool_size = max(1, concurrency)

    # -- the SDK -------------------------------------------------------------------------

    @abstractmethod
    def make_client(self, key: str, http_client: Any) -> Any:
        """One SDK client (``max_retries=0``) around ``http_client``."""

    @abstractmethod
    def body(self, request: Request) -> dict[str, Any]:
        """The JSON request body for ``request``."""

    @abstractmethod
    def normalize(self, data: dict[str, Any], latency_s: float) -> tuple[Response, int]:
        """The response for a decoded 200 body, and its prompt-cache write tokens (priced
        separately).

        Raises:
            InvalidResponse: the body is an error or lacks the fields a response needs.
            BadRequest: the provider's content filter stopped the response.
        """

    @abstractmethod
    def translate(self, exc: Exception) -> ProviderError | None:
        """The gradetrail error for an SDK exception, or None when it is not one."""

    def _client_factory(self, key: str) -> tuple[Callable[[int], Any], int]:
        """A function building one SDK client around a pool of N connections, and the
        connections each client should get."""
        http = http_module()
        sdk = importlib.import_module(self.sdk)
        aio = getattr(sdk, "DefaultAioHttpClient", None)
        use_aio = aio is not None and importlib.util.find_spec("aiohttp") is not None
        client_class = aio if use_aio else http.AsyncClient
        # one TLS context for every client: loading the CA store costs ~30 ms each time
        make_tls = getattr(http, "create_ssl_context", None)
        verify: Any = make_tls() if make_tls is not None else True

        def make(connections: int) -> Any:
            http_client = client_class(
                limits=http.Limits(
                    max_connections=connections, max_keepalive_connections=connections
                ),
                timeout=http.Timeout(None, connect=CONNECT_TIMEOUT_S),
                follow_redirects=True,
                verify=verify,
            )
            return self.make_client(key, http_client)

        # aiohttp's pool hands out idle connections in O(1): one client is enough
        return make, (self._pool_size if use_aio else CONNECTIONS_PER_CLIENT)

    def _clients(self) -> ClientPool:
        if self._pool is None:
            key = self._key if self._key is not None else self._read_key()
            self._key = key
            make, per_client = self._client_factory(key)
            self._pool = ClientPool(make, self._pool_size, per_client)
            self._raw_type = http_module().Response
            # absolute: spares the SDK merging the path into the base URL on every call
            self._url = self.base_url.rstrip("/") + self.path
        return self._pool

    # -- one call ------------------------------------------------------------------------

    async def complete(self, request: Request) -> Response:
        """Send one request through the SDK and normalize the answer.

        Raises:
            ProviderError: a subclass saying whether a retry may help (see
                :func:`classify_status`); connection failures name the endpoint and the
                error; an error body under 200 or an unparseable body is InvalidResponse.
        """
        pool = self._clients()
        i = pool.take()
        start = time.perf_counter()
        try:
            raw = await pool.clients[i].post(
                self._url, body=self.body(request), cast_to=self._raw_type
            )
        except ProviderError:
            raise
        except Exception as exc:
            error = self.translate(exc)
            if error is None:  # not an SDK error: record it (fail-fast catches a pattern)
                text = redact(f"{type(exc).__name__}: {exc}", self._key)
                error = ProviderError(f"unexpected error calling {self.base_url}: {text}")
            raise error from None
        finally:
            pool.give(i)
        latency = time.perf_counter() - start
        data = self._decode(raw)
        response, cache_write = self.normalize(data, latency)
        return self._finish(request, response, cache_write)

    def _decode(self, raw: Any) -> dict[str, Any]:
        try:
            data = json.loads(raw.content)
        except ValueError:
            text = raw.content[:80].decode("utf-8", "replace")
            raise InvalidResponse(
                f"{raw.status_code} answer is not JSON: {text!r}", status=raw.status_code
            ) from None
        if not isinstance(data, dict):
            raise InvalidResponse(
                f"{raw.status_code} answer is JSON but not an object", status=raw.status_code
            )
        return data

    def error_under_200(self, data: dict[str, Any]) -> InvalidResponse:
        """An error body that came with status 200: an :class:`InvalidResponse` (never
        cached) keeping the provider's error type and code, whose ``transient`` is what
        the status its type, code or message means would be (:func:`implied_status`):
        ``{"error": {"message": "rate limit exceeded", "code": 429}}`` is retried exactly
        as the same body with ``type: rate_limit_error`` is, and so is an overloaded or
        failed server; an exhausted quota, a bad request or a body that says nothing is
        recorded at once."""
        etype, code, message = error_fields(data)
        implied = implied_status(etype, code, message)
        transient = False
        if implied is not None:
            transient = classify_status(implied, None, data).transient
        what = etype or (f"code {code}" if code else "error")
        text = redact(f"200 answer is an error: {what}: {message or 'no message'}", self._key)
        return InvalidResponse(text, transient=transient, status=200, error_type=etype, code=code)

    def _finish(self, request: Request, response: Response, cache_write: int) -> Response:
        served = response.served_model
        if self.model.require_served_model and not served_model_matches(request.model, served):
            raise BadRequest(
                f"served model {served!r} is not the requested {request.model!r} (or its "
                "dated snapshot); model.require_served_model is set",
                error_type="served_model_mismatch",
                code=served,
            )
        response = replace(response, cache_write_tokens=cache_write)
        return replace(response, cost_usd=self.price(request, response))

    def price(self, request: Request, response: Response) -> float | None:
        """USD under the spec's ``model.price`` or the bundled table (None: unknown)."""
        price = self._price(request.model, response.served_model)
        if price is None:
            return None
        cost = price.cost(
            response.input_tokens - response.cache_write_tokens,
            response.output_tokens,
            response.cached_input_tokens,
            response.cache_write_tokens,
        )
        return round(cost, 10)

    def _price(self, model: str, served: str | None) -> Price | None:
        if self._price_override is not None:
            return self._price_override
        if served not in self._prices:
            self._prices[served] = price_for(self.price_provider, model, served)
        return self._prices[served]

    def usage_missing(self, request_model: str) -> None:
        """Count a response without ``usage`` (its tokens are 0); warn on the first."""
        self._missing_usage += 1
        if self._missing_usage == 1:
            log.warning(
                "%s: a response for %s carried no usage; its tokens and cost count as 0 "
                "(the run's log counts every such response)",
                self.model.provider,
                request_model,
            )
            _runlog_event("missing_usage", provider=self.model.provider, model=request_model)

    async def aclose(self) -> None:
        """Close the SDK clients; log how many responses had no usage."""
        if self._missing_usage:
            _runlog_event(
                "missing_usage_total",
                provider=self.model.provider,
                model=self.model.name,
                responses=self._missing_usage,
            )
        if self._pool is not None:
            pool, self._pool = self._pool, None
            await pool.aclose()


def _runlog_event(event: str, **fields: Any) -> None:
    from gradetrail import runlog

    current = runlog.current()
    if current is not None:
        current.event(event, **fields)


def usage_int(usage: Mapping[str, Any], *path: str) -> int:
    """An integer token count at ``path`` in a usage object (0 when absent or null)."""
    value: Any = usage
    for part in path:
        value = value.get(part) if isinstance(value, Mapping) else None
    return int(value) if isinstance(value, int | float) and not isinstance(value, bool) else 0


def innermost(exc: BaseException) -> BaseException:
    """The last exception in ``exc``'s chain of causes (or contexts)."""
    inner, seen = exc, {id(exc)}
    while True:
        nxt = inner.__cause__ or inner.__context__
        if nxt is None or id(nxt) in seen:
            return inner
        seen.add(id(nxt))
        inner = nxt


def cause_text(exc: BaseException) -> str:
    """``"ConnectError: [Errno 111] Connection refused"``: the innermost cause of an SDK
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


def translate_sdk_error(
    exc: Exception, sdk: Any, base_url: str, *, key: str | None, hint: str
) -> ProviderError | None:
    """Map an ``openai`` or ``anthropic`` SDK exception (both SDKs share these names) to
    the gradetrail error tree; None for anything else."""
    if isinstance(exc, sdk.APIConnectionError):  # APITimeoutError included
        return connection_error(exc, base_url)
    if isinstance(exc, sdk.APIStatusError):
        return classify_status(exc.status_code, exc.response.headers, exc.body, key=key, hint=hint)
    return None
