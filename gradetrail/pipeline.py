"""The per-sample pipeline, shared by every executor: render, cache, complete, score.

Stages are plain functions: :func:`prepare` renders one (sample, epoch) into a
:class:`Prepared` request (before any model call, so template errors stop the run early);
:func:`process` takes it through the cache, the executor (which decides only *where*
``provider.complete`` runs) and the scorer, and returns the result row (a dict shaped
as :class:`~gradetrail.results.SampleResult`).
"""

from __future__ import annotations

import asyncio
import hashlib
import json
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import jinja2
from jinja2.exceptions import SecurityError

from gradetrail.agent import Agent, converse, single_turn
from gradetrail.agreement import LabelReader
from gradetrail.bounded import BoundedCalls, CallAborted, CallTimedOut
from gradetrail.calls import cached_call, served_call
from gradetrail.conversation import (
    ConversationError,
    Transcript,
    check_anthropic_content,
    normalize_messages,
    split_system,
)
from gradetrail.datasets import Sample
from gradetrail.errors import DatasetError, GradetrailError, ProviderError, SpecError
from gradetrail.providers.base import PromptKeys, Request, Response
from gradetrail.results import Row, make_row
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.reasoning import Split, split_reasoning
from gradetrail.spec import EvalSpec
from gradetrail.templates import Template, compile_template
from gradetrail.terminal import one_line
from gradetrail.tools import ToolBox, ToolError, normalize_tool_choice, normalize_tools

if TYPE_CHECKING:
    from gradetrail.cache import ResponseCache
    from gradetrail.executors.base import Executor
    from gradetrail.runlog import RunLog

__all__ = [
    "Prepared",
    "PreparedRequests",
    "Renderer",
    "SampleContext",
    "prepare",
    "process",
    "with_hits",
]


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True)
class Prepared:
    """One (sample, epoch), rendered and keyed.

    Attributes:
        sample: the dataset sample.
        epoch: 1-based epoch index.
        request: the rendered request.
        key: the request's cache key.
        target: the rendered target, or None.
        label: the sample's human label as a score (``dataset.label_field``), or None.
        agent: the run's agent loop (``model.tools_module``), or None for one turn.
        conversational: the row records a transcript (message templates, a messages
            field, tools or an agent loop).
    """

    sample: Sample
    epoch: int
    request: Request
    key: str
    target: str | None
    label: float | None = None
    agent: Agent | None = None
    conversational: bool = False


