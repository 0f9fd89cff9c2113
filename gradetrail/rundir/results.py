"""Result rows: the :class:`SampleResult` model, the run directory's files, and reading
them back.

A run directory holds ``results.jsonl`` (one :class:`SampleResult` a line, one per
(sample, epoch), in input order once the run ends), ``samples.jsonl`` (one
:class:`SampleScore` a line: each sample's epochs reduced to one score, in input order),
``manifest.json`` and ``log.jsonl`` (every provider and judge call). While a run is
going, rows are appended as samples finish (written through, so a crash keeps them; rows
served from the cache 64 KB at a time, as a re-run rebuilds them at once); at the end the
file is rewritten in input order through a temporary file and an atomic rename (unless
every row already came in input order, as in a warm run).
Every file is written through :class:`~gradetrail.rundir.layout.RunDir`, never through a
symlink.
"""

from __future__ import annotations

import contextlib
import errno
import functools
import hashlib
import itertools
import json
import os
import stat
import types
import typing
from collections.abc import Callable, Iterator, Mapping
from pathlib import Path
from typing import IO, Any, Literal, NotRequired

from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    SerializerFunctionWrapHandler,
    TypeAdapter,
    model_serializer,
)
from typing_extensions import TypedDict

from gradetrail._util.jsontext import value_json
from gradetrail._util.slots import EpochSlots
from gradetrail.conversation.transcript import Transcript
from gradetrail.errors import RunError, UsageError
from gradetrail.rundir.layout import RunDir, run_status

__all__ = [
    "MAX_LINE_BYTES",
    "MAX_MANIFEST_BYTES",
    "RESULTS_FILE",
    "SAMPLES_FILE",
    "SPARSE_FIELDS",
    "JudgeRecord",
    "Row",
    "SampleResult",
    "SampleScore",
    "SampleState",
    "ResultsWriter",
    "count_result_lines",
    "count_result_lines_from",
    "iter_result_spans",
    "is_exact",
    "iter_results",
    "make_row",
    "open_run_file",
    "parse_row",
    "read_row_at",
    "read_manifest",
    "read_results",
    "read_samples",
    "row_json",
]

RESULTS_FILE = "results.jsonl"
MANIFEST_FILE = "manifest.json"
SAMPLES_FILE = "samples.jsonl"
LOG_FILE = "log.jsonl"
#: responses the cache could not store (its disk full), kept until the next run stores them
PENDING_FILE = "pending-cache.jsonl"
#: space set aside while a run goes, freed to write the final manifest on a full disk
RESERVE_FILE = ".reserve"
#: every name a run writes in its run directory (checked for planted symlinks up front)
OUTPUT_FILES = (
    RESULTS_FILE,
    RESULTS_FILE + ".tmp",
    SAMPLES_FILE,
    SAMPLES_FILE + ".tmp",
    MANIFEST_FILE,
    MANIFEST_FILE + ".tmp",
    LOG_FILE,
    PENDING_FILE,
    RESERVE_FILE,
    ".lock",
    "progress.json",
    "progress.json.tmp",
)

#: the longest line of ``results.jsonl`` or ``samples.jsonl`` a reader takes into memory:
#: four times the largest answer a provider may send (``MAX_ANSWER_BYTES``, 64 MB); a
#: longer line (a planted or damaged file) is skipped as malformed, read past in 1 MB
#: pieces, never held whole
MAX_LINE_BYTES = 256 << 20
#: the largest ``manifest.json`` read: six times the largest spec (10 MB) it holds
MAX_MANIFEST_BYTES = 64 << 20
_PIECE_BYTES = 1 << 20

SampleState = Literal["scored", "provider_error", "judge_error"]


