"""What the HTTP providers share: API keys, error classification, the one request path,
served-model checks, cost and the missing-usage warning.

One call is: the provider's :meth:`~HttpProvider.body` (the one request-body builder of
its protocol), sent by a :class:`~gradetrail.providers._transport.Transport` (the lean
``aiohttp`` client, or the official SDK's ``client.post``; ``model.http_client``), whose
raw answer is classified here whatever sent it: a 4xx/5xx by :func:`classify_status`, a
body that is not a JSON object or an error under status 200 as an
:class:`~gradetrail.errors.InvalidResponse` (never cached), and a good body by the
provider's :meth:`~HttpProvider.normalize` (the one response parser of its protocol).
Adding a field to requests or responses (messages, tools) is one edit to ``body`` or
``normalize``, for both transports.

Clients are built with retries off (gradetrail's retry engine is the only loop).
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
import sys
import time
import urllib.parse
from abc import abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import replace
from datetime import UTC
from typing import Any, ClassVar
from urllib.parse import urlencode

from gradetrail._util.events import Events
from gradetrail._util.jsontext import parsed
from gradetrail._util.lazyre import lazy_compile
from gradetrail.errors import (
    AuthError,
    BadRequest,
    InvalidResponse,
    ProviderError,
    ProviderTimeout,
    RateLimited,
    ServerError,
    SpecError,
    bounded_retry_after,
)
from gradetrail.providers._plain_http import PlainHttpTransport, plain_http_endpoint
from gradetrail.providers._stream import Fold, SseParser
from gradetrail.providers._transport import AioHttpTransport, Answer, SdkTransport, Transport
from gradetrail.providers.base import Provider, Request, Response
from gradetrail.providers.pricing import (
    Price,
    price_for,
    server_tool_fees,
    service_tier_shares,
    tier_name,
)
from gradetrail.providers.served import served_model_matches
from gradetrail.spec.model import ENV_REFERENCE, HttpClientName

__all__ = [
    "HttpProvider",
    "classify_status",
    "error_body",
    "error_fields",
    "implied_status",
    "parse_retry_after",
    "redact",
]

log = logging.getLogger("gradetrail.providers")
#: *_BASE_URL variables already warned about in this process
_WARNED: set[str] = set()

#: placeholder key for openai_compatible servers that check none (vLLM's documented value)
PLACEHOLDER_KEY = "EMPTY"

_KEY_SHAPES = lazy_compile(r"\b(?:sk|pk|rk)-[A-Za-z0-9_*.\-]{3,}|\bBearer\s+\S+", re.IGNORECASE)
_QUOTA = lazy_compile(
    r"quota|credit balance|billing|insufficient.?(?:funds|credits?|balance)|spend(?:ing)? limit|"
    r"out of credits?|credits? (?:are |is |have been )?(?:exhausted|depleted|used up)",
    re.I,
)
#: error codes (or types) that say a quota or spend cap ran out, and which (a key of
#: :data:`~gradetrail.errors.QUOTAS`): decisive, whatever the message says
QUOTA_CODES: dict[str, str] = {
    "insufficient_quota": "quota",  # OpenAI: credit or plan exhausted
    "billing_hard_limit_reached": "spend_cap",
    "billing_not_active": "credit",
    "organization_spend_limit_exceeded": "spend_cap",  # OpenAI's hard monthly spend limits
    "project_spend_limit_exceeded": "spend_cap",
    "credit_balance_exhausted": "credit",  # OpenAI: no prepaid credit left
    # Anthropic, in error.details.error_code under a 429 rate_limit_error: the usage tier's
    # monthly spend cap, or the contract's, was reached (no retry-after: it pauses until
    # the month or contract turns)
    "enforced_spend_limit_reached": "spend_cap",
    "contract_spend_limit_reached": "spend_cap",
}
#: words that say a spend limit or credit ran out whatever type or code the error carries:
#: Anthropic sends its organization's or workspace's own spend limit as "You have reached
#: your specified (workspace) API usage limits" under a 400 invalid_request_error, and may
#: send it under a 429 rate_limit_error (its Claude Code workspace), where the type alone
#: would read a per-minute limit to wait out
_SPEND_WORDS = lazy_compile(
    r"reached (?:your|its|the) specified (?:workspace )?API usage limits?|"
    r"credit balance is too low",
    re.I,
)
#: phrases of a message that name a quota which will not come back within a run, and which
#: (read, links removed, only when no rate-limit word is there and no code decided):
#: Gemini's "monthly spending cap" and "prepayment credits are depleted", Anthropic's
#: "credit balance is too low" and "reached your specified workspace API usage limits. You
#: will regain access on ...", a limit "per day" (Google's quota names)
QUOTA_PHRASES: tuple[tuple[re.Pattern[str], str], ...] = (
    (
        lazy_compile(
            r"credit balance|prepa(?:id|yment) (?:credits?|balance)|out of credits?|"
            r"insufficient.?(?:funds|credits?|balance)|"
            # xAI's 403 "Your newly created team doesn't have any credits yet"
            r"(?:doesn'?t|does not|don'?t|do not) have (?:any|enough) credits?|"
            r"credits? (?:are |is |have been )?(?:exhausted|depleted|used up)",
            re.I,
        ),
        "credit",
    ),
    (
        lazy_compile(
            r"spend(?:ing)? (?:cap|limit)|billing (?:cap|hard limit)|"
            r"usage limits?\b.{0,80}\bregain access|"  # Anthropic's workspace limit
            r"specified (?:workspace )?API usage limits?",
            re.I,
        ),
        "spend_cap",
    ),
    (lazy_compile(r"per[ -]day|daily (?:quota|limit)|\bRPD\b|\bTPD\b", re.I), "daily"),
    (lazy_compile(r"per[ -]month|monthly (?:quota|limit)", re.I), "monthly"),
)
#: the period in a Google quota id (``GenerateRequestsPerDayPerProjectPerModel-FreeTier``)
_QUOTA_PERIOD = lazy_compile(r"Per(Second|Minute|Hour|Day|Month)", re.I)
_LONG_PERIODS = {"day": "daily", "month": "monthly"}
#: a limit named by an identifier ending in its period (OpenRouter's 429 "Rate limit
#: exceeded: free-models-per-day"): decisive over the message's rate-limit words
_LIMIT_ID_PERIOD = lazy_compile(r"\b[a-z0-9]+(?:-[a-z0-9]+)*-per-(day|month)\b", re.I)
#: an error type or code that names a rate limit (decisive: the message is not read)
_RATE_CODES = lazy_compile(r"rate.?limit|too.?many.?requests|throttl|^requests$|^tokens$", re.I)
#: a URL (or a bare link such as aka.ms/x) in an error message: never a quota signal
_URL = lazy_compile(r"\b(?:https?://|www\.)\S+|\b[\w-]+(?:\.[\w-]+)+/\S*", re.I)


def message_words(message: str | None) -> str:
    """An error message with its links removed: the words a classifier may read (a link
    to a billing or quota page says where to go, not what happened)."""
    return _URL.sub(" ", message or "")


def _google_details(body: Any) -> list[dict[str, Any]]:
    """The ``error.details`` objects of a Google error body (``google.rpc.Status``: its
    envelope may come as a JSON list holding the error); empty for any other body."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]
    error = body.get("error") if isinstance(body, dict) else None
    details = error.get("details") if isinstance(error, dict) else None
    return [d for d in details if isinstance(d, dict)] if isinstance(details, list) else []


#: a protobuf Duration in JSON: decimal seconds with an ``s`` suffix (``"36s"``, ``"0.5s"``)
_DURATION = lazy_compile(r"\s*(\d+(?:\.\d*)?|\.\d+)s\s*")