class Renderer:
    """The spec's templates, compiled once, and the request fields every sample shares.

    Args:
        spec: the validated spec.
        identity: the provider's cache-key material (:meth:`Provider.identity`).
        keyed_by_sample: put the sample id into every request's identity (and so its key),
            for providers whose response depends on the sample (replay).
    """

    def __init__(
        self,
        spec: EvalSpec,
        identity: dict[str, Any],
        keyed_by_sample: bool = False,
        with_row: bool = False,
    ) -> None:
        self.with_row = with_row
        where = spec.source
        self.where = where
        prompt = spec.prompt
        if isinstance(prompt, list):
            self.messages = [
                (m.role, compile_template(m.content, f"{where}: prompt[{i}].content"))
                for i, m in enumerate(prompt)
            ]
        elif prompt is not None:
            self.messages = [("user", compile_template(prompt, f"{where}: prompt"))]
        else:
            self.messages = []
        self.messages_field = spec.dataset.messages_field
        self.tools_field = spec.dataset.tools_field
        self.system = compile_template(spec.system, f"{where}: system") if spec.system else None
        self.target = compile_template(spec.target, f"{where}: target") if spec.target else None
        self.model = spec.model
        self.anthropic = spec.model.provider == "anthropic"  # refuses empty messages
        self.params = spec.model.params.model_dump(exclude_none=True)
        if not self.params.get("extra"):
            self.params.pop("extra", None)
        self.identity = identity
        self.keyed_by_sample = keyed_by_sample
        self.label = (
            LabelReader(spec.dataset.label_field, spec.model.name, spec.dataset.label_map, where)
            if spec.dataset.label_field
            else None
        )
        self.agent, self.tools = self._tools(spec)
        try:  # the module's own tools are known only now
            per_row = spec.dataset.tools_field is not None and not self.tools
            known = None if per_row else self.tools  # a row's own tools are checked per row
            self.tool_choice = normalize_tool_choice(spec.tool_choice, known)
        except ToolError as exc:
            raise SpecError(f"tool_choice: {exc}") from None
        self.conversational = bool(
            isinstance(prompt, list) or self.messages_field or self.tools or self.tools_field
        )
        per_row = (("sample_id",) if keyed_by_sample else ()) + (
            ("row_sha256",) if with_row else ()
        )
        #: keys of one-message requests built from pre-encoded pieces (None: conversations)
        self.keys = (
            None
            if self.conversational or self.agent is not None
            else PromptKeys(
                spec.model.provider,
                spec.model.name,
                spec.model.base_url,
                self.params,
                identity,
                per_row,
            )
        )

    def _tools(self, spec: EvalSpec) -> tuple[Agent | None, tuple[dict[str, Any], ...]]:
        """The agent loop (when ``model.tools_module`` is set) and the spec's tools.

        Raises:
            SpecError: the tools module cannot be imported or lacks a defined tool.
        """
        tools = normalize_tools(spec.tools) if spec.tools is not None else ()
        if not spec.model.tools_module:
            return None, tools
        toolbox = ToolBox(spec.model.tools_module, spec.base_dir)
        if tools:
            toolbox.check(tools)
        else:
            tools = toolbox.definitions()
        run = spec.run
        agent = Agent(toolbox, run.max_turns, run.sample_timeout_s, run.timeout_s)
        return agent, tools

    def file_hashes(self) -> dict[str, str]:
        """SHA-256 of the files the renderer reads besides the dataset (the tools module),
        for the run's identity."""
        if self.agent is None or not self.agent.toolbox.sha256:
            return {}
        return {"tools_module": self.agent.toolbox.sha256}

    def templates(self) -> list[Template]:
        """The templates this renderer applies to every row."""
        found = [t for _, t in self.messages]
        return found + [t for t in (self.system, self.target) if t is not None]

    def check(self, row: dict[str, Any]) -> None:
        """Check every template (and the label field) against the first row. Raises
        SpecError."""
        for template in self.templates():
            template.check(row)
        if self.label is not None:
            self.label.check(row)


def _render(template: Template, sample: Sample) -> str:
    try:
        return template.render(sample.row)
    except jinja2.UndefinedError as exc:
        raise DatasetError(
            f"{template.where}: sample {sample.id!r} (line {sample.line}): {exc.message}; "
            "fix the template or the row"
        ) from None
    except SecurityError as exc:  # the sandbox refused a Python internal or a huge value
        raise DatasetError(
            f"{template.where}: sample {sample.id!r} (line {sample.line}): {exc}; templates "
            "run sandboxed: use the row's fields and Jinja2 filters"
        ) from None
    except Exception as exc:  # a template expression failing on one row's data
        raise DatasetError(
            f"{template.where}: sample {sample.id!r} (line {sample.line}): "
            f"{type(exc).__name__}: {exc}"
        ) from None


def _bad_row(renderer: Renderer, sample: Sample, what: str, problem: object) -> DatasetError:
    return DatasetError(
        f"{renderer.where}: {what}: sample {sample.id!r} (line {sample.line}): {problem}; "
        "fix the row"
    )


def _conversation(
    sample: Sample, renderer: Renderer
) -> tuple[str | None, tuple[dict[str, Any], ...]]:
    """The system prompt and the conversation of one row: the row's messages (when
    ``dataset.messages_field``) followed by the rendered message templates."""
    field = renderer.messages_field
    raw: list[Any] = []
    if field is not None:
        what = f"dataset.messages_field {field!r}"
        if field not in sample.row:
            raise _bad_row(renderer, sample, what, f"the row has no field '{field}'")
        raw = sample.row[field]
        if not isinstance(raw, list):
            raise _bad_row(renderer, sample, what, "not a list of messages")
    rendered = [
        {"role": role, "content": _render(template, sample)} for role, template in renderer.messages
    ]
    try:
        messages = normalize_messages([*raw, *rendered])
        if renderer.anthropic:
            check_anthropic_content(messages)
    except ConversationError as exc:
        where = f"dataset.messages_field {field!r}" if field else "prompt"
        raise _bad_row(renderer, sample, where, exc) from None
    system, rest = split_system(messages)
    if renderer.system is not None:
        spec_system = _render(renderer.system, sample)
        system = spec_system if system is None else f"{spec_system}\n\n{system}"
    return system, rest