class JudgeRecord(BaseModel):
    """The judge calls behind one row's score (``SampleResult.judge``)."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

    requests: int = Field(0, description="Judge requests made (samples x orders).")
    calls: int = Field(0, description="Requests sent to the judge this run (cache misses).")
    attempts: int = Field(0, description="Attempts over those calls, retries included.")
    cache_hits: int = Field(0, description="Requests answered from gradetrail's cache.")
    verdicts: int = Field(0, description="Replies a verdict was read from.")
    truncated: int = Field(0, description="Replies that stopped at the judge's max_tokens.")
    input_tokens: int = Field(
        0,
        description="Judge prompt tokens, provider prompt-cache reads included (gradetrail "
        "cache hits included).",
    )
    output_tokens: int = Field(0, description="Judge completion tokens (cache hits included).")
    cost_usd: float | None = Field(
        None,
        description="USD paid for calls made this run; null when none was made or any "
        "one's cost is unknown (a judge with no price).",
    )
    cost_usd_cached: float | None = Field(None, description="USD the cache hits once cost.")
    outcome: Literal["win", "tie", "loss", "split"] | None = Field(
        None,
        description="Pairwise only: the same verdict in both orders (win, tie, loss), or "
        "split when the two orders disagree.",
    )


#: fields a row holds only when they have a value (absent, not null, otherwise): rows
#: of runs that do not use them keep the bytes they had
SPARSE_FIELDS = ("app",)


class SampleResult(BaseModel):
    """One (sample, epoch) of a run."""

    model_config = ConfigDict(extra="allow", defer_build=True)  # built on first use

    sample_id: str = Field(description="The stable sample id.")
    epoch: int = Field(1, description="1-based epoch index.")
    state: SampleState = Field(description="scored, provider_error or judge_error.")
    score: float | None = Field(None, description="Score in [0, 1]; null unless scored.")
    system: str | None = Field(None, description="The rendered system prompt, or null.")
    prompt: str | None = Field(None, description="The rendered user message sent to the model.")
    target: str | None = Field(None, description="The rendered target.")
    response: str | None = Field(None, description="The response text; null on provider_error.")
    stop_reason: str | None = Field(None, description="Normalized stop reason.")
    raw_stop_reason: str | None = Field(None, description="The provider's own stop reason.")
    truncated: bool = Field(False, description="The response stopped at max_tokens.")
    served_model: str | None = Field(None, description="The model that served the request.")
    input_tokens: int = Field(
        0, description="Prompt tokens the provider counted as input, prompt-cache reads included."
    )
    output_tokens: int = Field(0, description="Completion tokens.")
    cached_input_tokens: int = Field(
        0, description="Of input_tokens, those read from the provider's prompt cache."
    )
    cost_usd: float | None = Field(
        None, description="Price of the response in USD; null if unknown."
    )
    cached: bool = Field(False, description="The response came from gradetrail's cache.")
    latency_s: float | None = Field(
        None, description="Seconds the call took (the original call's latency when cached)."
    )
    attempts: int = Field(0, description="Calls made this run (0 on a cache hit).")
    error: dict[str, Any] | None = Field(
        None,
        description="kind, message, status, error_type, code, transient, retry_after; quota "
        "(credit, spend_cap, daily, monthly or quota) when a quota ran out, and stops_run (key, "
        "access, model or memory) when every later request would fail alike: either stops "
        "the run.",
    )
    scorer: dict[str, Any] = Field(
        default_factory=dict, description="What the scorer saw and extracted."
    )
    cluster: str | None = Field(None, description="The sample's cluster, when the spec names one.")
    label: float | None = Field(
        None, description="The sample's human label as a score (dataset.label_field), or null."
    )
    judge: JudgeRecord | None = Field(
        None, description="What the judge calls for this row did and cost; null without a judge."
    )
    tool_calls: list[dict[str, Any]] | None = Field(
        None,
        description="The model's tool calls over every turn (id, name, arguments); null for a "
        "plain prompt.",
    )
    transcript: Transcript | None = Field(
        None,
        description="Conversation samples: the input messages and every turn (response, tool "
        "calls, tool results, stop reason, tokens, cost, latency); null for a plain prompt.",
    )
    app: dict[str, Any] | None = Field(
        None,
        description="What a python app handed back beside its answer: metadata (an "
        "object), metrics (name -> number), transcript (its steps) and artifacts ({name, "
        "path under the run directory, bytes, sha256}); absent from the row when none.",
    )

    @model_serializer(mode="wrap")
    def _sparse(self, handler: SerializerFunctionWrapHandler) -> dict[str, Any]:
        """Leave the :data:`SPARSE_FIELDS` that are None out of the row."""
        data = handler(self)
        for name in SPARSE_FIELDS:
            if data.get(name, 0) is None:
                del data[name]
        return data


class SampleScore(BaseModel):
    """One sample of a run: its epochs reduced to one score (a line of ``samples.jsonl``)."""

    model_config = ConfigDict(defer_build=True)  # built on first use, not at import

    sample_id: str = Field(description="The stable sample id.")
    score: float | None = Field(
        description="The reduced score in [0, 1] (run.reducer over the scored epochs); null "
        "when no epoch was scored, or fewer than k for pass_at_k."
    )
    epochs: int = Field(description="Epochs with a row (scored or not).")
    scored: int = Field(description="Epochs in state scored; the reducer's n.")
    scores: list[float | None] = Field(
        description="Each epoch's score in epoch order; null for an epoch in an error state."
    )
    cluster: str | None = Field(None, description="The sample's cluster, when the spec names one.")


#: bytes of cache-hit rows :meth:`ResultsWriter.append` may hold back before writing them
HOLD_BYTES = 64 * 1024

#: one result row as a run builds it: a dict holding :class:`SampleResult`'s fields in
#: their order, values as its validation makes them (nested judge records and transcripts
#: stay models), the same shape :func:`read_results` gives back
Row = dict[str, Any]


@functools.cache
def _row_schema() -> tuple[TypeAdapter[Any], dict[str, Any], dict[str, Any]]:
    """SampleResult's fields as a TypedDict adapter (built at the first row, not at
    import), each field's plain default (None for the required ones), and the default
    factories (called for each row)."""
    model_fields = SampleResult.model_fields
    typed = TypedDict(  # type: ignore[misc]  # the functional form, from the model's fields
        "SampleRow",
        {
            name: NotRequired[f.annotation] if name in SPARSE_FIELDS else f.annotation  # type: ignore[misc]
            for name, f in model_fields.items()
        },
    )
    typed.__pydantic_config__ = ConfigDict(extra="allow")  # type: ignore[attr-defined]
    defaults = {
        name: None if f.is_required() or f.default_factory else f.default
        for name, f in model_fields.items()
        if name not in SPARSE_FIELDS  # absent unless given
    }
    factories = {name: f.default_factory for name, f in model_fields.items() if f.default_factory}
    return TypeAdapter(typed), defaults, factories


def make_row(**fields: Any) -> Row:
    """A result row: ``fields`` over :class:`SampleResult`'s defaults, validated by its
    field types (the same coercions: an int score becomes 1.0), in its field order; one
    validation in pydantic-core, no model object (a third of the cost). A field of
    :data:`SPARSE_FIELDS` is in the row only when given a value other than None.

    Raises:
        pydantic.ValidationError: a value of the wrong type, or sample_id/state missing.
    """
    adapter, defaults, factories = _row_schema()
    row = {**defaults, **fields}
    for name in SPARSE_FIELDS:
        if name in row and row[name] is None:
            del row[name]  # absent, as SampleResult writes it
    for name, factory in factories.items():
        if name not in fields:
            row[name] = factory()  # type: ignore[call-arg]
    return adapter.validate_python(row)


_PLAIN = (str, int, float, bool, type(None))


def _type_check(expr: str, annotation: Any, names: dict[str, Any]) -> str:
    """Python source of a test that ``expr`` is exactly of the field type ``annotation``
    (so validation would return it unchanged); types are bound in ``names``."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in _PLAIN:
        names[annotation.__name__] = annotation
        return f"type({expr}) is {annotation.__name__}"
    if origin is typing.Literal:
        return f"{expr} in {args!r}"
    if origin is dict and args[0] is str:
        names["_STR_ONLY"] = frozenset([str])
        return f"(type({expr}) is dict and {{*map(type, {expr})}} <= _STR_ONLY)"
    if origin in (types.UnionType, typing.Union):
        members = [a for a in args if a is not type(None)]
        if all(m in _PLAIN for m in members):
            key = "_T_" + "_".join(m.__name__ for m in members)
            names[key] = (*members, type(None))
            return f"type({expr}) in {key}"
        inner = " or ".join(_type_check(expr, m, names) for m in members if _exact_able(m))
        return f"({expr} is None{' or ' + inner if inner else ''})"
    return "False"  # a model or a list: always validated


