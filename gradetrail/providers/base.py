"""The provider interface, and the request and response every provider speaks.

A provider turns one :class:`Request` into one :class:`Response`, or raises a
:class:`~gradetrail.errors.ProviderError` subclass that says whether a retry may help.
It never retries itself: :mod:`gradetrail.executors.retry` owns the loop, and the cache and
scoring live above it (see ARCHITECTURE.md, "One sample's path").
"""

from __future__ import annotations

import base64
import hashlib
import json
import math
import re
import secrets
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, fields
from json.encoder import encode_basestring
from pathlib import Path
from typing import TYPE_CHECKING, Any, ClassVar

from gradetrail._util.canonical import canonical_json
from gradetrail._util.events import Events
from gradetrail._util.jsontext import compact_json, parsed
from gradetrail.conversation.messages import Message
from gradetrail.spec import ModelSpec

if TYPE_CHECKING:
    from gradetrail.datasets.base import Sample

__all__ = ["PromptKeys", "Provider", "Request", "Response"]


#: The request key's payload, defined once: the :class:`Request` fields that decide its
#: response. :meth:`Request.key` hashes their canonical JSON, and :class:`PromptKeys`, the
#: fast path, is generated from the same fields; a field added here enters both.
KEY_FIELDS: tuple[str, ...] = (
    "provider",
    "model",
    "base_url",
    "system",
    "messages",
    "params",
    "epoch",
    "identity",
)
#: Key fields present only when tools (or a tool choice) are offered, so the keys of
#: requests without tools are the ones they had before tools existed.
TOOL_KEY_FIELDS: tuple[str, ...] = ("tools", "tool_choice")


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Request:
    """One model call, fully rendered.

    Attributes:
        provider: provider name (``replay``, ``openai``, ...).
        model: the requested model name.
        base_url: the endpoint, or None for the provider's default.
        system: the rendered system prompt, or None.
        messages: chat messages in gradetrail's normalized shape (see
            :mod:`gradetrail.conversation.messages`): ``{"role", "content"}``, assistant messages
            with ``tool_calls`` and ``tool`` results.
        params: sampling parameters that were set (None values dropped).
        epoch: 1-based epoch index; part of the key so k epochs are k distinct calls.
        sample_id: the sample this request is for (NOT part of the key: two samples with
            the same rendered prompt share a response).
        identity: provider-specific material that decides the response besides the above
            (e.g. the replay file's content hash); part of the key.
        tools: tool definitions ``{"name", "description", "parameters"}`` offered to the
            model (see :mod:`gradetrail.conversation.tools`); part of the key when given.
        tool_choice: ``auto``, ``none``, ``required``, ``{"name": TOOL}`` or None; part of
            the key when tools are given.
        row: the sample's dataset row, for a provider that asks for it
            (:meth:`Provider.wants_row`: a ``python`` function taking ``(request, row)``),
            else None. Not part of :meth:`key` itself: the row's SHA-256 is put into
            ``identity`` for such providers, so a response that may depend on a field
            the prompt does not show is never shared between rows.
    """

    provider: str
    model: str
    base_url: str | None
    system: str | None
    messages: tuple[dict[str, Any], ...]
    params: dict[str, Any]
    epoch: int = 1
    sample_id: str = ""
    identity: dict[str, Any] = field(default_factory=dict)
    tools: tuple[dict[str, Any], ...] = ()
    tool_choice: str | dict[str, str] | None = None
    row: dict[str, Any] | None = field(default=None, compare=False, repr=False)

    def key_payload(self) -> dict[str, Any]:
        """What :meth:`key` hashes: the fields of :data:`KEY_FIELDS`, then those of
        :data:`TOOL_KEY_FIELDS` when tools (or a tool choice) are offered."""
        payload = {name: getattr(self, name) for name in KEY_FIELDS}
        if self.tools or self.tool_choice is not None:  # absent: keys stay as they were
            payload.update({name: getattr(self, name) for name in TOOL_KEY_FIELDS})
        return payload

    def key(self) -> str:
        """The cache key: SHA-256 hex of the canonical JSON of :meth:`key_payload`."""
        # surrogatepass: a lone surrogate from a dataset row keys its own entry, no crash
        data = canonical_json(self.key_payload()).encode("utf-8", "surrogatepass")
        return hashlib.sha256(data).hexdigest()

    @property
    def prompt(self) -> str:
        """The last user message's text."""
        for message in reversed(self.messages):
            if message.get("role") == "user":
                return message.get("content") or ""
        return ""