def retry_delay(body: Any) -> float | None:
    """Seconds a Google error body asks to wait (its ``google.rpc.RetryInfo`` detail's
    ``retryDelay``, e.g. ``"36s"``: Gemini's 429s carry it in the body, not as a
    ``retry-after`` header), at most :data:`~gradetrail.errors.MAX_RETRY_AFTER_S`; None
    for any other body or an unreadable delay."""
    for detail in _google_details(body):
        if not str(detail.get("@type", "")).endswith("google.rpc.RetryInfo"):
            continue
        delay = detail.get("retryDelay")
        match = _DURATION.fullmatch(delay) if isinstance(delay, str) else None
        if match:
            return bounded_retry_after(float(match.group(1)))
    return None


def key_refused(body: Any) -> bool:
    """Whether a Google error body says the API key itself is refused (an ``ErrorInfo``
    detail whose ``reason`` is ``API_KEY_INVALID`` or another ``API_KEY_*``): Gemini's
    OpenAI-compatible endpoint sends an invalid or expired key as a 400
    ``INVALID_ARGUMENT``, which is an auth error, not a bad request."""
    return any(
        str(detail.get("reason") or "").startswith("API_KEY_")
        for detail in _google_details(body)
        if str(detail.get("@type", "")).endswith("google.rpc.ErrorInfo")
    )


#: words of a 403 saying a moderation or content filter refused this prompt, not the key
_MODERATED_WORDS = lazy_compile(
    r"\bflagged\b|moderation|content (?:policy|filter|management)|guardrail", re.I
)


#: a limit and what one request asked of it, in a rate-limit message ("Limit 30000,
#: Requested 33000"; OpenAI's may name what was "Used" between them)
_LIMIT_REQUESTED = lazy_compile(r"\blimit:?\s+([\d,]+)\b.{0,80}?\brequested:?\s+([\d,]+)", re.I)
#: words saying the prompt does not fit the model's context window
_CONTEXT_WORDS = lazy_compile(
    r"maximum context length|context(?:[ _]length|[ _]window)[ _](?:is )?exceeded|"
    r"exceeds? the (?:available |maximum )?context (?:size|window|length)|"
    r"prompt is too long|exceed context limit",
    re.I,
)


def never_fits(code: str | None, etype: str | None, message: str | None) -> str | None:
    """Why a request can never succeed however long it waits, or None: it alone asks
    more of a per-minute limit than the limit is (OpenAI's 429 "Request too large for
    gpt-4o ... on tokens per min (TPM): Limit 30000, Requested 33000"), or its prompt
    does not fit the context window (said under a 5xx by servers that send it so). Such
    an error is recorded at once, never retried."""
    words = message_words(message)
    match = _LIMIT_REQUESTED.search(words)
    if match:
        limit, asked = (int(g.replace(",", "")) for g in match.groups())
        if asked > limit:
            return "this one request asks more than the whole limit: shorten it (or max_tokens)"
    named = f"{code or ''} {etype or ''}"
    if _CONTEXT_WORDS.search(words) or "context_length" in named or "context_size" in named:
        return "the prompt does not fit the model's context window"
    return None


#: a 404's message that names nothing (a path no route serves: FastAPI's "Not Found",
#: Go's "404 page not found", Azure's "Resource not found")
_BARE_NOT_FOUND = lazy_compile(r"\s*(?:404:?\s*)?(?:page |resource )?not found\.?\s*", re.I)
#: a 400's message refusing the answer's JSON schema (OpenAI's Chat Completions and
#: Responses API: "Invalid schema for response_format 'NAME': In context=(), ...")
_SCHEMA_REFUSED = lazy_compile(r"\binvalid schema for (?:response_format|text\.format)\b", re.I)
#: a server that cannot load the model for want of memory (Ollama's 500 "model requires
#: more system memory (7.5 GiB) than is available (5.2 GiB)"): no request of the run fits
_NO_MEMORY = lazy_compile(r"requires more (?:system )?memory\b.{0,40}than is available", re.I)


def stops_run(
    status: int,
    code: str | None,
    message: str | None,
    model: str | None,
    *,
    auth: bool,
) -> str | None:
    """Why an error answer fails every later request of the run the same way (a key of
    :data:`~gradetrail.errors.RUN_STOPS`), or None when it may be this request's alone.

    - ``key``: a 401, or a key a Google 400 refuses (``auth`` and status 401 or 400);
    - ``access``: a 403 refusing the credentials (``auth``: not a moderation 403, which
      refuses one prompt and stays that sample's error);
    - ``model``: a 404 naming the model (OpenAI's ``model_not_found``, Anthropic's
      ``not_found_error`` "model: ...", Ollama's "model '...' not found") or naming nothing
      (no route at this URL); a 404 about something else (the Responses API's "Item with
      id ... not found") is one request's;
    - ``memory``: a server that cannot load the model (:data:`_NO_MEMORY`, any status);
    - ``schema``: a 400 refusing the answer's JSON schema (``model.response_format``, the
      same in every request): OpenAI's ``invalid_json_schema`` code, or its "Invalid
      schema for response_format" message (Chat Completions sends no code). A refused
      tool's schema ("Invalid schema for function ...") may be one row's own tools: not
      this.
    """
    words = message or ""
    if _NO_MEMORY.search(words):
        return "memory"
    if status == 400 and (code == "invalid_json_schema" or _SCHEMA_REFUSED.search(words)):
        return "schema"
    if auth:
        return "access" if status == 403 else "key"
    if status != 404:
        return None
    if code == "model_not_found" or (model and model in words) or "model" in words.lower():
        return "model"
    return "model" if not words or _BARE_NOT_FOUND.fullmatch(words) else None


def moderated(body: Any, message: str | None) -> bool:
    """Whether a 403 refuses this prompt's content rather than the credentials:
    OpenRouter's "your chosen model requires moderation and your input was flagged" (its
    ``error.metadata`` naming ``flagged_input`` / ``reasons``), a guardrail's block. Such
    a refusal is one sample's, a bad request, never an auth error stopping the run."""
    error = body.get("error") if isinstance(body, dict) else None
    metadata = error.get("metadata") if isinstance(error, dict) else None
    if isinstance(metadata, dict) and ("flagged_input" in metadata or "reasons" in metadata):
        return True
    return bool(_MODERATED_WORDS.search(message_words(message)))


def quota_ids(body: Any) -> list[str]:
    """The quota names a Google error body gives in its ``details`` (``QuotaFailure``
    violations' ``quotaId``, ``ErrorInfo`` metadata's ``quota_limit``), in order; empty
    for any other body. Google's envelope may come as a JSON list holding the error."""
    found: list[str] = []
    for detail in _google_details(body):
        violations = detail.get("violations")
        for violation in violations if isinstance(violations, list) else ():
            if isinstance(violation, dict) and isinstance(violation.get("quotaId"), str):
                found.append(violation["quotaId"])
        metadata = detail.get("metadata")
        if isinstance(metadata, dict) and isinstance(metadata.get("quota_limit"), str):
            found.append(metadata["quota_limit"])
    return found


