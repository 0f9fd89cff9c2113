"""The ``openai_responses`` provider: OpenAI's Responses API (``POST /v1/responses``),
through the lean aiohttp client or the official ``openai`` SDK's ``client.post``.

Why a provider of its own, and not ``model.api: responses`` on ``openai``: the Responses
API is another protocol (input items and ``instructions`` instead of messages, flat
tools, output items, ``max_output_tokens``, no ``stop`` or ``seed``, reasoning items to
carry across turns, its own usage and stop states), and each provider owns one wire
format, its request checks and its error mapping. As a provider name it enters every
request's cache key by itself, so Chat Completions keys stay byte-identical and a
response from one API is never served for the other.

- At OpenAI (no ``model.base_url``, or one at ``api.openai.com``): the key comes from
  ``OPENAI_API_KEY`` or ``model.api_key_env``; bundled OpenAI prices apply.
- At another server that speaks the protocol (vLLM, LM Studio, OpenRouter, Hugging Face,
  Azure OpenAI's v1 API): ``model.base_url`` ending in ``/v1``, and the key's variable in
  ``model.api_key_env`` (``OPENAI_API_KEY`` is never sent elsewhere), a key header in
  ``model.headers``, or ``model.api_key_required: false``. Prices: ``model.price``.

Requests are sent with ``store: false`` (nothing is kept on the server; each request is
whole, so the cache key is everything that decides it). ``max_tokens`` is sent as
``max_output_tokens``; ``temperature`` and ``top_p`` as they are; ``stop`` and ``seed``
are refused before any call (the API has neither). ``model.reasoning`` is sent as
``reasoning: {effort, summary: auto}`` (the summary only when ``reasoning.summary`` is
true), checked against OpenAI's model families as for ``openai``; a ``reasoning`` of
the API's own may go in ``model.params.extra`` instead. Either enters the key; with
either, and for a model of OpenAI's reasoning families (gpt-5, the o-series: they reason
unasked; other models refuse it), ``include: ["reasoning.encrypted_content"]`` is sent
so the reasoning items come back encrypted and an agent loop passes them back verbatim
(see :mod:`gradetrail.providers._responses_wire`). A reasoning item that came back
without encrypted content (a model reasoning unasked that the family table does not
know) is not sent back under ``store: false``: the API holds nothing its id could name, and answers
such an item with a 404. ``model.response_format`` is sent as
``text.format`` (``json_schema``).

Answers: ``status: completed`` -> ``end_turn`` (``tool_use`` when the model called
functions, ``refusal`` when it declined: the refusal text in :attr:`Response.refusal`);
``status: incomplete`` with ``incomplete_details.reason: max_output_tokens`` ->
``max_tokens`` (flagged truncated; a response that ran out while reasoning has empty
text), ``content_filter`` -> ``content_filter`` (the provider withheld the output: a
model answer whose usage and cost are kept, scored as ``run.refusals`` says, as Chat
Completions' ``finish_reason: content_filter``); ``status: failed`` with its ``error``
-> an :class:`~gradetrail.errors.InvalidResponse` retried as the status its code means
(``server_error``, ``rate_limit_exceeded``). Usage:
``input_tokens`` includes ``input_tokens_details.cached_tokens`` (subtracted, so input and
cached input are never counted twice) and ``input_tokens_details.cache_write_tokens``
(kept in the input, priced at the cache-write rate, as on Chat Completions);
``output_tokens`` includes ``output_tokens_details.reasoning_tokens`` (kept in
:attr:`Response.reasoning_tokens`).
Messages labelled ``phase: commentary`` (GPT-5.4 and later: preambles and progress notes
before the final answer) are not the answer: their text is kept with the reasoning, and
a tool-calling answer with phases, several messages or interleaved items is kept whole
(:attr:`Response.content_blocks`) and sent back in its order, phases included, as the
API asks.
Hosted tools billed per call (``web_search_call`` and ``file_search_call`` output items)
are counted in :attr:`Response.server_tool_uses` by item type, priced at
``model.price.server_tool_usd`` (no fee is bundled: without one the cost is unknown). A
completed answer holding hosted tools' items and no message (the tools ran, the model
said nothing after them) is the model's answer, empty: cached with its usage and tool
uses, scored as any answer (an empty one), never sent and paid for again; an answer with
nothing at all (no message, refusal, function call or hosted tool item) is a
``null_content`` error, never cached.
"""

