"""Rendering: each (sample, epoch) of a run into a keyed request, before any model call.

:class:`Renderer` compiles the spec's templates once and holds what every request shares
(the provider's identity and request checks, the tools, the agent loop); :func:`prepare`
renders one (sample, epoch) into a :class:`Prepared` request, so a template that fails on
any row stops the run before it pays for anything; :class:`PreparedRequests` keeps only
each request's key and renders an item again when it is asked for.
"""

from __future__ import annotations

import hashlib
import json
from array import array
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, overload

import jinja2
from jinja2.exceptions import SecurityError

from gradetrail.conversation.messages import ConversationError, normalize_messages, split_system
from gradetrail.conversation.tools import ToolError, normalize_tool_choice, normalize_tools
from gradetrail.datasets import Sample
from gradetrail.datasets.labels import LabelReader
from gradetrail.engine.agent import Agent
from gradetrail.errors import DatasetError, SpecError
from gradetrail.prompts.templates import (
    MissingValueShown,
    Template,
    compile_template,
    holds_missing,
)
from gradetrail.providers.base import PromptKeys, Provider, Request, Response
from gradetrail.spec import EvalSpec

if TYPE_CHECKING:
    from gradetrail.cache.store import ResponseCache

__all__ = [
    "MissingValueRow",
    "Prepared",
    "PreparedRequests",
    "Renderer",
    "counted",
    "prepare",
    "with_hits",
]


# read-only, but not frozen: one is built a row, and a frozen __init__ costs 5x
@dataclass(slots=True, eq=False, repr=False)
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
        provider: the run's provider, which declares what its requests need: the sample
            id in every request's identity (``keyed_by_sample``: its response depends on
            the sample, as replay's does), the row itself (``wants_row``), and its API's
            own checks of a conversation (``check_messages``, ``empty_prompt_refused``).
        target_required: the run's scorer compares each response with the target
            (:attr:`~gradetrail.scorers.base.Scorer.reads_target`): an empty target is
            then refused, naming the row.
    """

    def __init__(
        self,
        spec: EvalSpec,
        identity: dict[str, Any],
        provider: Provider,
        target_required: bool = False,
    ) -> None:
        self.target_required = target_required
        keyed_by_sample = provider.keyed_by_sample
        self.with_row = with_row = provider.wants_row()
        self.check_messages = provider.check_messages
        #: why a prompt that renders empty is refused (the API's words), or None
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
        self.target = (
            compile_template(spec.target, f"{where}: target", target=True) if spec.target else None
        )
        self.model = spec.model
        self.empty_prompt_refused = provider.empty_prompt_refused
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
        #: the tools as the provider's requests carry them (see Provider.offered_tools)
        self.offered_tools = provider.offered_tools
        self.agent, tools = self._tools(spec)
        self.tools = self.offered_tools(tools) if tools else tools
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
        from gradetrail.engine.toolbox import ToolBox  # only a spec with a tools module

        toolbox = ToolBox(spec.model.tools_module, spec.base_dir)
        if tools:
            toolbox.check(tools)
        else:
            tools = toolbox.definitions()
        run = spec.run
        agent = Agent(
            toolbox, run.max_turns, run.sample_timeout_s, run.timeout_s, run.max_tool_output
        )
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


class MissingValueRow(DatasetError):
    """A row that cannot be rendered or scored for a missing value: a null or NaN a
    template would show as the text ``None`` or ``nan``, or an empty target. Raised for
    the first such row; :func:`counted` adds how many rows of the run are alike.

    Attributes:
        where: the template that shows it (``spec.yaml: prompt``).
        head: the sample and its line.
        problem: what is missing.
        fix: what to do.
    """

    def __init__(self, where: str, head: str, problem: str, fix: str, count: str = "") -> None:
        super().__init__(f"{where}: {head}: {problem}{count}; {fix}")
        self.where, self.head, self.problem, self.fix = where, head, problem, fix


def _render(template: Template, sample: Sample) -> str:
    try:
        return template.render(sample.row)
    except MissingValueShown as exc:
        raise _missing_shown(template, sample, exc) from None
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


def _missing_shown(template: Template, sample: Sample, exc: MissingValueShown) -> MissingValueRow:
    """The refusal of a template showing a null or NaN (naming the fields holding one)."""
    name = exc.fields[0] if len(exc.fields) == 1 else "field"
    return MissingValueRow(
        template.where,
        f"sample {sample.id!r} (line {sample.line})",
        str(exc),
        f"show it through a default ({{{{ {name} | default('') }}}}) or under a test "
        f"({{% if {name} %}}...{{% endif %}}), or fill in the rows",
    )


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
        renderer.check_messages(messages)
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
            tools = renderer.offered_tools(normalize_tools(sample.row[field]))
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


#: the text a missing value renders to, and what it is called
_MISSING_TEXT = {"None": "null", "nan": "NaN"}


def _render_target(template: Template, sample: Sample, required: bool) -> str:
    """The rendered target; a target that rendered a missing field is refused: a null
    (``"None"``) or a NaN (``"nan"``: JSON Lines written by Python's ``json`` spell a
    missing float ``NaN``). A row whose ``answer`` is missing would otherwise be scored
    against the text "None" or "nan": a zero in the mean, exit 0. With ``required`` (the
    scorer compares the target), an empty or blank target (an empty CSV cell, ``""``) is
    refused too: exact scored it 0, numeric and math a judge_error, regex matched anything.

    Raises:
        MissingValueRow: naming the sample, its line and the missing field.
    """
    head = f"sample {sample.id!r} (line {sample.line})"
    fix = "fill in the target or drop the row"
    try:
        target = template.render(sample.row)
    except MissingValueShown as exc:
        kind, target = exc.kind, None
    except Exception:  # noqa: BLE001 - the error of any other failure, naming the sample
        return _render(template, sample)
    else:
        kind = _MISSING_TEXT.get(target.strip())
        if kind is None:
            if required and not target.strip():
                found = sorted(n for n in template.names if _blank(sample.row.get(n)))
                holds = f" ({', '.join(found)} holds {sample.row[found[0]]!r})" if found else ""
                problem = f"the target is empty{holds}, and the scorer compares against it"
                raise MissingValueRow(template.where, head, problem, fix)
            return target
    fields = template.names
    found = sorted(n for n in fields if n in sample.row and holds_missing(sample.row[n], kind))
    if found or target is None:
        holds = f" ({', '.join(found)} holds {kind})" if found else ""
        raise MissingValueRow(template.where, head, f"the target is {kind}{holds}", fix)
    return target


def _target(renderer: Renderer, sample: Sample) -> str | None:
    """The row's rendered target (:func:`_render_target`), or None without one."""
    if renderer.target is None:
        return None
    return _render_target(renderer.target, sample, renderer.target_required)