class PromptKeys:
    """:meth:`Request.key` of the requests of one run that are a single user message with
    no tools, generated from the key's definition rather than restating it.

    Once per run, the canonical JSON of a prototype request's :meth:`Request.key_payload`,
    whose varying parts (the system prompt, the message's text, the epoch and the per-row
    identity entries) are placeholders, is cut at the placeholders; :attr:`digest` is a
    function compiled from those pieces that puts a row's own encoded values between them.
    A row encodes only its own values: about a tenth of :meth:`Request.key`, the same key
    (tests/providers/test_keys.py and tests/engine/test_fast_paths.py compare the two).

    Args:
        provider, model, base_url, params, identity: what every request shares (the
            identity without its per-row entries).
        per_row: the identity's entries that each row sets (e.g. ``("sample_id",)``).

    Attributes:
        digest: ``digest(system, prompt, epoch, row) -> bytes``, the 32 bytes of the key of
            the request with this system prompt (or None), user message and epoch, whose
            per-row identity entries are ``row`` (every name of ``per_row``).
    """

    def __init__(
        self,
        provider: str,
        model: str,
        base_url: str | None,
        params: dict[str, Any],
        identity: Mapping[str, Any],
        per_row: tuple[str, ...] = (),
    ) -> None:
        self.per_row = per_row
        shared = {k: v for k, v in identity.items() if k not in per_row}
        # what each placeholder is replaced with, as an expression of digest's arguments
        values = [
            "('null' if system is None else _text(system))",
            "_text(prompt)",
            "int(epoch)",
            *(f"_value(row[_name{i}])" for i in range(len(per_row))),
        ]
        marks = [f"\x00{secrets.token_hex(16)}\x00" for _ in values]
        system, prompt, epoch, *own = marks
        prototype = Request(
            provider,
            model,
            base_url,
            system,
            ({"role": "user", "content": prompt},),
            params,
            epoch,  # type: ignore[arg-type]  # a placeholder
            identity={**shared, **dict(zip(per_row, own, strict=True))},
        )
        text = canonical_json(prototype.key_payload())
        slots = [
            (encode_basestring(mark), value) for mark, value in zip(marks, values, strict=True)
        ]
        names = {f"_name{i}": name for i, name in enumerate(per_row)}
        self.digest: Callable[[str | None, str, int, Mapping[str, Any]], bytes] = _compile(
            text, slots, names
        )

    def key(self, system: str | None, prompt: str, epoch: int, row: Mapping[str, Any]) -> str:
        """The key (hex) of the request with this system prompt, user message and epoch,
        whose per-row identity entries are ``row`` (every name of ``per_row``)."""
        return self.digest(system, prompt, epoch, row).hex()


def _compile(
    text: str, slots: list[tuple[str, str]], names: dict[str, str]
) -> Callable[..., bytes]:
    """The function ``digest(system, prompt, epoch, row) -> bytes`` hashing ``text`` with
    each placeholder of ``slots`` (its JSON text, an expression of digest's arguments and
    ``names``) replaced by the expression's value: one f-string of the literal pieces and
    the expressions, as fast as a hand-written one. A placeholder absent from ``text`` (a
    field the key does not hold) is skipped."""
    found = sorted((text.find(mark), mark, value) for mark, value in slots if mark in text)
    namespace: dict[str, Any] = {
        **names,
        "_sha256": hashlib.sha256,
        "_text": encode_basestring,
        "_value": _json_value,
    }
    parts, at = [], 0
    for start, mark, value in found:
        if text.count(mark) != 1:
            raise ValueError(f"request key placeholder found {text.count(mark)} times")
        namespace[f"_piece{len(parts)}"] = text[at:start]
        parts.append(f"{{_piece{len(parts)}}}{{{value}}}")
        at = start + len(mark)
    namespace[f"_piece{len(parts)}"] = text[at:]
    source = (
        "def digest(system, prompt, epoch, row):\n"
        f'    text = f"{"".join(parts)}{{_piece{len(parts)}}}"\n'
        '    return _sha256(text.encode("utf-8", "surrogatepass")).digest()\n'
    )
    exec(source, namespace)  # noqa: S102  # built here from fixed parts; values by name
    return namespace["digest"]