from __future__ import annotations

from typing import Any
from urllib.parse import urlsplit

from gradetrail.errors import InvalidResponse, SpecError
from gradetrail.providers._http import HttpProvider, error_fields, served_tier
from gradetrail.providers._openai_wire import openai_client, openai_headers
from gradetrail.providers._responses_wire import (
    read_output,
    rebuilt_exactly,
    responses_text_format,
    responses_tool_choice,
    responses_tools,
    to_responses_input,
)
from gradetrail.providers._stream import Fold
from gradetrail.providers.base import Request, Response
from gradetrail.spec.reasoning import family_of, responses_reasoning_fields

__all__ = ["OpenAIResponsesProvider"]

#: what ``include`` asks for so reasoning items can be sent back under ``store: false``
ENCRYPTED = "reasoning.encrypted_content"

OPENAI_BASE_URL = "https://api.openai.com/v1"
_PASSED = ("temperature", "top_p")
_REFUSED_PARAMS = {
    "stop": "the Responses API has no stop sequences; remove model.params.stop (or use "
    "provider openai for Chat Completions)",
    "seed": "the Responses API takes no seed; remove model.params.seed",
}
_INCOMPLETE = {"max_output_tokens": "max_tokens", "content_filter": "content_filter"}


_NO_STREAM = (
    "model.stream: the openai_responses provider does not stream yet; remove model.stream "
    "(answers come whole)"
)


