"""The run's structured log: ``log.jsonl`` in the run directory, one JSON object a line.

Lines are structlog event dicts as ``JSONRenderer`` writes them: ``ts`` (ISO 8601, UTC),
``level`` and ``event`` first, then the event's fields. They are rendered here with the
standard library's JSON encoder rather than through structlog's logger: importing
structlog costs ~20-50 ms and its logger ~12-20 us a line, measured against ~6 us here,
and a warm re-score of GSM8K writes 1,319 lines in about a tenth of a second. ``-v``
imports structlog and shows the same event dicts on stderr through its
``ConsoleRenderer`` (colours on a terminal), text from data stripped of escape
sequences. Events:

- ``run_start``: run directory, identity hash, rows to produce, pid, cache path.
- ``provider_call`` and ``judge_call``: one per attempt, and one per request served from
  the cache: ``sample_id``, ``epoch``, ``model`` (requested), ``served_model``,
  ``latency_ms``, ``input_tokens``, ``output_tokens``, ``cached_input_tokens``,
  ``cost_usd``, ``cached``, ``attempt`` (1, 2, ... for this request this run; 0 on a cache
  hit), ``outcome`` (``ok`` or ``error``), and on error ``error`` (the error class, e.g.
  ``RateLimited``), ``status`` and ``message``, plus ``retry_in_s`` (the backoff before
  the next attempt) when the attempt was retried. ``latency_ms`` is the attempt's own
  latency (the original call's on a cache hit). Each failed attempt is written the moment
  it ends, before its backoff, so its ``ts`` is its own end time; a final line with
  ``latency_ms`` null records a request stopped by the sample ceiling between attempts.
  A turn of an agent loop also has ``turn`` (1-based), the number of the model turn it
  is (passed by the loop with each call).
- ``interrupt`` (a Ctrl-C or SIGTERM arrived, with ``in_flight``), ``run_end`` (status,
  counts, wall time).
- ``function_held_loop`` (level ``warning``, once a run): a python provider's async
  function held its event loop without awaiting (``function``, ``sample_id``,
  ``held_s`` in seconds, ``message``); see :mod:`gradetrail.providers.python`.

Each line is written whole. When the log cannot be written (a full disk), it stops and
says why in ``write_error``; the run goes on, and every response is still cached. A call
made this run (paid for) and every other event are flushed at once, so ``tail -f``
follows a run and a killed process leaves them all;
cache-hit lines are buffered a few KB at a time. Each ``gradetrail run`` starts a fresh
``log.jsonl``; the previous invocations' logs are kept as ``log.1.jsonl`` (the latest) to
``log.3.jsonl``, so a killed run's log survives its resume. JSON escapes every control
character, so the file can be printed or tailed safely.

The run's one :class:`RunLog` is built by the runner and passed to what logs (the
calls of the model and of judges, :class:`~gradetrail.executors.calls.Calls`; providers
through their event sink): there is no global "current log".
"""

from __future__ import annotations

import contextlib
import json
import math
import os
import sys
import time
from collections.abc import Callable
from json.encoder import encode_basestring_ascii
from typing import IO, Any, Literal

from pydantic import BaseModel, ConfigDict, Field

from gradetrail._util.events import Events, Level
from gradetrail.rundir.layout import RunDir
from gradetrail.rundir.results import LOG_FILE

__all__ = ["LOG_FILE", "LOG_KEEP", "CallEvent", "RunLog", "rotated_names"]

#: previous invocations' logs kept beside log.jsonl (log.1.jsonl ... log.3.jsonl)
LOG_KEEP = 3
_MESSAGE_CHARS = 500


def rotated_names(keep: int = LOG_KEEP) -> tuple[str, ...]:
    """``log.1.jsonl`` ... the names older logs are kept under."""
    stem, dot, ext = LOG_FILE.partition(".")
    return tuple(f"{stem}.{i}{dot}{ext}" for i in range(1, keep + 1))