def _exact_able(annotation: Any) -> bool:
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    return annotation in _PLAIN or (origin is dict and bool(args) and args[0] is str)


def _make_is_exact() -> Callable[[Row], bool]:
    """:func:`is_exact`, generated from :class:`SampleResult`'s fields (one expression
    over the row's values; the model is the only definition of their types)."""
    names: dict[str, Any] = {}
    checks = [
        _type_check(f"row[{name!r}]", field.annotation, names)
        if name not in SPARSE_FIELDS
        else f"({name!r} not in row or row[{name!r}] is None)"  # present: validated
        for name, field in SampleResult.model_fields.items()
    ]
    source = "def is_exact(row):\n    return (\n        " + "\n        and ".join(checks)
    exec(source + "\n    )\n", names)  # the fast path, derived from the model
    return names["is_exact"]


#: True when every value of a result row (a dict with all of SampleResult's fields) has
#: exactly its field's type, so :func:`make_row` would return it unchanged; a model or list
#: value (a judge record, tool calls, a transcript), an int score or a numpy float is left
#: to validation
is_exact: Callable[[Row], bool] = _make_is_exact()


def row_json(row: Mapping[str, Any]) -> bytes:
    """One ``results.jsonl`` line (its newline included): byte for byte what
    :func:`~gradetrail._util.jsontext.model_json` writes for ``SampleResult(**row)``."""
    return value_json(row) + b"\n"