def _blank(value: Any) -> bool:
    """Text that is empty or blank."""
    return isinstance(value, str) and not value.strip()


def counted(exc: MissingValueRow, samples: Sequence[Sample], renderer: Renderer) -> DatasetError:
    """``exc`` (the first row found missing a value) with how many of ``samples`` the
    same template refuses so (each rendered again: an error's path only)."""
    count = 0
    for sample in samples:
        try:
            prepare(sample, 1, renderer)
        except MissingValueRow as other:
            count += other.where == exc.where
        except DatasetError:
            pass
    if count < 2:
        return exc
    alike = f" ({count:,} of {len(samples):,} rows are so; this is the first)"
    return MissingValueRow(exc.where, exc.head, exc.problem, exc.fix, alike)


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
    if renderer.empty_prompt_refused is not None and not prompt.strip():
        raise _bad_row(renderer, sample, "prompt", renderer.empty_prompt_refused)
    target = _target(renderer, sample)
    label = renderer.label.read(sample.row, sample.id) if renderer.label else None
    return system, prompt, target, label


#: what :class:`PreparedRequests` keeps of what rows rendered to, from keying a run to
#: running it, at most (bytes, as :data:`_HELD_OVERHEAD` and ASCII text count them): every
#: row of most datasets; of a million GSM8K rows the first ~65,000, of a million short
#: ones (``Q: What is 7 + 7?``) the first ~140,000; the others are rendered again when run
HELD_BYTES = 32 * 1024 * 1024
#: what a held row costs besides its text (measured: a tuple, the strings' headers, the
#: list's slot); a per-row identity (``row_sha256``) adds a dict and a hash, ~340 bytes
_HELD_OVERHEAD = 200
_HELD_IDENTITY = 340

#: what a one-message row renders to: system prompt, user message, target, label and its
#: per-row identity entries (:func:`_row_identity`; None in a held row: made again)
Rendered = tuple[str | None, str, str | None, float | None, dict[str, Any] | None]


def _message_prepared(
    sample: Sample, epoch: int, renderer: Renderer, rendered: Rendered, key: str | None
) -> Prepared:
    """The :class:`Prepared` of a one-message row (``renderer.keys`` is set) from what it
    rendered to (``key``: its key when known, computed otherwise)."""
    system, prompt, target, label, per_row = rendered
    assert per_row is not None
    model = renderer.model
    request = Request(
        model.provider,
        model.name,
        model.base_url,
        system,
        ({"role": "user", "content": prompt},),
        renderer.params,
        epoch,
        sample.id,
        {**renderer.identity, **per_row} if per_row else renderer.identity,
        (),
        None,
        sample.row if renderer.with_row else None,
    )  # by position: keywords cost twice as much
    if key is None:
        assert renderer.keys is not None
        key = renderer.keys.key(system, prompt, epoch, per_row)
    return Prepared(sample, epoch, request, key, target, label, None, False)