def _row_tools(
    sample: Sample, renderer: Renderer
) -> tuple[tuple[dict[str, Any], ...], str | dict[str, str] | None]:
    """This row's tools (``dataset.tools_field``; the spec's when the row's field is
    missing or null) and tool_choice (not sent with no tools, where ``auto`` and ``none``
    mean what no tools mean).

    Raises:
        DatasetError: the row's tools are malformed or not in the tools module, or
            ``tool_choice`` asks for a tool the row does not offer.
    """
    field = renderer.tools_field
    tools, choice = renderer.tools, renderer.tool_choice
    what = f"dataset.tools_field {field!r}"
    if field is not None and sample.row.get(field) is not None:
        try:
            tools = normalize_tools(sample.row[field])
            if isinstance(choice, dict):
                choice = normalize_tool_choice(choice, tools)
        except ToolError as exc:
            raise _bad_row(renderer, sample, what, exc) from None
        if renderer.agent is not None:
            functions = renderer.agent.toolbox.functions
            missing = [t["name"] for t in tools if t["name"] not in functions]
            if missing:
                problem = f"model.tools_module has no tool {', '.join(missing)}"
                raise _bad_row(renderer, sample, what, problem)
    if not tools and choice is not None:
        if choice in ("auto", "none"):
            return tools, None
        problem = f"tool_choice {choice!r} needs tools, and the row offers none"
        raise _bad_row(renderer, sample, what if field else "tool_choice", problem)
    return tools, choice