class ResultsWriter:
    """Appends rows to a run directory's ``results.jsonl`` and rewrites it in input order.

    Only each row's offset and length are kept in memory (not the row), in two arrays
    indexed by the row's place in input order (:class:`~gradetrail._util.slots.EpochSlots`: 16
    bytes a row, no Python object per row; a million rows cost 16 MB where a dict of
    tuples cost ~200 MB); :meth:`finalize` copies the rows into input order.

    Opening truncates the file: a re-run of a killed run writes every row again, from the
    cache. That loses nothing paid for, because the pipeline commits each response to the
    cache *before* its row is appended here, so every row on disk (a torn last line
    included) has its response in the cache; ``results.jsonl`` is derived data, and
    rebuilding it cannot merge a torn line into the next row or duplicate one. (With
    ``--no-cache`` nothing is kept between runs, by request.)

    Args:
        run_dir: the open run directory, or its path (must already exist).
        epochs: the run's epochs (a hint: a later epoch still works, at a copy).
        samples: the run's samples (a hint: their 16 bytes a row are made at once).

    Raises:
        RunError: ``results.jsonl`` is a symlink or cannot be written.
    """

    def __init__(self, run_dir: RunDir | Path, epochs: int = 1, samples: int = 0) -> None:
        self._own = not isinstance(run_dir, RunDir)
        self._dir = RunDir.create(run_dir) if self._own else run_dir
        self.path = self._dir.path / RESULTS_FILE
        # by (sample index, epoch): where its row starts, and its length (0: no row yet;
        # a row is never empty)
        self._slots = EpochSlots("q", "q", epochs=epochs, samples=samples)
        self._offset = 0  # where the next row goes (rows held back included)
        self._written = 0  # bytes on disk
        self._held = bytearray()  # rows held back, not yet written
        self._held_slots: list[int] = []
        self._last = (-1, -1)
        self._in_order = True  # every row so far came after the one before it
        self._digest = hashlib.sha256()  # of the bytes on disk, while they are in order
        self._fd = self._dir.open_fd(RESULTS_FILE, os.O_RDWR | os.O_CREAT | os.O_TRUNC)

    def append(self, order: tuple[int, int], row: Row, *, hold: bool = False) -> None:
        """Write one row now (unbuffered, so a crash keeps it); ``order`` is
        ``(sample index, epoch)``, the epoch 1-based (a second row for one order replaces
        the first in the final file). With ``hold`` (a row whose response came from the
        cache, so a crash loses nothing a re-run does not rebuild at once) the row may be
        held back with the next ones, up to :data:`HOLD_BYTES`, and written with them:
        one write for many cache hits instead of one a row.

        Raises:
            ValueError: a negative sample index or an epoch below 1.
            RunError: the row (or those held back) cannot be written (e.g. the disk is
                full); the rows not written are forgotten.
        """
        slot = self._slots.at(*order)
        data = row_json(row)
        self._held += data
        self._held_slots.append(slot)
        starts, lengths = self._slots.arrays
        starts[slot] = self._offset
        lengths[slot] = len(data)
        self._offset += len(data)
        if order <= self._last:
            self._in_order = False
        self._last = order
        if not hold or len(self._held) >= HOLD_BYTES:
            self.flush()

    def flush(self) -> None:
        """Write the rows held back.

        Raises:
            RunError: they cannot be written; none of them stays on disk or in the spans.
        """
        if not self._held:
            return
        data, slots = self._held, self._held_slots
        self._held, self._held_slots = bytearray(), []
        try:
            written = os.write(self._fd, data)
            if written < len(data):  # the disk filled mid-row: no torn row stays behind
                raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))
        except OSError as exc:
            with contextlib.suppress(OSError):
                os.ftruncate(self._fd, self._written)
            lengths = self._slots.arrays[1]
            for slot in slots:
                lengths[slot] = 0
            self._offset = self._written
            raise RunError(f"{self.path}: cannot write results ({exc.strerror})") from None
        self._written += len(data)
        if self._in_order:  # out of order, finalize hashes the rewritten file instead
            self._digest.update(data)

    def _spans(self) -> Iterator[tuple[int, int]]:
        """``(offset, length)`` of each written row, in input order."""
        starts, lengths = self._slots.arrays
        for slot, length in enumerate(lengths):
            if length:
                yield starts[slot], length

    def finalize(self) -> str:
        """Rewrite the file in input order, atomically (temporary file, then rename); a
        file whose rows were all appended in input order (a warm run's, every row a cache
        hit) already is that file, and is only flushed to disk (its hash taken as its
        bytes were written, not read back).

        Returns:
            The SHA-256 (hex) of the file as written (``manifest.results_sha256``).

        Raises:
            RunError: the file cannot be written.
        """
        self.flush()
        if self._in_order:
            try:
                os.fsync(self._fd)
            except OSError as exc:
                raise RunError(f"{self.path}: cannot write results ({exc.strerror})") from None
            self.close()
            return self._digest.hexdigest()
        digest = hashlib.sha256()

        def hashed() -> Iterator[bytes]:
            for offset, length in self._spans():
                chunk = os.pread(self._fd, length, offset)
                digest.update(chunk)
                yield chunk

        self._dir.write_atomic(RESULTS_FILE, hashed())
        self.close()
        return digest.hexdigest()

    def close(self) -> None:
        """Close without reordering (the rows written so far, and those held back when
        they can be written, stay on disk)."""
        if self._fd >= 0:
            with contextlib.suppress(RunError):
                self.flush()
            os.close(self._fd)
            self._fd = -1
        if self._own:
            self._dir.close()
            self._own = False


