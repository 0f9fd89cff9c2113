"""Local OpenAI / Anthropic protocol server for gradetrail tests and benchmarks.

A real HTTP server (starlette + uvicorn, 127.0.0.1 only) that answers GSM8K questions
with the completions recorded by the GSM8K authors, in the wire format of the real APIs,
and that can inject the faults a harness must survive. The real ``openai`` and
``anthropic`` SDKs can talk to it unchanged.

Start it
--------
::

    python tests/protocol_server.py --port 0 --latency 0.1
    # prints exactly one line on stdout:  listening on http://127.0.0.1:PORT

Point the SDKs at it::

    openai.AsyncOpenAI(base_url=f"{url}/v1", api_key="test", max_retries=0)
    anthropic.AsyncAnthropic(base_url=url, api_key="test", max_retries=0)

From Python (tests, benches), :func:`running_server` starts it in a *subprocess* (so its
CPU does not share the caller's GIL) and stops it on exit::

    with running_server(latency=0.1) as srv:      # same keys as /_control/config
        srv.base_url                              # "http://127.0.0.1:PORT"
        srv.openai_base_url                       # base_url + "/v1"
        srv.configure(faults=[{"kind": "rate_limit", "first": 2, "retry_after": 3}])
        srv.stats()                               # dict, see "Stats" below
        srv.reset()                               # clear stats and faults

pytest fixtures (this module does not touch conftest.py; conftest can do)::

    from protocol_server import protocol_server_fixture, fresh_protocol_server_fixture
    protocol_server = protocol_server_fixture(scope="session", latency=0.0)
    fresh_protocol_server = fresh_protocol_server_fixture("protocol_server")  # reset per test

Endpoints
---------
- ``POST /v1/chat/completions`` (OpenAI; ``n``, ``stop``, ``max_tokens`` /
  ``max_completion_tokens`` honoured) and ``GET /v1/models`` (OpenAI list shape, or the
  Anthropic shape when the request carries an ``anthropic-version`` header).
- ``POST /v1/messages`` (Anthropic Messages; ``stop_sequences`` and ``max_tokens``
  honoured). The ``anthropic-version`` header is required and must be a known version
  (``2023-01-01``, ``2023-06-01``, ``2026-10-21``); under ``2026-10-21`` a request with
  ``temperature``, ``top_p`` or ``top_k`` gets the 400 that version gives. With
  ``thinking`` on (``enabled`` with a budget of at least 1,024 below ``max_tokens``, or
  ``adaptive``; ``temperature`` only 1) the answer opens with a signed ``thinking`` block
  (or, with ``redacted_thinking``, a ``redacted_thinking`` one), counted in
  ``output_tokens`` and ``output_tokens_details.thinking_tokens``; a thinking block sent
  back altered gets a 400, and so does a final tool-use assistant turn that does not open
  with its thinking block, as the real API rules.
- ``stream: true`` (both protocols): the same answer as server-sent events, in the real
  APIs' event shapes (Messages ``message_start`` ... ``message_stop``; Chat Completions
  chunks, the usage chunk when ``stream_options.include_usage``, ``[DONE]``), one word a
  delta, paced at ``stream_tps`` output tokens a second.
- ``POST /v1/responses`` (OpenAI Responses, non-streaming: input items, flat function
  tools, ``max_output_tokens`` honoured as an ``incomplete`` answer, ``text.format``
  checked, ``stop`` / ``seed`` refused as unknown parameters). With ``reasoning`` set, the
  answer opens with a reasoning item (summary: the rule's ``reasoning`` text; its
  ``encrypted_content`` sealed by the server, sent when ``include`` asks for
  ``reasoning.encrypted_content``), and a later request must send every function call of
  such a turn back after that reasoning item, its content unchanged, or get the API's 400.
  Under ``store: false`` a reasoning item sent back with no encrypted content (only its id)
  is the API's 404 "Item with id ... not found". A model named as OpenAI's reasoning
  families (``gpt-5*`` but ``gpt-5-chat``, ``o1``, ``o3``, ``o4-mini``...) reasons unasked,
  as they do; asking another model for ``reasoning.encrypted_content`` without
  ``reasoning`` is the API's 400 "Encrypted content is not supported with this model", and
  ``reasoning.effort`` (or ``summary``) for one of its models that do not reason (gpt-4o,
  gpt-4.1, gpt-5-chat...) the API's 400 "Unsupported parameter". An
  assistant message's ``phase``
  (``commentary``, ``final_answer``) is part of what the scripted model reads, as
  ``[commentary] TEXT`` in the prompt its rules match.
- DeepSeek's thinking mode on ``/v1/chat/completions`` (``thinking: {type: enabled}`` in
  the body): answers carry the rule's ``reasoning`` as ``reasoning_content``, and an
  assistant message with ``tool_calls`` sent without its ``reasoning_content`` is
  DeepSeek's 400 "Missing `reasoning_content` field ...".
  A rule's ``refusal`` text answers with a ``refusal`` content part. Chat Completions'
  ``response_format`` is checked as the API checks its shape; a Messages request that
  forces a tool (``tool_choice: {type: tool}``) with no scripted call is answered with a
  call to that tool whose input is the reply, when the reply is a JSON object. Errors and faults use
  the OpenAI shape; fault rules target it as ``protocol: responses``.
- Provider recipes' paths, answered as above: Azure OpenAI's deployment URL ``POST
  /openai/deployments/{deployment}/chat/completions`` (the ``api-version`` query required,
  else Azure's 404 "Resource not found"; the key read from the ``api-key`` header) and its
  v1 API ``/openai/v1/chat/completions`` / ``/openai/v1/responses`` (key in ``api-key``
  too); Gemini's ``/v1beta/openai/chat/completions`` (bearer key).
- ``POST /v1/messages`` (Anthropic Messages, non-streaming; ``stop_sequences`` and
  ``max_tokens`` honoured). ``stream: true`` is answered with a 400: streaming is not
  implemented.
- The batch APIs: OpenAI ``/v1/files`` and ``/v1/batches``, Anthropic
  ``/v1/messages/batches`` (see :mod:`protocol_batches`).
- ``POST /_control/config`` (JSON, merged into the current config; ``faults`` replaces the
  fault list, ``add_faults`` appends), ``GET /_control/config``, ``GET /_control/stats``,
  ``POST /_control/reset`` (body optional: ``{"config": false}`` clears only the stats),
  ``POST /_control/release`` (held requests go on, see the ``hold`` fault),
  ``GET /_control/health``, ``GET /_control/sent`` (the last 256 inference requests as
  they arrived: path, query, headers, JSON body). Control requests are not counted in
  the stats.

Answers
-------
The requested ``model`` picks the recorded completion: ``6b_finetuning``,
``6b_verification``, ``175b_finetuning`` or ``175b_verification`` (extra names are accepted
through the ``models`` key, ``"*"`` accepts any). Any other model gets a 404 in the
protocol's error shape (OpenAI ``code: model_not_found``; Anthropic ``not_found_error``).
The question is looked up in the *last user message*: exact text, then stripped, then
whitespace-normalised, then a word-window index (the question may be wrapped in any
template), then a plain substring scan (cached). If several known questions occur in the
message, the one that appears last wins.

Unknown question (decision): by default the server answers 200 with ``default_reply``
(``"I don't know."``) and counts it in ``stats()["unmatched"]``, so smoke tests with
arbitrary prompts work and a test can still assert that every prompt matched. With
``unknown_question: "error"`` it answers 400 ``invalid_request_error`` instead.

Scripted replies (``--script FILE`` or the ``script`` key, checked before GSM8K): a JSON
object mapping substrings to replies (``{"Grade the answer": "GRADE: C"}``), or a list of
rules ``{"contains"|"regex": ..., "reply": ..., "model": optional}``, or
``{"rules": [...], "models": [...]}`` (``models`` extends the accepted model names). Rules
are matched in order against the whole prompt (system text and every message, joined by
newlines); ``regex`` uses ``re.search`` with DOTALL.

Tool calls (both protocols): a rule may carry ``tool_calls: [{"name", "arguments", "id"?}]``
(``reply`` then optional, default empty): the answer calls those tools (several = parallel
calls), OpenAI ``message.tool_calls`` with ``finish_reason: tool_calls`` / Anthropic
``tool_use`` blocks with ``stop_reason: tool_use``. ``arguments`` given as an object is
sent as JSON; given as a string it is sent verbatim (so ``'{"a": 1'`` is a malformed
call; for Anthropic, a string ``input``). A name no tool in the request defines is sent as
it is (a call to an unknown tool). Ids are ``call_``/``toolu_`` plus a hash of the prompt
and the call's position, so they are the same every time. ``last: "user" | "tool"``
restricts a rule to requests whose last message is a user message or tool results (the
turn after a tool ran), and ``{last_tool_result}`` in a reply stands for the content of the
last tool result. A request whose ``tool_choice`` compels a call (``required``, ``any``,
or OpenAI's named function) and whose rule answers no call gets a call to that tool (the
first tool for ``required`` / ``any``) with no arguments, as a compelled model answers.
In the prompt text rules match, a tool call reads ``[tool_call NAME ARGUMENTS]`` and a
tool result ``[tool_result CONTENT]``. Requests are checked as the real
APIs check them (400 ``invalid_request_error`` otherwise): tools well formed (OpenAI
``{type: function, function: {name, parameters}}``, Anthropic ``{name, input_schema}``; an
OpenAI function with ``strict: true`` needs ``additionalProperties: false`` and every
property required),
``tool_choice`` valid and naming a defined tool, every tool result answering a call of the
assistant message before it and every call answered before the conversation goes on, and
Anthropic roles alternating, starting with a user message, every message holding text
(whitespace-only text is refused; an empty final assistant message is a prefill).
``stats()["tool_requests"]`` counts requests that offered tools and
``stats()["tool_results"]`` the tool results received.

Token counts are whitespace-split word counts: ``prompt_tokens`` / ``input_tokens`` count
every message (and the system prompt); ``cache_read_tokens`` (config) reports that many of
them as cached (OpenAI ``prompt_tokens_details.cached_tokens``, included in
``prompt_tokens``; Anthropic ``cache_read_input_tokens``, excluded from ``input_tokens`` as
the real API does). If ``max_tokens`` is smaller than the reply's word count, the reply is
cut after that many words and ``finish_reason`` is ``"length"`` / ``stop_reason`` is
``"max_tokens"``.

Config keys (CLI flag / ``/_control/config`` key / ``running_server`` keyword)
------------------------------------------------------------------------------
``latency``           seconds (``0.1``), ``"uniform:LOW,HIGH"``, ``"lognormal:MEAN,SIGMA"``
                      (MEAN is the mean in seconds, SIGMA that of the underlying normal) or
                      ``{"dist": "uniform", "low": .., "high": ..}`` /
                      ``{"dist": "lognormal", "mean": .., "sigma": ..}``. Applied with
                      ``asyncio.sleep`` to every inference request that passes validation
                      (body, API key, model), injected faults included, but not to
                      rate-limit 429s (a real limiter answers those at once).
``latency_seed``      seed for the latency distribution (default 0).
``script``            path to a script file, or the script itself (see above).
``default_reply``     text for unknown questions (default ``"I don't know."``).
``unknown_question``  ``"reply"`` (default) or ``"error"`` (400).
``models``            extra accepted model names (``"*"`` = any).
``cache_read_tokens`` prompt tokens reported as cache reads (default 0).
``api_key``           if set, requests must carry it (``Authorization: Bearer`` for OpenAI,
                      ``x-api-key`` for Anthropic) or get a 401.
``rate_limit``        at most this many accepted requests per ``rate_limit_window`` seconds
                      (sliding window, default window 1.0); beyond it a 429 with
                      ``retry-after`` (whole seconds, rounded up) and ``retry-after-ms``.
``faults``            list of fault rules (below); ``add_faults`` appends to it.
``redacted_thinking`` answer thinking requests with redacted_thinking blocks.
``stream_tps``        output tokens a second of a streamed answer (default: no pacing).

Fault rules
-----------
``{"kind": KIND, <targeting>, <parameters>}``. Kinds:

- ``rate_limit`` (alias ``429``): 429, OpenAI ``code: rate_limit_exceeded`` / Anthropic
  ``rate_limit_error``, header ``retry-after`` (param ``retry_after``, default 1; ``null``
  omits it) and ``retry-after-ms`` (param ``retry_after_ms``, default omitted).
- ``quota`` (alias ``insufficient_quota``): OpenAI 429 ``insufficient_quota``; Anthropic
  400 ``invalid_request_error`` "Your credit balance is too low ..." (what the real API
  sends; ``status: 429`` makes it a 429).
- ``server_error`` (alias ``500``): OpenAI 500 ``server_error`` / Anthropic 500
  ``api_error``.
- ``overloaded`` (aliases ``529``, ``503``): Anthropic 529 ``overloaded_error`` / OpenAI
  503.
- ``error``: any status, params ``status`` (required), ``type``, ``message``, ``code``.
- ``error_200``: the protocol's error body under status 200.
- ``garbage_200``: an unparseable body (param ``body``) under status 200, JSON content type.
- ``answer``: a whole answer as given: ``body`` (a JSON value, sent as JSON; a string is
  sent verbatim), ``status`` (default 200) and ``headers``: the shapes the real APIs send
  that the GSM8K answers do not (refusals, pause_turn, thinking blocks, usage details,
  rate-limit bodies of other wordings).
- ``stall``: sleep ``seconds`` (default 600) before answering normally; ends early, without
  answering, when the client disconnects (so a client timeout frees the server).
- ``hold``: keep the request until ``POST /_control/release`` (``ServerHandle.release()``),
  then answer it as usual; ends early, without answering, when the client disconnects.
  ``stats()["held"]`` counts the requests held now, so a test can wait for exactly N
  requests to be in flight (``ServerHandle.wait_held(N)``) instead of guessing how long
  they take to arrive on a loaded machine. Released holds stay released until the fault
  list is set again (``faults``/``add_faults``) or reset, which also releases.
- ``drop``: abort the TCP connection without sending any response.
- ``stream_cut``: (modifier) a streamed answer's connection drops once param ``tokens``
  output tokens went out; with param ``type`` (e.g. ``overloaded_error``) an ``error``
  event of that type ends the stream instead, as the real APIs send mid-stream errors.
- ``no_usage``: (modifier) omit ``usage`` from a successful answer.
- ``pad``: (modifier) append ``chars`` (param) ``a`` characters to a successful answer's
  text; with ``gzip: true`` the whole answer is sent gzip-compressed (``Content-Encoding:
  gzip``), so a huge answer is a small transfer (a gzip bomb).
- ``usage``: (modifier) set fields of a successful answer's ``usage`` (param ``usage``, an
  object merged over it; ``NaN``, ``Infinity`` and ``-Infinity`` go out as those bare
  JSON tokens, as a broken server sends them).
- ``alias``: (modifier) answer with ``model`` = requested + ``suffix`` (default
  ``"-20250101"``), or = ``served_model`` if given.

Every error kind also takes ``retry_after``, ``retry_after_ms``, ``headers`` (extra response
headers, e.g. ``{"x-should-retry": "false"}``), ``message`` and ``status``.

What the real SDKs (openai 3.57, anthropic 2.14, ``max_retries=0``) make of each kind:
``rate_limit`` -> ``RateLimitError`` (``.response.headers["retry-after"]``); ``quota`` ->
``openai.RateLimitError`` with ``.code == "insufficient_quota"`` /
``anthropic.BadRequestError``; ``server_error`` / ``overloaded`` -> ``InternalServerError``
(``.status_code`` 500 / 503 / 529); ``error_200`` -> *no exception*: a response object
whose fields are all None (``choices is None`` / ``content is None``) with the error under
``.error``; ``garbage_200`` -> a bare ``json.JSONDecodeError`` (not an SDK exception);
``stall`` with a shorter client timeout -> ``APITimeoutError``; ``drop`` ->
``APIConnectionError`` (cause: "Server disconnected without sending a response");
``no_usage`` -> ``usage is None``.

Targeting (all given selectors must hold; none = every request): ``contains`` / ``regex``
(on the whole prompt), ``model``, ``protocol`` (``"openai"`` / ``"anthropic"``) pick the
*candidate* requests; then ``first: N`` (the first N candidates), ``after: N`` (every
candidate after the first N), ``every: K`` (the K-th, 2K-th, ... candidate), ``p`` with
``seed`` (each candidate with probability p, from a ``random.Random(seed)`` per rule) and
``times`` (fire at most this often). Counters are per rule and count candidates in arrival
order; every rule sees every request, the first matching *error* kind answers, ``stall``
and ``hold`` rules delay, modifier kinds apply on top.
Unknown keys are rejected with a 400 so typos do not silently disable a fault.

On the command line a rule is JSON or ``KIND[:key=value,...]`` (values parsed as JSON when
possible): ``--fault 'rate_limit:first=3,retry_after=2' --fault drop:every=10``. Shortcuts:
``--no-usage``, ``--served-model-suffix -20250101``, ``--served-model NAME``.

``reset`` clears the stats, removes every fault rule and the rate limit, and restores the
other keys to their startup values.

Stats (``GET /_control/stats``)
-------------------------------
``total`` (non-control requests), ``paths`` (count per path), ``statuses`` (count per status
code; ``"dropped"`` / ``"disconnected"`` for aborted ones), ``models``, ``faults`` (count
per kind injected), ``rate_limited``, ``unmatched``, ``fingerprints`` (sha256 of the path
and the canonical JSON body, keys sorted -> count), ``repeated`` (how many fingerprints
were seen more than once) and ``max_repeat``, ``in_flight`` and ``max_in_flight``,
``held`` (requests a ``hold`` fault keeps now),
``arrivals`` (``time.time()`` of each request arrival, in order), ``since`` (when the stats
were last cleared), ``versions`` (Messages requests per ``anthropic-version`` sent),
``thinking_returned`` (answers that carried thinking), ``reasoning_returned`` (Responses
reasoning items that came back sealed, as issued) and ``streamed`` (streamed answers).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import itertools
import json
import math
import queue
import random
import re
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from starlette.requests import Request
    from starlette.responses import Response

REPO_ROOT = Path(__file__).resolve().parents[1]
DEFAULT_DATA_DIR = REPO_ROOT / "examples" / "data" / "gsm8k"
GSM8K_MODELS = ("6b_finetuning", "6b_verification", "175b_finetuning", "175b_verification")
HOST = "127.0.0.1"
LISTEN_PREFIX = "listening on "
DEFAULT_REPLY = "I don't know."
OPENAI = "openai"
ANTHROPIC = "anthropic"
#: OpenAI's Responses API (``POST /v1/responses``): errors in the OpenAI shape
RESPONSES = "responses"

# --------------------------------------------------------------------------------------
# GSM8K data and question lookup
# --------------------------------------------------------------------------------------


class QuestionIndex:
    """Finds which known question a prompt contains, cheaply for the common cases."""

    WINDOW = 4

    def __init__(self, questions: list[str]) -> None:
        """Index ``questions`` by exact text, normalised text and their first words."""
        self.questions = questions
        self.exact: dict[str, int] = {q: i for i, q in enumerate(questions)}
        self.normalised: dict[str, int] = {" ".join(q.split()): i for i, q in enumerate(questions)}
        self.words: list[list[str]] = [q.split() for q in questions]
        self.heads: dict[tuple[str, ...], list[int]] = {}
        self.tails: dict[tuple[str, ...], list[int]] = {}
        self.short: list[int] = []
        for i, words in enumerate(self.words):
            if len(words) >= self.WINDOW:
                self.heads.setdefault(tuple(words[: self.WINDOW]), []).append(i)
                self.tails.setdefault(tuple(words[-self.WINDOW :]), []).append(i)
            else:
                self.short.append(i)
        self._slow_cache: dict[str, int | None] = {}

    def find(self, text: str) -> int | None:
        """Return the index of the (last occurring) known question in ``text``, or None."""
        hit = self.exact.get(text)
        if hit is not None:
            return hit
        stripped = text.strip()
        hit = self.exact.get(stripped)
        if hit is not None:
            return hit
        words = text.split()
        hit = self.normalised.get(" ".join(words))
        if hit is not None:
            return hit
        window = self.WINDOW
        qwords = self.words
        # Word windows, from the end of the text: a template usually puts little after the
        # question, so matching on the question's last words finds it in a few steps.
        tails = self.tails
        for end in range(len(words), window - 1, -1):
            candidates = tails.get(tuple(words[end - window : end]))
            if candidates:
                for cand in candidates:
                    qw = qwords[cand]
                    if end >= len(qw) and words[end - len(qw) : end] == qw:
                        return cand
        # The question's last word may be glued to what follows; try its first words.
        heads = self.heads
        for pos in range(len(words) - window, -1, -1):
            candidates = heads.get(tuple(words[pos : pos + window]))
            if candidates:
                for cand in candidates:
                    qw = qwords[cand]
                    if words[pos : pos + len(qw)] == qw:
                        return cand
        for cand in self.short:
            if self.questions[cand] in text:
                return cand
        return self._slow_find(text)

    def _slow_find(self, text: str) -> int | None:
        """Substring scan over every question (for glued punctuation); results are cached."""
        if text in self._slow_cache:
            return self._slow_cache[text]
        best: int | None = None
        best_pos = -1
        for i, q in enumerate(self.questions):
            pos = text.rfind(q)
            if pos > best_pos:
                best, best_pos = i, pos
        if len(self._slow_cache) > 4096:
            self._slow_cache.clear()
        self._slow_cache[text] = best
        return best


@dataclass
class Gsm8kData:
    """The GSM8K test questions, their reference answers and the recorded solutions."""

    questions: list[str]
    answers: list[str]
    solutions: dict[str, list[str]]
    index: QuestionIndex

    @classmethod
    def load(cls, data_dir: Path) -> Gsm8kData:
        """Read ``test.jsonl`` and ``example_model_solutions.jsonl`` from ``data_dir``."""
        questions: list[str] = []
        answers: list[str] = []
        with open(data_dir / "test.jsonl", encoding="utf-8") as fh:
            for line in fh:
                if line.strip():
                    row = json.loads(line)
                    questions.append(row["question"])
                    answers.append(row["answer"])
        solutions: dict[str, list[str]] = {m: [] for m in GSM8K_MODELS}
        with open(data_dir / "example_model_solutions.jsonl", encoding="utf-8") as fh:
            for i, line in enumerate(fh):
                if not line.strip():
                    continue
                row = json.loads(line)
                if i < len(questions) and row.get("question", questions[i]) != questions[i]:
                    raise ValueError(f"example_model_solutions.jsonl line {i + 1} is out of order")
                for model in GSM8K_MODELS:
                    solutions[model].append(row[model]["solution"])
        if any(len(v) != len(questions) for v in solutions.values()):
            raise ValueError("test.jsonl and example_model_solutions.jsonl differ in length")
        return cls(questions, answers, solutions, QuestionIndex(questions))


def load_gsm8k(data_dir: Path | str | None = None) -> Gsm8kData:
    """Load the GSM8K data the server answers from (default: ``examples/data/gsm8k``)."""
    return Gsm8kData.load(Path(data_dir) if data_dir else DEFAULT_DATA_DIR)


# --------------------------------------------------------------------------------------
# Configuration: latency, script, fault rules
# --------------------------------------------------------------------------------------


class ConfigError(ValueError):
    """A control or CLI configuration that cannot be applied."""


def parse_latency(spec: Any, seed: int = 0) -> Callable[[], float]:
    """Return a sampler of latency seconds for a number, string or dict ``spec``."""
    if spec is None or spec == 0 or spec == "":
        return lambda: 0.0
    if isinstance(spec, int | float) and not isinstance(spec, bool):
        value = float(spec)
        if value < 0:
            raise ConfigError("latency must be >= 0")
        return lambda: value
    if isinstance(spec, str):
        name, _, args = spec.partition(":")
        if not args:
            try:
                return parse_latency(float(name), seed)
            except ValueError:
                raise ConfigError(f"bad latency {spec!r}") from None
        try:
            nums = [float(x) for x in args.split(",")]
        except ValueError:
            raise ConfigError(f"bad latency {spec!r}") from None
        if name == "uniform" and len(nums) == 2:
            return parse_latency({"dist": "uniform", "low": nums[0], "high": nums[1]}, seed)
        if name == "lognormal" and len(nums) == 2:
            return parse_latency({"dist": "lognormal", "mean": nums[0], "sigma": nums[1]}, seed)
        raise ConfigError(f"bad latency {spec!r}")
    if isinstance(spec, dict):
        rng = random.Random(seed)
        dist = spec.get("dist")
        try:
            if dist == "fixed":
                return parse_latency(float(spec["seconds"]), seed)
            if dist == "uniform":
                low, high = float(spec["low"]), float(spec["high"])
                if not 0 <= low <= high:
                    raise ConfigError("uniform latency needs 0 <= low <= high")
                return lambda: rng.uniform(low, high)
            if dist == "lognormal":
                mean, sigma = float(spec["mean"]), float(spec["sigma"])
                if mean <= 0 or sigma < 0:
                    raise ConfigError("lognormal latency needs mean > 0 and sigma >= 0")
                mu = math.log(mean) - sigma * sigma / 2
                return lambda: rng.lognormvariate(mu, sigma)
        except KeyError as exc:
            raise ConfigError(f"latency {dist} needs {exc}") from None
    raise ConfigError(f"bad latency {spec!r}")


@dataclass
class ScriptRule:
    """One scripted reply: a substring or regex of the prompt, the reply text and the tool
    calls it makes (``tool_calls``), optionally only after a user or tool message
    (``last``)."""

    reply: str
    contains: str | None = None
    regex: re.Pattern[str] | None = None
    model: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    last: str | None = None
    refusal: str | None = None
    reasoning: str | None = None

    def matches(self, prompt: str, model: str, last: str = "user") -> bool:
        """Whether this rule answers ``prompt`` sent to ``model`` (its last message from
        ``last``: ``user`` or ``tool``)."""
        if self.model is not None and self.model != model:
            return False
        if self.last is not None and self.last != last:
            return False
        if self.contains is not None and self.contains not in prompt:
            return False
        return self.regex is None or self.regex.search(prompt) is not None


def parse_script(spec: Any) -> tuple[list[ScriptRule], list[str]]:
    """Parse a script (path, mapping, list of rules or ``{"rules", "models"}``)."""
    if spec is None:
        return [], []
    if isinstance(spec, str):
        try:
            spec = json.loads(Path(spec).read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            raise ConfigError(f"cannot read script {spec!r}: {exc}") from None
    models: list[str] = []
    if isinstance(spec, dict) and "rules" in spec:
        models = list(spec.get("models", []))
        extra = set(spec) - {"rules", "models"}
        if extra:
            raise ConfigError(f"unknown script keys {sorted(extra)}")
        spec = spec["rules"]
    if isinstance(spec, dict):
        spec = [{"contains": k, "reply": v} for k, v in spec.items()]
    if not isinstance(spec, list):
        raise ConfigError("script must be a mapping, a list of rules or {'rules': [...]}")
    rules: list[ScriptRule] = []
    for raw in spec:
        if not isinstance(raw, dict) or not {"reply", "tool_calls", "refusal"} & set(raw):
            raise ConfigError(f"script rule needs a 'reply', 'tool_calls' or 'refusal': {raw!r}")
        extra = set(raw) - {"contains", "regex", "reply", "model", "tool_calls", "last"}
        extra -= {"refusal", "reasoning"}
        if extra:
            raise ConfigError(f"unknown script rule keys {sorted(extra)}")
        calls = raw.get("tool_calls")
        if calls is not None and (
            not isinstance(calls, list)
            or not all(isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls)
        ):
            raise ConfigError(
                f"script rule tool_calls must be a list of {{name, arguments}}: {raw!r}"
            )
        if raw.get("last") not in (None, "user", "tool"):
            raise ConfigError("script rule 'last' must be 'user' or 'tool'")
        try:
            regex = re.compile(raw["regex"], re.DOTALL) if raw.get("regex") else None
        except re.error as exc:
            raise ConfigError(f"bad script regex {raw['regex']!r}: {exc}") from None
        rules.append(
            ScriptRule(
                str(raw.get("reply", "")),
                raw.get("contains"),
                regex,
                raw.get("model"),
                calls,
                raw.get("last"),
                raw.get("refusal"),
                raw.get("reasoning"),
            )
        )
    models.extend(r.model for r in rules if r.model)
    return rules, models


ERROR_KINDS = {"rate_limit", "quota", "server_error", "overloaded", "error", "error_200"}
ERROR_KINDS |= {"garbage_200", "drop", "answer"}
MODIFIER_KINDS = {"no_usage", "alias", "stream_cut", "usage", "pad"}
FAULT_KINDS = ERROR_KINDS | MODIFIER_KINDS | {"stall", "hold"}
KIND_ALIASES = {
    "429": "rate_limit",
    "insufficient_quota": "quota",
    "500": "server_error",
    "503": "overloaded",
    "529": "overloaded",
}
_SELECTOR_KEYS = {"contains", "regex", "model", "protocol", "first", "after", "every", "p"}
_SELECTOR_KEYS |= {"seed", "times"}
_PARAM_KEYS = {"retry_after", "retry_after_ms", "headers", "message", "status", "type", "code"}
_PARAM_KEYS |= {"body", "seconds", "suffix", "served_model", "tokens", "usage", "chars", "gzip"}


@dataclass
class FaultRule:
    """A fault kind with its targeting, parameters and per-rule counters."""

    kind: str
    params: dict[str, Any]
    contains: str | None = None
    regex: re.Pattern[str] | None = None
    model: str | None = None
    protocol: str | None = None
    first: int | None = None
    after: int | None = None
    every: int | None = None
    p: float | None = None
    times: int | None = None
    rng: random.Random = field(default_factory=random.Random)
    seen: int = 0
    fired: int = 0

    @classmethod
    def parse(cls, raw: Any) -> FaultRule:
        """Build a rule from its JSON form (or the ``KIND[:k=v,...]`` string form)."""
        if isinstance(raw, str):
            raw = parse_fault_string(raw)
        if not isinstance(raw, dict) or "kind" not in raw:
            raise ConfigError(f"fault rule needs a 'kind': {raw!r}")
        kind = KIND_ALIASES.get(str(raw["kind"]), str(raw["kind"]))
        if kind not in FAULT_KINDS:
            raise ConfigError(f"unknown fault kind {raw['kind']!r}; known: {sorted(FAULT_KINDS)}")
        extra = set(raw) - _SELECTOR_KEYS - _PARAM_KEYS - {"kind"}
        if extra:
            raise ConfigError(f"unknown fault rule keys {sorted(extra)}")
        if kind == "error" and "status" not in raw:
            raise ConfigError("fault kind 'error' needs a 'status'")
        if raw.get("protocol") not in (None, OPENAI, ANTHROPIC, RESPONSES):
            raise ConfigError("fault 'protocol' must be 'openai' or 'anthropic'")
        for key in ("first", "after", "every", "times"):
            if raw.get(key) is not None and (not isinstance(raw[key], int) or raw[key] < 0):
                raise ConfigError(f"fault {key!r} must be a non-negative integer")
        if raw.get("every") == 0:
            raise ConfigError("fault 'every' must be >= 1")
        try:
            regex = re.compile(raw["regex"], re.DOTALL) if raw.get("regex") else None
        except re.error as exc:
            raise ConfigError(f"bad fault regex: {exc}") from None
        params = {k: v for k, v in raw.items() if k in _PARAM_KEYS}
        if kind == "rate_limit":
            params.setdefault("retry_after", 1)
        return cls(
            kind=kind,
            params=params,
            contains=raw.get("contains"),
            regex=regex,
            model=raw.get("model"),
            protocol=raw.get("protocol"),
            first=raw.get("first"),
            after=raw.get("after"),
            every=raw.get("every"),
            p=None if raw.get("p") is None else float(raw["p"]),
            times=raw.get("times"),
            rng=random.Random(raw.get("seed", 0)),
        )

    def check(self, prompt: str, model: str, protocol: str) -> bool:
        """Advance this rule's counters for one request; return whether it fires."""
        if self.protocol is not None and self.protocol != protocol:
            return False
        if self.model is not None and self.model != model:
            return False
        if self.contains is not None and self.contains not in prompt:
            return False
        if self.regex is not None and self.regex.search(prompt) is None:
            return False
        self.seen += 1
        hit = True
        if self.first is not None and self.seen > self.first:
            hit = False
        if self.after is not None and self.seen <= self.after:
            hit = False
        if self.every is not None and self.seen % self.every:
            hit = False
        if self.p is not None and self.rng.random() >= self.p:
            hit = False
        if self.times is not None and self.fired >= self.times:
            hit = False
        if hit:
            self.fired += 1
        return hit