def exhausted_quota(
    etype: str | None, code: str | None, message: str | None, ids: Sequence[str] = ()
) -> str | None:
    """Which quota a refusal (a 429, or a 400/402/403 of the same kind) says ran out, when
    it is one that will not come back within the run (a key of
    :data:`~gradetrail.errors.QUOTAS`: ``credit``, ``spend_cap``, ``daily``, ``monthly``,
    ``quota``); None for a per-minute rate limit to wait out.

    Decided, first to last:

    1. the quota names of the body (:func:`quota_ids`, Google's): any per-day or per-month
       one ran out is that; per-second, -minute or -hour ones only: a rate limit;
    2. the error's code, then type: one of :data:`QUOTA_CODES` (``insufficient_quota``,
       ``billing_hard_limit_reached``, ``project_spend_limit_exceeded``, Anthropic's
       ``enforced_spend_limit_reached``...) is that; then the message's spend-limit words
       (:data:`_SPEND_WORDS`: Anthropic's "reached your specified API usage limits"), which
       outrank a rate-limit type; one naming a rate limit (``rate_limit_exceeded``,
       ``rate_limit_error``, OpenAI's ``tokens``/``requests`` types) is a rate limit,
       whatever else the message says; then a limit the message names by an identifier
       ending in its period (OpenRouter's ``free-models-per-day``: daily), whatever
       rate-limit words are around it;
    3. the message, its links removed, when it holds no rate-limit words: a phrase of
       :data:`QUOTA_PHRASES` (credit exhausted, a spend cap, a limit per day or month);
    4. a code that is itself an HTTP status (Google's and Azure's ``429``) says nothing
       more: a rate limit; else quota, credit or billing words mean ``quota``.
    """
    periods = {m.group(1).lower() for i in ids for m in _QUOTA_PERIOD.finditer(i)}
    long = sorted(periods & set(_LONG_PERIODS))
    if long:
        return _LONG_PERIODS[long[0]]
    if periods:
        return None
    for value in (code, etype):  # the code first: it is the more specific
        if value in QUOTA_CODES:
            return QUOTA_CODES[value]
    words = message_words(message)
    spent = _SPEND_WORDS.search(words)
    if spent:
        return "credit" if "credit" in spent.group(0).lower() else "spend_cap"
    if any(value and _RATE_CODES.search(value) for value in (code, etype)):
        return None
    named = _LIMIT_ID_PERIOD.search(words)  # a limit's own name says its period
    if named:
        return _LONG_PERIODS[named.group(1).lower()]
    if _RATE_WORDS.search(words):
        return None
    for pattern, quota in QUOTA_PHRASES:
        if pattern.search(words):
            return quota
    if any(value and value.isdigit() for value in (code, etype)):
        return None
    return "quota" if _QUOTA.search(words) else None


def served_tier(data: Mapping[str, Any]) -> str | None:
    """The service tier an answer body says served it (its top-level ``service_tier``,
    as OpenAI's Chat Completions and Responses answers give it; :func:`tier_name`), or
    None for the standard tier or when it does not say."""
    return tier_name(data.get("service_tier"))


def unencodable_request(exc: UnicodeEncodeError) -> BadRequest:
    """The request holds text UTF-8 cannot encode (a lone surrogate from a dataset row or a
    template, or from a response or tool result the request passes on: a judge prompt
    quoting the response, an agent's next turn): a permanent error naming the character,
    recorded on the sample's row."""
    char = exc.object[exc.start : exc.start + 1] if isinstance(exc.object, str) else ""
    code = f"U+{ord(char):04X}" if char else "a character"
    return BadRequest(
        f"the request holds text UTF-8 cannot encode ({code}, a lone surrogate, at "
        f"position {exc.start}); fix the dataset row or the template it came from, if it "
        "did not come from a response or tool result this request passes on"
    )


#: the variables the official SDKs read their keys from, and the provider each is for
_SDK_KEYS = {"OPENAI_API_KEY": "openai", "ANTHROPIC_API_KEY": "anthropic"}


def _set_instead(env: str | None) -> str:
    """A first-contact hint after ``env`` was found unset: a set variable with a close
    name (a typo in model.api_key_env), or the other SDK's key (the wrong provider).
    Names only, never values."""
    import difflib

    named = [k for k in os.environ if k != env and k.upper().endswith(("KEY", "TOKEN"))]
    close = difflib.get_close_matches(env or "", named, n=1, cutoff=0.75)
    if close and os.environ[close[0]].strip():
        return f"; {close[0]} is set: name it in model.api_key_env if it holds the key"
    other = [k for k in _SDK_KEYS if k != env and os.environ.get(k, "").strip()]
    if env in _SDK_KEYS and other:
        return f"; {other[0]} is set, which is for model.provider: {_SDK_KEYS[other[0]]}"
    return ""


#: the shortest run of a key's characters that is masked where it appears
_KEY_WINDOW = 10


def _key_runs(key: str) -> re.Pattern[str]:
    """Every run of :data:`_KEY_WINDOW` characters of ``key``, any case, as one pattern."""
    width = min(len(key), _KEY_WINDOW)
    runs = {key[i : i + width] for i in range(len(key) - width + 1)}
    return re.compile("|".join(re.escape(r) for r in sorted(runs)), re.IGNORECASE)


_RUNS_CACHE: dict[str, re.Pattern[str]] = {}


def redact(text: str, key: str | Sequence[str] | None) -> str:
    """``text`` with the API key (or each of several secrets: the key and the values
    ``model.headers`` read from the environment), and anything shaped like a key or bearer
    token, masked: a provider can echo a key whole, in another case, or in part (OpenAI's
    401 shows a masked key). Any stretch of ``text`` that is a part of a secret of at
    least 10 characters (4 for a shorter secret: the whole of it), matched
    case-insensitively, is masked as ``***``, grown to the longest such stretch around it."""
    for secret in (key,) if isinstance(key, str) or key is None else key:
        if secret and len(secret) >= 4:
            text = _masked(text, secret)
    return _KEY_SHAPES.sub("***", text)


def _masked(text: str, key: str) -> str:
    """``text`` with every stretch of it that is a part of ``key`` masked (see
    :func:`redact`)."""
    runs = _RUNS_CACHE.get(key)
    if runs is None:
        runs = _RUNS_CACHE[key] = _key_runs(key)
    folded_key = key.casefold()
    spans: list[tuple[int, int]] = []
    for m in runs.finditer(text):
        start, end = m.start(), m.end()
        if spans and start < spans[-1][1]:
            continue
        while end < len(text) and text[start : end + 1].casefold() in folded_key:
            end += 1
        while start > 0 and text[start - 1 : end].casefold() in folded_key:
            start -= 1
        spans.append((start, end))
    for start, end in reversed(spans):
        text = f"{text[:start]}***{text[end:]}"
    return text


def _scrubbed(value: Any, key: Sequence[str]) -> Any:
    """``value`` (text, or lists and dicts of it) with the secrets masked (:func:`redact`)."""
    if isinstance(value, str):
        return redact(value, key)
    if isinstance(value, list | tuple):
        return type(value)(_scrubbed(v, key) for v in value)
    if isinstance(value, dict):
        return {k: _scrubbed(v, key) for k, v in value.items()}
    return value


#: headers that carry a key: one in model.headers replaces the provider's own
KEY_HEADERS = frozenset(["authorization", "api-key", "x-api-key"])


def resolve_headers(headers: Mapping[str, str] | None) -> tuple[dict[str, str], tuple[str, ...]]:
    """``model.headers`` with each ``${NAME}`` replaced by the environment variable's value,
    and the values so read (secrets, to redact from every message).

    Raises:
        SpecError: a named variable is unset or empty, or its value holds a line break or
            control character (one line naming the header and the variable, never a value).
    """
    out: dict[str, str] = {}
    secrets: list[str] = []
    for name, text in (headers or {}).items():

        def value(match: re.Match[str], name: str = name) -> str:
            env = match.group(1)
            found = os.environ.get(env, "")
            if not found.strip():
                raise SpecError(
                    f"model.headers {name!r}: ${{{env}}} is not set; export {env}=<value>"
                )
            if any(ord(ch) < 32 or ord(ch) == 127 for ch in found):
                raise SpecError(
                    f"model.headers {name!r}: the value of ${{{env}}} holds a line break or "
                    f"control character; set {env} to one line"
                )
            secrets.append(found.strip())
            return found.strip()

        out[name] = ENV_REFERENCE.sub(value, text)
    return out, tuple(secrets)