def _has_null(value: Any, depth: int = 0) -> bool:
    if value is None:
        return True
    if depth > 20:
        return False
    if isinstance(value, dict):
        return any(_has_null(v, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(_has_null(v, depth + 1) for v in value)
    return False


def _render_target(template: Template, sample: Sample) -> str:
    """The rendered target; a target that rendered a null field (``"None"``: a row whose
    ``answer`` is ``null`` would otherwise be scored against the text "None") is refused.

    Raises:
        DatasetError: naming the sample, its line and the null field.
    """
    target = _render(template, sample)
    if target.strip() == "None":
        nulls = sorted(n for n in template.names if n in sample.row and _has_null(sample.row[n]))
        if nulls:
            raise DatasetError(
                f"{template.where}: sample {sample.id!r} (line {sample.line}): the target is "
                f"null ({', '.join(nulls)} holds null); fill in the target or drop the row"
            )
    return target


def _row_identity(renderer: Renderer, sample: Sample) -> dict[str, Any]:
    """The request identity's per-row entries: the sample id for providers keyed by
    sample, the row's SHA-256 for providers that receive the row."""
    entries: dict[str, Any] = {}
    if renderer.keyed_by_sample:
        entries["sample_id"] = sample.id
    if renderer.with_row:
        text = json.dumps(sample.row, sort_keys=True, ensure_ascii=False, default=repr)
        entries["row_sha256"] = hashlib.sha256(text.encode("utf-8", "surrogatepass")).hexdigest()
    return entries


def _one_message(
    sample: Sample, renderer: Renderer
) -> tuple[str | None, str, str | None, float | None]:
    """The system prompt, user message, target and label of a one-message row.

    Raises:
        DatasetError: a template fails on this row (naming the sample id and line).
    """
    system = _render(renderer.system, sample) if renderer.system else None
    prompt = _render(renderer.messages[0][1], sample)
    if renderer.anthropic and not prompt.strip():
        problem = "the prompt renders empty, which the Anthropic API refuses"
        raise _bad_row(renderer, sample, "prompt", problem)
    target = _render_target(renderer.target, sample) if renderer.target else None
    label = renderer.label.read(sample.row, sample.id) if renderer.label else None
    return system, prompt, target, label


def prepare(sample: Sample, epoch: int, renderer: Renderer, key: str | None = None) -> Prepared:
    """Render one (sample, epoch) into a keyed request (``key``: its key, when already
    known from an earlier rendering; computed otherwise).

    Raises:
        DatasetError: a template fails on this row, or its conversation or tools are
            invalid (naming the sample id and line).
    """
    per_row = _row_identity(renderer, sample)
    identity = {**renderer.identity, **per_row} if per_row else renderer.identity
    model = renderer.model
    if renderer.keys is not None:  # one user message: the common case, kept lean
        system, prompt, target, label = _one_message(sample, renderer)
        request = Request(
            model.provider,
            model.name,
            model.base_url,
            system,
            ({"role": "user", "content": prompt},),
            renderer.params,
            epoch,
            sample.id,
            identity,
            (),
            None,
            sample.row if renderer.with_row else None,
        )  # by position: keywords cost twice as much
        key = key or renderer.keys.key(system, prompt, epoch, per_row)
        return Prepared(sample, epoch, request, key, target, label, None, False)
    if renderer.conversational:
        system, messages = _conversation(sample, renderer)
        tools, tool_choice = _row_tools(sample, renderer)
    else:  # an agent loop over one user message
        system, prompt, _, _ = _one_message(sample, renderer)
        messages = ({"role": "user", "content": prompt},)
        tools, tool_choice = (), None
    request = Request(
        provider=model.provider,
        model=model.name,
        base_url=model.base_url,
        system=system,
        messages=messages,
        params=renderer.params,
        epoch=epoch,
        sample_id=sample.id,
        identity=identity,
        tools=tools,
        tool_choice=tool_choice,
        row=sample.row if renderer.with_row else None,
    )
    target = _render_target(renderer.target, sample) if renderer.target else None
    label = renderer.label.read(sample.row, sample.id) if renderer.label else None
    return Prepared(
        sample,
        epoch,
        request,
        key or request.key(),
        target,
        label,
        renderer.agent,
        renderer.conversational or renderer.agent is not None,
    )


def with_hits(
    prepared: PreparedRequests, cache: ResponseCache | None, batch: int = 256
) -> Iterator[tuple[Prepared, Response | None]]:
    """Each prepared item, rendered when taken, with its cached response (None when not
    cached, or without a cache), the cache read ``batch`` keys a query."""
    for start in range(0, len(prepared), batch):
        stop = min(start + batch, len(prepared))
        found = cache.get_many([prepared.key(i) for i in range(start, stop)]) if cache else {}
        for i in range(start, stop):
            item = prepared[i]
            yield item, found.get(item.key)


class PreparedRequests(Sequence[Prepared]):
    """Every (sample, epoch) of a run, epoch-major, rendered on access.

    Building it renders and keys every request once, so a template that fails on any row
    stops the run before any call, but keeps only each request's key (32 bytes): a
    :class:`Prepared` is rendered again when it is asked for, and dropped once its row is
    written, so memory stays flat in the dataset's size (100,000 rendered prompts would
    otherwise be held for the whole run).

    Args:
        samples: the dataset in run order.
        epochs: the number of epochs.
        renderer: the run's templates.
        check: called with each item of epoch 1 as it is first rendered (the scorer's
            checks of what it derives from a row); may raise.

    Raises:
        DatasetError: a template fails on a row (naming the sample id and line).
    """

    def __init__(
        self,
        samples: Sequence[Sample],
        epochs: int,
        renderer: Renderer,
        check: Callable[[Prepared], None] | None = None,
    ) -> None:
        self.samples, self.epochs, self.renderer = samples, epochs, renderer
        n = len(samples)
        # one buffer of the final size, filled in place (no growth slack, no final copy)
        digests = bytearray(32 * n * epochs)
        keys = renderer.keys
        for at, sample in enumerate(samples):  # sample-major: a row is rendered once
            if keys is not None and check is None:
                system, prompt, _, _ = _one_message(sample, renderer)
                per_row = _row_identity(renderer, sample)
                for epoch in range(1, epochs + 1):
                    i = 32 * ((epoch - 1) * n + at)
                    digests[i : i + 32] = keys.digest(system, prompt, epoch, per_row)
                continue
            for epoch in range(1, epochs + 1):
                item = prepare(sample, epoch, renderer)
                if check is not None and epoch == 1:
                    check(item)
                i = 32 * ((epoch - 1) * n + at)
                digests[i : i + 32] = bytes.fromhex(item.key)
        self._digests = digests
        self._n, self._len = n, n * epochs  # read for every item

    def __len__(self) -> int:
        return self._len

    def key(self, index: int) -> str:
        """The cache key of item ``index`` (without rendering it)."""
        return self._digests[32 * index : 32 * index + 32].hex()

    def keys(self) -> Iterator[str]:
        """Every item's cache key, in order, made as they are taken (a list of a million
        hex keys would cost ~120 MB)."""
        return (self.key(i) for i in range(len(self)))

    def sorted_keys(self) -> Iterator[str]:
        """Every item's cache key in sorted order, the cache table's own order (neighbours
        share its pages, so reading them is about four times cheaper), made one at a time:
        the digests are sorted by their first byte's bucket, one bucket at a time, so only
        4 bytes a row (the bucket lists) are held besides them."""
        digests = self._digests
        buckets = [array("I") for _ in range(256)]
        for i in range(len(self)):
            buckets[digests[32 * i]].append(i)
        for bucket in buckets:
            for digest in sorted(digests[32 * i : 32 * i + 32] for i in bucket):
                yield digest.hex()

    @overload
    def __getitem__(self, index: int) -> Prepared: ...
    @overload
    def __getitem__(self, index: slice) -> list[Prepared]: ...
    def __getitem__(self, index: int | slice) -> Prepared | list[Prepared]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(self._len))]
        if index < 0:
            index += self._len
        if not 0 <= index < self._len:
            raise IndexError(index)
        epoch, at = divmod(index, self._n)
        return prepare(self.samples[at], epoch + 1, self.renderer, self.key(index))

    def __iter__(self) -> Iterator[Prepared]:
        for i in range(len(self)):
            yield self[i]