def _json_value(value: Any) -> str:
    return encode_basestring(value) if type(value) is str else canonical_json(value)


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Response:
    """A successful model response.

    Attributes:
        text: the completion text.
        stop_reason: normalized stop reason: ``end_turn``, ``max_tokens``,
            ``stop_sequence``, ``tool_use``, ``pause_turn`` (a server-tool loop paused
            before the answer was finished), ``refusal`` (the model declined: Anthropic's
            stop reason, OpenAI's ``message.refusal``), ``content_filter`` (the provider
            withheld the output) or None when unknown.
        raw_stop_reason: the provider's own value (e.g. OpenAI's ``length``).
        served_model: the model the provider says served the request.
        input_tokens: prompt tokens not read from the provider's prompt cache (cache writes
            included). Results, logs and summaries report :attr:`total_input_tokens`.
        output_tokens: completion tokens.
        cached_input_tokens: prompt tokens read from the provider's prompt cache.
        latency_s: seconds from sending the request to the full response.
        cost_usd: the call's price in USD, or None when unknown.
        cache_write_tokens: prompt tokens written to the provider's prompt cache (part of
            ``input_tokens``; priced at the cache-write rate).
        batch: the response came through a batch API (priced at the batch tier).
        tool_calls: the tools the model called, normalized (``{"id", "name",
            "arguments"}``; see :mod:`gradetrail.conversation.messages`), in its order.
        reasoning: the reasoning text the API returned apart from the visible answer
            (Anthropic ``thinking`` blocks' text, summarized or full; an OpenAI-compatible
            server's ``reasoning_content`` / ``reasoning``), or None. ``<think>`` text
            inside the answer stays in ``text``; the scorer strips it.
        reasoning_tokens: of ``output_tokens``, those spent reasoning (OpenAI's
            ``completion_tokens_details.reasoning_tokens``, Anthropic's
            ``output_tokens_details.thinking_tokens``); 0 when the API does not say.
        reasoning_blocks: what an agent loop sends back unchanged on its next turn, as
            the API requires: Anthropic ``thinking`` / ``redacted_thinking`` content
            blocks, verbatim (signatures and data included), in the answer's order; the
            Responses API's ``reasoning`` items; on Chat Completions, a tool-calling
            message's ``reasoning_content`` / ``reasoning`` fields as one ``{field:
            text}`` block (no ``type``).
        server_tool_uses: server-side tool calls the provider bills per use, by its usage
            name (Anthropic ``usage.server_tool_use``: ``{"web_search_requests": 3}``).
        refusal: the refusal text when the model declined (OpenAI ``message.refusal``,
            Anthropic ``stop_details.explanation``), else None.
        ttft_s: seconds from sending a streamed request to its first output token (text,
            thinking, refusal or tool call); None when not streamed.
        cache_write_1h_tokens: of ``cache_write_tokens``, those written with Anthropic's
            one-hour TTL (``usage.cache_creation.ephemeral_1h_input_tokens``), priced at
            the one-hour write rate.
        metadata: what an application (a ``python`` provider's function) reports beside
            its answer, a JSON object (retrieved document ids, the prompt version...), or
            None.
        metrics: an application's own numbers, name -> finite number (latency of its own
            steps in seconds, documents retrieved...); the summary averages each over the
            rows that have it. None when there are none.
        transcript: an application's own steps, a list of JSON objects (``{"step":
            "retrieve", ...}``), or None.
        artifacts: files an application hands back, file name -> content (text, or
            bytes); written under the run directory (``artifacts/<sample>/<epoch>/``),
            never outside it, and referenced from the row. None when there are none.

        service_tier: the service tier the provider says served the response when it is
            not its standard one (OpenAI's ``service_tier``: ``flex``, ``priority``,
            ``scale``), else None (``default``, ``auto``, or not said). Priced at that
            tier's rates (:meth:`~gradetrail.providers.pricing.Price.for_tier`).
        content_blocks: an Anthropic answer's content blocks (a Responses answer's
            output items), verbatim, when an agent loop could not rebuild them from
            ``reasoning_blocks``, ``text`` and ``tool_calls`` (server-tool blocks such as
            ``web_search_tool_result``, several text blocks or citations, blocks out of the
            order thinking, text, tool use; several messages or a message's ``phase``), for
            a tool-use or paused answer; else empty. The next turn sends them back in their
            order.

    The four application fields are cached with the response, stored on its row (under
    ``app``) and shown to scorers (:class:`~gradetrail.scorers.base.ScoreInput`). They,
    ``service_tier`` and ``content_blocks`` (:data:`SPARSE_FIELDS`) are cached only when
    set, so other responses' entries keep their bytes; an entry without ``service_tier`` is
    of the standard tier.
    """

    text: str
    stop_reason: str | None = None
    raw_stop_reason: str | None = None
    served_model: str | None = None
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    latency_s: float = 0.0
    cost_usd: float | None = None
    cache_write_tokens: int = 0
    batch: bool = False
    tool_calls: tuple[dict[str, Any], ...] = ()
    reasoning: str | None = None
    reasoning_tokens: int = 0
    reasoning_blocks: tuple[dict[str, Any], ...] = ()
    server_tool_uses: dict[str, int] = field(default_factory=dict)
    refusal: str | None = None
    ttft_s: float | None = None
    cache_write_1h_tokens: int = 0
    metadata: dict[str, Any] | None = None
    metrics: dict[str, float] | None = None
    transcript: list[dict[str, Any]] | None = None
    artifacts: dict[str, str | bytes] | None = None
    service_tier: str | None = None
    content_blocks: tuple[dict[str, Any], ...] = ()

    def to_json(self) -> str:
        """Serialize for the cache (fields read directly: ``dataclasses.asdict`` deep-copies
        every value, a third of a cache write's cost), as compact JSON (:func:`compact_json`:
        pydantic-core's serializer; entries written as ``json.dumps`` wrote them read the
        same). The :data:`SPARSE_FIELDS` are written only when set (artifact bytes as
        base64), so other responses keep their bytes."""
        data = {name: getattr(self, name) for name in _FIELDS}
        for name in SPARSE_FIELDS:
            value = getattr(self, name)
            if value:
                data[name] = _artifacts_json(value) if name == "artifacts" else value
        return compact_json(data)

    @classmethod
    def from_json(cls, text: str) -> Response:
        """Inverse of :meth:`to_json` (parsed by :func:`~gradetrail._util.jsontext.parsed`).

        Raises:
            ValueError: not JSON. TypeError: not a response's fields.
        """
        data = parsed(text)
        if type(data) is dict and tuple(data) == _FIELDS:  # as to_json wrote it
            values = list(data.values())  # by position: half the time of keywords
            values[_TOOL_CALLS] = tuple(values[_TOOL_CALLS])
            values[_BLOCKS] = tuple(values[_BLOCKS])
            return cls(*values)
        for name in ("tool_calls", "reasoning_blocks", "content_blocks"):  # older: lack some
            if name in data:
                data[name] = tuple(data[name])
        if data.get("artifacts"):
            data["artifacts"] = _artifacts_from_json(data["artifacts"])
        return cls(**data)

    @property
    def app(self) -> dict[str, Any] | None:
        """The application fields that are set (``metadata``, ``metrics``, ``transcript``),
        or None when none is; artifacts go to files (see
        :class:`~gradetrail.rundir.artifacts.Artifacts`)."""
        out = {n: getattr(self, n) for n in ("metadata", "metrics", "transcript")}
        return {k: v for k, v in out.items() if v} or None

    @property
    def total_input_tokens(self) -> int:
        """Every prompt token the provider counted as input, prompt-cache reads included
        (OpenAI's ``prompt_tokens``; Anthropic's ``input_tokens`` +
        ``cache_creation_input_tokens`` + ``cache_read_input_tokens``): what rows, logs and
        summaries call ``input_tokens``, of which ``cached_input_tokens`` were cached."""
        return self.input_tokens + self.cached_input_tokens

    @property
    def truncated(self) -> bool:
        """True when the response stopped before its end: at max_tokens, or paused
        (``pause_turn``: a server-tool loop the API stopped, to be continued)."""
        return self.stop_reason in _UNFINISHED

    @property
    def refused(self) -> bool:
        """True when the model declined to answer (stop reason ``refusal``) or the
        provider withheld its output (``content_filter``): a model answer all the same,
        its usage and cost kept (the run's ``run.refusals`` says how it is scored)."""
        return self.stop_reason in _REFUSED

    @property
    def reasoning_exhausted(self) -> bool:
        """True when the response ran out of max_tokens while still reasoning: truncated,
        with reasoning (tokens or text) and no visible answer or tool call."""
        return (
            self.stop_reason == "max_tokens"
            and (self.reasoning_tokens > 0 or bool(self.reasoning) or bool(self.reasoning_blocks))
            and not self.text.strip()
            and not self.tool_calls
        )


