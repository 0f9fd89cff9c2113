"""The ``anthropic`` provider: the Messages API through the official ``anthropic`` SDK
(``AsyncAnthropic``).

The key comes from ``ANTHROPIC_API_KEY`` or ``model.api_key_env`` (never the SDK's
profile or token files: a run's credentials are one named variable). ``base_url``
defaults to ``https://api.anthropic.com`` (``ANTHROPIC_BASE_URL`` is ignored, so the
cache key always names the endpoint). ``max_tokens`` is required by the API: when the
spec sets none, :data:`DEFAULT_MAX_TOKENS` is sent (and enters the cache key). The API
has no ``seed``; a spec that sets one is refused before any call. ``stop`` is sent as
``stop_sequences``. ``model.response_format`` (a JSON-schema answer) is asked for with a
forced answer tool (see :mod:`gradetrail.providers._structured`).

Stop reasons are Anthropic's own (``end_turn``, ``max_tokens``, ``stop_sequence``,
``tool_use``, ``pause_turn``: a server-tool loop paused, flagged truncated, or sent
back verbatim to be continued up to ``model.pause_turn_continuations`` times);
``model_context_window_exceeded`` counts as ``max_tokens`` (truncated); ``refusal`` (the
safety classifiers stopped the answer) is a model answer whose usage and cost are kept,
scored as ``run.refusals`` says. Tokens: ``input_tokens`` excludes prompt-cache reads
and writes, so input = ``input_tokens`` + ``cache_creation_input_tokens`` and cached
input = ``cache_read_input_tokens``; cache writes are priced at the cache-write rate;
``output_tokens_details.thinking_tokens`` are the reasoning tokens (part of output);
``server_tool_use`` counts (web searches, fetches) are priced per use;
``usage.service_tier`` (``standard``, ``priority``, ``batch``) is the tier that served the
answer (a priority one priced at the standard rates, with a warning: Priority Tier has no
per-token price). ``thinking`` and ``redacted_thinking`` blocks are kept verbatim
(:attr:`Response.reasoning_blocks`) and their text as :attr:`Response.reasoning`; a
tool-use answer whose blocks those parts do not rebuild (server-tool results, citations)
is kept whole (:attr:`Response.content_blocks`), so an agent loop sends it back as it
came.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from gradetrail.conversation.messages import Message
from gradetrail.errors import BadRequest, InvalidResponse, ProviderError, RateLimited, SpecError
from gradetrail.providers._anthropic_wire import (
    anthropic_tool_choice,
    anthropic_tools,
    check_anthropic_content,
    rebuilt_exactly,
    to_anthropic,
    tool_calls_from_anthropic,
)
from gradetrail.providers._http import HttpProvider, error_fields
from gradetrail.providers._stream import AnthropicFold
from gradetrail.providers._structured import answer_from_forced_tool, force_answer_tool
from gradetrail.providers._transport import sdk_env_headers
from gradetrail.providers.base import Request, Response
from gradetrail.providers.pricing import tier_name
from gradetrail.spec.reasoning import (
    ANTHROPIC_DEFAULT_MAX_TOKENS,
    DEFAULT_ANTHROPIC_VERSION,
    anthropic_reasoning_fields,
)

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicProvider"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
#: max_tokens sent when the spec sets none (the Messages API requires one)
DEFAULT_MAX_TOKENS = ANTHROPIC_DEFAULT_MAX_TOKENS
#: the ``anthropic-version`` header both clients send when ``model.api_version`` is unset
ANTHROPIC_VERSION = DEFAULT_ANTHROPIC_VERSION

_STOP = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "model_context_window_exceeded": "max_tokens",
    "pause_turn": "pause_turn",
    "refusal": "refusal",
}
#: max_tokens above which a request is streamed (model.stream unset): the SDK's rule, an
#: expected 60 min x max_tokens / 128,000 over ten minutes
STREAM_ABOVE_MAX_TOKENS = 21_333
#: content blocks an agent loop must send back verbatim on its next turn
REASONING_BLOCKS = ("thinking", "redacted_thinking")


#: a 400 refusing a tool's input schema (the Messages API: "tools.0.custom.input_schema:
#: JSON schema is invalid. It must match JSON Schema draft 2020-12 ...")
_SCHEMA_WORDS = re.compile(r"\binput_schema\b.{0,80}\binvalid\b", re.I | re.S)


#: the per-minute token limit a 429 names ("would exceed the rate limit for your
#: organization (...) of 30,000 input tokens per minute")
_PER_MINUTE = re.compile(r"\bof ([\d,]+) (input|output) tokens per minute", re.I)


def never_fits(message: str | None, headers: Mapping[str, str], max_tokens: Any) -> str | None:
    """Why an Anthropic 429 for tokens a minute can never succeed, or None (a limit to
    wait out). Anthropic counts a request against its output-tokens-a-minute limit by its
    ``max_tokens`` at the start ("OTPM rate limits are estimated based on max_tokens at
    the beginning of each request", docs.anthropic.com/en/api/rate-limits), so a
    ``max_tokens`` above that limit never fits; and a request refused while the
    ``anthropic-ratelimit-{input,output}-tokens-remaining`` header equals its ``-limit``
    (nothing else in the bucket) asks more on its own than the whole limit. The message
    (the same words as a full bucket's) does not tell them apart."""
    match = _PER_MINUTE.search(message or "")
    if match is None:
        return None
    headers = {str(k).lower(): str(v) for k, v in headers.items()}
    limit, kind = int(match.group(1).replace(",", "")), match.group(2).lower()
    if kind == "output" and isinstance(max_tokens, int) and max_tokens > limit:
        return (
            f"max_tokens {max_tokens:,} is more than the whole limit of {limit:,} output "
            "tokens a minute, which Anthropic counts max_tokens against: lower max_tokens"
        )
    cap = headers.get(f"anthropic-ratelimit-{kind}-tokens-limit")
    left = headers.get(f"anthropic-ratelimit-{kind}-tokens-remaining")
    if cap is not None and cap.strip().isdigit() and cap.strip() == (left or "").strip():
        return (
            f"this one request asks more than the whole limit of {limit:,} {kind} tokens a "
            "minute (refused with none of it in use): shorten the prompt"
            + (" or max_tokens" if kind == "output" else "")
        )
    return None


class AnthropicProvider(HttpProvider):
    """The Messages API."""

    name = "anthropic"
    sdk = "anthropic"
    default_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"
    price_provider = "anthropic"
    default_base_url = ANTHROPIC_BASE_URL
    empty_prompt_refused = "the prompt renders empty, which the Anthropic API refuses"

    def refine_error(
        self,
        error: ProviderError,
        headers: Mapping[str, str],
        answer: Any,
        sent: dict[str, Any],
    ) -> ProviderError:
        """A 429 for tokens a minute that this request can never fit (:func:`never_fits`)
        is recorded as the row's error at once (a :class:`BadRequest`), never retried nor
        left to pause every other request on its Retry-After. With
        ``model.response_format`` (its schema the forced answer tool's ``input_schema``,
        the request's only tool), a 400 refusing a tool's ``input_schema`` ("tools.0.custom
        .input_schema: JSON schema is invalid ...") refuses that schema, which every
        request repeats: it stops the run (``stops_run: schema``)."""
        if isinstance(error, BadRequest) and error.status == 400 and not error.transient:
            _, _, message = error_fields(answer)
            fmt = self.model.response_format
            if fmt is not None and error.stops_run is None and _SCHEMA_WORDS.search(message or ""):
                error.stops_run = "schema"
            return error
        if not (isinstance(error, RateLimited) and error.transient):
            return error
        _, _, message = error_fields(answer)
        why = never_fits(message, headers, sent.get("max_tokens"))
        if why is None:
            return error
        return BadRequest(
            f"{str(error).rstrip('. ')}; {why}",
            status=error.status,
            error_type=error.error_type,
            code=error.code,
        )

    def check_messages(self, messages: Sequence[Message]) -> None:
        """The Messages API refuses a message with no text (see
        :func:`~gradetrail.providers._anthropic_wire.check_anthropic_content`).

        Raises:
            ConversationError: naming the message.
        """
        check_anthropic_content(messages)

    def base_url_advice(self) -> str:
        """The path ``/v1/messages`` is added to the base URL: it should not end in /v1."""
        if not self.base_url.rstrip("/").endswith("/v1"):
            return ""
        return " (without /v1: gradetrail adds /v1/messages)"

    def check_ready(self) -> None:
        """See :meth:`HttpProvider.check_ready`; also refuses ``params.seed``.

        Raises:
            SpecError: the SDK is missing, or the spec sets a seed.
            AuthError: the key's variable is unset.
        """
        if self.model.params.seed is not None:
            raise SpecError("model.params.seed: the Anthropic API has no seed; remove it")
        super().check_ready()

    def identity(self) -> dict[str, Any]:
        """The default ``max_tokens``, when the spec sets none (it decides the output);
        ``model.api_version``, ``model.pause_turn_continuations`` and ``model.reasoning``
        when set (absent at their defaults, so keys made without them stay valid)."""
        out: dict[str, Any] = super().identity()
        if self.model.params.max_tokens is None:
            out["default_max_tokens"] = DEFAULT_MAX_TOKENS
        if self.model.api_version is not None and self.model.api_version != ANTHROPIC_VERSION:
            out["api_version"] = self.model.api_version
        if self.model.pause_turn_continuations:
            out["pause_turn_continuations"] = self.model.pause_turn_continuations
        return out

    @property
    def api_version(self) -> str:
        """The ``anthropic-version`` both clients send: ``model.api_version``, else
        :data:`ANTHROPIC_VERSION` (never the installed SDK's own default)."""
        return self.model.api_version or ANTHROPIC_VERSION

    batches = True

    def batch_api(self) -> Any:
        """The Message Batches API client (see :mod:`gradetrail.providers._anthropic_batch`)."""
        from gradetrail.providers._anthropic_batch import AnthropicBatchAPI

        return AnthropicBatchAPI(self)

    def headers(self, key: str) -> dict[str, str]:
        """``x-api-key`` and ``anthropic-version`` (:attr:`api_version`), as the
        Messages API documents them."""
        return {"x-api-key": key, "anthropic-version": self.api_version}

    def make_client(self, key: str, http_client: Any) -> Any:
        """An ``anthropic.AsyncAnthropic`` with retries (and tracing) off, sending the
        run's ``anthropic-version`` (:attr:`api_version`) and the key in ``x-api-key``,
        as the lean client does (:meth:`headers`), and no header of the SDK's
        ``ANTHROPIC_CUSTOM_HEADERS`` variable (``model.headers`` is the run's one way
        to add headers, and enters its identity)."""
        import anthropic

        kwargs: dict[str, Any] = {
            "api_key": key,
            "base_url": self.base_url,
            "max_retries": 0,
            "http_client": http_client,
            # the run's API version, not the SDK's default (2.x sends 2026-10-21), and the
            # key where the Messages API documents it (2.x sends it as a bearer token);
            # none of the headers the SDK reads from ANTHROPIC_CUSTOM_HEADERS by itself
            "default_headers": {
                **{name: anthropic.Omit() for name in sdk_env_headers("ANTHROPIC_CUSTOM_HEADERS")},
                "anthropic-version": self.api_version,
                "X-Api-Key": key,
                "Authorization": anthropic.Omit(),
            },
        }
        try:
            return anthropic.AsyncAnthropic(**kwargs, open_telemetry=False)
        except TypeError:  # SDKs before OpenTelemetry support
            return anthropic.AsyncAnthropic(**kwargs)

    def body(self, request: Request) -> dict[str, Any]:
        """The Messages body: ``system`` apart, roles alternating (tool calls as
        ``tool_use``, results as ``tool_result`` blocks), ``tools`` and ``tool_choice``,
        ``stop`` as ``stop_sequences``, ``model.reasoning`` as ``thinking`` /
        ``output_config`` (see :mod:`gradetrail.spec.reasoning`)."""
        params = request.params
        body: dict[str, Any] = {
            "model": request.model,
            "max_tokens": params.get("max_tokens", DEFAULT_MAX_TOKENS),
            "messages": to_anthropic(request.messages),
        }
        if request.system is not None:
            body["system"] = request.system
        if request.tools:
            body["tools"] = anthropic_tools(request.tools)
        if request.tool_choice is not None:
            body["tool_choice"] = anthropic_tool_choice(request.tool_choice)
        for name in ("temperature", "top_p"):
            if name in params:
                body[name] = params[name]
        if "stop" in params:
            body["stop_sequences"] = params["stop"]
        if self.model.reasoning is not None:
            body.update(anthropic_reasoning_fields(request.model, self.model.reasoning))
        if self.model.response_format is not None:  # a JSON answer through a forced tool
            force_answer_tool(body, self.model.response_format)
        extra = params.get("extra")
        if extra:
            body.update(extra)
        return body

    def needs_stream(self, request: Request) -> bool:
        """True when max_tokens is above :data:`STREAM_ABOVE_MAX_TOKENS`: an answer that
        long may take past ten minutes, which the API (and its SDK) refuse to serve
        without streaming."""
        max_tokens = request.params.get("max_tokens", DEFAULT_MAX_TOKENS)
        return int(max_tokens) > STREAM_ABOVE_MAX_TOKENS

    def continuation(self, body: dict[str, Any], data: dict[str, Any]) -> dict[str, Any] | None:
        """For ``stop_reason: pause_turn`` (a server-tool loop the API paused): the body
        with the paused answer's content sent back verbatim as the last assistant turn,
        which the API continues; None otherwise."""
        content = data.get("content")
        if data.get("stop_reason") != "pause_turn" or not isinstance(content, list):
            return None
        messages = list(body["messages"])
        if messages and messages[-1].get("role") == "assistant":  # continuing a continuation
            before = messages.pop()["content"]
            content = [*before, *content] if isinstance(before, list) else content
        return {**body, "messages": [*messages, {"role": "assistant", "content": content}]}

    def fold(self, started: float) -> AnthropicFold:
        """Messages stream events folded into a Message."""
        return AnthropicFold(started)

    def normalize(self, data: dict[str, Any], latency_s: float) -> tuple[Response, int]:
        """Text, tool calls (``tool_use`` blocks), stop reason, served model and usage of
        a Messages answer."""
        if data.get("type") == "error" or data.get("error"):
            raise self.error_under_200(data)
        content = data.get("content")
        if not isinstance(content, list):
            raise InvalidResponse("200 answer has no content list", status=200)
        texts = [
            block.get("text")
            for block in content
            if isinstance(block, dict) and block.get("type") == "text"
        ]
        if any(t is not None and not isinstance(t, str) for t in texts):
            raise InvalidResponse(
                "200 answer's text block is not text; a model's answer is never coerced to text",
                status=200,
                error_type="invalid_content",
            )
        text = "".join(t or "" for t in texts)
        raw_stop = data.get("stop_reason")
        stop = _STOP.get(raw_stop) if isinstance(raw_stop, str) else None
        usage = data.get("usage")
        servers: dict[str, int] = {}
        tier = None
        if isinstance(usage, dict):
            tier = tier_name(usage.get("service_tier"))  # standard: None; priority, batch
            fresh = self.usage_int(usage, "input_tokens")
            write = self.usage_int(usage, "cache_creation_input_tokens")
            read = self.usage_int(usage, "cache_read_input_tokens")
            output = self.usage_int(usage, "output_tokens")
            thinking = self.usage_int(usage, "output_tokens_details", "thinking_tokens")
            long_write = min(
                self.usage_int(usage, "cache_creation", "ephemeral_1h_input_tokens"), write
            )
            server_use = usage.get("server_tool_use")
            if isinstance(server_use, dict):
                servers = {k: self.usage_int(server_use, k) for k in server_use}
                servers = {k: v for k, v in servers.items() if v > 0}
        else:
            self.usage_missing(str(data.get("model") or self.model.name))
            fresh = write = read = output = thinking = long_write = 0
        blocks = tuple(
            block
            for block in content
            if isinstance(block, dict) and block.get("type") in REASONING_BLOCKS
        )
        thoughts = [b["thinking"] for b in blocks if isinstance(b.get("thinking"), str)]
        refusal = None
        if stop == "refusal":
            details = data.get("stop_details")
            explanation = details.get("explanation") if isinstance(details, dict) else None
            refusal = explanation if isinstance(explanation, str) else text or "refusal"
        calls = tool_calls_from_anthropic(content, cut=stop == "max_tokens")
        kept = tuple(block for block in content if isinstance(block, dict))
        sent_back = bool(calls) or raw_stop == "pause_turn"  # what a next turn repeats
        served = data.get("model")
        response = Response(
            text=text,
            stop_reason=stop,
            raw_stop_reason=raw_stop if isinstance(raw_stop, str) else None,
            served_model=served if isinstance(served, str) else None,
            service_tier=tier,
            input_tokens=fresh + write,
            output_tokens=output,
            cached_input_tokens=read,
            latency_s=latency_s,
            tool_calls=calls,
            reasoning="\n\n".join(thoughts) if thoughts else None,
            reasoning_tokens=thinking,
            reasoning_blocks=blocks,
            server_tool_uses=servers,
            refusal=refusal,
            cache_write_1h_tokens=long_write,
            content_blocks=kept if sent_back and not rebuilt_exactly(kept) else (),
        )
        if self.model.response_format is not None:
            response = answer_from_forced_tool(response, self.model.response_format)
        return response, write