@dataclass(slots=True)
class SampleContext:
    """What :func:`process` needs besides the sample: shared by all samples of a run.

    Attributes:
        cache: the response cache, or None with ``--no-cache``.
        executor: where provider calls run.
        scorer: the run's scorer.
        log: the run's structured log (``log.jsonl``), or None to log nothing.
        bounded: runs a synchronous scorer's ``score`` with the run's time bound and within
            reach of SIGINT/SIGTERM (see :mod:`gradetrail.bounded`), or None to call it
            directly.
        refusals: ``run.refusals``: ``score`` a refusal's text as any answer, or
            ``exclude`` it from the mean (a ``judge_error`` row, reason ``refusal``).
        reasoning_tags: ``scorer.reasoning_tags``: the scorer sees only the text after
            the last closing tag of these names; a tag left open scores 0 as no answer
            (see :mod:`gradetrail.scorers.reasoning`).
    """

    cache: ResponseCache | None
    executor: Executor
    scorer: Scorer
    log: RunLog | None = None
    bounded: BoundedCalls | None = None
    refusals: str = "score"
    reasoning_tags: tuple[str, ...] = ()


async def process(item: Prepared, ctx: SampleContext, hit: Response | None = None) -> Row:
    """Take one prepared (sample, epoch) to its result row (a dict shaped as
    :class:`~gradetrail.results.SampleResult`): the response from the cache
    (``hit``, when the caller read it already), else from the executor (with the run's
    retry policy, cached on success), then scored.
    With an agent loop every turn goes that way (:func:`gradetrail.agent.converse`)."""
    if item.agent is not None:
        talk = await converse(
            item.agent,
            item.request,
            item.key,
            cache=ctx.cache,
            executor=ctx.executor,
            log=ctx.log,
            epoch=item.epoch,
        )
        response, error, cached, attempts = talk.response, talk.error, talk.cached, talk.attempts
        transcript: Transcript | None = talk.transcript
    else:
        call = (
            served_call(item.request, hit, ctx.executor, ctx.log, "provider", item.epoch)
            if hit is not None  # read already: nothing to wait for
            else await cached_call(
                item.request,
                item.key,
                ctx.cache,
                ctx.executor,
                ctx.log,
                kind="provider",
                epoch=item.epoch,
            )
        )
        response, error, cached, attempts = call.response, call.error, call.cached, call.attempts
        transcript = single_turn(item.request, item.key, call) if item.conversational else None
    if response is None:
        return _error_row(item, error, attempts, transcript)
    text, split = response.text, None
    if ctx.reasoning_tags and "<" in text:
        split = split_reasoning(text, ctx.reasoning_tags)
        text = split.answer
    scored = ScoreInput(
        item.sample,
        item.epoch,
        item.request.prompt,
        item.request.system,
        item.target,
        text,
        response.tool_calls,
        item.request.tools,
    )
    scorer = ctx.scorer
    if response.refused and ctx.refusals == "exclude":
        score = refusal_excluded(response)
        return _scored_row(item, response, score, cached, attempts, transcript)
    if split is not None and split.unclosed is not None:  # no answer: never its thinking
        score = Score(
            0.0,
            {
                "extracted": None,
                "reason": f"no answer: the <{split.unclosed}> reasoning was never closed (the "
                "model ran out while reasoning); raise max_tokens",
                "response_chars": len(response.text),
            },
        )
        return _scored_row(item, response, score, cached, attempts, transcript, split)
    try:
        if ctx.bounded is None or type(scorer).ascore is not Scorer.ascore:
            score = await scorer.ascore(scored)
        else:  # a synchronous scorer: no coroutine to wait on
            score = _bounded_score(ctx, scored)
    except GradetrailError:  # the cache or the run failing: the run stops, as it says
        raise
    except Exception as exc:  # the scorer failing on this one response: its row says so
        score = _scorer_failed(scorer, scored, exc)
    return _scored_row(item, response, score, cached, attempts, transcript, split)


