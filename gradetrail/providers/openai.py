"""The ``openai`` and ``openai_compatible`` providers: Chat Completions through the
official ``openai`` SDK (``AsyncOpenAI``).

- ``openai``: the OpenAI API (``base_url`` defaults to ``https://api.openai.com/v1``; the
  ``OPENAI_BASE_URL`` variable is ignored, so the cache key always names the endpoint).
  The key comes from ``OPENAI_API_KEY`` or ``model.api_key_env``. ``max_tokens`` is sent as
  ``max_completion_tokens``, the field every current OpenAI model accepts.
- ``openai_compatible``: any server that speaks the protocol (vLLM, llama.cpp server,
  gateways), at the required ``model.base_url`` (ending in ``/v1``). It never reads
  ``OPENAI_API_KEY``, so an OpenAI key is never sent to another server: the spec names
  the key's variable in ``model.api_key_env``, or sets ``model.api_key_required: false``
  for a server that checks none (a placeholder key ``EMPTY`` is then sent).
  ``max_tokens`` is sent as ``max_tokens``, which such servers expect. Prices are unknown
  unless the spec gives ``model.price``.

Stop reasons: ``stop`` -> ``end_turn`` (``stop_sequence`` when the server names the
matched stop string, as vLLM does), ``length`` -> ``max_tokens`` (the sample is flagged
truncated), ``tool_calls`` / ``function_call`` -> ``tool_use``; ``content_filter`` is a
permanent ``BadRequest`` (the provider withheld the answer). Tokens: ``prompt_tokens``
includes the prompt-cache reads (``prompt_tokens_details.cached_tokens``), which are
subtracted so input and cached input are never counted twice.
"""

from __future__ import annotations

import os
from typing import Any

from gradetrail.conversation import to_openai, tool_calls_from_openai
from gradetrail.errors import BadRequest, InvalidResponse
from gradetrail.providers._http import HttpProvider, usage_int
from gradetrail.providers.base import Request, Response
from gradetrail.tools import openai_tool_choice, openai_tools

__all__ = ["OpenAIProvider"]

OPENAI_BASE_URL = "https://api.openai.com/v1"

_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
}
_PASSED = ("temperature", "top_p", "stop", "seed")