def _json_types(annotation: Any) -> tuple[type, ...] | None:
    """The JSON value types (as ``json.loads`` makes them) a row's field of type
    ``annotation`` may hold; None for any."""
    origin, args = typing.get_origin(annotation), typing.get_args(annotation)
    if annotation in (str, bool, type(None)):
        return (annotation,)
    if annotation is int:
        return (int,)
    if annotation is float:
        return (int, float)
    if origin is typing.Literal:
        return tuple({type(a) for a in args})
    if origin is dict or (isinstance(annotation, type) and issubclass(annotation, BaseModel)):
        return (dict,)
    if origin is list:
        return (list,)
    if origin in (types.UnionType, typing.Union):
        members = [_json_types(a) for a in args]
        if any(m is None for m in members):
            return None
        return tuple({t for m in members for t in m})  # type: ignore[union-attr]
    return None


def _list_of_dicts(annotation: Any) -> bool:
    """Whether ``annotation`` is ``list[dict[...]]``, or that or None."""
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    if typing.get_origin(annotation) in (types.UnionType, typing.Union) and len(args) == 1:
        annotation = args[0]
    items = typing.get_args(annotation)
    return typing.get_origin(annotation) is list and typing.get_origin(items[0]) is dict


def _literal_values(annotation: Any) -> tuple[Any, ...] | None:
    """The values a ``Literal`` of strings (or that or None) allows; None for any other
    annotation."""
    args = typing.get_args(annotation)
    if typing.get_origin(annotation) in (types.UnionType, typing.Union):
        literal = [a for a in args if a is not type(None)]
        if len(literal) != 1 or typing.get_origin(literal[0]) is not typing.Literal:
            return None
        return (*(_literal_values(literal[0]) or ()), None)
    if typing.get_origin(annotation) is typing.Literal and all(type(a) is str for a in args):
        return args
    return None