#: what an application may hand back beside its answer (see :class:`Response`)
APP_FIELDS = ("metadata", "metrics", "transcript", "artifacts")
#: the response fields cached only when set (the last of the dataclass's fields, so an
#: entry of the others alone is read by position): the application's and the tier
SPARSE_FIELDS = (*APP_FIELDS, "service_tier", "content_blocks")
#: an artifact's file name: a plain name, no directory, not hidden (checked before a
#: response is cached; the run directory's writer refuses any other)
ARTIFACT_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}")


def app_problems(response: Response) -> list[str]:
    """What is wrong with a response's application fields, one phrase each (empty when
    nothing): metadata not a JSON object, a metric not a finite number, a transcript not
    a list of objects, an artifact name that is not a plain file name or content that is
    neither text nor bytes."""
    problems = []
    if response.metadata is not None and not isinstance(response.metadata, dict):
        problems.append("metadata must be a dict")
    elif response.metadata:
        try:
            json.dumps(response.metadata, allow_nan=False)
        except (TypeError, ValueError) as exc:
            problems.append(f"metadata must be JSON ({exc})")
    metrics = response.metrics
    if metrics is not None and (
        not isinstance(metrics, dict)
        or not all(
            isinstance(k, str)
            and isinstance(v, int | float)
            and not isinstance(v, bool)
            and math.isfinite(v)
            for k, v in metrics.items()
        )
    ):
        problems.append("metrics must be a dict of name -> finite number")
    steps = response.transcript
    if steps is not None and (
        not isinstance(steps, list) or not all(isinstance(x, dict) for x in steps)
    ):
        problems.append("transcript must be a list of dicts")
    elif steps:
        try:
            json.dumps(steps, allow_nan=False)
        except (TypeError, ValueError) as exc:
            problems.append(f"transcript must be JSON ({exc})")
    artifacts = response.artifacts
    if artifacts is not None and not isinstance(artifacts, dict):
        problems.append("artifacts must be a dict of file name -> str or bytes")
    for name, content in (artifacts or {}).items():
        if not isinstance(name, str) or not ARTIFACT_NAME.fullmatch(name) or ".." in name:
            problems.append(
                f"artifact name {name!r} must be a plain file name (letters, digits, . _ -)"
            )
        elif not isinstance(content, str | bytes):
            problems.append(f"artifact {name!r} must be str or bytes")
    return problems