class CallEvent(BaseModel):
    """One ``provider_call`` / ``judge_call`` line of ``log.jsonl``, after ``ts``,
    ``level`` and ``event``: its fields, in the order they are written. The one
    definition of the line: :meth:`RunLog.call` writes a dict in this order, and the fast
    path of :meth:`RunLog.served` is generated from it (:data:`_SERVED_LINE`)."""

    model_config = ConfigDict(defer_build=True)  # a run reads its fields, never validates

    sample_id: str = Field(description="The sample the call was for.")
    epoch: int = Field(description="The row's epoch (a judge's: its sample number).")
    model: str = Field(description="The requested model.")
    served_model: str | None = Field(description="The model the provider says answered.")
    latency_ms: float | None = Field(description="The attempt's own latency, milliseconds.")
    input_tokens: int = Field(description="Prompt tokens, cached ones included.")
    output_tokens: int = Field(description="Completion tokens.")
    cached_input_tokens: int = Field(description="Prompt tokens read from the cache.")
    cost_usd: float | None = Field(description="USD, or null when the price is unknown.")
    cached: bool = Field(description="Served from gradetrail's cache (nothing paid).")
    attempt: int = Field(description="1, 2, ... for this request this run; 0 on a hit.")
    outcome: Literal["ok", "error"] = Field(description="How the attempt ended.")
    turn: int | None = Field(None, description="An agent loop's turn (1-based), if any.")
    error: str | None = Field(None, description="On error: the error class.")
    status: int | None = Field(None, description="On error: the HTTP status, if any.")
    message: str | None = Field(None, description="On error: its message, cut to 500.")
    retry_in_s: float | None = Field(None, description="Backoff before the next attempt.")


#: the fields every call line has, in order (those of CallEvent without a default)
_CALL_FIELDS = tuple(n for n, f in CallEvent.model_fields.items() if f.is_required())
#: the fields of a served line that a run fills in once for each (event, model, served
#: model) it serves (:meth:`RunLog._served_line`); the others are filled in a line
_NAMED = ("model", "served_model", "outcome")
#: a served line, newline included, with a ``%s`` slot for ``ts``, ``event`` and each
#: field's JSON in CallEvent's order: generated from it, never written by hand; filled by
#: position, a third faster than ``str.format`` with named slots (a test holds the line
#: equal to the general encoder's); ``%`` in it is doubled where a slot of
#: :data:`_NAMED` is filled first
_SERVED_LINE = (
    '{"ts":"%%s","level":"info","event":%s,'
    + ",".join(f'"{name}":%s' if name in _NAMED else f'"{name}":%%s' for name in _CALL_FIELDS)
    + "}\n"
)
_second: list[Any] = [-1, ""]
_encode = json.JSONEncoder(separators=(",", ":"), default=repr).encode


class _NotPlain(Exception):
    """A value :func:`_plain` does not encode (the line takes the general encoder)."""


def _plain(value: Any) -> str:
    """The JSON of a str, None, bool, int or float exactly as :data:`_encode` writes it
    (ASCII, NaN and infinities as JavaScript names); other types raise _NotPlain."""
    kind = type(value)
    if kind is str:
        return encode_basestring_ascii(value)
    if value is None:
        return "null"
    if kind is bool:
        return "true" if value else "false"
    if kind is int:
        return int.__repr__(value)
    if kind is float:
        if value != value:
            return "NaN"
        if value in (math.inf, -math.inf):
            return "Infinity" if value > 0 else "-Infinity"
        return float.__repr__(value)
    raise _NotPlain


def _now_iso() -> str:
    """The current UTC time, ISO 8601 with microseconds (the date part formatted once a
    second: this runs for every call logged)."""
    now = time.time()
    sec = int(now)
    if sec != _second[0]:
        _second[:] = [sec, time.strftime("%Y-%m-%dT%H:%M:%S.", time.gmtime(sec)) + "%06dZ"]
    return _second[1] % ((now - sec) * 1e6)  # %d truncates, as int() does


def _console(stream: IO[str]) -> Callable[[dict[str, Any]], str]:
    """structlog's ConsoleRenderer for ``-v`` (colours only on a terminal), fed event dicts
    whose text is stripped of escape sequences first."""
    import structlog

    from gradetrail._util.terminal import one_line

    try:
        colors = stream.isatty()
    except (AttributeError, ValueError):
        colors = False
    renderer = structlog.dev.ConsoleRenderer(colors=colors, timestamp_key="ts")

    def render(event: dict[str, Any]) -> str:
        safe = {k: one_line(v) if isinstance(v, str) else v for k, v in event.items()}
        return renderer(None, safe["level"], safe)

    return render