class OpenAIProvider(HttpProvider):
    """Chat Completions for ``openai`` and ``openai_compatible``."""

    name = "openai"
    sdk = "openai"
    path = "/chat/completions"
    default_base_url = OPENAI_BASE_URL

    @property
    def default_key_env(self) -> str | None:  # type: ignore[override]
        """``OPENAI_API_KEY`` for ``openai``; none for ``openai_compatible``."""
        return "OPENAI_API_KEY" if self.model.provider == "openai" else None

    @property
    def price_provider(self) -> str:  # type: ignore[override]
        """Bundled prices exist for ``openai`` only."""
        return self.model.provider

    def base_url_advice(self) -> str:
        """A Chat Completions base URL usually ends in ``/v1``."""
        if self.base_url.rstrip("/").endswith("/v1"):
            return ""
        return " (an OpenAI-compatible server's usually ends in /v1)"

    def headers(self, key: str) -> dict[str, str]:
        """``Authorization: Bearer <key>``; for ``openai`` also ``OpenAI-Organization`` /
        ``OpenAI-Project`` from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` when set, as the
        SDK sends them (never to an ``openai_compatible`` server)."""
        headers = {"Authorization": f"Bearer {key}"}
        if self.model.provider == "openai":
            for header, env in (
                ("OpenAI-Organization", "OPENAI_ORG_ID"),
                ("OpenAI-Project", "OPENAI_PROJECT_ID"),
            ):
                if os.environ.get(env):
                    headers[header] = os.environ[env]
        return headers

    def make_client(self, key: str, http_client: Any) -> Any:
        """An ``openai.AsyncOpenAI`` with retries off around ``http_client``."""
        import openai

        return openai.AsyncOpenAI(
            api_key=key, base_url=self.base_url, max_retries=0, http_client=http_client
        )

    def body(self, request: Request) -> dict[str, Any]:
        """The Chat Completions body: system prompt first, the conversation (tool calls and
        ``role: tool`` results), ``tools`` and ``tool_choice``, sampling params, ``extra``."""
        messages = to_openai(request.system, request.messages)
        body: dict[str, Any] = {"model": request.model, "messages": messages}
        if request.tools:
            body["tools"] = openai_tools(request.tools)
        if request.tool_choice is not None:
            body["tool_choice"] = openai_tool_choice(request.tool_choice)
        params = request.params
        for name in _PASSED:
            if name in params:
                body[name] = params[name]
        if "max_tokens" in params:
            field = "max_completion_tokens" if self.model.provider == "openai" else "max_tokens"
            body[field] = params["max_tokens"]
        extra = params.get("extra")
        if extra:
            body.update(extra)
        return body

    def normalize(self, data: dict[str, Any], latency_s: float) -> tuple[Response, int]:
        """Text, tool calls, stop reason, served model and usage of a Chat Completions
        answer."""
        if data.get("error"):
            raise self.error_under_200(data)
        choices = data.get("choices")
        if not isinstance(choices, list) or not choices or not isinstance(choices[0], dict):
            raise InvalidResponse("200 answer has no choices", status=200)
        choice = choices[0]
        message = choice.get("message") if isinstance(choice.get("message"), dict) else {}
        text = message.get("content")
        if isinstance(text, list):  # content parts
            parts = [p.get("text") for p in text if isinstance(p, dict)]
            if any(part is not None and not isinstance(part, str) for part in parts):
                raise _not_text("a content part's text")
            text = "".join(part or "" for part in parts)
        if text is not None and not isinstance(text, str):
            raise _not_text("message.content", text)
        if text is None and isinstance(message.get("refusal"), str):
            text = message["refusal"]
        raw_stop = choice.get("finish_reason")
        stop = _STOP.get(raw_stop) if isinstance(raw_stop, str) else None
        if stop == "end_turn" and isinstance(choice.get("stop_reason"), str):
            stop = "stop_sequence"
        if stop == "content_filter":
            raise BadRequest(
                "the provider's content filter withheld the response (finish_reason "
                "content_filter)",
                status=200,
                error_type="content_filter",
                code=raw_stop,
            )
        usage = data.get("usage")
        if isinstance(usage, dict):
            prompt = usage_int(usage, "prompt_tokens")
            cached = usage_int(usage, "prompt_tokens_details", "cached_tokens")
            output = usage_int(usage, "completion_tokens")
        else:
            self.usage_missing(str(data.get("model") or self.model.name))
            prompt = cached = output = 0
        tool_calls = tool_calls_from_openai(message.get("tool_calls"))
        if text is None and not tool_calls:
            # nothing to score: never cached and scored 0 as if the model answered ""
            raise InvalidResponse(
                "200 answer has no content (message.content is null, with no refusal and "
                f"no tool calls; finish_reason {raw_stop!r})",
                status=200,
                error_type="null_content",
            )
        served = data.get("model")
        response = Response(
            text=text or "",
            stop_reason=stop,
            raw_stop_reason=raw_stop if isinstance(raw_stop, str) else None,
            served_model=served if isinstance(served, str) else None,
            input_tokens=max(prompt - cached, 0),
            output_tokens=output,
            cached_input_tokens=cached,
            latency_s=latency_s,
            tool_calls=tool_calls,
        )
        return response, 0


def _not_text(field: str, value: object = None) -> InvalidResponse:
    """A 200 answer whose text is not a string (never coerced, never cached)."""
    kind = f" is {type(value).__name__}," if value is not None else ""
    return InvalidResponse(
        f"200 answer's {field}{kind} not text; a model's answer is never coerced to text",
        status=200,
        error_type="invalid_content",
    )