def parse_fault_string(text: str) -> dict[str, Any]:
    """Parse ``KIND[:key=value,...]`` (or a JSON object) into a fault rule dict."""
    text = text.strip()
    if text.startswith("{"):
        try:
            return dict(json.loads(text))
        except ValueError as exc:
            raise ConfigError(f"bad fault JSON {text!r}: {exc}") from None
    kind, _, rest = text.partition(":")
    rule: dict[str, Any] = {"kind": kind}
    for item in filter(None, rest.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise ConfigError(f"bad fault parameter {item!r} in {text!r}")
        try:
            rule[key.strip()] = json.loads(value)
        except ValueError:
            rule[key.strip()] = value
    return rule


CONFIG_KEYS = {
    "latency",
    "latency_seed",
    "script",
    "default_reply",
    "unknown_question",
    "models",
    "cache_read_tokens",
    "api_key",
    "rate_limit",
    "rate_limit_window",
    "faults",
    "redacted_thinking",
    "stream_tps",
}
FAULT_CONFIG_KEYS = {"faults", "rate_limit", "rate_limit_window"}


@dataclass
class Settings:
    """The parsed form of a config dict."""

    latency: Callable[[], float]
    has_latency: bool
    script: list[ScriptRule]
    default_reply: str
    unknown_is_error: bool
    models: frozenset[str]
    any_model: bool
    cache_read_tokens: int
    api_key: str | None
    rate_limit: float | None
    rate_limit_window: float
    redacted_thinking: bool = False
    stream_tps: float | None = None

    @classmethod
    def parse(cls, raw: dict[str, Any]) -> Settings:
        """Validate and parse a config dict (see the module docstring for its keys)."""
        unknown = set(raw) - CONFIG_KEYS
        if unknown:
            raise ConfigError(
                f"unknown config keys {sorted(unknown)}; known: {sorted(CONFIG_KEYS)}"
            )
        script, script_models = parse_script(raw.get("script"))
        models = set(GSM8K_MODELS) | set(raw.get("models") or []) | set(script_models)
        unknown_question = raw.get("unknown_question", "reply")
        if unknown_question not in ("reply", "error"):
            raise ConfigError("unknown_question must be 'reply' or 'error'")
        rate_limit = raw.get("rate_limit")
        window = float(raw.get("rate_limit_window") or 1.0)
        if rate_limit is not None and (float(rate_limit) <= 0 or window <= 0):
            raise ConfigError("rate_limit and rate_limit_window must be > 0")
        latency = raw.get("latency")
        return cls(
            latency=parse_latency(latency, int(raw.get("latency_seed") or 0)),
            has_latency=bool(latency),
            script=script,
            default_reply=str(raw.get("default_reply", DEFAULT_REPLY)),
            unknown_is_error=unknown_question == "error",
            models=frozenset(models),
            any_model="*" in models,
            cache_read_tokens=int(raw.get("cache_read_tokens") or 0),
            api_key=raw.get("api_key"),
            rate_limit=None if rate_limit is None else float(rate_limit),
            rate_limit_window=window,
            redacted_thinking=bool(raw.get("redacted_thinking")),
            stream_tps=float(raw["stream_tps"]) if raw.get("stream_tps") else None,
        )


# --------------------------------------------------------------------------------------
# Stats
# --------------------------------------------------------------------------------------


#: how many inference requests ``GET /_control/sent`` keeps (the last ones)
SENT_KEPT = 256


class Stats:
    """Counters the control endpoint reports; cleared by ``/_control/reset``."""

    def __init__(self) -> None:
        """Start with empty counters."""
        self.in_flight = 0
        self.held = 0
        self.clear()

    def clear(self) -> None:
        """Forget everything except the number of requests currently in flight."""
        self.since = time.time()
        self.total = 0
        self.paths: dict[str, int] = {}
        self.statuses: dict[str, int] = {}
        self.models: dict[str, int] = {}
        self.faults: dict[str, int] = {}
        self.fingerprints: dict[str, int] = {}
        self.arrivals: list[float] = []
        self.unmatched = 0
        self.rate_limited = 0
        self.tool_requests = 0
        self.tool_results = 0
        self.versions: dict[str, int] = {}
        self.thinking_returned = 0
        self.reasoning_returned = 0
        self.streamed = 0
        self.max_in_flight = self.in_flight
        #: the last inference requests as sent (``GET /_control/sent``)
        self.sent: deque[dict[str, Any]] = deque(maxlen=SENT_KEPT)

    def arrive(self, path: str) -> None:
        """Count a request arriving at ``path``."""
        self.total += 1
        self.paths[path] = self.paths.get(path, 0) + 1
        self.arrivals.append(time.time())
        self.in_flight += 1
        if self.in_flight > self.max_in_flight:
            self.max_in_flight = self.in_flight

    def leave(self, status: int | str) -> None:
        """Count a request leaving with ``status``."""
        self.in_flight -= 1
        key = str(status)
        self.statuses[key] = self.statuses.get(key, 0) + 1

    def bump(self, table: dict[str, int], key: str) -> None:
        """Increment ``table[key]``."""
        table[key] = table.get(key, 0) + 1

    def snapshot(self) -> dict[str, Any]:
        """Return the stats as a JSON-able dict."""
        counts = self.fingerprints.values()
        return {
            "total": self.total,
            "paths": dict(self.paths),
            "statuses": dict(self.statuses),
            "models": dict(self.models),
            "faults": dict(self.faults),
            "rate_limited": self.rate_limited,
            "unmatched": self.unmatched,
            "tool_requests": self.tool_requests,
            "tool_results": self.tool_results,
            "versions": dict(self.versions),
            "thinking_returned": self.thinking_returned,
            "reasoning_returned": self.reasoning_returned,
            "streamed": self.streamed,
            "fingerprints": dict(self.fingerprints),
            "repeated": sum(1 for c in counts if c > 1),
            "max_repeat": max(counts, default=0),
            "in_flight": self.in_flight,
            "max_in_flight": self.max_in_flight,
            "held": self.held,
            "arrivals": list(self.arrivals),
            "since": self.since,
        }


# --------------------------------------------------------------------------------------
# Protocol details
# --------------------------------------------------------------------------------------

_WORD = re.compile(r"\S+")

# (status, openai type, openai code, openai message, anthropic status, anthropic type, message)
_ERRORS: dict[str, tuple[int, str, str | None, str, int, str, str]] = {
    "rate_limit": (
        429,
        "requests",
        "rate_limit_exceeded",
        "Rate limit reached for requests. Please try again later.",
        429,
        "rate_limit_error",
        "This request would exceed your organization's rate limit. Please try again later.",
    ),
    "quota": (
        429,
        "insufficient_quota",
        "insufficient_quota",
        "You exceeded your current quota, please check your plan and billing details.",
        400,
        "invalid_request_error",
        "Your credit balance is too low to access the Anthropic API. "
        "Please go to Plans & Billing to upgrade or purchase credits.",
    ),
    "server_error": (
        500,
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
        500,
        "api_error",
        "Internal server error",
    ),
    "overloaded": (
        503,
        "server_error",
        None,
        "The engine is currently overloaded, please try again later.",
        529,
        "overloaded_error",
        "Overloaded",
    ),
    "error_200": (
        200,
        "server_error",
        None,
        "The server had an error while processing your request. Sorry about that!",
        200,
        "overloaded_error",
        "Overloaded",
    ),
}
_ANTHROPIC_TYPES = {
    400: "invalid_request_error",
    401: "authentication_error",
    403: "permission_error",
    404: "not_found_error",
    413: "request_too_large",
    429: "rate_limit_error",
    500: "api_error",
    529: "overloaded_error",
}
_OPENAI_TYPES = {
    400: "invalid_request_error",
    401: "invalid_request_error",
    404: "invalid_request_error",
    429: "requests",
}


def _content_text(content: Any) -> str:
    """Text of a message ``content`` (a string or a list of content blocks; Anthropic
    ``tool_use`` blocks read ``[tool_call NAME INPUT]``, ``tool_result`` blocks
    ``[tool_result CONTENT]``, server-tool blocks ``[server_tool_use ID]`` and
    ``[web_search_tool_result TOOL_USE_ID]``)."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        parts = []
        for block in content:
            if not isinstance(block, dict):
                continue
            if block.get("type") == "tool_use":
                parts.append(
                    f"[tool_call {block.get('name')} {_dumps(block.get('input')).decode()}]"
                )
            elif block.get("type") == "tool_result":
                parts.append(f"[tool_result {_content_text(block.get('content'))}]")
            elif block.get("type") in ("server_tool_use", "web_search_tool_result"):
                ref = block.get("id") or block.get("tool_use_id")  # what the model saw
                parts.append(f"[{block['type']} {ref}]")
            else:
                parts.append(str(block.get("text", "")))
        return "\n".join(parts)
    return ""


def _truncate_words(text: str, limit: int) -> str:
    """Cut ``text`` right after its ``limit``-th whitespace-separated word."""
    if limit <= 0:
        return ""
    for count, match in enumerate(_WORD.finditer(text), start=1):
        if count == limit:
            return text[: match.end()]
    return text


def _cut_at_stop(text: str, stops: list[str]) -> tuple[str, str | None]:
    """Cut ``text`` before the earliest stop sequence; return the text and the sequence."""
    best: tuple[int, str] | None = None
    for stop in stops:
        if stop:
            pos = text.find(stop)
            if pos >= 0 and (best is None or pos < best[0]):
                best = (pos, stop)
    return (text, None) if best is None else (text[: best[0]], best[1])


def _call_id(prefix: str, prompt: str, index: int, call: dict[str, Any]) -> str:
    """A scripted call's id: given, or derived from the prompt and the call's position."""
    if call.get("id"):
        return str(call["id"])
    return f"{prefix}{hashlib.sha256(prompt.encode()).hexdigest()[:16]}_{index}"


def _openai_calls(calls: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """Scripted tool calls as Chat Completions ``tool_calls`` (arguments as JSON text; a
    string is sent verbatim, malformed or not)."""
    out = []
    for i, call in enumerate(calls):
        args = call.get("arguments", {})
        text = args if isinstance(args, str) else json.dumps(args)
        fn = {"name": call["name"], "arguments": text}
        out.append({"id": _call_id("call_", prompt, i, call), "type": "function", "function": fn})
    return out


def _anthropic_calls(calls: list[dict[str, Any]], prompt: str) -> list[dict[str, Any]]:
    """Scripted tool calls as Messages ``tool_use`` blocks."""
    return [
        {
            "type": "tool_use",
            "id": _call_id("toolu_", prompt, i, call),
            "name": call["name"],
            "input": call.get("arguments", {}),
        }
        for i, call in enumerate(calls)
    ]


def _fingerprint(path: str, body: bytes) -> str:
    """sha256 of the path and the (canonical JSON) body: equal requests collide."""
    return hashlib.sha256(path.encode() + b"\n" + body).hexdigest()


def _dumps(obj: Any) -> bytes:
    """Compact JSON bytes (text UTF-8 cannot encode, such as a lone surrogate from a
    script, goes out as a JSON escape, ``\\ud800``, as some real servers send it)."""
    try:
        return json.dumps(obj, separators=(",", ":"), ensure_ascii=False).encode()
    except UnicodeEncodeError:
        return json.dumps(obj, separators=(",", ":")).encode()


@dataclass
class ParsedRequest:
    """What the handlers need from an inference request body."""

    protocol: str
    body: dict[str, Any]
    model: str
    prompt: str
    last_user: str
    max_tokens: int | None
    stops: list[str]
    last_role: str = "user"
    last_tool_result: str = ""
    tool_names: frozenset[str] = frozenset()
    tool_results: int = 0


def _parse_openai(body: dict[str, Any]) -> ParsedRequest | str:
    """Pull the fields out of a chat completions body, or return an error message."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "'messages' must be a non-empty array"
    read = _read_messages(messages, "each message must be an object")
    if isinstance(read, str):
        return read
    texts, last_user = read
    max_tokens = body.get("max_completion_tokens", body.get("max_tokens"))
    if max_tokens is not None and not isinstance(max_tokens, int):
        return "'max_tokens' must be an integer"
    n = body.get("n")
    if n is not None and (not isinstance(n, int) or n < 1):
        return "'n' must be a positive integer"
    stop = body.get("stop")
    stops = [stop] if isinstance(stop, str) else list(stop or [])
    tools = _check_openai_tools(body, messages)
    if isinstance(tools, str):
        return tools
    if _thinks(body):  # DeepSeek's thinking mode: a tool loop's reasoning must come back
        for i, msg in enumerate(messages):
            has_calls = isinstance(msg, dict) and msg.get("tool_calls")
            if has_calls and msg.get("role") == "assistant" and "reasoning_content" not in msg:
                return (
                    f"Missing `reasoning_content` field in the assistant message at message "
                    f"index {i}. For more information, please refer to "
                    "https://api-docs.deepseek.com/guides/thinking_mode#tool-calls"
                )
    bad_format = _check_response_format(body)
    if bad_format is not None:
        return bad_format
    names, results, last_result = tools
    last_role = "tool" if messages[-1].get("role") == "tool" else "user"
    return ParsedRequest(
        OPENAI,
        body,
        str(body.get("model", "")),
        "\n".join(texts),
        last_user,
        max_tokens,
        stops,
        last_role,
        last_result,
        names,
        results,
    )


def _compelled_tool(body: dict[str, Any]) -> str | None:
    """The tool a request's ``tool_choice`` compels a call to: the named one (OpenAI's
    ``{type: function}``), or the first tool for ``required`` / Anthropic's ``any``; None
    otherwise (Anthropic's named tool is :func:`_forced_tool`'s, answered from the reply)."""
    choice = body.get("tool_choice")
    tools = [t for t in body.get("tools") or [] if isinstance(t, dict)]
    names = [str((t.get("function") or t).get("name")) for t in tools]
    if not names:
        return None
    if choice == "required" or (isinstance(choice, dict) and choice.get("type") == "any"):
        return names[0]
    if isinstance(choice, dict) and choice.get("type") == "function":
        named = choice.get("name") or (choice.get("function") or {}).get("name")
        return str(named) if named in names else None
    return None


def _thinks(body: dict[str, Any]) -> bool:
    """True when a Chat Completions body turns on DeepSeek's thinking mode (``thinking:
    {type: enabled}``): answers then carry ``reasoning_content`` (a rule's ``reasoning``)
    and an assistant message with tool calls must send it back."""
    thinking = body.get("thinking")
    return isinstance(thinking, dict) and thinking.get("type") == "enabled"


def _strict_refused(fn: dict[str, Any], what: str = "function", schema: Any = None) -> str | None:
    """The OpenAI APIs' 400 for a function (or a ``response_format``) with ``strict:
    true`` whose schema is not a strict one at its top: ``additionalProperties: false``
    and every property required (the first rules of strict mode the real API checks)."""
    if fn.get("strict") is not True:
        return None
    params = (fn.get("parameters") if schema is None else schema) or {}
    name = fn.get("name")
    if params.get("additionalProperties") is not False:
        return (
            f"Invalid schema for {what} '{name}': In context=(), 'additionalProperties' is "
            "required to be supplied and to be false."
        )
    missing = sorted(set(params.get("properties") or {}) - set(params.get("required") or []))
    if missing:
        return (
            f"Invalid schema for {what} '{name}': In context=(), 'required' is required to "
            f"be supplied and to be an array including every key in properties. Missing "
            f"'{missing[0]}'."
        )
    return None


def _check_openai_tools(
    body: dict[str, Any], messages: list[dict[str, Any]]
) -> tuple[frozenset[str], int, str] | str:
    """Tool names, tool results and the last result's text of a Chat Completions body, or
    the error the real API gives for malformed tools or an unanswered or stray tool
    result."""
    names: set[str] = set()
    for tool in body.get("tools") or []:
        fn = tool.get("function") if isinstance(tool, dict) else None
        if tool.get("type") != "function" or not isinstance(fn, dict) or not fn.get("name"):
            return "tools: each tool must be {type: function, function: {name, parameters}}"
        refused = _strict_refused(fn)
        if refused:
            return refused
        names.add(str(fn["name"]))
    choice = body.get("tool_choice")
    if choice is not None:
        if isinstance(choice, dict):
            named = (choice.get("function") or {}).get("name")
            if choice.get("type") != "function" or named not in names:
                return f"tool_choice: no tool named {named!r} in tools"
        elif choice not in ("auto", "none", "required"):
            return f"tool_choice: invalid value {choice!r}"
        if not names:
            return "tool_choice is only allowed when tools are specified"
    pending: set[str] = set()
    results, last_result = 0, ""
    for msg in messages:
        role = msg.get("role")
        if role == "tool":
            call_id = msg.get("tool_call_id")
            if call_id not in pending:
                return (
                    "messages with role 'tool' must be a response to a preceding message "
                    f"with 'tool_calls' (tool_call_id {call_id!r})"
                )
            pending.discard(call_id)
            results += 1
            last_result = _content_text(msg.get("content"))
            continue
        if pending:
            return (
                "An assistant message with 'tool_calls' must be followed by tool messages "
                f"responding to each 'tool_call_id'; missing {sorted(pending)}"
            )
        if role == "assistant":
            for call in msg.get("tool_calls") or []:
                fn = call.get("function") if isinstance(call, dict) else None
                if not isinstance(fn, dict) or not isinstance(fn.get("arguments"), str):
                    return "assistant tool_calls need function.name and string arguments"
                pending.add(str(call.get("id")))
    return frozenset(names), results, last_result


def _forced_tool(body: dict[str, Any]) -> str | None:
    """The tool a Messages request forces (``tool_choice: {"type": "tool", "name"}``)."""
    choice = body.get("tool_choice")
    if isinstance(choice, dict) and choice.get("type") == "tool":
        return str(choice.get("name"))
    return None


def _forced_answer(name: str, reply: str) -> tuple[list[dict[str, Any]], str]:
    """A reply to a forced-tool request, as a model answers one: a reply that is a JSON
    object (a code fence around it allowed) becomes the tool's input; any other reply is
    sent as text (there is no object to call the tool with)."""
    text = reply.strip()
    if text.startswith("```"):
        text = text.split("\n", 1)[-1].rsplit("```", 1)[0]
    try:
        value = json.loads(text)
    except ValueError:
        return [], reply
    if not isinstance(value, dict):
        return [], reply
    return [{"name": name, "arguments": value}], ""


def _check_response_format(body: dict[str, Any]) -> str | None:
    """The error Chat Completions gives for a malformed ``response_format``, or None."""
    fmt = body.get("response_format")
    if fmt is None:
        return None
    if not isinstance(fmt, dict) or fmt.get("type") not in ("text", "json_object", "json_schema"):
        return "Invalid value for 'response_format.type'"
    spec = fmt.get("json_schema")
    if fmt["type"] == "json_schema" and (
        not isinstance(spec, dict)
        or not isinstance(spec.get("name"), str)
        or not isinstance(spec.get("schema"), dict)
    ):
        return "Missing required parameter: 'response_format.json_schema' (name and schema)."
    if fmt["type"] == "json_schema":
        return _strict_refused(spec, "response_format", spec.get("schema"))
    return None


def _read_messages(messages: list[Any], not_object: str) -> tuple[list[str], str] | str:
    """Each message's text and the last user message's text, or the error ``not_object``
    when a message is not an object (both protocols read messages alike)."""
    texts: list[str] = []
    last_user = ""
    for msg in messages:
        if not isinstance(msg, dict):
            return not_object
        text = _content_text(msg.get("content"))
        if msg.get("role") == "tool":
            text = f"[tool_result {text}]"
        for call in msg.get("tool_calls") or []:
            fn = call.get("function") if isinstance(call, dict) else None
            if isinstance(fn, dict):
                text += f"\n[tool_call {fn.get('name')} {fn.get('arguments')}]"
        texts.append(text)
        if msg.get("role") == "user":
            last_user = text
    return texts, last_user


def _parse_anthropic(body: dict[str, Any]) -> ParsedRequest | str:
    """Pull the fields out of a messages body, or return an error message."""
    messages = body.get("messages")
    if not isinstance(messages, list) or not messages:
        return "messages: Field required"
    if not isinstance(body.get("max_tokens"), int):
        return "max_tokens: Field required"
    read = _read_messages(messages, "messages: each message must be an object")
    if isinstance(read, str):
        return read
    texts, last_user = read
    system = body.get("system")
    if system:
        texts.insert(0, _content_text(system))
    stops = list(body.get("stop_sequences") or [])
    tools = _check_anthropic_tools(body, messages)
    if isinstance(tools, str):
        return tools
    names, results, last_result, last_role = tools
    return ParsedRequest(
        ANTHROPIC,
        body,
        str(body.get("model", "")),
        "\n".join(texts),
        last_user,
        body["max_tokens"],
        stops,
        last_role,
        last_result,
        names,
        results,
    )


def _empty_anthropic_content(content: Any, final_assistant: bool) -> str | None:
    """The real API's refusal of a message with no text (a whitespace-only string or text
    block, or no content at all; a final assistant message, a prefill, may be empty)."""
    if isinstance(content, str) or content is None or content == []:
        if final_assistant or (isinstance(content, str) and content.strip()):
            return None
        return (
            ": all messages must have non-empty content except for the optional final "
            "assistant message"
        )
    for j, block in enumerate(content if isinstance(content, list) else []):
        text = block.get("text") if isinstance(block, dict) else None
        if isinstance(block, dict) and block.get("type") == "text" and not str(text or "").strip():
            return f".content.{j}.text: text content blocks must contain non-whitespace text"
    return None


def _check_anthropic_tools(
    body: dict[str, Any], messages: list[dict[str, Any]]
) -> tuple[frozenset[str], int, str, str] | str:
    """Tool names, tool results, the last result's text and the last message's kind
    (``user`` or ``tool``) of a Messages body, or the error the real API gives for
    malformed tools, roles that do not alternate, or tool_use / tool_result blocks that do
    not pair up."""
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or not tool.get("name"):
            return "tools: each tool needs a name"
        if not isinstance(tool.get("input_schema"), dict):
            return f"tools.{tool.get('name')}.input_schema: Field required"
        names.add(str(tool["name"]))
    choice = body.get("tool_choice")
    if choice is not None:
        kind = choice.get("type") if isinstance(choice, dict) else None
        if kind not in ("auto", "any", "tool", "none"):
            return f"tool_choice: invalid type {kind!r}"
        if kind == "tool" and choice.get("name") not in names:
            return f"tool_choice: no tool named {choice.get('name')!r} in tools"
    previous, pending = None, set()
    results, last_result, last_role = 0, "", "user"
    for i, msg in enumerate(messages):
        role = msg.get("role")
        if role not in ("user", "assistant"):
            return f"messages.{i}.role: Input should be 'user' or 'assistant'"
        if previous is None and role != "user":
            return 'messages: first message must use the "user" role'
        if role == previous:
            return f'messages: roles must alternate between "user" and "assistant" (message {i})'
        content = msg.get("content")
        blocks = content if isinstance(content, list) else []
        empty = _empty_anthropic_content(content, final_assistant=i == len(messages) - 1)
        if empty:
            return f"messages.{i}{empty}"
        answered = {
            b.get("tool_use_id")
            for b in blocks
            if isinstance(b, dict) and b.get("type") == "tool_result"
        }
        if role == "user":
            if answered - pending:
                stray = sorted(answered - pending)
                return f"messages.{i}: unexpected tool_use_id in tool_result blocks: {stray}"
            if pending - answered:
                return (
                    f"messages.{i}: tool_use ids were found without tool_result blocks "
                    f"immediately after: {sorted(pending - answered)}"
                )
            results += len(answered)
            last_role = "tool" if answered else "user"
            for b in blocks:
                if isinstance(b, dict) and b.get("type") == "tool_result":
                    last_result = _content_text(b.get("content"))
            pending = set()
        else:
            pending = {
                b.get("id") for b in blocks if isinstance(b, dict) and b.get("type") == "tool_use"
            }
        previous = role
    return frozenset(names), results, last_result, last_role


#: the Messages API versions the server knows; from NO_SAMPLING_VERSION on, temperature,
#: top_p and top_k are refused on every model, as the real API does
ANTHROPIC_VERSIONS = ("2023-01-01", "2023-06-01", "2026-10-21")
NO_SAMPLING_VERSION = "2026-10-21"
_THINKING_KEY = b"gradetrail-protocol-server-thinking"


def thinking_signature(kind: str, text: str) -> str:
    """The signature the server gives a thinking block (or the ``data`` of a redacted
    one): a keyed hash of its text, so a block sent back altered fails the check."""
    digest = hashlib.sha256(_THINKING_KEY + kind.encode() + b"\0" + text.encode()).digest()
    return base64.b64encode(digest).decode()


def _check_version(version: str | None, body: dict[str, Any]) -> str | None:
    """The real API's 400 for a missing or unknown ``anthropic-version``, or for a sampling
    parameter under a version that takes none."""
    if version is None:
        return "anthropic-version: header is required"
    if version not in ANTHROPIC_VERSIONS:
        return f"anthropic-version: {version!r} is not a valid version"
    if version >= NO_SAMPLING_VERSION:
        for name in ("temperature", "top_p", "top_k"):
            if name in body:
                return f"{name}: Extra inputs are not permitted"
    return None


def _check_thinking(body: dict[str, Any], messages: list[dict[str, Any]]) -> str | None:
    """The real API's 400s for thinking: a budget below 1,024 or not below max_tokens, a
    temperature other than 1 with thinking on, a forced tool (``tool_choice`` any or tool)
    with thinking enabled (adaptive thinking takes one), a thinking block sent back altered (its
    signature no longer matches), and, with thinking on, a final assistant turn that uses
    tools without opening with its thinking block."""
    thinking = body.get("thinking")
    kind = thinking.get("type") if isinstance(thinking, dict) else None
    if thinking is not None and kind not in ("enabled", "adaptive", "disabled"):
        return "thinking.type: Input should be 'enabled', 'adaptive' or 'disabled'"
    on = kind in ("enabled", "adaptive")
    if kind == "enabled":
        budget = thinking.get("budget_tokens")
        if not isinstance(budget, int) or budget < 1024:
            return "thinking.enabled.budget_tokens: Input should be greater than or equal to 1024"
        if budget >= body.get("max_tokens", 0):
            return "max_tokens: must be greater than thinking.budget_tokens"
    if on and body.get("temperature", 1) != 1:
        return "`temperature` may only be set to 1 when thinking is enabled"
    choice = body.get("tool_choice")
    if kind == "enabled" and isinstance(choice, dict) and choice.get("type") in ("any", "tool"):
        return "Thinking may not be enabled when tool_choice forces tool use."
    last_tool_turn = None
    for i, msg in enumerate(messages):
        content = msg.get("content")
        if msg.get("role") != "assistant" or not isinstance(content, list):
            continue
        for j, block in enumerate(content):
            btype = block.get("type") if isinstance(block, dict) else None
            if btype == "thinking":
                sig = thinking_signature("thinking", str(block.get("thinking", "")))
                if block.get("signature") != sig:
                    return f"messages.{i}.content.{j}: Invalid `signature` in `thinking` block"
            elif btype == "redacted_thinking":
                data = str(block.get("data", ""))
                if (
                    not data.startswith("RT:")
                    or thinking_signature("redacted", data[3:].split(":", 1)[-1])
                    != data[3:].split(":", 1)[0]
                ):
                    return f"messages.{i}.content.{j}: Invalid `data` in `redacted_thinking` block"
        if any(isinstance(b, dict) and b.get("type") == "tool_use" for b in content):
            last_tool_turn = (i, content)
    if on and last_tool_turn is not None and last_tool_turn[0] >= len(messages) - 2:
        i, content = last_tool_turn
        first = content[0].get("type") if isinstance(content[0], dict) else None
        if first not in ("thinking", "redacted_thinking"):
            return (
                f"messages.{i}.content.0.type: Expected `thinking` or `redacted_thinking`, but "
                f"found `{first}`. When `thinking` is enabled, a final `assistant` message "
                "must start with a thinking block"
            )
    return None


def _thinking_blocks(prompt: str, redacted: bool) -> list[dict[str, Any]]:
    """The thinking the server "does" before answering: a signed block about the prompt's
    last words, or, with ``redacted_thinking`` configured, an opaque redacted one."""
    words = prompt.split()[-12:]
    text = "Reading the question: " + " ".join(words)
    if redacted:
        return [
            {
                "type": "redacted_thinking",
                "data": f"RT:{thinking_signature('redacted', text)}:{text}",
            }
        ]
    return [
        {"type": "thinking", "thinking": text, "signature": thinking_signature("thinking", text)}
    ]


def _word_pieces(text: str) -> list[str]:
    """Text in pieces of one word each (its trailing white space with it): one token a
    piece, as the server counts tokens."""
    return re.findall(r"\s*\S+\s*", text) or ([text] if text else [])


def _anthropic_events(message: dict[str, Any]) -> list[tuple[str | None, Any, int]]:
    """A Message as the Messages API streams it: ``(event, data, tokens it carries)``."""
    start = {**message, "content": [], "stop_reason": None, "stop_sequence": None}
    usage = dict(message.get("usage") or {})
    if usage:
        start["usage"] = {**usage, "output_tokens": 1}
    events: list[tuple[str | None, Any, int]] = [
        ("message_start", {"type": "message_start", "message": start}, 0)
    ]
    for index, block in enumerate(message.get("content") or []):
        kind = block.get("type")
        if kind == "text":
            opening: dict[str, Any] = {"type": "text", "text": ""}
        elif kind == "thinking":
            opening = {"type": "thinking", "thinking": "", "signature": ""}
        elif kind == "tool_use":
            opening = {**block, "input": {}}
        else:
            opening = block
        events.append(
            (
                "content_block_start",
                {"type": "content_block_start", "index": index, "content_block": opening},
                0,
            )
        )
        if kind in ("text", "thinking"):
            field = "text" if kind == "text" else "thinking"
            for piece in _word_pieces(str(block.get(field) or "")):
                delta = {"type": f"{field}_delta", field: piece}
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        1,
                    )
                )
            if kind == "thinking":
                delta = {"type": "signature_delta", "signature": block.get("signature", "")}
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        0,
                    )
                )
        elif kind == "tool_use":
            raw = (
                json.dumps(block.get("input"), ensure_ascii=False)
                if not isinstance(block.get("input"), str)
                else block["input"]
            )
            for part in (raw[: len(raw) // 2], raw[len(raw) // 2 :]):
                delta = {"type": "input_json_delta", "partial_json": part}
                events.append(
                    (
                        "content_block_delta",
                        {"type": "content_block_delta", "index": index, "delta": delta},
                        0,
                    )
                )
        events.append(("content_block_stop", {"type": "content_block_stop", "index": index}, 0))
        if index == 0:
            events.append(("ping", {"type": "ping"}, 0))
    delta = {
        "stop_reason": message.get("stop_reason"),
        "stop_sequence": message.get("stop_sequence"),
    }
    final: dict[str, Any] = {"type": "message_delta", "delta": delta}
    if usage:
        final["usage"] = {"output_tokens": usage.get("output_tokens", 0)}
        if "output_tokens_details" in usage:
            final["usage"]["output_tokens_details"] = usage["output_tokens_details"]
    events.append(("message_delta", final, 0))
    events.append(("message_stop", {"type": "message_stop"}, 0))
    return events


def _openai_events(
    completion: dict[str, Any], include_usage: bool
) -> list[tuple[str | None, Any, int]]:
    """A chat completion's first choice as Chat Completions streams it."""
    head = {
        k: completion[k]
        for k in ("id", "created", "model", "system_fingerprint")
        if k in completion
    }
    head["object"] = "chat.completion.chunk"
    choice = (completion.get("choices") or [{}])[0]
    message = choice.get("message") or {}

    def chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
        return {
            **head,
            "choices": [{"index": 0, "delta": delta, "logprobs": None, "finish_reason": finish}],
        }

    events: list[tuple[str | None, Any, int]] = [
        (None, chunk({"role": "assistant", "content": ""}), 0)
    ]
    for key in ("reasoning_content", "content", "refusal"):
        if isinstance(message.get(key), str):
            for piece in _word_pieces(message[key]):
                events.append((None, chunk({key: piece}), 1))
    for i, call in enumerate(message.get("tool_calls") or []):
        fn = call.get("function") or {}
        first = {
            "index": i,
            "id": call.get("id"),
            "type": "function",
            "function": {"name": fn.get("name"), "arguments": ""},
        }
        events.append((None, chunk({"tool_calls": [first]}), 0))
        args = str(fn.get("arguments") or "")
        for part in (args[: len(args) // 2], args[len(args) // 2 :]):
            events.append(
                (None, chunk({"tool_calls": [{"index": i, "function": {"arguments": part}}]}), 0)
            )
    events.append((None, chunk({}, choice.get("finish_reason")), 0))
    if include_usage and "usage" in completion:
        events.append((None, {**head, "choices": [], "usage": completion["usage"]}, 0))
    events.append((None, "[DONE]", 0))
    return events


# --------------------------------------------------------------------------------------
# The server
# --------------------------------------------------------------------------------------


# --------------------------------------------------------------------------------------
# The Responses API (POST /v1/responses)
# --------------------------------------------------------------------------------------

#: what the server signs its reasoning items' encrypted content with (a test stand-in for
#: the real API's encryption: only content this server issued passes its check)
_REASONING_SEAL = b"gradetrail-protocol-server"


def _sealed(reasoning_id: str) -> str:
    """The encrypted content this server issues with reasoning item ``reasoning_id``."""
    digest = hashlib.sha256(_REASONING_SEAL + reasoning_id.encode()).hexdigest()
    return base64.b64encode(f"gAAAA|{reasoning_id}|{digest}".encode()).decode()


def _parse_responses(body: dict[str, Any]) -> ParsedRequest | str:
    """Pull the fields out of a Responses body, or return the error the real API gives.

    Checked as the API checks them: ``input`` a string or a list of items (messages,
    ``function_call``, ``function_call_output``, ``reasoning``); flat function tools
    and a valid ``tool_choice``; every ``function_call_output`` answering an earlier
    ``function_call``; no ``stop`` / ``seed`` (unknown parameters there); ``text.format``
    of type ``json_schema`` with a name and an object schema. With ``reasoning`` set,
    every function call this server made in a reasoning turn must come back after that
    turn's reasoning item, its ``encrypted_content`` unchanged (what ``store: false``
    requires of a real client).
    """
    for name in ("stop", "seed", "messages", "max_tokens"):
        if name in body:
            return f"Unknown parameter: '{name}'."
    reasoning = body.get("reasoning")
    if isinstance(reasoning, dict) and _NOT_REASONING.fullmatch(str(body.get("model"))):
        for name in ("effort", "summary"):
            if reasoning.get(name) is not None:
                return (
                    f"Unsupported parameter: 'reasoning.{name}' is not supported with this model."
                )
    raw_input = body.get("input")
    if isinstance(raw_input, str):
        raw_input = [{"role": "user", "content": raw_input}]
    if not isinstance(raw_input, list) or not raw_input:
        return "'input' must be a string or a non-empty array of input items"
    max_tokens = body.get("max_output_tokens")
    if max_tokens is not None and (not isinstance(max_tokens, int) or max_tokens < 16):
        return "Invalid 'max_output_tokens': integer below minimum value 16."
    fmt = (body.get("text") or {}).get("format") if isinstance(body.get("text"), dict) else None
    if fmt is not None:
        if fmt.get("type") == "json_schema":
            if not isinstance(fmt.get("name"), str) or not isinstance(fmt.get("schema"), dict):
                return "text.format json_schema needs 'name' and an object 'schema'"
            refused = _strict_refused(fmt, "response_format", fmt["schema"])
            if refused:
                return refused
        elif fmt.get("type") not in ("text", "json_object"):
            return f"Invalid value for text.format.type: {fmt.get('type')!r}"
    names: set[str] = set()
    for tool in body.get("tools") or []:
        if not isinstance(tool, dict) or tool.get("type") != "function" or not tool.get("name"):
            return "tools: each function tool must be {type: function, name, parameters}"
        if "function" in tool:
            return "Unknown parameter: 'tools[0].function'."
        refused = _strict_refused(tool)
        if refused:
            return refused
        names.add(str(tool["name"]))
    choice = body.get("tool_choice")
    if isinstance(choice, dict):
        if choice.get("type") != "function" or choice.get("name") not in names:
            return f"tool_choice: no function named {choice.get('name')!r} in tools"
    elif choice not in (None, "auto", "none", "required"):
        return f"tool_choice: invalid value {choice!r}"
    # a turn's reasoning item can come back only as its encrypted content (store: false)
    if _asks_encrypted(body) and not _reasons(body):
        return "Encrypted content is not supported with this model."
    reasoning_on = _reasons(body) and _asks_encrypted(body)
    texts: list[str] = []
    last_user, last_role, last_result = "", "user", ""
    calls: set[str] = set()
    sealed: set[str] = set()  # reasoning item ids that came back intact
    results = 0
    for i, item in enumerate(raw_input):
        if not isinstance(item, dict):
            return f"Invalid type for 'input[{i}]': expected an object"
        kind = item.get("type", "message")
        if kind == "message":
            role = item.get("role")
            if role not in ("user", "assistant", "system", "developer"):
                return f"Invalid value: '{role}'. Supported values are: 'assistant', 'system', ..."
            text = _content_text(item.get("content"))
            if role == "assistant" and isinstance(item.get("phase"), str):
                text = f"[{item['phase']}] {text}"  # the model reads its own labels
            texts.append(text)
            last_role = "user"
            if role == "user":
                last_user = text
        elif kind == "reasoning":
            rid = str(item.get("id", ""))
            if item.get("encrypted_content") == _sealed(rid):
                sealed.add(rid)
            elif item.get("encrypted_content") is not None:
                return f"The encrypted content for item {rid} could not be verified."
            elif body.get("store") is False:  # only an id, of an item never stored: a 404
                return (
                    f"Item with id '{rid}' not found. Items are not persisted when `store` is "
                    "set to false. Try again with `store` set to true, or remove this item "
                    "from your input."
                )
        elif kind == "function_call":
            call_id = str(item.get("call_id", ""))
            if not isinstance(item.get("arguments"), str) or not item.get("name"):
                return f"input[{i}]: a function_call needs name and string arguments"
            turn = call_id.split("_")[1] if call_id.count("_") >= 2 else ""
            if reasoning_on and call_id.startswith("call_") and f"rs_{turn}" not in sealed:
                return (
                    f"Item 'fc_{turn}' of type 'function_call' was provided without its "
                    f"required 'reasoning' item: 'rs_{turn}'."
                )
            calls.add(call_id)
            texts.append(f"[tool_call {item.get('name')} {item.get('arguments')}]")
        elif kind == "function_call_output":
            call_id = item.get("call_id")
            if call_id not in calls:
                return f"No tool call found for function call output with call_id {call_id}."
            results += 1
            last_result = str(item.get("output", ""))
            texts.append(f"[tool_result {last_result}]")
            last_role = "tool"
        else:
            return f"Invalid value for 'input[{i}].type': {kind!r}"
    if isinstance(body.get("instructions"), str):
        texts.insert(0, body["instructions"])
    return ParsedRequest(
        RESPONSES,
        body,
        str(body.get("model", "")),
        "\n".join(texts),
        last_user,
        max_tokens,
        [],
        last_role,
        last_result,
        frozenset(names),
        results,
    )


#: OpenAI's models that do not reason (refusing ``reasoning.effort`` and ``summary``)
_NOT_REASONING = re.compile(r"(?:gpt-4|gpt-3\.5|chatgpt-4o|gpt-5(?:\.\d+)?-chat)(?:[.o-].*)?")

#: OpenAI's reasoning families, which reason whether or not the request sets ``reasoning``
_REASONING_MODELS = re.compile(r"(?:gpt-5(?!(?:\.\d+)?-chat)|o[134])(?:[.-].*)?")


def _reasons(body: dict[str, Any]) -> bool:
    """True when a Responses request's answer opens with a reasoning item: ``reasoning``
    is set, or the model is one of OpenAI's reasoning families (they reason unasked)."""
    return bool(body.get("reasoning")) or bool(_REASONING_MODELS.fullmatch(str(body.get("model"))))


def _sealed_items(body: dict[str, Any]) -> int:
    """How many reasoning items of a Responses request's input came back sealed."""
    items = body.get("input") if isinstance(body.get("input"), list) else []
    return sum(
        1
        for item in items
        if isinstance(item, dict)
        and item.get("type") == "reasoning"
        and item.get("encrypted_content") == _sealed(str(item.get("id", "")))
    )


def _asks_encrypted(body: dict[str, Any]) -> bool:
    """True when a Responses request's ``include`` asks for reasoning items' encrypted
    content."""
    include = body.get("include")
    return isinstance(include, list) and "reasoning.encrypted_content" in include


def _responses_answer(
    req: ParsedRequest,
    rule: ScriptRule | None,
    text: str,
    tool_calls: list[dict[str, Any]] | None,
    seq: str,
    served: str,
    usage: tuple[int, int, int] | None,
    *,
    truncated: bool,
) -> dict[str, Any]:
    """A Responses answer: a reasoning item first when the request sets ``reasoning``
    (its summary the rule's ``reasoning`` text, its encrypted content sealed, sent only
    when ``include`` asks for it), then the message (``output_text``, or the rule's
    ``refusal``), then the function calls; ``status: incomplete`` with reason
    ``max_output_tokens`` when the reply was cut. Usage counts the reasoning summary's
    words as reasoning tokens (at least 8 with reasoning on)."""
    body = req.body
    turn = hashlib.sha256(req.prompt.encode()).hexdigest()[:16]
    output: list[dict[str, Any]] = []
    reasoning_tokens = 0
    if _reasons(body):
        summary = rule.reasoning if rule is not None and rule.reasoning else ""
        reasoning_tokens = max(len(summary.split()), 8)
        item: dict[str, Any] = {
            "id": f"rs_{turn}",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": summary}] if summary else [],
        }
        if _asks_encrypted(body):
            item["encrypted_content"] = _sealed(f"rs_{turn}")
        output.append(item)
    refusal = rule.refusal if rule is not None else None
    if refusal:
        content: list[dict[str, Any]] = [{"type": "refusal", "refusal": refusal}]
    else:
        content = [{"type": "output_text", "text": text, "annotations": [], "logprobs": []}]
    if refusal or text or not tool_calls:
        output.append(
            {
                "id": f"msg_{turn}",
                "type": "message",
                "status": "incomplete" if truncated else "completed",
                "role": "assistant",
                "content": content,
            }
        )
    for i, call in enumerate(tool_calls or []):
        args = call.get("arguments", {})
        output.append(
            {
                "id": f"fc_{turn}_{i}",
                "type": "function_call",
                "status": "completed",
                "call_id": str(call.get("id") or f"call_{turn}_{i}"),
                "name": call["name"],
                "arguments": args if isinstance(args, str) else json.dumps(args),
            }
        )
    out: dict[str, Any] = {
        "id": f"resp_gt{seq}",
        "object": "response",
        "created_at": int(time.time()),
        "status": "incomplete" if truncated else "completed",
        "error": None,
        "incomplete_details": {"reason": "max_output_tokens"} if truncated else None,
        "instructions": body.get("instructions"),
        "max_output_tokens": body.get("max_output_tokens"),
        "model": served,
        "output": output,
        "parallel_tool_calls": True,
        "reasoning": body.get("reasoning") or {"effort": None, "summary": None},
        "store": body.get("store", True),
        "text": body.get("text") or {"format": {"type": "text"}},
        "tool_choice": body.get("tool_choice", "auto"),
        "tools": body.get("tools") or [],
    }
    if usage is not None:
        prompt_tokens, cached, completion = usage
        output_tokens = completion + reasoning_tokens
        out["usage"] = {
            "input_tokens": prompt_tokens,
            "input_tokens_details": {"cached_tokens": cached},
            "output_tokens": output_tokens,
            "output_tokens_details": {"reasoning_tokens": reasoning_tokens},
            "total_tokens": prompt_tokens + output_tokens,
        }
    return out


_PARSERS: dict[str, Callable[[dict[str, Any]], ParsedRequest | str]] = {
    OPENAI: _parse_openai,
    ANTHROPIC: _parse_anthropic,
    RESPONSES: _parse_responses,
}


class ProtocolServer:
    """State and request handling; :meth:`app` returns the ASGI application."""

    def __init__(self, data: Gsm8kData, startup: dict[str, Any] | None = None) -> None:
        """Serve ``data`` with the ``startup`` config (restored, minus faults, on reset)."""
        self.data = data
        self.startup = dict(startup or {})
        self.raw: dict[str, Any] = {}
        self.settings = Settings.parse({})
        self.rules: list[FaultRule] = []
        self.window: deque[float] = deque()
        #: set by /_control/release: every held request goes on (see the ``hold`` fault)
        self.released = asyncio.Event()
        self.stats = Stats()
        self._ids = itertools.count(1)
        from protocol_batches import BatchAPIs  # the batch endpoints (tests/protocol_batches.py)

        self.batch_apis = BatchAPIs(self)
        self.apply(self.startup)

    # -- configuration ---------------------------------------------------------------

    def apply(self, update: dict[str, Any]) -> dict[str, Any]:
        """Merge ``update`` into the config (``faults`` replaces, ``add_faults`` appends)."""
        update = dict(update)
        add = update.pop("add_faults", None)
        raw = {**self.raw, **update}
        rules = self.rules
        if "faults" in update or add:
            fault_list = list(raw.get("faults") or []) + list(add or [])
            if add:
                raw["faults"] = fault_list
            rules = [FaultRule.parse(r) for r in fault_list]
            if "faults" not in update:  # keep the counters of the existing rules
                rules = self.rules + rules[len(self.rules) :]
        settings = Settings.parse(raw)
        if rules is not self.rules and self.released.is_set():
            self.released = asyncio.Event()  # a new fault list: its holds hold again
        self.raw, self.settings, self.rules = raw, settings, rules
        if "rate_limit" in update or "rate_limit_window" in update:
            self.window.clear()
        return self.config()

    def config(self) -> dict[str, Any]:
        """The current config dict."""
        return dict(self.raw)

    def reset(self, config: bool = True) -> None:
        """Clear the stats and the batches; with ``config``, drop faults and restore the
        startup config."""
        self.stats.clear()
        self.batch_apis.reset()
        if config:
            base = {k: v for k, v in self.startup.items() if k not in FAULT_CONFIG_KEYS}
            self.raw, self.rules = {}, []
            self.window.clear()
            self.release()
            self.released = asyncio.Event()
            self.apply(base)

    def release(self) -> None:
        """Let every held request go on; later ``hold`` candidates pass too."""
        self.released.set()

    # -- helpers ---------------------------------------------------------------------

    def _error(
        self,
        protocol: str,
        status: int,
        etype: str,
        message: str,
        code: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> Response:
        """An error response in ``protocol``'s body shape."""
        from starlette.responses import Response

        rid = f"req_gt{next(self._ids):012d}"
        if protocol == ANTHROPIC:
            body = {
                "type": "error",
                "error": {"type": etype, "message": message},
                "request_id": rid,
            }
            hdrs = {"request-id": rid}
        else:
            body = {"error": {"message": message, "type": etype, "param": None, "code": code}}
            hdrs = {"x-request-id": rid}
        if headers:
            hdrs.update(headers)
        return Response(_dumps(body), status, hdrs, media_type="application/json")

    def _fault_response(self, rule: FaultRule, protocol: str) -> Response:
        """The response for an error-kind fault rule."""
        from starlette.responses import Response

        params = rule.params
        headers = {str(k): str(v) for k, v in (params.get("headers") or {}).items()}
        if params.get("retry_after") is not None:
            headers["retry-after"] = str(params["retry_after"])
        if params.get("retry_after_ms") is not None:
            headers["retry-after-ms"] = str(params["retry_after_ms"])
        if rule.kind == "answer":  # a whole answer as given: any status, any body
            raw = params.get("body", {})
            body = raw.encode() if isinstance(raw, str) else _dumps(raw)
            return Response(
                body, int(params.get("status", 200)), headers, media_type="application/json"
            )
        if rule.kind == "garbage_200":
            default = '{"id": "chatcmpl-gt' if protocol == OPENAI else '{"id": "msg_gt'
            body = str(params.get("body", default)).encode()
            status = int(params.get("status", 200))
            return Response(body, status, headers, media_type="application/json")
        if rule.kind == "error":
            status = int(params["status"])
            types = _ANTHROPIC_TYPES if protocol == ANTHROPIC else _OPENAI_TYPES
            etype = params.get("type") or types.get(status, "api_error")
            message = params.get("message") or f"Injected error with status {status}"
            return self._error(protocol, status, etype, message, params.get("code"), headers)
        spec = _ERRORS[rule.kind]
        if protocol == ANTHROPIC:
            status, etype, code, message = spec[4], spec[5], None, spec[6]
        else:
            status, etype, code, message = spec[0], spec[1], spec[2], spec[3]
        status = int(params.get("status", status))
        etype = params.get("type", etype)
        code = params.get("code", code)
        message = params.get("message", message)
        return self._error(protocol, status, etype, message, code, headers)

    async def _abort(self, request: Request) -> None:
        """Close the client's TCP connection without sending a response."""
        send = request.scope.get("gradetrail.send")
        cycle = getattr(send, "__self__", None)
        transport = getattr(cycle, "transport", None)
        if transport is None:
            raise ConnectionAbortedError("no transport to abort")
        transport.abort()
        for _ in range(200):  # let connection_lost mark the cycle disconnected
            if getattr(cycle, "disconnected", True):
                return
            await asyncio.sleep(0.001)

    async def _hold(self, request: Request) -> bool:
        """Wait for /_control/release; return True early if the client disconnects."""
        released = asyncio.ensure_future(self.released.wait())
        disconnected = asyncio.ensure_future(self._disconnect(request))
        self.stats.held += 1
        try:
            done, _ = await asyncio.wait(
                {released, disconnected}, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            self.stats.held -= 1
            for task in (released, disconnected):
                task.cancel()
        return released not in done

    @staticmethod
    async def _disconnect(request: Request) -> None:
        """Return when the client has gone (the body was read already)."""
        while (await request.receive())["type"] != "http.disconnect":
            pass

    async def _stall(self, request: Request, seconds: float) -> bool:
        """Sleep ``seconds``; return True early if the client disconnects meanwhile."""
        receive = request.receive

        async def wait_disconnect() -> None:
            while (await receive())["type"] != "http.disconnect":
                pass

        try:
            await asyncio.wait_for(wait_disconnect(), timeout=seconds)
        except TimeoutError:
            return False
        return True

    def _reply(self, req: ParsedRequest) -> tuple[str | None, list[dict[str, Any]] | None]:
        """The completion and the scripted tool calls (None: none) for a request; under a
        ``tool_choice`` that forces a tool, an answer without a call is that tool's call
        with no arguments instead (a model can answer nothing else)."""
        text, calls = self._scripted(req)
        compelled = _compelled_tool(req.body)
        if compelled is not None and not calls:
            return "", [{"name": compelled, "arguments": {}}]
        return text, calls

    def _scripted(self, req: ParsedRequest) -> tuple[str | None, list[dict[str, Any]] | None]:
        """The script's (or the recording's) completion and tool calls for a request."""
        for rule in self.settings.script:
            if rule.matches(req.prompt, req.model, req.last_role):
                text = rule.reply.replace("{last_tool_result}", req.last_tool_result)
                return text, rule.tool_calls
        return self._recorded(req), None

    def _rule(self, req: ParsedRequest) -> ScriptRule | None:
        """The script rule that answers ``req``, or None (a recorded answer)."""
        for rule in self.settings.script:
            if rule.matches(req.prompt, req.model, req.last_role):
                return rule
        return None

    def _recorded(self, req: ParsedRequest) -> str | None:
        """The recorded GSM8K completion, the default reply, or None (-> 400)."""
        solutions = self.data.solutions.get(req.model)
        if solutions is not None:
            idx = self.data.index.find(req.last_user)
            if idx is not None:
                return solutions[idx]
        self.stats.unmatched += 1
        return None if self.settings.unknown_is_error else self.settings.default_reply

    def _authorised(self, request: Request, protocol: str) -> bool:
        """Whether the request carries the configured API key (always, if none is set)."""
        key = self.settings.api_key
        if key is None:
            return True
        if request.scope["path"].startswith("/openai/"):  # Azure OpenAI: its own header
            return request.headers.get("api-key") == key
        if protocol == ANTHROPIC:
            return request.headers.get("x-api-key") == key
        return request.headers.get("authorization") == f"Bearer {key}"

    def _rate_limited(self) -> float | None:
        """Seconds until a slot frees, if the sliding window is full; else take a slot."""
        limit = self.settings.rate_limit
        if limit is None:
            return None
        now = time.monotonic()
        window, span = self.window, self.settings.rate_limit_window
        while window and window[0] <= now - span:
            window.popleft()
        if len(window) >= limit:
            return max(window[0] + span - now, 0.001)
        window.append(now)
        return None

    # -- inference -------------------------------------------------------------------

    async def chat_completions(self, request: Request) -> Response:
        """``POST /v1/chat/completions``."""
        return await self._inference(request, OPENAI)

    async def messages(self, request: Request) -> Response:
        """``POST /v1/messages``."""
        return await self._inference(request, ANTHROPIC)

    async def responses(self, request: Request) -> Response:
        """``POST /v1/responses``."""
        return await self._inference(request, RESPONSES)

    async def azure_deployment(self, request: Request) -> Response:
        """``POST /openai/deployments/{deployment}/chat/completions?api-version=...``:
        Azure OpenAI's deployment URL. Without the ``api-version`` query, Azure's 404
        "Resource not found"; the key (``api_key`` config) is read from ``api-key``."""
        if not request.query_params.get("api-version"):
            self.stats.arrive(request.scope["path"])
            self.stats.leave(404)
            return self._error(OPENAI, 404, "invalid_request_error", "Resource not found", "404")
        return await self._inference(request, OPENAI)

    async def _inference(self, request: Request, protocol: str) -> Response:
        """Count the request, run it, and count how it left."""
        stats = self.stats
        stats.arrive(request.scope["path"])
        outcome: int | str = 500
        try:
            response, outcome = await self._handle(request, protocol)
            return response
        finally:
            stats.leave(outcome)

    async def _handle(self, request: Request, protocol: str) -> tuple[Response, int | str]:
        """The inference pipeline: parse, check, inject faults, wait, answer."""
        from starlette.responses import Response

        stats = self.stats
        raw = await request.body()
        try:
            body = json.loads(raw)
            if not isinstance(body, dict):
                raise ValueError("not an object")
        except ValueError:
            stats.bump(stats.fingerprints, _fingerprint(request.scope["path"], raw))
            err = self._error(protocol, 400, "invalid_request_error", "Body is not valid JSON")
            return err, 400
        stats.sent.append(
            {
                "path": request.scope["path"],
                "query": dict(request.query_params),
                "headers": {k.lower(): v for k, v in request.headers.items()},
                "body": body,
            }
        )
        canonical = json.dumps(body, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
        raw_canonical = canonical.encode("utf-8", "surrogatepass")  # a lone surrogate too
        fingerprint = _fingerprint(request.scope["path"], raw_canonical)
        stats.bump(stats.fingerprints, fingerprint)

        parsed = _PARSERS[protocol](body)
        if isinstance(parsed, str):
            status = 404 if parsed.startswith("Item with id") else 400  # as the API answers
            # the Responses API codes a refused answer schema (Chat Completions does not)
            schema = protocol == RESPONSES and parsed.startswith("Invalid schema for response_")
            code = "invalid_json_schema" if schema else None
            return self._error(protocol, status, "invalid_request_error", parsed, code), status
        if protocol == RESPONSES:
            stats.reasoning_returned += _sealed_items(body)
        if protocol == ANTHROPIC:
            version = request.headers.get("anthropic-version")
            stats.bump(stats.versions, str(version))
            refused = _check_version(version, body) or _check_thinking(body, body["messages"])
            if refused:
                return self._error(protocol, 400, "invalid_request_error", refused), 400
        stats.bump(stats.models, parsed.model)
        if not self._authorised(request, protocol):
            if protocol == ANTHROPIC:
                return self._error(protocol, 401, "authentication_error", "invalid x-api-key"), 401
            msg = "Incorrect API key provided."
            return self._error(protocol, 401, "invalid_request_error", msg, "invalid_api_key"), 401
        settings = self.settings
        if parsed.model not in settings.models and not settings.any_model:
            if protocol == ANTHROPIC:
                msg = f"model: {parsed.model}"
                return self._error(protocol, 404, "not_found_error", msg), 404
            msg = f"The model `{parsed.model}` does not exist or you do not have access to it."
            return self._error(protocol, 404, "invalid_request_error", msg, "model_not_found"), 404
        stream = body.get("stream") is True

        error_rule: FaultRule | None = None
        modifiers: list[FaultRule] = []
        stall = 0.0
        hold = False
        for rule in self.rules:
            if rule.check(parsed.prompt, parsed.model, protocol):
                if rule.kind in MODIFIER_KINDS:
                    modifiers.append(rule)
                elif rule.kind == "hold":
                    hold = True
                elif rule.kind == "stall":
                    stall = max(stall, float(rule.params.get("seconds", 600)))
                elif error_rule is None:
                    error_rule = rule
        if error_rule is None:
            wait = self._rate_limited()
            if wait is not None:
                stats.rate_limited += 1
                headers = {
                    "retry-after": str(math.ceil(wait)),
                    "retry-after-ms": str(math.ceil(wait * 1000)),
                }
                spec = _ERRORS["rate_limit"]
                if protocol == ANTHROPIC:
                    err = self._error(protocol, 429, spec[5], spec[6], None, headers)
                else:
                    err = self._error(protocol, 429, spec[1], spec[3], spec[2], headers)
                return err, 429

        if hold and not self.released.is_set():
            stats.bump(stats.faults, "hold")
            if await self._hold(request):
                return Response(b"", 499), "disconnected"
        if settings.has_latency:
            await asyncio.sleep(settings.latency())
        if stall:
            stats.bump(stats.faults, "stall")
            if await self._stall(request, stall):
                return Response(b"", 499), "disconnected"
        if error_rule is not None:
            stats.bump(stats.faults, error_rule.kind)
            if error_rule.kind == "drop":
                await self._abort(request)
                return Response(b"", 499), "dropped"
            response = self._fault_response(error_rule, protocol)
            return response, response.status_code

        if parsed.tool_names:
            stats.tool_requests += 1
        stats.tool_results += parsed.tool_results
        text, tool_calls = self._reply(parsed)
        if text is None:
            msg = "No recorded answer for this prompt (unknown_question is 'error')"
            return self._error(protocol, 400, "invalid_request_error", msg), 400
        text, stop_seq = _cut_at_stop(text, parsed.stops)
        finish = "stop"
        completion_tokens = len(text.split())
        if parsed.max_tokens is not None and completion_tokens > parsed.max_tokens:
            text = _truncate_words(text, parsed.max_tokens)
            completion_tokens = max(parsed.max_tokens, 0)
            finish, stop_seq = "length", None

        served = parsed.model
        include_usage = True
        usage_over: dict[str, Any] = {}
        gzipped = False
        for rule in modifiers:
            stats.bump(stats.faults, rule.kind)
            if rule.kind == "no_usage":
                include_usage = False
            elif rule.kind == "stream_cut":
                continue  # applied to the stream itself
            elif rule.kind == "pad":
                text += "a" * int(rule.params.get("chars", 0))
                gzipped = gzipped or bool(rule.params.get("gzip"))
            elif rule.kind == "usage":
                usage_over.update(rule.params.get("usage") or {})
            elif rule.params.get("served_model"):
                served = str(rule.params["served_model"])
            else:
                served = parsed.model + str(rule.params.get("suffix", "-20250101"))

        prompt_tokens = len(parsed.prompt.split())
        cached = min(settings.cache_read_tokens, prompt_tokens)
        seq = next(self._ids)
        if protocol == RESPONSES:
            rule = self._rule(parsed)
            out = _responses_answer(
                parsed,
                rule,
                text,
                tool_calls,
                f"{seq:012d}",
                served,
                (prompt_tokens, cached, completion_tokens) if include_usage else None,
                truncated=finish == "length",
            )
            headers = {"x-request-id": f"req_gt{seq:012d}"}
        elif protocol == OPENAI:
            n = body.get("n") or 1
            message = {"role": "assistant", "content": text, "refusal": None, "annotations": []}
            thought = self._rule(parsed)
            if _thinks(body) and thought is not None and thought.reasoning:
                message["reasoning_content"] = thought.reasoning
            if tool_calls:
                message["content"] = text or None
                message["tool_calls"] = _openai_calls(tool_calls, parsed.prompt)
                finish = "tool_calls" if finish == "stop" else finish
            choice = {"message": message, "logprobs": None, "finish_reason": finish}
            out: dict[str, Any] = {
                "id": f"chatcmpl-gt{seq:012d}",
                "object": "chat.completion",
                "created": int(time.time()),
                "model": served,
                "choices": [{"index": i, **choice} for i in range(n)],
                "service_tier": "default",
                "system_fingerprint": "fp_gradetrail",
            }
            if include_usage:
                completion_total = completion_tokens * n
                out["usage"] = {
                    "prompt_tokens": prompt_tokens,
                    "completion_tokens": completion_total,
                    "total_tokens": prompt_tokens + completion_total,
                    "prompt_tokens_details": {"cached_tokens": cached, "audio_tokens": 0},
                    "completion_tokens_details": {
                        "reasoning_tokens": 0,
                        "audio_tokens": 0,
                        "accepted_prediction_tokens": 0,
                        "rejected_prediction_tokens": 0,
                    },
                    **usage_over,
                }
            headers = {"x-request-id": f"req_gt{seq:012d}"}
        else:
            if finish == "length":
                stop_reason = "max_tokens"
            else:
                stop_reason = "stop_sequence" if stop_seq else "end_turn"
            forced = _forced_tool(body)
            if forced is not None and not tool_calls:
                tool_calls, text = _forced_answer(forced, text)
            content: list[dict[str, Any]] = [{"type": "text", "text": text}]
            if tool_calls:
                content = content if text else []
                content += _anthropic_calls(tool_calls, parsed.prompt)
                stop_reason = "tool_use" if stop_reason == "end_turn" else stop_reason
            thought = 0
            if (body.get("thinking") or {}).get("type") in ("enabled", "adaptive"):
                thinking = _thinking_blocks(parsed.prompt, settings.redacted_thinking)
                content = thinking + content
                thought = len(str(thinking[0].get("thinking") or thinking[0]["data"]).split())
                completion_tokens += thought
                stats.thinking_returned += 1
            out = {
                "id": f"msg_gt{seq:018d}",
                "type": "message",
                "role": "assistant",
                "model": served,
                "content": content,
                "stop_reason": stop_reason,
                "stop_sequence": stop_seq,
            }
            if include_usage:
                out["usage"] = {
                    "input_tokens": prompt_tokens - cached,
                    "output_tokens": completion_tokens,
                    "cache_creation_input_tokens": 0,
                    "cache_read_input_tokens": cached,
                    "service_tier": "standard",
                    **usage_over,
                }
                if thought:
                    out["usage"]["output_tokens_details"] = {"thinking_tokens": thought}
            headers = {"request-id": f"req_gt{seq:012d}"}
        if stream:
            stats.streamed += 1
            cut = next((r for r in modifiers if r.kind == "stream_cut"), None)
            include_usage = protocol == ANTHROPIC or bool(
                (body.get("stream_options") or {}).get("include_usage")
            )
            events = (
                _anthropic_events(out)
                if protocol == ANTHROPIC
                else _openai_events(out, include_usage)
            )
            return self._streamed(events, headers, cut), 200
        if gzipped:
            import gzip

            headers["content-encoding"] = "gzip"
            return Response(
                gzip.compress(_dumps(out), 1), 200, headers, media_type="application/json"
            ), 200
        return Response(_dumps(out), 200, headers, media_type="application/json"), 200

    def _streamed(
        self,
        events: list[tuple[str | None, dict[str, Any] | str, int]],
        headers: dict[str, str],
        cut: FaultRule | None,
    ) -> Response:
        """A streamed answer: each event as server-sent event text, paced at
        ``stream_tps`` output tokens a second (the third item of each event: the tokens
        it carries); a ``stream_cut`` rule drops the connection once that many tokens
        went out."""
        from starlette.responses import StreamingResponse

        tps = self.settings.stream_tps
        limit = None if cut is None else int(cut.params.get("tokens", 0))

        async def body() -> Any:
            sent = 0
            for event, data, tokens in events:
                if tps and tokens:
                    await asyncio.sleep(tokens / tps)
                sent += tokens
                if limit is not None and sent > limit:
                    if cut is not None and cut.params.get("type"):  # an error event instead
                        error = {"type": cut.params["type"], "message": "Injected stream error"}
                        payload = {"type": "error", "error": error}
                        yield f"event: error\ndata: {json.dumps(payload)}\n\n".encode()
                        return
                    raise ConnectionAbortedError("stream_cut fault")
                text = data if isinstance(data, str) else json.dumps(data, ensure_ascii=False)
                head = f"event: {event}\n" if event else ""
                yield f"{head}data: {text}\n\n".encode()

        return StreamingResponse(body(), 200, headers, media_type="text/event-stream")

    # -- models and control ----------------------------------------------------------

    async def list_models(self, request: Request) -> Response:
        """``GET /v1/models`` in the OpenAI or (with ``anthropic-version``) Anthropic shape."""
        from starlette.responses import JSONResponse

        self.stats.arrive(request.scope["path"])
        names = sorted(self.settings.models - {"*"})
        if "anthropic-version" in request.headers:
            data = [
                {
                    "type": "model",
                    "id": m,
                    "display_name": m,
                    "created_at": "2025-01-01T00:00:00Z",
                }
                for m in names
            ]
            body: dict[str, Any] = {
                "data": data,
                "has_more": False,
                "first_id": names[0] if names else None,
                "last_id": names[-1] if names else None,
            }
        else:
            data = [
                {"id": m, "object": "model", "created": 1735689600, "owned_by": "gradetrail"}
                for m in names
            ]
            body = {"object": "list", "data": data}
        self.stats.leave(200)
        return JSONResponse(body)

    async def control_config(self, request: Request) -> Response:
        """``GET``/``POST /_control/config``."""
        from starlette.responses import JSONResponse, Response

        if request.method == "GET":
            return Response(_dumps(self.config()), media_type="application/json")
        try:
            update = json.loads(await request.body() or b"{}")
            if not isinstance(update, dict):
                raise ConfigError("config must be a JSON object")
            return Response(_dumps(self.apply(update)), media_type="application/json")
        except (ConfigError, ValueError, TypeError) as exc:
            return JSONResponse({"error": str(exc)}, status_code=400)

    async def control_stats(self, request: Request) -> Response:
        """``GET /_control/stats``."""
        from starlette.responses import JSONResponse

        return JSONResponse(self.stats.snapshot())

    async def control_sent(self, request: Request) -> Response:
        """``GET /_control/sent``: the last inference requests (path, query, headers
        lower-cased, JSON body), oldest first."""
        from starlette.responses import Response

        return Response(_dumps(list(self.stats.sent)), media_type="application/json")

    async def control_reset(self, request: Request) -> Response:
        """``POST /_control/reset``."""
        from starlette.responses import JSONResponse

        raw = await request.body()
        options = json.loads(raw) if raw.strip() else {}
        self.reset(config=bool(options.get("config", True)))
        return JSONResponse({"ok": True, "config": self.config()})

    async def control_release(self, request: Request) -> Response:
        """``POST /_control/release``: every held request goes on."""
        from starlette.responses import JSONResponse

        held = self.stats.held
        self.release()
        return JSONResponse({"ok": True, "released": held})

    async def control_health(self, request: Request) -> Response:
        """``GET /_control/health``."""
        from starlette.responses import JSONResponse

        return JSONResponse({"ok": True})

    def app(self) -> Callable[..., Any]:
        """The ASGI application (a Starlette app behind a thin wrapper)."""
        from starlette.applications import Starlette
        from starlette.routing import Route

        routes = [
            Route("/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/messages", self.messages, methods=["POST"]),
            Route("/v1/responses", self.responses, methods=["POST"]),
            # Azure OpenAI: deployment URLs (api-version query) and the v1 API
            Route(
                "/openai/deployments/{deployment}/chat/completions",
                self.azure_deployment,
                methods=["POST"],
            ),
            Route("/openai/v1/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/openai/v1/responses", self.responses, methods=["POST"]),
            # Gemini's OpenAI-compatible endpoint
            Route("/v1beta/openai/chat/completions", self.chat_completions, methods=["POST"]),
            Route("/v1/models", self.list_models, methods=["GET"]),
            Route("/_control/config", self.control_config, methods=["GET", "POST"]),
            Route("/_control/stats", self.control_stats, methods=["GET"]),
            Route("/_control/sent", self.control_sent, methods=["GET"]),
            Route("/_control/reset", self.control_reset, methods=["POST"]),
            Route("/_control/release", self.control_release, methods=["POST"]),
            Route("/_control/health", self.control_health, methods=["GET"]),
            *self.batch_apis.routes(),
        ]
        inner = Starlette(routes=routes)

        async def asgi(scope: dict[str, Any], receive: Any, send: Any) -> None:
            # Keep the server's own ``send`` so the drop fault can reach the transport.
            if scope["type"] == "http":
                scope["gradetrail.send"] = send
            await inner(scope, receive, send)

        return asgi


# --------------------------------------------------------------------------------------
# Running it
# --------------------------------------------------------------------------------------


def serve(
    config: dict[str, Any],
    *,
    port: int = 0,
    data_dir: Path | str | None = None,
    exit_on_stdin_eof: bool = False,
    http: str = "auto",
    loop: str = "auto",
) -> None:
    """Run the server on 127.0.0.1:``port`` until SIGINT/SIGTERM (or stdin EOF).

    ``http`` / ``loop`` pick uvicorn's HTTP parser and event loop; ``auto`` takes httptools
    and uvloop when installed (the cheapest per request), else h11 and asyncio.
    """
    import uvicorn

    server_state = ProtocolServer(load_gsm8k(data_dir), config)
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((HOST, port))
    sock.listen(4096)
    sock.setblocking(False)
    bound_port = sock.getsockname()[1]

    def have(module: str) -> bool:
        try:
            __import__(module)
        except ImportError:
            return False
        return True

    uv_config = uvicorn.Config(
        server_state.app(),
        host=HOST,
        port=bound_port,
        loop=("uvloop" if have("uvloop") else "asyncio") if loop == "auto" else loop,
        http=("httptools" if have("httptools") else "h11") if http == "auto" else http,
        lifespan="off",
        access_log=False,
        log_level="warning",
        proxy_headers=False,
        server_header=False,
        date_header=False,
        backlog=4096,
        timeout_keep_alive=30,
        timeout_graceful_shutdown=1,
    )

    class _Server(uvicorn.Server):
        async def startup(self, sockets: list[socket.socket] | None = None) -> None:
            await super().startup(sockets=sockets)
            if not self.should_exit:
                print(f"{LISTEN_PREFIX}http://{HOST}:{bound_port}", flush=True)

    server = _Server(uv_config)
    if exit_on_stdin_eof:

        def watch_stdin() -> None:
            with contextlib.suppress(Exception):
                while sys.stdin.buffer.read(65536):
                    pass
            server.should_exit = True

        threading.Thread(target=watch_stdin, daemon=True).start()
    server.run(sockets=[sock])


def _build_arg_parser() -> argparse.ArgumentParser:
    """The command line (see the module docstring)."""
    ap = argparse.ArgumentParser(
        description="OpenAI/Anthropic protocol server with recorded GSM8K answers and faults."
    )
    ap.add_argument("--port", type=int, default=0, help="0 picks a free port")
    ap.add_argument("--data-dir", default=None, help=f"default: {DEFAULT_DATA_DIR}")
    ap.add_argument("--latency", default=None, help="0.1 | uniform:A,B | lognormal:MEAN,SIGMA")
    ap.add_argument("--latency-seed", type=int, default=None)
    ap.add_argument("--script", default=None, help="JSON file of scripted replies")
    ap.add_argument("--default-reply", default=None)
    ap.add_argument("--unknown-question", choices=["reply", "error"], default=None)
    ap.add_argument("--model", dest="models", action="append", default=None, help="extra model")
    ap.add_argument("--cache-read-tokens", type=int, default=None)
    ap.add_argument("--api-key", default=None)
    ap.add_argument("--rate-limit", type=float, default=None, help="requests per window")
    ap.add_argument("--rate-limit-window", type=float, default=None, help="seconds (1.0)")
    ap.add_argument(
        "--redacted-thinking",
        action="store_true",
        default=None,
        help="answer thinking requests with redacted_thinking blocks",
    )
    ap.add_argument(
        "--stream-tps", type=float, default=None, help="output tokens a second when streaming"
    )
    ap.add_argument("--fault", action="append", default=[], help="JSON or KIND[:k=v,...]")
    ap.add_argument("--no-usage", action="store_true", help="omit usage from answers")
    ap.add_argument("--served-model-suffix", default=None, help="e.g. -20250101")
    ap.add_argument("--served-model", default=None, help="answer with this model name")
    ap.add_argument("--config-json", default=None, help="a whole config object as JSON")
    ap.add_argument("--http", choices=["auto", "httptools", "h11"], default="auto")
    ap.add_argument("--loop", choices=["auto", "uvloop", "asyncio"], default="auto")
    ap.add_argument("--exit-on-stdin-eof", action="store_true", help=argparse.SUPPRESS)
    return ap


def config_from_args(args: argparse.Namespace) -> dict[str, Any]:
    """Turn parsed command-line arguments into a config dict."""
    config: dict[str, Any] = json.loads(args.config_json) if args.config_json else {}
    latency = args.latency
    if latency is not None:
        with contextlib.suppress(ValueError):
            latency = float(latency)
        config["latency"] = latency
    for key in sorted(CONFIG_KEYS - {"latency", "faults"}):  # those two are parsed above
        value = getattr(args, key)
        if value is not None:
            config[key] = value
    faults = list(config.get("faults") or [])
    faults += [parse_fault_string(spec) for spec in args.fault]
    if args.no_usage:
        faults.append({"kind": "no_usage"})
    if args.served_model_suffix:
        faults.append({"kind": "alias", "suffix": args.served_model_suffix})
    if args.served_model:
        faults.append({"kind": "alias", "served_model": args.served_model})
    if faults:
        config["faults"] = faults
    Settings.parse(config)
    for rule in faults:
        FaultRule.parse(rule)
    return config


def main(argv: list[str] | None = None) -> None:
    """Command-line entry point."""
    args = _build_arg_parser().parse_args(argv)
    try:
        config = config_from_args(args)
    except ConfigError as exc:
        raise SystemExit(f"protocol_server: {exc}") from None
    serve(
        config,
        port=args.port,
        data_dir=args.data_dir,
        exit_on_stdin_eof=args.exit_on_stdin_eof,
        http=args.http,
        loop=args.loop,
    )


# --------------------------------------------------------------------------------------
# Client-side helpers for tests and benchmarks
# --------------------------------------------------------------------------------------

_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}))


class ServerHandle:
    """A running protocol server: its URLs and its control endpoints."""

    def __init__(self, base_url: str, process: subprocess.Popen[bytes] | None = None) -> None:
        """Wrap the server at ``base_url`` (started as ``process``, if we started it)."""
        self.base_url = base_url
        self.process = process

    @property
    def port(self) -> int:
        """The TCP port."""
        return int(self.base_url.rsplit(":", 1)[1])

    @property
    def openai_base_url(self) -> str:
        """``base_url`` for ``openai.OpenAI`` (ends in ``/v1``)."""
        return self.base_url + "/v1"

    @property
    def openai_compatible_overrides(self) -> list[str]:
        """Spec overrides (``--set`` values, or ``load_spec``'s) that point a spec's model
        at this server's Chat Completions endpoint, with no API key required."""
        return [
            "model.provider=openai_compatible",
            f"model.base_url={self.openai_base_url}",
            "model.api_key_required=false",
        ]

    @property
    def anthropic_base_url(self) -> str:
        """``base_url`` for ``anthropic.Anthropic`` (the SDK appends ``/v1/messages``)."""
        return self.base_url

    def _call(self, method: str, path: str, payload: Any = None) -> Any:
        """Call a control endpoint and decode its JSON answer."""
        data = None if payload is None else json.dumps(payload).encode()
        req = urllib.request.Request(
            self.base_url + path,
            data=data,
            method=method,
            headers={"content-type": "application/json"},
        )
        try:
            with _NO_PROXY.open(req, timeout=30) as resp:
                return json.loads(resp.read())
        except urllib.error.HTTPError as exc:
            detail = exc.read().decode(errors="replace")
            raise ConfigError(f"{method} {path} -> {exc.code}: {detail}") from None

    def configure(self, **config: Any) -> dict[str, Any]:
        """Merge config keys (``latency=``, ``faults=[...]``, ...); return the new config."""
        return self._call("POST", "/_control/config", config)

    def add_fault(self, kind: str, **rule: Any) -> dict[str, Any]:
        """Append one fault rule, e.g. ``add_fault("drop", first=1)``."""
        return self.configure(add_faults=[{"kind": kind, **rule}])

    def config(self) -> dict[str, Any]:
        """The current config."""
        return self._call("GET", "/_control/config")

    def stats(self) -> dict[str, Any]:
        """The stats (see the module docstring)."""
        return self._call("GET", "/_control/stats")

    def sent(self) -> list[dict[str, Any]]:
        """The last inference requests as they arrived (``path``, ``query``, ``headers``
        lower-cased, JSON ``body``), oldest first; cleared with the stats."""
        return self._call("GET", "/_control/sent")

    def settled_stats(self, requests: int = 0, timeout: float = 60.0) -> dict[str, Any]:
        """The stats once at least ``requests`` requests have arrived and none is in flight.

        A client sees an aborted connection (a drop, its own timeout) before the server's
        handler has counted it, and on a loaded machine before the server has even read
        the request, so a test that asserts on ``statuses`` after such a request reads
        these, naming how many requests it sent. ``timeout`` (seconds) only guards
        against a hang: past it, :class:`TimeoutError` with the last stats."""
        return self._wait(
            lambda s: s["total"] >= requests and s["in_flight"] == 0,
            timeout,
            f"{requests} requests settled",
        )

    def wait_held(self, count: int, timeout: float = 60.0) -> dict[str, Any]:
        """The stats once ``count`` requests are held by a ``hold`` fault (see
        :meth:`release`); :class:`TimeoutError` after ``timeout`` seconds (a hang guard)."""
        return self._wait(lambda s: s["held"] >= count, timeout, f"{count} requests held")

    def _wait(self, done: Callable[[dict[str, Any]], bool], timeout: float, what: str) -> Any:
        """Poll the stats every 10 ms until ``done(stats)``."""
        deadline = time.monotonic() + timeout
        while not done(stats := self.stats()):
            if time.monotonic() > deadline:
                raise TimeoutError(f"waited {timeout} s for {what}; stats: {stats}")
            time.sleep(0.01)
        return stats

    def release(self) -> int:
        """Let every request a ``hold`` fault keeps go on; return how many were held."""
        return int(self._call("POST", "/_control/release", {})["released"])

    def reset(self, *, config: bool = True) -> None:
        """Clear the stats and (unless ``config=False``) the faults."""
        self._call("POST", "/_control/reset", {"config": config})

    def batches(self, **update: Any) -> dict[str, Any]:
        """The batch APIs' counters, after applying ``update`` (``polls=``,
        ``expire_after=``, ``reset=True``; see :mod:`protocol_batches`)."""
        if update:
            return self._call("POST", "/_control/batches", update)
        return self._call("GET", "/_control/batches")


@contextlib.contextmanager
def running_server(
    *,
    data_dir: Path | str | None = None,
    port: int = 0,
    startup_timeout: float = 30.0,
    python: str | None = None,
    server_args: list[str] | None = None,
    **config: Any,
) -> Iterator[ServerHandle]:
    """Start the server in a subprocess with ``config``; yield its handle; stop it on exit.

    ``config`` takes the ``/_control/config`` keys (``latency``, ``faults``, ``script``,
    ``rate_limit``, ...); ``server_args`` adds command-line flags (e.g.
    ``["--http", "h11"]``). Server errors go to this process's stderr.
    """
    cmd = [python or sys.executable, str(Path(__file__).resolve()), "--port", str(port)]
    cmd += ["--exit-on-stdin-eof"]
    if data_dir is not None:
        cmd += ["--data-dir", str(data_dir)]
    if config:
        cmd += ["--config-json", json.dumps(config)]
    cmd += server_args or []
    proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE)
    lines: queue.Queue[bytes] = queue.Queue()

    def pump() -> None:
        assert proc.stdout is not None
        for line in proc.stdout:
            lines.put(line)
        lines.put(b"")

    threading.Thread(target=pump, daemon=True).start()
    try:
        deadline = time.monotonic() + startup_timeout
        base_url = None
        while base_url is None:
            try:
                line = lines.get(timeout=max(deadline - time.monotonic(), 0.01))
            except queue.Empty:
                raise TimeoutError(f"protocol server did not start in {startup_timeout}s") from None
            text = line.decode(errors="replace").strip()
            if not line:
                raise RuntimeError(f"protocol server exited with {proc.wait()} before listening")
            if text.startswith(LISTEN_PREFIX):
                base_url = text[len(LISTEN_PREFIX) :]
        yield ServerHandle(base_url, proc)
    finally:
        if proc.poll() is None:
            proc.terminate()
            try:
                proc.wait(timeout=10)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        for stream in (proc.stdin, proc.stdout):
            if stream is not None:
                with contextlib.suppress(OSError):
                    stream.close()


def protocol_server_fixture(
    scope: str = "session", name: str = "protocol_server", **config: Any
) -> Any:
    """Return a pytest fixture named ``name`` yielding a :class:`ServerHandle`.

    In conftest.py: ``protocol_server = protocol_server_fixture(scope="session")``.
    """
    import pytest

    @pytest.fixture(scope=scope, name=name)  # type: ignore[call-overload]
    def _fixture() -> Iterator[ServerHandle]:
        with running_server(**config) as handle:
            yield handle

    return _fixture


def fresh_protocol_server_fixture(
    server_fixture: str = "protocol_server", name: str = "fresh_protocol_server"
) -> Any:
    """Return a function-scoped fixture: the ``server_fixture`` handle, reset before use
    (once no request of an earlier test is still in flight)."""
    import pytest

    @pytest.fixture(name=name)
    def _fixture(request: Any) -> ServerHandle:
        handle: ServerHandle = request.getfixturevalue(server_fixture)
        handle.reset()  # drops the faults and releases held requests
        # a request an earlier test abandoned (a client timeout, a killed run) may still be
        # in the server: let it leave before clearing the stats, so it is not counted here
        handle.settled_stats()
        handle.reset(config=False)
        return handle

    return _fixture


if __name__ == "__main__":
    main()