class RunLog:
    """The structured log of one run (see the module docstring for the events).

    Args:
        run_dir: the open run directory; ``log.jsonl`` is rotated and opened in it.
        echo: also show every event on stderr (``gradetrail run -v``).

    Raises:
        RunError: ``log.jsonl`` (or a rotated log) is a symlink or cannot be written.
    """

    def __init__(self, run_dir: RunDir, *, echo: bool = False) -> None:
        run_dir.rotate(LOG_FILE, rotated_names())
        self._file = run_dir.open_text(LOG_FILE, append=True)
        self.path = run_dir.path / LOG_FILE
        self._echo = _console(sys.stderr) if echo else None
        #: why the log stopped being written (a full disk), or None; the run goes on
        self.write_error: str | None = None
        self._lines: dict[tuple[str, str, Any], str] = {}  # see _served_line
        self._followed: list[Events] = []

    def _emit(self, level: str, event: str, fields: dict[str, Any], flush: bool) -> None:
        record = {"ts": _now_iso(), "level": level, "event": event, **fields}
        self._write(_encode(record) + "\n", flush)
        if self._echo is not None:
            self._show(record)

    def _write(self, line: str, flush: bool) -> None:
        """Write one line (its newline included)."""
        if self.write_error is None:
            try:
                self._file.write(line)
                if flush:
                    self._file.flush()
            except OSError as exc:  # a full disk: the log stops, the run does not
                self.write_error = f"{self.path}: cannot write ({exc.strerror})"
                self._drop()

    def _show(self, record: dict[str, Any]) -> None:
        """Echo one event on stderr (``-v``)."""
        assert self._echo is not None
        # sys.stderr looked up per line: a live progress bar that redirects it prints the
        # line above the bar
        try:
            print(self._echo(record), file=sys.stderr, flush=True)
        except (OSError, ValueError):  # stderr closed (e.g. piped into head): stop echoing
            self._echo = None

    def __enter__(self) -> RunLog:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def follow(self, events: Events) -> None:
        """Write what ``events`` (a provider's outbox) holds and receives until this log
        closes (see :mod:`gradetrail._util.events`)."""
        events.follow(self._forwarded)
        self._followed.append(events)

    def _forwarded(self, level: Level, event: str, fields: dict[str, Any]) -> None:
        self._emit(level, event, fields, flush=True)

    def event(self, event: str, **fields: Any) -> None:
        """Log one event (level info) with JSON-ready fields; written through at once."""
        self._emit("info", event, fields, flush=True)

    def warning(self, event: str, **fields: Any) -> None:
        """Log one event at level ``warning`` (something the user should fix, that does
        not stop the run) with JSON-ready fields; written through at once."""
        self._emit("warning", event, fields, flush=True)

    def call(
        self,
        kind: Literal["provider", "judge"],
        *,
        sample_id: str,
        epoch: int,
        model: str,
        cached: bool,
        attempt: int,
        outcome: Literal["ok", "error"],
        latency_ms: float | None,
        served_model: str | None = None,
        input_tokens: int = 0,
        output_tokens: int = 0,
        cached_input_tokens: int = 0,
        cost_usd: float | None = None,
        error: str | None = None,
        status: int | None = None,
        message: str | None = None,
        retry_in_s: float | None = None,
        turn: int | None = None,
    ) -> None:
        """Log one provider or judge call (event ``provider_call`` / ``judge_call``; level
        warning on error). ``latency_ms`` in milliseconds; ``message`` is cut to 500
        characters; ``retry_in_s`` (seconds) marks an attempt that is retried; ``turn`` is the
        agent loop's turn number (1-based), None outside one.

        A call made this run (``cached=False``) is written through at once, so a killed
        run's log shows every call it paid for; cache hits are buffered (a few KB) so a
        warm re-score does not pay a write per line."""
        values = {
            "sample_id": sample_id,
            "epoch": epoch,
            "model": model,
            "served_model": served_model,
            "latency_ms": None if latency_ms is None else round(latency_ms, 1),
            "input_tokens": input_tokens,
            "output_tokens": output_tokens,
            "cached_input_tokens": cached_input_tokens,
            "cost_usd": cost_usd,
            "cached": cached,
            "attempt": attempt,
            "outcome": outcome,
        }
        fields: dict[str, Any] = {name: values[name] for name in _CALL_FIELDS}
        if turn is not None:
            fields["turn"] = turn
        if outcome == "error":
            fields["error"] = error
            fields["status"] = status
            fields["message"] = None if message is None else message[:_MESSAGE_CHARS]
            if retry_in_s is not None:
                fields["retry_in_s"] = round(retry_in_s, 3)
            self._emit("warning", f"{kind}_call", fields, flush=True)
        else:
            self._emit("info", f"{kind}_call", fields, flush=not cached)

    def _served_line(self, kind: str, model: str, served_model: Any) -> str:
        """:data:`_SERVED_LINE` with the event name, model and served model filled in:
        made once for each (a run serves a few models, a warm run one line a row).

        Raises:
            _NotPlain: a served model that is not a str or None.
        """
        names = (kind, model, served_model)
        found = self._lines.get(names)
        if found is None:
            filled = (f"{kind}_call", model, served_model, "ok")
            found = _SERVED_LINE % tuple(_plain(v).replace("%", "%%") for v in filled)
            if len(self._lines) < 256:  # a provider that names every response anew
                self._lines[names] = found
        return found

    def served(
        self,
        kind: Literal["provider", "judge"],
        sample_id: str,
        epoch: int,
        model: str,
        response: Any,
        cached: bool,
        attempt: int,
        turn: int | None = None,
    ) -> None:
        """Log one successful call, as :meth:`call` with outcome ``ok`` and the served
        model, latency, tokens and cost of ``response`` (a
        :class:`~gradetrail.providers.base.Response`). The line is written from those
        values directly: the same bytes as the general encoder at a fraction of its cost
        (a warm run writes one a row); values of the types a response holds (a str id,
        int tokens, finite floats) are written as ``%s`` writes them, others through
        :func:`_plain`."""
        latency_ms = response.latency_s * 1000.0
        tokens, cost = response.total_input_tokens, response.cost_usd
        out, cached_in = response.output_tokens, response.cached_input_tokens
        if self._echo is None and turn is None:  # an agent turn adds its number
            latency = round(latency_ms, 1)
            try:
                line = self._served_line(kind, model, response.served_model)
                if (  # the common types, whose str() is their JSON: one test for all
                    type(sample_id) is str
                    and type(epoch) is type(tokens) is type(out) is int
                    and type(cached_in) is type(attempt) is int
                    and type(latency) is float
                    and latency - latency == 0.0  # finite
                    and (cost is None or (type(cost) is float and cost - cost == 0.0))
                    and type(cached) is bool
                ):
                    text = line % (
                        _now_iso(),
                        encode_basestring_ascii(sample_id),
                        epoch,
                        latency,
                        tokens,
                        out,
                        cached_in,
                        "null" if cost is None else cost,
                        "true" if cached else "false",
                        attempt,
                    )
                else:
                    values = (sample_id, epoch, latency, tokens, out, cached_in, cost, cached)
                    text = line % (_now_iso(), *map(_plain, values), _plain(attempt))
            except _NotPlain:
                pass
            else:
                self._write(text, flush=not cached)
                return
        self.call(
            kind,
            sample_id=sample_id,
            epoch=epoch,
            model=model,
            served_model=response.served_model,
            latency_ms=latency_ms,
            input_tokens=tokens,
            output_tokens=out,
            cached_input_tokens=cached_in,
            cost_usd=cost,
            cached=cached,
            attempt=attempt,
            outcome="ok",
            turn=turn,
        )

    def close(self) -> None:
        """Close the file (idempotent; a failed last flush is kept in ``write_error``) and
        stop following the providers' events."""
        for events in self._followed:
            events.stop()
        self._followed.clear()
        if not self._file.closed:
            try:
                self._file.close()
            except OSError as exc:
                self.write_error = self.write_error or f"{self.path}: cannot write ({exc.strerror})"
                self._drop()

    def _drop(self) -> None:
        """Close the file without flushing what it still buffers (it cannot be written)."""
        with contextlib.suppress(OSError):
            os.close(self._file.fileno())
        with contextlib.suppress(OSError, ValueError):
            self._file.close()