class OpenAIResponsesProvider(HttpProvider):
    """The Responses API (see the module docstring)."""

    name = "openai_responses"
    sdk = "openai"
    path = "/responses"
    default_base_url = OPENAI_BASE_URL

    @property
    def at_openai(self) -> bool:
        """True when requests go to OpenAI itself."""
        base = self.model.base_url
        return base is None or urlsplit(base).hostname == "api.openai.com"

    @property
    def default_key_env(self) -> str | None:  # type: ignore[override]
        """``OPENAI_API_KEY`` at OpenAI; none elsewhere (the spec names the variable)."""
        return "OPENAI_API_KEY" if self.at_openai else None

    @property
    def price_provider(self) -> str:  # type: ignore[override]
        """Bundled OpenAI prices at OpenAI; elsewhere none (``model.price``)."""
        return "openai" if self.at_openai else self.name

    def check_ready(self) -> None:
        """Refuse parameters the API does not have, then check the client and key.

        Raises:
            SpecError: ``model.params.stop`` or ``seed`` is set; ``model.stream`` is true
                (this provider does not stream yet); the client is missing.
            AuthError: the key's variable is unset.
        """
        params = self.model.params
        for name, why in _REFUSED_PARAMS.items():
            if getattr(params, name) is not None:
                raise SpecError(f"model.params.{name}: {why}")
        if self.model.stream:
            raise SpecError(_NO_STREAM)
        super().check_ready()

    def fold(self, started: float) -> Fold:
        """Never reached: a streamed answer is refused before any call (``check_ready``).

        Raises:
            SpecError: always.
        """
        raise SpecError(_NO_STREAM)

    def base_url_advice(self) -> str:
        """A Responses base URL usually ends in ``/v1``; a server without the Responses API
        is reached with ``openai_compatible``."""
        advice = "" if self.base_url.rstrip("/").endswith("/v1") else " (usually ending in /v1)"
        return f"{advice}, or, for a server without the Responses API, use openai_compatible"

    def endpoint_hint(self, body: Any, model: str) -> str:
        """After a 404: a model served on Chat Completions only names the other provider;
        else the base class's hint (nothing answered at the URL)."""
        _, _, message = error_fields(body)
        text = (message or "").lower()
        if "chat/completions" in text or ("not supported" in text and "responses" in text):
            return (
                f"; {model} is served on Chat Completions, not the Responses API: use "
                "model.provider: openai (or openai_compatible)"
            )
        return super().endpoint_hint(body, model)

    def headers(self, key: str) -> dict[str, str]:
        """``Authorization: Bearer <key>``; at OpenAI also ``OpenAI-Organization`` /
        ``OpenAI-Project`` from ``OPENAI_ORG_ID`` / ``OPENAI_PROJECT_ID`` when set."""
        return openai_headers(key, self.at_openai)

    def make_client(self, key: str, http_client: Any) -> Any:
        """An ``openai.AsyncOpenAI`` with retries off around ``http_client``."""
        return openai_client(key, self.base_url, http_client, self.at_openai)

    def body(self, request: Request) -> dict[str, Any]:
        """The Responses body: ``model``, ``input`` items, ``instructions`` (the system
        prompt), ``tools`` / ``tool_choice``, ``max_output_tokens``, sampling params,
        ``text.format`` for a JSON-schema answer, ``store: false``, then ``extra``; with
        ``reasoning`` set, ``reasoning.encrypted_content`` added to ``include`` (after the
        spec's own entries), so the reasoning can go back under ``store: false``."""
        body: dict[str, Any] = {"model": request.model, "input": None, "store": False}
        if request.system is not None:
            body["instructions"] = request.system
        if request.tools:
            body["tools"] = responses_tools(request.tools)
        if request.tool_choice is not None:
            body["tool_choice"] = responses_tool_choice(request.tool_choice)
        params = request.params
        for name in _PASSED:
            if name in params:
                body[name] = params[name]
        if "max_tokens" in params:
            body["max_output_tokens"] = params["max_tokens"]
        fmt = self.model.response_format
        if fmt is not None:
            body["text"] = responses_text_format(fmt.name, fmt.schema_, fmt.strict)
        if self.model.reasoning is not None:
            body.update(responses_reasoning_fields(self.model.reasoning))
        extra = params.get("extra")
        if extra:
            body.update(extra)
        include = _sent_include(body, request.model)
        if include is not None:
            body["include"] = include
        body["input"] = to_responses_input(request.messages, stored=body["store"] is not False)
        return body

    def offered_tools(self, tools: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """Each definition with ``strict`` written out (``false`` unless it sets it): the
        Responses API takes a function without the field as strict, so what is sent,
        ``strict: false``, is what the request and its key hold. Requests offering only
        definitions that set ``strict`` keep their keys."""
        return tuple(tool if "strict" in tool else {**tool, "strict": False} for tool in tools)

    def identity(self) -> dict[str, Any]:
        """The base class's, and ``include``: what ``include`` gradetrail sends, when it
        adds ``reasoning.encrypted_content`` where the first rule did not (a model of a
        reasoning family without reasoning settings, or beside the spec's own
        ``include``). The first rule (reasoning set and no ``include`` of the spec's own)
        sent the same bytes as today, so those requests, and every request that sends no
        ``include``, keep their keys; the others' keys change with what they send."""
        out = super().identity()
        fields: dict[str, Any] = {}
        if self.model.reasoning is not None:
            fields.update(responses_reasoning_fields(self.model.reasoning))
        fields.update(self.model.params.extra or {})
        include = _sent_include(fields, self.model.name)
        first = fields.get("include")
        if fields.get("reasoning") and "include" not in fields:
            first = [ENCRYPTED]
        if include is not None and include != first:
            out["include"] = include
        return out

    def normalize(self, data: dict[str, Any], latency_s: float) -> tuple[Response, int]:
        """Text, tool calls, reasoning items, stop state, served model and usage of a
        Responses answer (see the module docstring)."""
        status = data.get("status")
        if data.get("error") or data.get("type") == "error":  # the flat error event shape
            raise self.error_under_200(data)
        if status == "failed":
            raise self.error_under_200({"error": "failed"})
        if status not in ("completed", "incomplete", None):
            raise InvalidResponse(
                f"200 answer has status {status!r}, not completed or incomplete (background "
                "responses are not supported: do not set background)",
                status=200,
                error_type="unfinished_response",
            )
        if not isinstance(data.get("output"), list):
            raise InvalidResponse("200 answer has no output list", status=200)
        out = read_output(data["output"])
        details = data.get("incomplete_details")
        raw_stop = details.get("reason") if isinstance(details, dict) else None
        if status == "incomplete":
            raw_stop = raw_stop if isinstance(raw_stop, str) else "incomplete"
            stop = _INCOMPLETE.get(raw_stop)
        else:
            raw_stop = status if isinstance(status, str) else None
            stop = "tool_use" if out.tool_calls else "end_turn"
            if out.refusal is not None:  # declined, after some text or not (as Chat's)
                stop = "refusal"
        usage = data.get("usage")
        if isinstance(usage, dict):
            prompt = self.usage_int(usage, "input_tokens")
            cached = self.usage_int(usage, "input_tokens_details", "cached_tokens")
            write = self.usage_int(usage, "input_tokens_details", "cache_write_tokens")
            output = self.usage_int(usage, "output_tokens")
            reasoning_tokens = self.usage_int(usage, "output_tokens_details", "reasoning_tokens")
        else:
            self.usage_missing(str(data.get("model") or self.model.name))
            prompt = cached = write = output = reasoning_tokens = 0
        # an answer whose hosted tools (web search, file search...) ran and which ended
        # without a message is complete and billed: the model's answer, empty (cached,
        # scored as any answer, its tool uses priced), never re-sent and paid again
        answered = out.has_message or out.tool_calls or out.refusal is not None or out.hosted
        if not answered and status != "incomplete":
            # nothing to score: never cached and scored 0 as if the model answered ""
            raise InvalidResponse(
                "200 answer has no content (no message, refusal, function call or hosted "
                f"tool call in its output; status {status!r})",
                status=200,
                error_type="null_content",
            )
        served = data.get("model")
        response = Response(
            text=out.text,
            stop_reason=stop,
            raw_stop_reason=raw_stop,
            served_model=served if isinstance(served, str) else None,
            service_tier=served_tier(data),
            input_tokens=max(prompt - cached, 0),
            output_tokens=output,
            cached_input_tokens=cached,
            latency_s=latency_s,
            tool_calls=out.tool_calls,
            reasoning=out.reasoning,
            reasoning_tokens=reasoning_tokens,
            reasoning_blocks=out.reasoning_items,
            refusal=out.refusal,
            server_tool_uses=out.server_calls,
            content_blocks=_kept_whole(data["output"]) if out.tool_calls else (),
        )
        return response, min(write, max(prompt - cached, 0))


def _sent_include(fields: dict[str, Any], model: str) -> list[Any] | None:
    """The ``include`` a Responses body with these top-level ``fields`` (the spec's
    reasoning and ``extra`` applied) is sent with: the spec's own entries, then
    ``reasoning.encrypted_content`` when the request reasons (``reasoning`` set, or a
    model of a reasoning family: :func:`_reasons_unasked`); None when no ``include`` is
    sent. An ``include`` that is not a list is sent as the spec wrote it."""
    include = fields.get("include")
    if include is not None and not isinstance(include, list):
        return None
    reasons = fields.get("reasoning") or _reasons_unasked(model)
    if reasons and ENCRYPTED not in (include or []):
        return [*(include or []), ENCRYPTED]  # a spec's own include keeps its entries
    return include


def _reasons_unasked(model: str) -> bool:
    """True for a model of OpenAI's reasoning families (gpt-5, the o-series): it reasons
    whether or not the request sets ``reasoning``, so its reasoning items must come back
    encrypted for an agent loop to send them back; never for another model, which the
    API refuses ``include: [reasoning.encrypted_content]`` ("Encrypted content is not
    supported with this model")."""
    family = family_of("openai", model)
    return family is not None and family.thinking is not None


def _kept_whole(output: list[Any]) -> tuple[dict[str, Any], ...]:
    """A tool-calling answer's output items, when its parts do not rebuild them (see
    :func:`~gradetrail.providers._responses_wire.rebuilt_exactly`); else empty, so the
    answers they rebuild keep their cache entries and turn keys."""
    items = tuple(item for item in output if isinstance(item, dict))
    return () if rebuilt_exactly(items) else items