def refusal_excluded(response: Response) -> Score:
    """The score of a refusal under ``run.refusals: exclude``: none, the row left out of
    the mean (``judge_error``, reason ``refusal``), its tokens and cost kept."""
    why = response.refusal or "no explanation given"
    return scorer_error(
        {"response_chars": len(response.text)},
        "refusal",
        f"the model declined (stop reason {response.raw_stop_reason or response.stop_reason}"
        f"): {one_line(why)[:200]}; run.refusals is exclude, so the row is left out of the "
        "mean",
    )


def response_extras(response: Response) -> dict[str, Any]:
    """The optional row fields a response sets (absent when at their defaults, so rows of
    responses without them stay as they were): ``reasoning`` (text), ``reasoning_tokens``
    (of output_tokens), ``reasoning_exhausted`` (max_tokens ran out while reasoning),
    ``refusal`` (the refusal text or explanation), ``cache_write_tokens`` (of
    input_tokens, written to the prompt cache), ``server_tool_uses`` (billed per use,
    ``{"web_search_requests": n}``) and ``ttft_s`` (seconds to the first token of a
    streamed answer)."""
    extras: dict[str, Any] = {}
    if response.reasoning is not None:
        extras["reasoning"] = response.reasoning
    if response.reasoning_tokens:
        extras["reasoning_tokens"] = response.reasoning_tokens
    if response.reasoning_exhausted:
        extras["reasoning_exhausted"] = True
    if response.refused:
        extras["refusal"] = response.refusal or ""
    if response.cache_write_tokens:
        extras["cache_write_tokens"] = response.cache_write_tokens
    if response.server_tool_uses:
        extras["server_tool_uses"] = dict(response.server_tool_uses)
    if response.ttft_s is not None:
        extras["ttft_s"] = response.ttft_s
    return extras


def _scorer_failed(scorer: Scorer, item: ScoreInput, exc: Exception) -> Score:
    """The row of a response the scorer raised on (a bug it has with this text, e.g. an
    overflow): a ``judge_error`` row left out of the mean, naming the exception, instead
    of a run that stops and loses the rows after it."""
    name = type(scorer).__name__
    return scorer_error(
        {"response_chars": len(item.response)},
        "scorer_failed",
        f"the {name} raised {type(exc).__name__} on this response ({one_line(str(exc))[:200]}); "
        "the row is left out of the mean: report it with the response",
    )


def _bounded_score(ctx: SampleContext, item: ScoreInput) -> Score:
    """A synchronous scorer's verdict (one that implements only ``score``), run through
    ``ctx.bounded``: past the run's ``score_timeout_s`` it is stopped and the row is a
    ``judge_error`` with reason ``scorer_timeout``; SIGTERM or a second Ctrl-C during it
    cancels the sample like any other in flight."""
    assert ctx.bounded is not None
    scorer = ctx.scorer
    try:
        return ctx.bounded.call(scorer.score, item)
    except CallTimedOut:
        limit = ctx.bounded.timeout_s
        return Score(
            None,
            {"response_chars": len(item.response)},
            error={
                "kind": "ScorerTimeout",
                "reason": "scorer_timeout",
                "message": f"the {type(scorer).__name__} took more than {limit:g} s on this "
                "response and was stopped (run.score_timeout_s); a pattern that backtracks "
                "catastrophically, e.g. (a+)+$, does this",
            },
        )
    except CallAborted:
        raise asyncio.CancelledError from None