def parse_retry_after(headers: Mapping[str, str] | None, now: float | None = None) -> float | None:
    """Seconds a response asks to wait: ``retry-after-ms`` (milliseconds, sent by OpenAI),
    else ``retry-after`` as seconds or an HTTP date (RFC 9110, section 10.2.3); None when
    absent or unparseable (NaN included); never negative, and at most
    :data:`~gradetrail.errors.MAX_RETRY_AFTER_S` (an infinite or absurd value included).

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
            seconds_ms = float(ms) / 1000.0
        except ValueError:
            pass
        else:
            if not math.isnan(seconds_ms):
                return bounded_retry_after(seconds_ms)
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
    return bounded_retry_after(seconds)


def _redirected(answer: Answer) -> BadRequest:
    """The permanent error for a redirect answer: API calls are never redirected (a
    307/308 would re-send the prompt and the key elsewhere; a 302's answer there is not
    the model's)."""
    location = str(answer.headers.get("location") or "")
    where = urllib.parse.urlsplit(location).netloc if location else ""
    to = f" to {where or 'this host'}" if location else ""
    return BadRequest(
        f"the endpoint answered {answer.status}, a redirect{to}; API calls are never "
        "redirected (the prompt and key would go elsewhere): set model.base_url to the URL "
        "that answers",
        status=answer.status,
    )


def error_fields(body: Any) -> tuple[str | None, str | None, str | None]:
    """``(error_type, code, message)`` from an error body in either protocol's shape:
    OpenAI ``{"error": {"type", "code", "message"}}`` (or the inner object alone, as the
    SDK passes it), Anthropic ``{"type": "error", "error": {"type", "message",
    "details": {"error_code"}}}``, and the plain-string form some gateways send,
    ``{"error": "rate limit exceeded"}`` (the string is the message), and FastAPI's
    ``{"detail": ...}`` (:func:`_fastapi_detail`) when nothing else says. Numeric codes
    (``"code": 429``) come back as text. Google's envelope, a JSON list holding the error
    object (``[{"error": {"code", "message", "status"}}]``, as Gemini's OpenAI-compatible
    endpoint sends it), is read as that object."""
    if isinstance(body, list) and body and isinstance(body[0], dict):
        body = body[0]
    if not isinstance(body, dict):
        return None, None, body.strip()[:300] if isinstance(body, str) and body.strip() else None
    error = body.get("error")
    if isinstance(error, str) and error.strip():
        inner: dict[str, Any] = {**body, "message": body.get("message") or error}
    else:
        inner = error if isinstance(error, dict) else body
    etype, code, message = inner.get("type"), inner.get("code"), inner.get("message")
    if message is None:  # FastAPI's own envelope (vLLM, LiteLLM and others' 404s, 422s)
        message = _fastapi_detail(inner.get("detail"))
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


def _fastapi_detail(detail: Any) -> str | None:
    """The message of FastAPI's error envelope, ``{"detail": "Not Found"}`` or a 422's
    ``{"detail": [{"loc": ["body", "messages"], "msg": "Field required"}, ...]}`` (as
    ``body.messages: Field required``, joined by ``; ``), or None."""
    if isinstance(detail, str) and detail.strip():
        return detail.strip()
    if not isinstance(detail, list):
        return None
    parts = []
    for item in detail[:5]:
        if isinstance(item, dict) and item.get("msg") is not None:
            loc = item.get("loc")
            where = ".".join(str(p) for p in loc) if isinstance(loc, list) else ""
            parts.append(f"{where}: {item['msg']}" if where else str(item["msg"]))
    return "; ".join(parts) or None


_RATE_WORDS = lazy_compile(r"rate.?limit|too many requests|throttl", re.I)
_OVERLOAD_WORDS = lazy_compile(
    r"overloaded|internal (?:server )?error|server error|temporarily unavailable|"
    r"service unavailable|bad gateway|gateway time-?out|try again later",
    re.I,
)
_TIMEOUT_WORDS = lazy_compile(r"timed? ?out|timeout", re.I)
_AUTH_WORDS = lazy_compile(r"invalid.{0,20}(?:api.?key|token|credential)|unauthori[sz]ed", re.I)
#: (status, words in an error type or code that mean it), checked in order
_STATUS_WORDS = (
    (529, ("overloaded",)),
    (402, ("billing_error",)),  # Anthropic: the credit or the billing set-up
    (413, ("request_too_large",)),  # Anthropic: the request over its size limit
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
        the code's own 4xx/5xx status, or 429, 529 (overloaded), 402 (billing), 413 (too
        large), 500, 408, 401 or 400;
        None when nothing says (such a body is a permanent :class:`InvalidResponse`).
    """
    if code is not None and code.isdigit() and 400 <= int(code) <= 599:
        return int(code)
    words = f"{etype or ''} {code or ''}".lower()
    if code in QUOTA_CODES or etype in QUOTA_CODES or _RATE_WORDS.search(words):
        return 429
    for status, names in _STATUS_WORDS:
        if any(name in words for name in names):
            return status
    text = message_words(message)
    if _RATE_WORDS.search(text) or _QUOTA.search(text):
        return 429
    if "overloaded" in text.lower():
        return 529
    for status, pattern in ((500, _OVERLOAD_WORDS), (408, _TIMEOUT_WORDS), (401, _AUTH_WORDS)):
        if pattern.search(text):
            return status
    return None


#: an HTML page (a proxy's or gateway's error page)
_HTML_PAGE = lazy_compile(r"^\s*(?:<!doctype html|<html\b|<head\b|<body\b)", re.I)


_TAG = lazy_compile(r"<[^<>]*>")


def _page_words(page: str) -> str:
    """The words of an HTML page, outside its scripts and styles, tags removed and
    whitespace collapsed; linear in the page, whatever it holds."""
    import html

    low, kept, at = page.lower(), [], 0
    while True:
        found = [i for i in (low.find("<script", at), low.find("<style", at)) if i >= 0]
        if not found:
            kept.append(page[at:])
            break
        start = min(found)
        kept.append(page[at:start])
        tag = "</script" if low.startswith("<script", start) else "</style"
        close = low.find(tag, start)
        end = low.find(">", close) if close >= 0 else -1
        if end < 0:
            break
        at = end + 1
    return " ".join(html.unescape(_TAG.sub(" ", " ".join(kept))).split())


def error_body(content: bytes) -> Any:
    """An error answer's body as both SDKs read it: the decoded JSON when it parses, else
    the stripped text (what :func:`classify_status` and :func:`error_fields` take); an
    HTML page (a proxy's: Cloudflare, nginx) as its words only, tags, scripts and styles
    removed and whitespace collapsed, so the row's one-line message says what it said."""
    text = content.decode("utf-8", "replace").strip()
    try:
        return json.loads(text)
    except (ValueError, RecursionError):  # RecursionError: nested past Python's limit
        if _HTML_PAGE.match(text):
            return _page_words(text[:20_000])[:500] or text[:500]
        return text[:500]


#: statuses whose body may say a quota ran out; of them, a 400/402/403/412 is read for a
#: code of :data:`QUOTA_CODES` or the quotas of :data:`_BILLING_QUOTAS` only (Anthropic's
#: 400 "credit balance is too low"; Fireworks' 412 "Account ... is suspended, possibly due
#: to reaching the monthly spending limit")
_QUOTA_STATUSES = frozenset([400, 402, 403, 412, 429])
_BILLING_QUOTAS = frozenset(["credit", "spend_cap"])


def classify_status(
    status: int,
    headers: Mapping[str, str] | None,
    body: Any,
    *,
    key: str | Sequence[str] | None = None,
    hint: str = "",
    not_found: str = "",
    model: str | None = None,
) -> ProviderError:
    """The gradetrail error for an HTTP error answer; how long it asks to wait is its
    ``retry-after-ms`` or ``retry-after`` header, else a Google body's ``retryDelay``.

    Transient: 408 (timeout), 409, 429 (unless a quota ran out that will not come back
    within the run, as :func:`exhausted_quota` decides: the error's ``quota`` then says
    which; a 400, 402, 403 or 412 saying credit or a spend cap ran out says so too, and any
    402, Payment Required, is ``credit``: Anthropic's ``billing_error``), 5xx,
    529, and any body whose error type or code says overloaded or at capacity (Groq's 498
    ``capacity_exceeded``), unless the request can never succeed (:func:`never_fits`: a
    429 for one request larger than the whole per-minute limit, a 5xx saying the prompt
    does not fit the context window: a :class:`BadRequest`). Permanent: 400, 401, 403,
    404, 422 and every other 4xx (an
    :class:`AuthError` for 401, 403, and a 400 whose Google body refuses the key:
    :func:`key_refused`; a 403 refusing the prompt's content, :func:`moderated`, is a
    :class:`BadRequest`). A
    server's ``x-should-retry: true/false`` header overrides the status (both official
    SDKs honour it). The provider's error type and code are kept;
    the message is redacted of keys. A permanent error that every later request of the
    run would repeat (a refused key, no access, an unknown model, a server without the
    memory for the model: :func:`stops_run`) says so in ``stops_run``, and is permanent
    whatever its status (Ollama's memory error is a 500).

    Args:
        status: the HTTP status code.
        headers: the response headers.
        body: the decoded JSON body, or the raw text.
        key: the API key (or the secrets) to redact from the message.
        hint: appended to auth errors (which variable holds the key).
        not_found: appended to a 404 (where the request went).
        model: the model the request named (a 404 naming it stops the run).
    """
    etype, code, message = error_fields(body)
    text = redact(f"{status} {etype or 'error'}: {message or 'no message'}", key)
    retry_after = parse_retry_after(headers)
    if retry_after is None:  # Gemini says how long in the body
        retry_after = retry_delay(body)
    fields: dict[str, Any] = {
        "status": status,
        "error_type": etype,
        "code": code,
        "retry_after": retry_after,
    }
    # a server at capacity under any status (Groq's 498 capacity_exceeded) is a 5xx's kin
    overloaded = any(w in (v or "") for v in (etype, code) for w in ("overloaded", "capacity"))
    if status in _QUOTA_STATUSES:
        quota = exhausted_quota(etype, code, message, quota_ids(body))
        coded = code in QUOTA_CODES or etype in QUOTA_CODES
        if status != 429 and not coded and quota not in _BILLING_QUOTAS:
            quota = None  # a 400 about one prompt may say "quota" or "per day"
        if status == 402 and quota is None:  # Payment Required: nothing runs until paid
            quota = "credit"
        fields["quota"] = quota
    too_big = never_fits(code, etype, message) if status == 429 or status >= 500 else None
    if too_big is not None:  # retrying can never succeed: recorded at once
        error: ProviderError = BadRequest(f"{text.rstrip('. ')}; {too_big}", **fields)
    elif status == 429:
        error = RateLimited(text, transient=fields["quota"] is None, **fields)
    elif status == 403 and moderated(body, message):  # this prompt refused: a bad request
        error = BadRequest(text, **fields)
    elif _NO_MEMORY.search(message or ""):  # a 500 no retry can cure: the run stops
        error = ServerError(text, transient=False, **fields)
    elif status in (401, 403) or status == 400 and key_refused(body):
        error = AuthError(f"{text.rstrip('. ')}{hint}", **fields)
    elif status == 408:
        error = ProviderTimeout(text, **fields)
    elif status == 409 or status >= 500 or overloaded:
        error = ServerError(text, **fields)
    elif status == 404 and not_found:
        error = BadRequest(f"{text.rstrip('. ')}{not_found}", **fields)
    else:
        error = BadRequest(text, **fields)
    should_retry = (headers or {}).get("x-should-retry")
    if should_retry in ("true", "false") and not _decisive_quota(etype, code, message, error):
        error.transient = should_retry == "true"
        if error.transient:
            error.quota = None  # the server says a retry may succeed: nothing ran out
    if not error.transient and error.quota is None:
        auth = isinstance(error, AuthError)
        error.stops_run = stops_run(status, code, message, model, auth=auth)
    return error


def _decisive_quota(
    etype: str | None, code: str | None, message: str | None, error: ProviderError
) -> bool:
    """Whether ``error`` says a quota ran out by a code of :data:`QUOTA_CODES` or the
    spend-limit words of :data:`_SPEND_WORDS`: then a server's generic ``x-should-retry:
    true`` (which an API may send on every 429) does not make it a limit to wait out."""
    if error.quota is None:
        return False
    coded = code in QUOTA_CODES or etype in QUOTA_CODES
    return coded or _SPEND_WORDS.search(message_words(message)) is not None


class HttpProvider(Provider):
    """Base of the providers that call an HTTP API (see the module docstring).

    Subclasses set the class attributes and implement :meth:`headers`,
    :meth:`make_client`, :meth:`body` and :meth:`normalize`; this class owns keys, the
    transport, error classification, the served-model check, cost and the missing-usage
    warning.
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
        self._client: HttpClientName | None = None
        self._transport: Transport | None = None
        self._pool_size = 16
        self._missing_usage = 0
        self._price_override = (
            Price.from_dict(self.model.price.model_dump())
            .with_fees(server_tool_fees(self.price_provider))
            .with_tier_shares(service_tier_shares(self.price_provider))
            if self.model.price
            else None
        )
        self._prices: dict[str | None, Price | None] = {}
        #: (tier, model, prompt limit) already warned of as priced at the standard rates
        #: (or, with a limit, as unpriced above it)
        self._unpriced_tiers: set[tuple[str | None, str, int | None]] = set()
        self._extra_headers: dict[str, str] | None = None
        self._header_secrets: tuple[str, ...] = ()
        #: what every error message is redacted of: the key and the headers' secrets
        self._secrets: tuple[str, ...] = ()

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
        """Check that the HTTP client is installed and the API key is set, in
        milliseconds: the client is only found, not imported (a fully cached run never
        imports it; see :meth:`warm_up`).

        Raises:
            SpecError: neither aiohttp nor the SDK is installed, or ``model.http_client``
                names one that is not (the message names the pip command).
            AuthError: the key's variable is unset or empty.
        """
        self._client = self._choose_client()
        self._warn_ignored_base_url()
        self._extra_headers = None
        self._key = self._read_key()

    def _warn_ignored_base_url(self) -> None:
        """Warn (once a process) when the SDK's own ``*_BASE_URL`` variable is set but the
        spec names no ``model.base_url``: gradetrail ignores the variable (the cache key
        must name the endpoint), so the requests go to the API's own URL."""
        variable = f"{self.sdk.upper()}_BASE_URL"
        value = os.environ.get(variable, "").strip()
        if not value or self.model.base_url is not None or variable in _WARNED:
            return
        _WARNED.add(variable)
        log.warning(
            "warning: %s is set but ignored; requests go to %s. To send them to %s, set "
            "model.base_url in the spec (or --set model.base_url=...)",
            variable,
            self.default_base_url,
            value,
        )

    def _choose_client(self) -> HttpClientName:
        wanted = self.model.http_client
        have_aio = importlib.util.find_spec("aiohttp") is not None
        have_sdk = importlib.util.find_spec(self.sdk) is not None
        if wanted == "auto":
            if have_aio or have_sdk:
                return "aiohttp" if have_aio else "sdk"
        elif wanted == "aiohttp" and have_aio or wanted == "sdk" and have_sdk:
            return wanted
        package = "aiohttp" if wanted == "aiohttp" else self.sdk
        raise SpecError(
            f"model.provider {self.model.provider!r} needs the {package} package; "
            f"pip install 'gradetrail[{self.sdk}]'"
        )

    def warm_up(self) -> None:
        """Import the HTTP client (up to a second for an SDK), so the run's first samples
        do not pay it; nothing for a plain ``http://`` endpoint (:meth:`plain_http`)."""
        if not self.plain_http():
            importlib.import_module("aiohttp" if self._chosen() == "aiohttp" else self.sdk)

    def plain_http(self) -> bool:
        """Whether requests go through :class:`PlainHttpTransport` (asyncio's streams,
        no HTTP library to import): ``model.http_client: auto`` where aiohttp would serve
        a plain ``http://`` endpoint without a proxy (a local server)."""
        return (
            self.model.http_client == "auto"
            and self._chosen() == "aiohttp"
            and plain_http_endpoint(self.url())
        )

    def _chosen(self) -> HttpClientName:
        if self._client is None:
            self._client = self._choose_client()
        return self._client

    def key_hint(self) -> str:
        """What to fix after an auth error: which variable holds the key, or that none
        was sent (``model.api_key_required: false`` sends a placeholder)."""
        if self.key_in_headers():
            return "; check the key header in model.headers (and the variable it names)"
        if getattr(self, "_key", None) == PLACEHOLDER_KEY:
            return (
                f"; no key was sent (model.api_key_required is false, so {PLACEHOLDER_KEY!r} "
                "was): name the key's variable in model.api_key_env"
            )
        return f"; check the key in {self.key_env}" if self.key_env else ""

    def refine_error(
        self,
        error: ProviderError,
        headers: Mapping[str, str],
        answer: Any,
        sent: dict[str, Any],
    ) -> ProviderError:
        """``error`` (:func:`classify_status` of the error ``answer``, decoded, with its
        ``headers``) as this provider's API means it, given the body ``sent``: a protocol
        whose error says more than its status (Anthropic's 429 for a request that can
        never fit its limit) overrides this. By default ``error`` as it is."""
        return error

    def endpoint_hint(self, body: Any, model: str) -> str:
        """What to check after a 404 that is not about the model (nothing serves the
        endpoint's path at this base URL): empty when the error names the model."""
        etype, code, message = error_fields(body)
        if code == "model_not_found" or model in (message or ""):
            return ""
        url = self.base_url.rstrip("/") + self.path
        return f"; nothing answered at {url}: check model.base_url{self.base_url_advice()}"

    def base_url_advice(self) -> str:
        """A protocol's usual mistake in ``model.base_url`` (after a 404), or empty."""
        return ""

    def identity(self) -> dict[str, Any]:
        """What the spec adds to every request besides the conversation, when set:
        ``model.reasoning``, the answer's JSON Schema (``model.response_format``), the
        URL's query (``model.query``) and the headers as the spec writes them (``${NAME}``
        unresolved: never a secret). Unset, nothing: older keys stay as they were."""
        out: dict[str, Any] = {}
        if self.model.reasoning is not None:
            out["reasoning"] = self.model.reasoning.model_dump(exclude_none=True)
        if self.model.response_format is not None:
            out["response_format"] = self.model.response_format.model_dump(mode="json")
        if self.model.query:
            out["query"] = dict(self.model.query)
        if self.model.headers:
            out["headers"] = dict(self.model.headers)
        return out

    def extra_headers(self) -> dict[str, str]:
        """``model.headers`` resolved (see :func:`resolve_headers`); read once.

        Raises:
            SpecError: a header's variable is unset or holds a line break.
        """
        if self._extra_headers is None:
            self._extra_headers, self._header_secrets = resolve_headers(self.model.headers)
        return self._extra_headers

    def key_in_headers(self) -> bool:
        """True when ``model.headers`` carries the key (Authorization, api-key or
        x-api-key): the provider's own key is then neither read nor sent."""
        return any(name.lower() in KEY_HEADERS for name in self.model.headers or {})

    def url(self) -> str:
        """The endpoint's absolute URL: the base URL, the API's path and ``model.query``."""
        url = self.base_url.rstrip("/") + self.path
        if self.model.query:
            url += ("&" if "?" in url else "?") + urlencode(self.model.query)
        return url

    def _all_headers(self, key: str) -> dict[str, str]:
        """The lean client's headers: the protocol's, then ``model.headers`` over them
        (with a key header there, the protocol's own key headers are dropped)."""
        own = self.headers(key)
        if self.key_in_headers():
            own = {k: v for k, v in own.items() if k.lower() not in KEY_HEADERS}
        return {**own, **self.extra_headers()}

    def _sdk_headers(self) -> dict[str, Any]:
        """``model.headers`` for the SDK's requests; when they carry the key, the SDK's
        own key headers are omitted (its ``Omit()``, which the SDK's auth check accepts
        only per request)."""
        extra: dict[str, Any] = dict(self.extra_headers())
        if extra and self.key_in_headers():
            omit = importlib.import_module(self.sdk).Omit()
            named = {k.lower() for k in extra}
            for name in ("Authorization", "X-Api-Key"):
                if name.lower() not in named:
                    extra[name] = omit
        return extra

    def _read_key(self) -> str:
        self.extra_headers()  # a header's variable unset: one line, before any call
        key = PLACEHOLDER_KEY if self.key_in_headers() else self._read_own_key()
        self._secrets = (key, *self._header_secrets)
        return key

    def _read_own_key(self) -> str:
        env = self.key_env
        value = os.environ.get(env, "").strip() if env else ""
        if value:
            return value
        if not self.model.api_key_required:
            return PLACEHOLDER_KEY
        raise AuthError(
            f"{env} is not set; export {env}=<your API key> "
            f"(or name another variable in model.api_key_env){_set_instead(env)}"
        )

    def size_pool(self, concurrency: int) -> None:
        """Size the connection pool for ``concurrency`` requests in flight."""
        self._pool_size = max(1, concurrency)

    # -- the protocol ------------------------------------------------------------------

    @abstractmethod
    def headers(self, key: str) -> dict[str, str]:
        """The protocol's authentication (and version) headers, for the lean client."""

    @abstractmethod
    def make_client(self, key: str, http_client: Any) -> Any:
        """One SDK client (``max_retries=0``) around ``http_client``, for the SDK path."""

    @abstractmethod
    def body(self, request: Request) -> dict[str, Any]:
        """The JSON request body for ``request`` (the one builder, for every transport)."""

    @abstractmethod
    def normalize(self, data: dict[str, Any], latency_s: float) -> tuple[Response, int]:
        """The response for a decoded 200 body, and its prompt-cache write tokens (priced
        separately): the one parser, for every transport.

        Raises:
            InvalidResponse: the body is an error or lacks the fields a response needs.
        """

    def transport(self) -> Transport:
        """The run's transport (built on first use: in a Ray actor, in the actor)."""
        if self._transport is None:
            key = self._key if self._key is not None else self._read_key()
            self._key = key
            # absolute: spares merging the path into the base URL on every call
            url = self.url()
            if self.plain_http():
                self._transport = PlainHttpTransport(
                    url, self.base_url, self._all_headers(key), self._pool_size
                )
            elif self._chosen() == "aiohttp":
                self._transport = AioHttpTransport(
                    url, self.base_url, self._all_headers(key), self._pool_size
                )
            else:
                self._transport = SdkTransport(
                    self.sdk,
                    lambda http_client: self.make_client(key, http_client),
                    url,
                    self.base_url,
                    self._pool_size,
                    self._sdk_headers(),
                )
        return self._transport

    # -- one call ------------------------------------------------------------------------

    async def complete(self, request: Request) -> Response:
        """Send one request and normalize the answer; an answer the provider says is to
        be continued (:meth:`continuation`: Anthropic's ``pause_turn``) is sent back, up
        to ``model.pause_turn_continuations`` times, and the parts make one response
        (texts joined, tokens, server-tool uses and cost summed, the last part's stop
        reason). The API key and the headers' secrets are masked (:func:`redact`) in
        every field of the answer or error that a provider controls (text, tool calls,
        served model, stop reason; an error's message, type and code), so a provider that
        echoes one gets it stored nowhere.

        Raises:
            ProviderError: a subclass saying whether a retry may help (see
                :func:`classify_status`); connection failures name the endpoint and the
                error; an error body under 200 or an unparseable body is InvalidResponse.
        """
        try:
            response = await self._complete(request)
        except ProviderError as exc:
            secrets = self._masked_secrets()
            if secrets:
                exc.args = (redact(str(exc), secrets),)
                exc.error_type = _scrubbed(exc.error_type, secrets)
                exc.code = _scrubbed(exc.code, secrets)
            raise
        secrets = self._masked_secrets()
        if not secrets:
            return response
        return replace(
            response,
            text=redact(response.text, secrets),
            served_model=_scrubbed(response.served_model, secrets),
            stop_reason=_scrubbed(response.stop_reason, secrets),
            raw_stop_reason=_scrubbed(response.raw_stop_reason, secrets),
            tool_calls=_scrubbed(response.tool_calls, secrets),
        )

    def usage_int(self, usage: Mapping[str, Any], *path: str) -> int:
        """:func:`usage_int`, a hostile value told to this provider's events."""
        return usage_int(usage, *path, events=self.events)

    def _masked_secrets(self) -> tuple[str, ...]:
        """The secrets to mask (the key, read by the first call's transport, and the
        headers' values), without the placeholder sent when no key is required."""
        return tuple(s for s in self._secrets if s and s != PLACEHOLDER_KEY)

    async def _complete(self, request: Request) -> Response:
        """:meth:`complete` before the secrets are masked."""
        start = time.perf_counter()
        streamed = self.streams(request)
        body = self.stream_body(request) if streamed else self.body(request)
        data, ttft = await self._exchange(request, body, streamed, start)
        response, cache_write = self.normalize(data, time.perf_counter() - start)
        if ttft is not None or cache_write != response.cache_write_tokens:
            response = replace(response, ttft_s=ttft, cache_write_tokens=cache_write)
        for _ in range(self.model.pause_turn_continuations):
            more = self.continuation(body, data)
            if more is None:
                break
            body = more
            data, _ = await self._exchange(request, body, streamed, start)
            part, cache_write = self.normalize(data, time.perf_counter() - start)
            response = _joined(response, replace(part, cache_write_tokens=cache_write))
        return self._finish(request, response, response.cache_write_tokens)

    def continuation(self, body: dict[str, Any], data: dict[str, Any]) -> dict[str, Any] | None:
        """The body that continues an answer the API paused (``data``, the answer to
        ``body``), or None when it is finished (default: always finished)."""
        return None

    async def _exchange(
        self, request: Request, body: dict[str, Any], streamed: bool, start: float
    ) -> tuple[dict[str, Any], float | None]:
        """Send ``body``: the decoded answer (a stream folded into it) and the time to
        its first token when streamed.

        Raises:
            ProviderError: see :meth:`complete`.
        """
        transport = self.transport()
        fold: Fold | None = None
        feeder: _Feeder | None = None
        try:
            if streamed:
                fold = self.fold(start)
                feeder = _feeder(fold)
                answer = await transport.stream(body, feeder)
            else:
                answer = await transport.send(body)
        except ProviderError:
            raise
        except UnicodeEncodeError as exc:  # a lone surrogate from a row: one recorded row
            raise unencodable_request(exc) from None
        except Exception as exc:  # not a transport error: record it (fail-fast catches it)
            text = redact(f"{type(exc).__name__}: {exc}", self._secrets)
            raise ProviderError(f"unexpected error calling {self.base_url}: {text}") from None
        if 300 <= answer.status < 400:
            raise _redirected(answer)
        if answer.status >= 400:
            error = error_body(answer.content)
            classified = classify_status(
                answer.status,
                answer.headers,
                error,
                key=self._secrets,
                hint=self.key_hint(),
                not_found=self.endpoint_hint(error, request.model) if answer.status == 404 else "",
                model=request.model,
            )
            raise self.refine_error(classified, answer.headers, error, body)
        if fold is not None and feeder is not None:
            whole = feeder.unstreamed()  # the server ignored stream: true
            if whole is not None:
                return whole, None
            return fold.answer(), fold.first_token_s
        return self._decode(answer), None

    def streams(self, request: Request) -> bool:
        """Whether ``request`` is streamed: ``model.stream`` when set, else what the
        provider requires (:meth:`needs_stream`)."""
        wanted = self.model.stream
        return self.needs_stream(request) if wanted is None else wanted

    def needs_stream(self, request: Request) -> bool:
        """True when the provider requires streaming for this request (default: never)."""
        return False

    @abstractmethod
    def fold(self, started: float) -> Fold:
        """A fold of this protocol's stream events into its non-streaming answer."""

    def stream_body(self, request: Request) -> dict[str, Any]:
        """:meth:`body` asking for a streamed answer (``stream: true``)."""
        return {**self.body(request), "stream": True}

    def _decode(self, answer: Answer) -> dict[str, Any]:
        try:
            data = parsed(answer.content)
        except ValueError:
            text = answer.content[:80].decode("utf-8", "replace")
            raise InvalidResponse(
                f"{answer.status} answer is not JSON: {text!r}", status=answer.status
            ) from None
        except RecursionError:
            raise InvalidResponse(
                f"{answer.status} answer is JSON nested too deeply to read (over about "
                f"{sys.getrecursionlimit()} levels)",
                status=answer.status,
            ) from None
        if not isinstance(data, dict):
            raise InvalidResponse(
                f"{answer.status} answer is JSON but not an object", status=answer.status
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
        transient, quota = False, None
        if implied is not None:
            implied_error = classify_status(implied, None, data)
            transient, quota = implied_error.transient, implied_error.quota
        what = etype or (f"code {code}" if code else "error")
        text = redact(f"200 answer is an error: {what}: {message or 'no message'}", self._secrets)
        return InvalidResponse(
            text, transient=transient, status=200, error_type=etype, code=code, quota=quota
        )

    def _finish(self, request: Request, response: Response, cache_write: int) -> Response:
        served = response.served_model
        if response.cache_write_tokens != cache_write:
            response = replace(response, cache_write_tokens=cache_write)
        reasoning = self.model.reasoning
        if reasoning is not None and reasoning.summary is False:  # tokens kept, text not
            response = replace(response, reasoning=None)
        cost = self.price(request, response)
        if cost != response.cost_usd:
            response = replace(response, cost_usd=cost)
        if self.model.require_served_model and not served_model_matches(request.model, served):
            raise BadRequest(
                f"served model {served!r} is not the requested {request.model!r} (or its "
                "dated snapshot); model.require_served_model is set",
                error_type="served_model_mismatch",
                code=served,
                billed=response,  # answered and paid for: its tokens and cost stay counted
            )
        return response

    def price(self, request: Request, response: Response) -> float | None:
        """USD under the spec's ``model.price`` or the bundled table (None: unknown), at
        the rates of the service tier the response says served it
        (``response.service_tier``; a tier with no known rates at the standard ones, with
        a warning once); a batch response (``response.batch``) at :attr:`batch_discount`
        of it."""
        standard = self._price(request.model, response.served_model)
        if standard is None:
            return None
        price = standard.for_tier(response.service_tier)
        if price is None:
            price = standard
            self._tier_unpriced(response.service_tier, request.model)
        if not price.covers(response.total_input_tokens):  # priority above 128K prompt tokens
            self._tier_unpriced(response.service_tier, request.model, price.max_prompt_tokens)
            return None
        cost = price.cost(
            response.input_tokens - response.cache_write_tokens,
            response.output_tokens,
            response.cached_input_tokens,
            response.cache_write_tokens,
            response.cache_write_1h_tokens,
        )
        fees = price.tool_fees(response.server_tool_uses)
        if fees is None:
            return None
        if response.batch:  # the batch tier discounts tokens; per-use fees stay whole
            cost *= self.batch_discount
        return round(cost + fees, 10)

    #: the batch tier's share of the online price (both APIs: half)
    batch_discount: ClassVar[float] = 0.5

    def batch_response(self, request: Request, data: dict[str, Any]) -> Response:
        """The response for one successful batch result's body (the same parser and
        checks as an online answer), priced at the batch tier.

        Raises:
            InvalidResponse, BadRequest: as :meth:`normalize` and the served-model check.
        """
        response, cache_write = self.normalize(data, 0.0)
        # the batch tier is its own (batch=True), whatever service_tier the body names
        batched = replace(response, batch=True, service_tier=None)
        return self._finish(request, batched, cache_write)

    def _price(self, model: str, served: str | None) -> Price | None:
        if self._price_override is not None:
            return self._price_override
        if served not in self._prices:
            price = price_for(self.price_provider, model, served)
            fees = server_tool_fees(self.price_provider)
            self._prices[served] = price.with_fees(fees) if price is not None else None
        return self._prices[served]

    def _tier_unpriced(
        self, tier: str | None, request_model: str, above: int | None = None
    ) -> None:
        """Warn (once a tier and model) that a response of ``tier`` is priced at the
        standard rates, for want of that tier's; with ``above``, that the tier's rates
        hold only for prompts up to ``above`` tokens, so a longer one's cost is unknown."""
        if (tier, request_model, above) in self._unpriced_tiers:
            return
        self._unpriced_tiers.add((tier, request_model, above))
        if above is None:
            log.warning(
                "%s: no %s-tier price for %s; its responses are priced at the standard rates "
                "(give model.price to set them)",
                self.model.provider,
                tier,
                request_model,
            )
        else:
            log.warning(
                "%s: %s-tier rates for %s are published for prompts of up to %s tokens; a "
                "longer prompt's cost is unknown (n/a; give model.price to set it)",
                self.model.provider,
                tier or "standard",
                request_model,
                f"{above:,}",
            )
        self.events.emit(
            "tier_unpriced", provider=self.model.provider, model=request_model, tier=tier
        )

    def servable_tiers(self, request: Request) -> tuple[str | None, ...]:
        """The service tiers an answer to ``request`` may be served and billed on (None:
        the standard one), for the budget's worst case: the tier the request asks for
        (``extra.service_tier``) and the standard one; when it asks for none (or
        ``auto``), every tier this model has rates for, batch aside (a project or
        organization may default to priority: OpenAI's project service tier, Anthropic's
        Priority Tier commitments); ``default`` / ``standard_only``: the standard one."""
        asked = (request.params.get("extra") or {}).get("service_tier")
        if isinstance(asked, str) and asked.strip().lower() in ("default", "standard_only"):
            return (None,)
        named = tier_name(asked)  # auto: None, as if not asked
        if named is not None:
            return (None, named)
        price = self._price(request.model, None)
        known = [name for name, _ in price.tiers if name != "batch"] if price else []
        return (None, *known)

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
            self.events.emit("missing_usage", provider=self.model.provider, model=request_model)

    async def aclose(self) -> None:
        """Close the transport; log how many responses had no usage."""
        if self._missing_usage:
            self.events.emit(
                "missing_usage_total",
                provider=self.model.provider,
                model=self.model.name,
                responses=self._missing_usage,
            )
        if self._transport is not None:
            transport, self._transport = self._transport, None
            await transport.aclose()


def _joined(first: Response, then: Response) -> Response:
    """One response from an answer and its continuation: texts, tool calls and reasoning
    joined; tokens and server-tool uses summed; the continuation's stop reason."""
    uses = dict(first.server_tool_uses)
    for name, n in then.server_tool_uses.items():
        uses[name] = uses.get(name, 0) + n
    reasoning = [r for r in (first.reasoning, then.reasoning) if r]
    return replace(
        then,
        text=first.text + then.text,
        input_tokens=first.input_tokens + then.input_tokens,
        output_tokens=first.output_tokens + then.output_tokens,
        cached_input_tokens=first.cached_input_tokens + then.cached_input_tokens,
        cache_write_tokens=first.cache_write_tokens + then.cache_write_tokens,
        cache_write_1h_tokens=first.cache_write_1h_tokens + then.cache_write_1h_tokens,
        reasoning_tokens=first.reasoning_tokens + then.reasoning_tokens,
        reasoning="\n\n".join(reasoning) if reasoning else None,
        reasoning_blocks=first.reasoning_blocks + then.reasoning_blocks,
        content_blocks=_joined_blocks(first, then),
        tool_calls=first.tool_calls + then.tool_calls,
        server_tool_uses=uses,
        ttft_s=first.ttft_s,
    )


def _joined_blocks(first: Response, then: Response) -> tuple[dict[str, Any], ...]:
    """The content blocks of an answer and its continuation, when either kept its own
    (see :attr:`Response.content_blocks`), the other's rebuilt from its parts."""
    if not first.content_blocks and not then.content_blocks:
        return ()
    from gradetrail.providers._anthropic_wire import answer_blocks  # pause_turn is theirs

    return tuple(
        block
        for one in (first, then)
        for block in (
            one.content_blocks or answer_blocks(one.text, one.tool_calls, one.reasoning_blocks)
        )
    )


#: the most characters of a streamed answer kept while it holds no event (a server that
#: ignored ``stream: true`` and answered the whole JSON body)
_UNSTREAMED_CHARS = 64 * 1024 * 1024


class _Feeder:
    """A line handler parsing server-sent events into ``fold``; until an event comes, the
    lines are kept too (:meth:`unstreamed`), in case the server ignored ``stream: true``
    and answered the whole body as JSON, as some gateways and local servers do."""

    def __init__(self, fold: Fold) -> None:
        self.fold = fold
        self.parser = SseParser()
        self.events = 0
        self.lines: list[str] = []
        self.size = 0

    def __call__(self, line: str) -> None:
        if not self.events and self.size < _UNSTREAMED_CHARS:
            self.lines.append(line)
            self.size += len(line)
        event = self.parser.line(line)
        if event is not None:
            self.events += 1
            self.lines.clear()
            self.fold.feed(*event)

    def unstreamed(self) -> dict[str, Any] | None:
        """The answer as a JSON object when no event came and the lines are one (the
        server answered unstreamed), else None."""
        if self.events or not self.lines or self.size >= _UNSTREAMED_CHARS:
            return None
        try:
            data = parsed("\n".join(self.lines).encode())
        except (ValueError, RecursionError):
            return None
        return data if isinstance(data, dict) else None


def _feeder(fold: Fold) -> _Feeder:
    """A line handler parsing server-sent events into ``fold`` (see :class:`_Feeder`)."""
    return _Feeder(fold)


#: the largest token count one response's ``usage`` may report; above it (or negative,
#: fractional, NaN, infinite, not a number) a field is not a count and counts as 0
MAX_USAGE_TOKENS = 100_000_000


def usage_int(usage: Mapping[str, Any], *path: str, events: Events | None = None) -> int:
    """An integer token count at ``path`` in a usage object: 0 when absent or null, and
    0 with a logged warning and an ``invalid_usage`` event when the value is not a count
    (NaN, infinite, negative, fractional, above :data:`MAX_USAGE_TOKENS`, or not a
    number): a hostile usage never crashes a run or makes a cost negative."""
    value: Any = usage
    for part in path:  # a dict (a decoded answer) tested first: the ABC check is slower
        value = value.get(part) if type(value) is dict or isinstance(value, Mapping) else None
    if value is None:
        return 0
    if type(value) is int and 0 <= value <= MAX_USAGE_TOKENS:  # the common case, at once
        return value
    number = isinstance(value, int | float) and not isinstance(value, bool)
    whole = number and (isinstance(value, int) or (math.isfinite(value) and value.is_integer()))
    if whole and 0 <= value <= MAX_USAGE_TOKENS:
        return int(value)
    shown = repr(value)[:40]
    log.warning("a response's usage %s is %s, not a token count: counted as 0", path, shown)
    if events is not None:  # the run's log follows the provider's events
        events.emit("invalid_usage", "warning", field=".".join(path), value=shown)
    return 0