def prepare(sample: Sample, epoch: int, renderer: Renderer, key: str | None = None) -> Prepared:
    """Render one (sample, epoch) into a keyed request (``key``: its key, when already
    known from an earlier rendering; computed otherwise).

    Raises:
        DatasetError: a template fails on this row, or its conversation or tools are
            invalid (naming the sample id and line).
    """
    if renderer.keys is not None:  # one user message: the common case, kept lean
        rendered = (*_one_message(sample, renderer), _row_identity(renderer, sample))
        return _message_prepared(sample, epoch, renderer, rendered, key)
    per_row = _row_identity(renderer, sample)
    identity = {**renderer.identity, **per_row} if per_row else renderer.identity
    model = renderer.model
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
    target = _target(renderer, sample)
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
    prepared: PreparedRequests,
    cache: ResponseCache | None,
    batch: int = 256,
    release: bool = False,
) -> Iterator[tuple[Prepared, Response | None]]:
    """Each prepared item, rendered when taken, with its cached response (None when not
    cached, or without a cache), the cache read ``batch`` keys a query; ``release``: the
    run's own pass (see :meth:`PreparedRequests.at`)."""
    for start in range(0, len(prepared), batch):
        stop = min(start + batch, len(prepared))
        keys = [prepared.key(i) for i in range(start, stop)]
        found = cache.get_many(keys) if cache else {}
        for i, key in enumerate(keys, start):
            yield prepared.at(i, key, release), found.get(key)


class PreparedRequests(Sequence[Prepared]):
    """Every (sample, epoch) of a run, epoch-major, rendered on access.

    Building it renders and keys every request once, so a template that fails on any row
    stops the run before any call. It keeps each request's key (32 bytes) and, for
    one-message rows, what the first rows rendered to, up to about :data:`HELD_BYTES`:
    those rows are not rendered again when asked for (every row of a
    dataset of ordinary size, in every epoch); the run's own pass lets each go once it has
    taken the row's last epoch. A row past that budget is rendered again
    when it is asked for, and its :class:`Prepared` dropped once its row is written, so
    memory stays bounded whatever the dataset's size (a million rendered prompts would
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
        held: list[Rendered | None] = []  # what rows 0, 1, ... rendered to, within budget
        try:
            self._key_all(samples, epochs, renderer, check, digests, held)
        except MissingValueRow as exc:  # how many rows are alike, with the first
            raise counted(exc, samples, renderer) from None
        self._digests = digests
        self._held = held
        self._n, self._len = n, n * epochs  # read for every item

    @staticmethod
    def _key_all(
        samples: Sequence[Sample],
        epochs: int,
        renderer: Renderer,
        check: Callable[[Prepared], None] | None,
        digests: bytearray,
        held: list[Rendered | None],
    ) -> None:
        """Render and key every (sample, epoch) into ``digests``, holding what the first
        rows rendered to in ``held`` (see the class docstring)."""
        n, keys = len(samples), renderer.keys
        with_row = renderer.with_row  # the row's hash is kept; a sample id is not
        budget = HELD_BYTES
        for at, sample in enumerate(samples):  # sample-major: a row is rendered once
            if keys is not None and check is None:
                system, prompt, target, label = _one_message(sample, renderer)
                per_row = _row_identity(renderer, sample)
                for epoch in range(1, epochs + 1):
                    i = 32 * ((epoch - 1) * n + at)
                    digests[i : i + 32] = keys.digest(system, prompt, epoch, per_row)
                if budget > 0:
                    budget -= _HELD_OVERHEAD + len(prompt) + len(system or "")
                    budget -= len(target or "") + (_HELD_IDENTITY if with_row else 0)
                    held.append((system, prompt, target, label, per_row if with_row else None))
                continue
            for epoch in range(1, epochs + 1):
                item = prepare(sample, epoch, renderer)
                if check is not None and epoch == 1:
                    check(item)
                i = 32 * ((epoch - 1) * n + at)
                digests[i : i + 32] = bytes.fromhex(item.key)

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
        return self.at(index, self.key(index))

    def at(self, index: int, key: str, release: bool = False) -> Prepared:
        """Item ``index`` (in range: unchecked), whose key ``key`` the caller has read.
        With ``release`` (the run's own pass, which takes each item once, in order), a
        held row's rendering is let go when its last epoch is taken: its memory goes back
        as the run goes (a later read renders the row again)."""
        epoch, at = divmod(index, self._n)
        held = self._held
        rendered = held[at] if at < len(held) else None
        if rendered is not None:  # rendered when the requests were keyed
            if release and epoch + 1 == self.epochs:
                held[at] = None
            sample, renderer = self.samples[at], self.renderer
            if rendered[4] is None:  # a sample id's entry: cheaper made again than kept
                rendered = (*rendered[:4], _row_identity(renderer, sample))
            return _message_prepared(sample, epoch + 1, renderer, rendered, key)
        return prepare(self.samples[at], epoch + 1, self.renderer, key)

    def __iter__(self) -> Iterator[Prepared]:
        for i in range(len(self)):
            yield self[i]