def _artifacts_json(artifacts: dict[str, str | bytes]) -> dict[str, dict[str, str]]:
    """Artifacts as JSON: name -> ``{"text": ...}`` or ``{"base64": ...}``."""
    return {
        name: {"base64": base64.b64encode(v).decode()} if isinstance(v, bytes) else {"text": v}
        for name, v in artifacts.items()
    }


def _artifacts_from_json(data: dict[str, dict[str, str]]) -> dict[str, str | bytes]:
    """Inverse of :func:`_artifacts_json`."""
    return {
        name: base64.b64decode(v["base64"]) if "base64" in v else v["text"]
        for name, v in data.items()
    }


_FIELDS = tuple(f.name for f in fields(Response) if f.name not in SPARSE_FIELDS)
_TOOL_CALLS = _FIELDS.index("tool_calls")
_BLOCKS = _FIELDS.index("reasoning_blocks")
_UNFINISHED = frozenset(["max_tokens", "pause_turn"])
_REFUSED = frozenset(["refusal", "content_filter"])


class Provider(ABC):
    """Base class of every provider.

    Subclasses set ``name``, implement :meth:`complete`, and may override
    :meth:`identity` (extra cache-key material), :meth:`check_ready` (fail before any call,
    e.g. a missing API key) and :meth:`aclose`.

    Args:
        model: the spec's model section.
        base_dir: directory that relative paths in the spec resolve against.
    """

    name: ClassVar[str]
    #: True when the response depends on the sample itself, not only on the rendered
    #: request (replay): the sample id then enters the cache key
    keyed_by_sample: ClassVar[bool] = False
    #: False when no call of the provider is ever billed (replay reads a file): its worst
    #: case under ``run.max_cost_usd`` is 0, with no price or ``max_tokens`` needed
    billed: ClassVar[bool] = True
    #: why the API refuses a prompt that renders empty (a row is then refused before any
    #: call, with these words), or None when an empty prompt may be sent
    empty_prompt_refused: ClassVar[str | None] = None
    #: True when the provider's API has a batch API (:meth:`batch_api` builds its client)
    batches: bool = False

    def __init__(self, model: ModelSpec, base_dir: Path) -> None:
        self.model = model
        self.base_dir = base_dir
        #: what the provider notices for the run's log (see :mod:`gradetrail._util.events`)
        self.events = Events()

    def check_messages(self, messages: Sequence[Message]) -> None:
        """Refuse a conversation this provider's API would reject, before any call.
        Default: nothing (the neutral shape's own checks have run).

        Raises:
            ConversationError: naming the 1-based message and what is wrong.
        """

    def wants_row(self) -> bool:
        """True when :meth:`complete` reads ``request.row`` (the sample's fields); the row
        then enters each request's cache key. Default False."""
        return False

    def identity(self) -> dict[str, Any]:
        """Provider-specific material that decides responses, beyond the request; enters
        every request's cache key. Default: nothing."""
        return {}

    def offered_tools(self, tools: tuple[dict[str, Any], ...]) -> tuple[dict[str, Any], ...]:
        """The tool definitions (normalized, see :mod:`gradetrail.conversation.tools`) as
        this provider's requests carry them, and so as their cache keys hold them. A
        provider whose API reads a field a definition leaves out otherwise than gradetrail
        means it writes the field out here (the Responses API's ``strict``), so the key
        says what is sent. Default: the definitions as given (their keys unchanged)."""
        return tools

    def check_ready(self) -> None:
        """Raise a GradetrailError when the provider cannot serve any request (missing key,
        missing file, unimportable function). Called once before the first call."""

    def check_samples(self, samples: Sequence[Sample]) -> None:
        """Check the provider against the run's samples, before any call (the ``replay``
        provider: recordings in step with the dataset). Default: nothing.

        Raises:
            GradetrailError: the samples cannot be served as they are.
        """

    def size_pool(self, concurrency: int) -> None:
        """Size connection pools for ``concurrency`` requests in flight. Called by the
        executor before the first call. Default: nothing."""

    @abstractmethod
    async def complete(self, request: Request) -> Response:
        """Serve one request.

        Raises:
            ProviderError: a subclass that classifies the failure (transient or not).
        """

    def price(self, request: Request, response: Response) -> float | None:
        """The response's cost in USD under the current spec's prices, or None when
        unknown. The pipeline re-prices cache hits with it, so a price added or changed
        after a response was cached applies to it. Default: the cost the response carries
        (e.g. one a ``python`` function reported)."""
        return response.cost_usd

    def servable_tiers(self, request: Request) -> tuple[str | None, ...]:
        """The service tiers an answer to ``request`` may be billed on (None: the standard
        one), whose dearest the budget's worst case assumes. Default: the standard tier
        and the one ``model.params.extra.service_tier`` names, when it names one."""
        from gradetrail.providers.pricing import tier_name

        named = tier_name((request.params.get("extra") or {}).get("service_tier"))
        return (None,) if named is None else (None, named)

    def shipped_modules(self) -> list[Path]:
        """Local code the provider's calls import that a remote worker may lack: files or
        package directories that ``--executor ray`` ships to its workers
        (``runtime_env.py_modules``). Default: none (gradetrail itself, and the SDKs, are
        installed on every node)."""
        return []

    def batch_api(self) -> Any:
        """The client of this provider's batch API (a
        :class:`~gradetrail.providers._batch.BatchAPI`), when :attr:`batches` is True.

        Raises:
            SpecError: the provider has no batch API.
        """
        from gradetrail.errors import SpecError

        raise SpecError(
            f"model.provider {self.model.provider!r} has no batch API; run without --batch"
        )

    def warm_up(self) -> None:
        """Load what the first call needs (an SDK import, say) ahead of time. The runner
        calls it before the run's clock starts, only when some request is not cached, so
        a fully cached run never pays for it. Default: nothing."""

    async def aclose(self) -> None:
        """Release connections. Called once at the end of the run."""