class _Absent:
    """A field the row does not hold (any field but the required ones may be absent)."""


def _make_well_typed() -> Callable[[Mapping[str, Any]], bool]:
    """:func:`well_typed`, generated from :class:`SampleResult`'s fields (one expression
    over the row, as :func:`is_exact` is; the model is the only definition of the types)."""
    names: dict[str, Any] = {"_ABSENT": _Absent()}
    checks = [
        f"{name!r} in row" for name, f in SampleResult.model_fields.items() if f.is_required()
    ]
    for i, (name, f) in enumerate(SampleResult.model_fields.items()):
        kinds = _json_types(f.annotation)
        if kinds is not None:
            names[f"_K{i}"] = frozenset((*kinds, _Absent))
            checks.append(f"type(get({name!r}, _ABSENT)) in _K{i}")
        values = _literal_values(f.annotation)
        if values is not None:  # state: one of its words, never any string
            names[f"_V{i}"] = frozenset((*values, names["_ABSENT"]))
            checks.append(f"get({name!r}, _ABSENT) in _V{i}")
        if _list_of_dicts(f.annotation):  # tool_calls: each item an object too
            checks.append(f"all(type(x) is dict for x in get({name!r}) or ())")
    source = "def well_typed(row):\n    get = row.get\n    return (\n        "
    exec(source + "\n        and ".join(checks) + "\n    )\n", names)  # the fast path
    return names["well_typed"]


#: Whether a decoded row holds :class:`SampleResult`'s required fields and every one of
#: its fields it holds has a JSON type that field takes (an int is a float; a bool is
#: neither; tool calls each an object; a state is one of its three words):
#: ``"score": "1"``, ``"epoch": "one"``, ``"sample_id": 123``, ``"error": [1]`` or
#: ``"state": "passed"`` make a row malformed, which every reader skips
#: (:func:`parse_row`)
well_typed: Callable[[Mapping[str, Any]], bool] = _make_well_typed()


def parse_row(line: bytes | str) -> dict[str, Any] | None:
    """One ``results.jsonl`` line as a dict, or None for a torn or malformed line (a line
    without its newline, invalid JSON, JSON nested past Python's recursion limit, JSON
    that is not an object, or a row that is not :func:`well_typed`). Invalid UTF-8 is
    replaced, never raised."""
    row = _parse_object(line)
    return row if row is not None and well_typed(row) else None


def _parse_object(line: bytes | str) -> dict[str, Any] | None:
    """One JSON-lines line as a dict, or None for a torn or malformed line (see
    :func:`parse_row`, less the row's types)."""
    if isinstance(line, bytes):
        if not line.endswith(b"\n"):
            return None  # torn write
        line = line.decode("utf-8", errors="replace")
    elif not line.endswith("\n"):
        return None
    try:
        row = json.loads(line)
    except (ValueError, RecursionError):  # RecursionError: nested past the limit
        return None
    return row if isinstance(row, dict) else None


