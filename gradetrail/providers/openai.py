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
truncated), ``tool_calls`` / ``function_call`` -> ``tool_use``; servers' own values too:
``eos_token`` / ``eos`` -> ``end_turn``, ``stop_sequence`` -> ``stop_sequence`` (TGI),
``model_length`` / ``model_context_window_exceeded`` -> ``max_tokens`` (Mistral, GLM: the
context window ran out), GLM's ``sensitive`` -> ``content_filter``, and the Messages API's
and Gemini's own reasons that gateways pass through (``end_turn``, ``max_tokens``,
``tool_use``, ``refusal``; ``STOP``, ``MAX_TOKENS``, ``SAFETY``, ``RECITATION``... read in
any case, Gemini's blocks as ``content_filter``); ``error`` / ``abort`` /
``insufficient_system_resource`` / ``network_error`` (the server failed while generating:
Mistral, OpenRouter, vLLM, DeepSeek, GLM) is a transient error, never a cached answer;
``content_filter`` (the provider withheld the output) and a ``message.refusal`` (stop
reason ``refusal``, the refusal kept in :attr:`Response.refusal`) are model answers whose
usage and cost are kept, scored as ``run.refusals`` says. Tokens: ``prompt_tokens`` includes the
prompt-cache reads (``prompt_tokens_details.cached_tokens``, or DeepSeek's
``prompt_cache_hit_tokens``), which are subtracted so
input and cached input are never counted twice, and the cache writes
(``prompt_tokens_details.cache_write_tokens``), priced at the cache-write rate;
``completion_tokens_details.reasoning_tokens`` are the reasoning tokens (part of output;
a server that counts them apart from ``completion_tokens``, as xAI's Grok does, says so by
a ``total_tokens`` of prompt + completion + reasoning, and they are added to the output;
a ``total_tokens`` above prompt + completion with no reasoning detail, as Gemini's
OpenAI-compatible endpoint reports its thoughts, is the same: the rest is reasoning
output).
A server's ``reasoning_content`` (or ``reasoning``) is the response's reasoning text (on a
message that calls tools also kept verbatim, :attr:`Response.reasoning_blocks`, and sent
back on it in an agent loop, as DeepSeek's thinking mode requires), and
so are Mistral's ``thinking`` content chunks (its reasoning models answer ``content`` as a
list of ``thinking`` and ``text`` chunks).
"""

from __future__ import annotations

from typing import Any

from gradetrail.errors import InvalidResponse
from gradetrail.providers._http import HttpProvider, error_fields, implied_status, served_tier
from gradetrail.providers._openai_wire import (
    openai_client,
    openai_headers,
    openai_tool_choice,
    openai_tools,
    thinking_text,
    to_openai,
    tool_calls_from_openai,
)
from gradetrail.providers._stream import OpenAIFold
from gradetrail.providers.base import Request, Response
from gradetrail.spec.reasoning import openai_reasoning_fields

__all__ = ["OpenAIProvider"]

OPENAI_BASE_URL = "https://api.openai.com/v1"

_STOP = {
    "stop": "end_turn",
    "length": "max_tokens",
    "tool_calls": "tool_use",
    "function_call": "tool_use",
    "content_filter": "content_filter",
    # OpenAI-compatible servers' own: an end of sequence (TGI before 2.2.1, Together),
    # a matched stop string (TGI), the context window run out (Mistral)
    "eos_token": "end_turn",
    "eos": "end_turn",
    "stop_sequence": "stop_sequence",
    "model_length": "max_tokens",
    # Zhipu's GLM: the context window ran out, the output was withheld as sensitive
    "model_context_window_exceeded": "max_tokens",
    "sensitive": "content_filter",
    # the Messages API's own, as gateways in front of Claude pass them through
    "end_turn": "end_turn",
    "max_tokens": "max_tokens",
    "tool_use": "tool_use",
    "refusal": "refusal",
    # Gemini's own (STOP, MAX_TOKENS, SAFETY...), as gateways in front of it pass them
    # through: read in lower case, as every finish reason is
    "safety": "content_filter",
    "recitation": "content_filter",
    "blocklist": "content_filter",
    "prohibited_content": "content_filter",
    "spii": "content_filter",
    "image_safety": "content_filter",
}
#: finish reasons that say the server failed while generating (Mistral's, OpenRouter's and
#: vLLM's ``error``, vLLM's ``abort``, DeepSeek's ``insufficient_system_resource``, GLM's
#: ``network_error``): the answer is cut, not the model's
_FAILED = frozenset(["error", "abort", "insufficient_system_resource", "network_error"])
_PASSED = ("temperature", "top_p", "stop", "seed")
#: message fields OpenAI-compatible servers put reasoning text in (vLLM, SGLang,
#: OpenRouter, DeepSeek)
_REASONING_FIELDS = ("reasoning_content", "reasoning")


#: content parts that are not the answer's text
_NOT_TEXT_PARTS = ("refusal", "thinking")


def _reasoning_text(message: dict[str, Any]) -> str | None:
    """The reasoning text a server returned beside the answer, or None."""
    for name in _REASONING_FIELDS:
        value = message.get(name)
        if isinstance(value, str) and value:
            return value
    return None


def _reasoning_fields(message: dict[str, Any]) -> tuple[dict[str, Any], ...]:
    """A tool-calling message's reasoning fields (:data:`_REASONING_FIELDS`), verbatim,
    as one ``{field: text}`` block for the agent loop to send back on the assistant
    message (DeepSeek's thinking mode refuses a tool loop's next turn without its
    ``reasoning_content``); empty when it calls no tool or has none."""
    if not message.get("tool_calls"):
        return ()
    kept = {n: message[n] for n in _REASONING_FIELDS if isinstance(message.get(n), str)}
    return (kept,) if any(kept.values()) else ()


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

    def endpoint_hint(self, body: Any, model: str) -> str:
        """After a 404: a model served on the Responses API only (OpenAI's "only
        supported in v1/responses") names that provider; else the base class's hint."""
        _, _, message = error_fields(body)
        if "v1/responses" in (message or "").lower():
            return (
                f"; {model} is served on the Responses API only: use "
                "model.provider: openai_responses"
            )
        return super().endpoint_hint(body, model)

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        #: the Batch API is OpenAI's own (an openai_compatible server has none)
        self.batches = self.model.provider == "openai"

    def batch_api(self) -> Any:
        """The Batch API client (see :mod:`gradetrail.providers._openai_batch`)."""
        from gradetrail.providers._openai_batch import OpenAIBatchAPI

        return OpenAIBatchAPI(self)

    def headers(self, key: str) -> dict[str, str]:
        """``Authorization: Bearer <key>``; for ``openai`` also ``OpenAI-Organization`` /
        ``OpenAI-Project`` from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` when set, as the
        SDK sends them (never to an ``openai_compatible`` server)."""
        return openai_headers(key, self.model.provider == "openai")

    def make_client(self, key: str, http_client: Any) -> Any:
        """An ``openai.AsyncOpenAI`` with retries off around ``http_client``."""
        return openai_client(key, self.base_url, http_client, self.model.provider == "openai")

    def body(self, request: Request) -> dict[str, Any]:
        """The Chat Completions body: system prompt first, the conversation (tool calls and
        ``role: tool`` results), ``tools`` and ``tool_choice``, sampling params,
        ``model.reasoning`` as ``reasoning_effort``, ``extra``."""
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
        if self.model.reasoning is not None:
            body.update(openai_reasoning_fields(self.model.reasoning))
        fmt = self.model.response_format
        if fmt is not None:  # a JSON-schema answer (model.response_format)
            body["response_format"] = {
                "type": "json_schema",
                "json_schema": {"name": fmt.name, "schema": fmt.schema_, "strict": fmt.strict},
            }
        extra = params.get("extra")
        if extra:
            body.update(extra)
        return body

    def fold(self, started: float) -> OpenAIFold:
        """Chat Completions chunks folded into a chat completion."""
        return OpenAIFold(started)

    def stream_body(self, request: Request) -> dict[str, Any]:
        """:meth:`body` with ``stream: true`` and ``stream_options.include_usage`` (the
        usage comes in a last chunk)."""
        return {**self.body(request), "stream": True, "stream_options": {"include_usage": True}}

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
        refusal = message.get("refusal")
        thought = None
        if isinstance(text, list):  # content parts: text, a refusal part, thinking chunks
            parts = [p for p in text if isinstance(p, dict)]
            texts = [p.get("text") for p in parts if p.get("type") not in _NOT_TEXT_PARTS]
            if any(part is not None and not isinstance(part, str) for part in texts):
                raise _not_text("a content part's text")
            text = "".join(part or "" for part in texts)
            refused = [p.get("refusal") for p in parts if p.get("type") == "refusal"]
            if not refusal and refused and isinstance(refused[0], str):
                refusal = refused[0]
            thought = thinking_text(parts) or None
        if text is not None and not isinstance(text, str):
            raise _not_text("message.content", text)
        refusal = refusal if isinstance(refusal, str) and refusal.strip() else None
        reasoning = _reasoning_text(message) or thought
        raw_stop = choice.get("finish_reason")
        folded = raw_stop.strip().lower() if isinstance(raw_stop, str) else None
        if folded in _FAILED or isinstance(choice.get("error"), dict):
            raise self._failed(choice)
        stop = _STOP.get(folded) if folded is not None else None
        if stop == "end_turn" and isinstance(choice.get("stop_reason"), str):
            stop = "stop_sequence"
        if refusal is not None:
            stop = "refusal"
        elif stop == "refusal":  # a gateway passing Claude's refusal: its text says why
            refusal = text.strip() if isinstance(text, str) and text.strip() else "refusal"
        usage = data.get("usage")
        if isinstance(usage, dict):
            prompt = self.usage_int(usage, "prompt_tokens")
            cached = self.usage_int(usage, "prompt_tokens_details", "cached_tokens")
            if not cached:  # DeepSeek's own field for the prompt-cache hits
                cached = min(self.usage_int(usage, "prompt_cache_hit_tokens"), prompt)
            write = self.usage_int(usage, "prompt_tokens_details", "cache_write_tokens")
            output = self.usage_int(usage, "completion_tokens")
            thinking = self.usage_int(usage, "completion_tokens_details", "reasoning_tokens")
            # the total's tokens neither prompt nor completion count (only when both are
            # counts as sent: one read as 0 for being no count says nothing of the rest)
            counted = (
                usage.get("prompt_tokens") == prompt and usage.get("completion_tokens") == output
            )
            unsaid = self.usage_int(usage, "total_tokens") - prompt - output if counted else 0
            if thinking and unsaid == thinking:
                output += thinking  # counted apart from completion_tokens (xAI's Grok)
            elif not thinking and unsaid > 0 and unsaid != cached:
                # Gemini's thoughts: in total_tokens (and billed as output), in neither
                # completion_tokens nor a reasoning_tokens detail
                output += unsaid
                thinking = unsaid
        else:
            self.usage_missing(str(data.get("model") or self.model.name))
            prompt = cached = write = output = thinking = 0
        tool_calls = tool_calls_from_openai(message.get("tool_calls"))
        answered = refusal is not None or reasoning is not None or stop == "content_filter"
        if text is None and not tool_calls and not answered:
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
            service_tier=served_tier(data),
            input_tokens=max(prompt - cached, 0),
            output_tokens=output,
            cached_input_tokens=cached,
            latency_s=latency_s,
            tool_calls=tool_calls,
            reasoning=reasoning,
            reasoning_tokens=min(thinking, output) if output else thinking,
            reasoning_blocks=_reasoning_fields(message),
            refusal=refusal,
        )
        return response, min(write, max(prompt - cached, 0))

    def _failed(self, choice: dict[str, Any]) -> InvalidResponse:
        """The error for a choice the server failed while generating (see :data:`_FAILED`;
        OpenRouter's choice also carries the ``error``): classified as the status its
        error means when it says one, else transient (as a stream cut mid-way), never
        cached."""
        error = choice.get("error")
        if isinstance(error, dict) and implied_status(*error_fields(error)) is not None:
            return self.error_under_200({"error": error})
        message = error_fields(error)[2] if isinstance(error, dict) else None
        raw = choice.get("finish_reason")
        return InvalidResponse(
            f"200 answer was cut by a server failure (finish_reason {raw!r}): "
            f"{message or 'no message'}",
            transient=True,
            status=200,
            error_type="generation_failed",
            code=str(raw) if raw is not None else None,
        )


def _not_text(field: str, value: object = None) -> InvalidResponse:
    """A 200 answer whose text is not a string (never coerced, never cached)."""
    kind = f" is {type(value).__name__}," if value is not None else ""
    return InvalidResponse(
        f"200 answer's {field}{kind} not text; a model's answer is never coerced to text",
        status=200,
        error_type="invalid_content",
    )
