"""The ``anthropic`` provider: the Messages API through the official ``anthropic`` SDK
(``AsyncAnthropic``).

The key comes from ``ANTHROPIC_API_KEY`` or ``model.api_key_env`` (never the SDK's
profile or token files: a run's credentials are one named variable). ``base_url``
defaults to ``https://api.anthropic.com`` (``ANTHROPIC_BASE_URL`` is ignored, so the
cache key always names the endpoint). ``max_tokens`` is required by the API: when the
spec sets none, :data:`DEFAULT_MAX_TOKENS` is sent (and enters the cache key). The API
has no ``seed``; a spec that sets one is refused before any call. ``stop`` is sent as
``stop_sequences``.

Stop reasons are Anthropic's own (``end_turn``, ``max_tokens``, ``stop_sequence``,
``tool_use``); ``model_context_window_exceeded`` counts as ``max_tokens`` (truncated);
``refusal`` (the safety classifiers stopped the answer) is a permanent ``BadRequest``
with error type ``content_filter``. Tokens: ``input_tokens`` excludes prompt-cache reads
and writes, so input = ``input_tokens`` + ``cache_creation_input_tokens`` and cached
input = ``cache_read_input_tokens``; cache writes are priced at the cache-write rate.
"""

from __future__ import annotations

from typing import Any

from gradetrail.conversation import to_anthropic, tool_calls_from_anthropic
from gradetrail.errors import BadRequest, InvalidResponse, SpecError
from gradetrail.providers._http import HttpProvider, usage_int
from gradetrail.providers.base import Request, Response
from gradetrail.tools import anthropic_tool_choice, anthropic_tools

__all__ = ["DEFAULT_MAX_TOKENS", "AnthropicProvider"]

ANTHROPIC_BASE_URL = "https://api.anthropic.com"
#: max_tokens sent when the spec sets none (the Messages API requires one)
DEFAULT_MAX_TOKENS = 4096
#: the ``anthropic-version`` header the lean client sends (the Messages API's version)
ANTHROPIC_VERSION = "2023-06-01"

_STOP = {
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "stop_sequence": "stop_sequence",
    "tool_use": "tool_use",
    "model_context_window_exceeded": "max_tokens",
    "refusal": "content_filter",
}


class AnthropicProvider(HttpProvider):
    """The Messages API."""

    name = "anthropic"
    sdk = "anthropic"
    default_key_env = "ANTHROPIC_API_KEY"
    path = "/v1/messages"
    price_provider = "anthropic"
    default_base_url = ANTHROPIC_BASE_URL

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
        """The default ``max_tokens``, when the spec sets none (it decides the output)."""
        if self.model.params.max_tokens is None:
            return {"default_max_tokens": DEFAULT_MAX_TOKENS}
        return {}

    def headers(self, key: str) -> dict[str, str]:
        """``x-api-key`` and ``anthropic-version`` (:data:`ANTHROPIC_VERSION`), as the
        Messages API documents them."""
        return {"x-api-key": key, "anthropic-version": ANTHROPIC_VERSION}

    def make_client(self, key: str, http_client: Any) -> Any:
        """An ``anthropic.AsyncAnthropic`` with retries (and tracing) off."""
        import anthropic

        kwargs: dict[str, Any] = {
            "api_key": key,
            "base_url": self.base_url,
            "max_retries": 0,
            "http_client": http_client,
        }
        try:
            return anthropic.AsyncAnthropic(**kwargs, open_telemetry=False)
        except TypeError:  # SDKs before OpenTelemetry support
            return anthropic.AsyncAnthropic(**kwargs)

    def body(self, request: Request) -> dict[str, Any]:
        """The Messages body: ``system`` apart, roles alternating (tool calls as
        ``tool_use``, results as ``tool_result`` blocks), ``tools`` and ``tool_choice``,
        ``stop`` as ``stop_sequences``."""
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
        extra = params.get("extra")
        if extra:
            body.update(extra)
        return body

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
        if stop == "content_filter":
            raise BadRequest(
                "the model's safety classifiers stopped the response (stop_reason refusal)",
                status=200,
                error_type="content_filter",
                code=raw_stop,
            )
        usage = data.get("usage")
        if isinstance(usage, dict):
            fresh = usage_int(usage, "input_tokens")
            write = usage_int(usage, "cache_creation_input_tokens")
            read = usage_int(usage, "cache_read_input_tokens")
            output = usage_int(usage, "output_tokens")
        else:
            self.usage_missing(str(data.get("model") or self.model.name))
            fresh = write = read = output = 0
        served = data.get("model")
        response = Response(
            text=text,
            stop_reason=stop,
            raw_stop_reason=raw_stop if isinstance(raw_stop, str) else None,
            served_model=served if isinstance(served, str) else None,
            input_tokens=fresh + write,
            output_tokens=output,
            cached_input_tokens=read,
            latency_s=latency_s,
            tool_calls=tool_calls_from_anthropic(content),
        )
        return response, write