def _scored_row(
    item: Prepared,
    response: Response,
    score: Score,
    cached: bool,
    attempts: int,
    transcript: Transcript | None = None,
    split: Split | None = None,
) -> Row:
    """The row of a scored (or judge_error) sample: built as a dict in SampleResult's field
    order; validated by :func:`~gradetrail.results.make_row` only when a value from the
    scorer or the provider is not exactly of its field's type (validation would return
    every other row unchanged: the pipeline's own values have their types already).
    ``split``: the response split at reasoning tags in its text (the row keeps the whole
    text as ``response``, the reasoning as ``reasoning``)."""
    ok = score.error is None
    row = {
        "sample_id": item.sample.id,
        "epoch": item.epoch,
        "state": "scored" if ok else "judge_error",
        "score": score.value if ok else None,
        "system": item.request.system,
        "prompt": item.request.prompt,
        "target": item.target,
        "response": response.text,
        "stop_reason": response.stop_reason,
        "raw_stop_reason": response.raw_stop_reason,
        "truncated": response.truncated,
        "served_model": response.served_model,
        "input_tokens": response.total_input_tokens,
        "output_tokens": response.output_tokens,
        "cached_input_tokens": response.cached_input_tokens,
        "cost_usd": response.cost_usd,
        "cached": cached,
        "latency_s": response.latency_s,
        "attempts": attempts,
        "error": score.error,
        "scorer": score.detail,
        "cluster": item.sample.cluster,
        "label": item.label,
        "judge": score.judge,
        "tool_calls": list(response.tool_calls) if item.conversational else None,
        "transcript": transcript,
    }
    extras = response_extras(response)
    if split is not None:
        if split.reasoning is not None and "reasoning" not in extras:
            extras["reasoning"] = split.reasoning
        if split.unclosed is not None:
            extras["reasoning_exhausted"] = True
    if extras:
        row.update(extras)
    return row if _exact(row) else make_row(**row)


_OPT_FLOAT = (float, type(None))
_OPT_STR = (str, type(None))
_STR_ONLY = frozenset([str])


def _exact(row: Row) -> bool:
    """True when the row's values from scorers, providers and the dataset have exactly
    their SampleResult field types (an int score, a numpy float, a non-str key or a tool
    call list is left to validation)."""
    detail, error = row["scorer"], row["error"]
    return (
        type(row["score"]) in _OPT_FLOAT
        and type(row["cost_usd"]) in _OPT_FLOAT
        and type(row["latency_s"]) in _OPT_FLOAT
        and type(row["label"]) in _OPT_FLOAT
        and type(row["sample_id"]) is str
        and type(row["response"]) is str
        and type(row["stop_reason"]) in _OPT_STR
        and type(row["raw_stop_reason"]) in _OPT_STR
        and type(row["served_model"]) in _OPT_STR
        and type(row["cluster"]) in _OPT_STR
        and type(row["truncated"]) is bool
        and type(row["input_tokens"]) is int
        and type(row["output_tokens"]) is int
        and type(row["cached_input_tokens"]) is int
        and type(detail) is dict
        and {*map(type, detail)} <= _STR_ONLY
        and (error is None or (type(error) is dict and {*map(type, error)} <= _STR_ONLY))
        and row["judge"] is None
        and row["tool_calls"] is None
        and row["transcript"] is None
    )


def _error_row(
    item: Prepared,
    error: ProviderError | None,
    attempts: int,
    transcript: Transcript | None = None,
) -> Row:
    detail = error.detail() if error is not None else {"kind": "ProviderError", "message": "?"}
    return make_row(
        sample_id=item.sample.id,
        epoch=item.epoch,
        state="provider_error",
        system=item.request.system,
        prompt=item.request.prompt,
        target=item.target,
        attempts=attempts,
        error=detail,
        cluster=item.sample.cluster,
        label=item.label,
        transcript=transcript,
    )