def open_run_file(path: Path) -> IO[bytes]:
    """A run directory's file, opened for reading only if it is a regular file: a FIFO
    in its place would block the reader until some writer came (a viewer's page, a diff,
    a gate hung for good), a device could be read forever.

    Raises:
        FileNotFoundError, NotADirectoryError: there is no such file.
        UsageError: it is not a regular file, or it cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a FIFO opens without a writer
    except (FileNotFoundError, NotADirectoryError):
        raise
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    if not stat.S_ISREG(os.fstat(fd).st_mode):
        os.close(fd)
        raise UsageError(f"{path}: not a regular file (a FIFO, device or directory)")
    return os.fdopen(fd, "rb")


def _open_results(run_dir: str | Path) -> IO[bytes]:
    try:
        return open_run_file(Path(run_dir) / RESULTS_FILE)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(not_a_run_dir(run_dir, RESULTS_FILE)) from None


def not_a_run_dir(run_dir: str | Path, missing: str) -> str:
    """The one-line refusal for a path given as a run directory that is none (its file
    ``missing`` absent): a path that does not exist says so; a results root (a directory
    of run directories) names one of its runs and ``gradetrail runs``; else the file the
    directory lacks."""
    path = Path(run_dir)
    if not path.exists():
        return f"{run_dir}: no such run directory; gradetrail runs lists the run directories"
    try:
        runs = sorted(
            child.name
            for child in itertools.islice(path.iterdir(), 10_000)
            if (child / MANIFEST_FILE).is_file()
        )
    except OSError:
        runs = []
    if runs:
        return (
            f"{run_dir}: a results root, not a run directory; name one of its {len(runs)} "
            f"runs, e.g. {path / runs[0]} (gradetrail runs {run_dir} lists them)"
        )
    return f"{run_dir}: not a run directory (no {missing})"


def iter_result_spans(
    run_dir: str | Path, start: int = 0
) -> Iterator[tuple[int, int, dict[str, Any] | None]]:
    """Yield ``(offset, length, row)`` for each line of ``results.jsonl`` from byte
    ``start``: where the line is in the file (bytes, its newline included) and the row as
    a dict, or None for a malformed line (one over :data:`MAX_LINE_BYTES` is never held
    in memory whole). A torn last line (a line still being written, or
    left by a killed process) ends the iteration without being yielded, so a caller can
    resume from the last span's end once it is complete.

    Raises:
        UsageError: the directory has no results file.
    """
    with _open_results(run_dir) as f:
        f.seek(start)
        offset = start
        for length, line in _bounded_lines(f):
            yield offset, length, parse_row(line) if line is not None else None
            offset += length


def _bounded_lines(f: IO[bytes]) -> Iterator[tuple[int, bytes | None]]:
    """``(length, line)`` for each complete line of ``f`` from where it is: the line with
    its newline, or None for a line over :data:`MAX_LINE_BYTES`, which is measured in
    1 MB pieces and never held (a line over 1 MB is measured first, then read whole if
    it is within the bound). A torn last line (no newline yet) ends the iteration."""
    while line := f.readline(_PIECE_BYTES):
        if line.endswith(b"\n"):
            yield len(line), line
            continue
        start, length = f.tell() - len(line), len(line)
        del line
        while piece := f.readline(_PIECE_BYTES):
            length += len(piece)
            if piece.endswith(b"\n"):
                break
        else:
            return  # torn write
        if length > MAX_LINE_BYTES:
            yield length, None
            continue
        f.seek(start)
        yield length, f.read(length)


def count_result_lines(run_dir: str | Path, start: int = 0) -> int:
    """Complete lines in ``results.jsonl`` (rows, malformed ones included), counted
    without parsing: about 0.1 s for 100,000 rows; from byte ``start`` on, the ends of
    lines after it (see :func:`count_result_lines_from`).

    Raises:
        UsageError: the directory has no results file.
    """
    return count_result_lines_from(run_dir, start)[0]


def count_result_lines_from(run_dir: str | Path, start: int = 0) -> tuple[int, int]:
    """``(lines, end)``: the line ends in ``results.jsonl`` from byte ``start`` to the end
    of the file as read, and the offset just past its last line end (``start`` when there
    is none): counting again from ``end`` later counts only the rows appended since, as
    a live run's poll does.

    Raises:
        UsageError: the directory has no results file.
    """
    count, end, at = 0, start, start
    with _open_results(run_dir) as f:
        f.seek(start)
        while chunk := f.read(1 << 20):
            found = chunk.count(b"\n")
            if found:
                count += found
                end = at + chunk.rindex(b"\n") + 1
            at += len(chunk)
    return count, end


def read_row_at(run_dir: str | Path, offset: int, length: int) -> dict[str, Any] | None:
    """The row at ``offset`` (``length`` bytes) of ``results.jsonl``, as found by
    :func:`iter_result_spans`; None if those bytes are no longer one whole row (the file
    was rewritten since).

    Raises:
        UsageError: the directory has no results file.
    """
    before = 1 if offset > 0 else 0
    with _open_results(run_dir) as f:
        f.seek(offset - before)
        data = f.read(length + before)
    if len(data) != length + before or (before and data[:1] != b"\n"):
        return None  # shorter now, or no longer at the start of a line
    return parse_row(data[before:])


def iter_results(run_dir: str | Path) -> Iterator[dict[str, Any]]:
    """Yield the rows of a run directory's ``results.jsonl`` as dicts.

    A torn last line (from a killed process) is skipped, never merged into another row;
    a malformed line is skipped.

    Raises:
        UsageError: the directory has no results file.
    """
    for _, _, row in iter_result_spans(run_dir):
        if row is not None:
            yield row


def read_results(run_dir: str | Path) -> list[dict[str, Any]]:
    """All rows of a run as dicts (see :class:`SampleResult` for the fields)."""
    return list(iter_results(run_dir))


def read_samples(run_dir: str | Path) -> list[dict[str, Any]]:
    """A run's ``samples.jsonl`` as dicts (see :class:`SampleScore`), in input order; a
    malformed line (not a JSON object, or over :data:`MAX_LINE_BYTES`) is skipped, and so
    is a last line without its newline.

    Raises:
        UsageError: the directory has no samples file (a run from before reducers, or one
            killed before it ended).
    """
    path = Path(run_dir) / SAMPLES_FILE
    try:
        f = open_run_file(path)
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(f"{run_dir}: no {SAMPLES_FILE}; re-run the spec to write it") from None
    with f:
        rows = (_parse_object(line) for _, line in _bounded_lines(f) if line and line.strip())
        return [row for row in rows if row is not None]


def read_manifest(run_dir: str | Path, *, as_written: bool = False) -> dict[str, Any]:
    """A run's ``manifest.json`` as a dict (see :class:`gradetrail.rundir.manifest.Manifest`).

    A manifest still saying ``running`` whose process is gone reads ``"status": "killed"``
    (:func:`gradetrail.rundir.layout.run_status`, the one liveness check), unless ``as_written``.

    Raises:
        UsageError: missing or unreadable manifest, or one over :data:`MAX_MANIFEST_BYTES`.
    """
    path = Path(run_dir) / MANIFEST_FILE
    try:
        with open_run_file(path) as f:
            data = f.read(MAX_MANIFEST_BYTES + 1)
        if len(data) > MAX_MANIFEST_BYTES:
            raise UsageError(
                f"{path}: larger than {MAX_MANIFEST_BYTES >> 20} MB; not a gradetrail manifest"
            )
        manifest = json.loads(data.decode("utf-8"))
    except (FileNotFoundError, NotADirectoryError):
        raise UsageError(not_a_run_dir(run_dir, MANIFEST_FILE)) from None
    except ValueError as exc:
        raise UsageError(f"{path}: not valid JSON ({exc})") from None
    except RecursionError:
        raise UsageError(f"{path}: not a gradetrail manifest (nested too deeply)") from None
    except OSError as exc:
        raise UsageError(f"{path}: cannot read ({exc.strerror})") from None
    if not isinstance(manifest, dict):
        raise UsageError(f"{path}: not a gradetrail manifest (a JSON object is expected)")
    if not as_written and manifest.get("status") == "running":
        manifest["status"] = run_status(run_dir, "running")
    return manifest


def list_runs(results_root: str | Path = "results") -> list[tuple[Path, dict[str, Any]]]:
    """The run directories under ``results_root`` with their manifests, newest first.

    Returns:
        ``(run_dir, manifest)`` pairs; directories without a readable manifest are skipped.
    """
    root = Path(results_root)
    if not root.is_dir():
        return []
    runs = []
    for path in root.iterdir():
        if path.is_dir() and not path.is_symlink():
            try:
                runs.append((path, read_manifest(path)))
            except UsageError:
                continue
    runs.sort(key=lambda run: str(run[1].get("started_at", "")), reverse=True)
    return runs
