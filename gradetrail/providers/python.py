"""The ``python`` provider: evaluate your own application through the same pipeline.

``model.function: "package.module:function"`` names a callable, sync or async (a
coroutine function, or an object with an ``async def __call__``), that takes
the rendered :class:`~gradetrail.providers.base.Request` and returns the response text
(a ``str``), or a :class:`~gradetrail.providers.base.Response` for full detail (its
``tool_calls``, ``{"id", "name", "arguments"}`` dicts, are the application's tool calls,
as a model's would be). A function with a second parameter (``answer(request, row)``,
or a parameter named ``row``) also receives the sample's dataset row, a ``dict`` of its
fields, so an application under test can use its structured inputs; the row's SHA-256
then enters each request's cache key. One-argument functions work as before. The module
is imported with the spec's directory and the working directory on ``sys.path``.

The function never runs on the run's own event loop (:mod:`gradetrail._util.userloop`), so
whatever it does, run.timeout_s, the sample ceiling, Ctrl-C and SIGTERM keep working: a
sync function runs in a daemon thread; an async one on an event loop of its own, shared
by its calls. An async function that holds that loop for over ``BLOCK_LIMIT_S`` (1 s)
without awaiting (``time.sleep``, ``requests.get``, CPU-bound work or a heavy first
``import`` in an ``async def``) is not failed for it: the call runs to its end, bounded
by run.timeout_s and the sample ceiling like any other. The first time a function does
so in a run, a ``function_held_loop`` warning (level ``warning`` in log.jsonl, and one
line on stderr) names the function, the sample, how long it held the loop and the fix
(``await asyncio.sleep``, ``await asyncio.to_thread(...)``, or a plain ``def``). Calls
that arrive meanwhile run on a fresh loop beside it, and calls queued on the held loop
that have not started move there (no error, no retry used); calls already started on it
wait for it. A call still holding its loop when its attempt times out is a permanent
``function_blocked`` error naming the function and the fix (a retry would only hold
another loop).

To signal a transient failure that should be retried, raise a
:class:`~gradetrail.errors.ProviderError` subclass such as ``ServerError``; any other
exception is recorded as a permanent ``provider_error``.

Caching: a response is keyed on the rendered request (not the sample id, as for a model)
and on the SHA-256 of the function's module file (and of the file its code is defined in,
through partials, bound methods and ``functools.wraps`` decorators), so editing that code
re-runs every sample; a module imported before in this process is executed again when its
file changed since, so a second run in one process (a notebook) runs the code its key
hashes. Edits to code the module imports are not seen: change ``model.name`` or pass
``--no-cache`` after them.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import inspect
import math
import sys
import time
from collections.abc import Callable
from dataclasses import replace
from functools import partial
from pathlib import Path
from typing import Any

from gradetrail._util.usercode import exception_text, import_user_module
from gradetrail._util.userloop import BLOCK_LIMIT_S, Blocked, Escaped, UserLoop, in_daemon_thread
from gradetrail.conversation.messages import make_tool_call
from gradetrail.datasets import file_sha256
from gradetrail.errors import BadRequest, ProviderError, SpecError
from gradetrail.providers.base import Provider, Request, Response, app_problems

__all__ = ["PythonProvider"]


class PythonProvider(Provider):
    """Calls a user's function for every request."""

    name = "python"

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self._fn: Callable[[Request], Any] | None = None
        self._warned = False  # function_held_loop said (once a run)

    def identity(self) -> dict[str, Any]:
        """The function's import path, the SHA-256 of the module ``model.function`` names
        (``module_sha256``) and, when the function's code is defined in another file of
        the user's (imported into that module; not an installed package), that file's
        SHA-256 too (``source_sha256``). A ``functools.partial``, a bound method, a
        callable object and a decorated function (``functools.wraps``) are followed to
        the code they run, so editing it misses the cache (and changes the run's
        identity) whatever decorator or wrapper is around it. Edits elsewhere (other
        modules, data, a remote service) are invisible: change ``model.name`` or run with
        ``--no-cache`` after them."""
        fn = self._resolve()
        out: dict[str, Any] = {"function": self.model.function}
        named = getattr(
            sys.modules.get((self.model.function or "").partition(":")[0]), "__file__", None
        )
        if named and Path(named).is_file():
            out["module_sha256"] = file_sha256(Path(named))
        source = _source_file(fn)
        if source is not None and (named is None or source != Path(named).resolve()):
            out["source_sha256"] = file_sha256(source)
        return out

    def shipped_modules(self) -> list[Path]:
        """The function's top-level package directory (or its module file, for a
        top-level module), and every other top-level module or package imported so far
        from the same directory (``helpers.py`` beside ``app.py``, which ``app`` imports),
        unless installed (under ``sys.prefix``): what Ray workers need to import the
        function on a node that cannot see this machine's files. gradetrail itself is
        never shipped (every node has it installed)."""
        fn = self._resolve()
        top_name = fn.__module__.partition(".")[0]
        where = _local_code(sys.modules.get(top_name))
        if where is None:
            return []
        shipped = {where}
        for name, module in list(sys.modules.items()):
            if "." in name or name in (top_name, "__main__", "gradetrail"):
                continue
            path = _local_code(module)
            if path is not None and path.parent == where.parent:
                shipped.add(path)
        return sorted(shipped)

    def wants_row(self) -> bool:
        """True when the function takes the sample's row too: ``answer(request, row)`` (a
        second positional parameter, or one named ``row``)."""
        return _row_mode(self._resolve()) is not None

    def check_ready(self) -> None:
        """Import the function now, so a typo stops the run before any sample.

        Raises:
            SpecError: the module or attribute cannot be imported, is not callable, or
                cannot be called as one of the accepted signatures (:data:`ACCEPTED`).
        """
        self._resolve()

    def _resolve(self) -> Callable[[Request], Any]:
        if self._fn is not None:
            return self._fn
        target = self.model.function or ""
        module_name, _, attr = target.partition(":")
        module = import_user_module(module_name, self.base_dir, "model.function", current=True)
        missing = object()
        fn = getattr(module, attr, missing)
        if fn is missing:
            have = sorted(n for n, v in vars(module).items() if callable(v) and n[0] != "_")
            raise SpecError(
                f"model.function {target!r}: {module_name!r} has no {attr!r} (its callables: "
                f"{', '.join(have[:10]) or 'none'}); name one of them"
            )
        if not callable(fn):
            raise SpecError(
                f"model.function {target!r}: {module_name!r} has no callable {attr!r} "
                f"(it is {type(fn).__name__}); {ACCEPTED}"
            )
        problem = _signature_problem(fn)
        if problem is not None:
            raise SpecError(f"model.function {target!r} {problem}; {ACCEPTED}")
        self._fn = fn
        return fn

    async def complete(self, request: Request) -> Response:
        """Call the function; wrap a plain string as a Response.

        Raises:
            ProviderError: what the function raised (a ProviderError passes through; any
                other exception becomes a permanent BadRequest naming its type).
            asyncio.CancelledError: the call was cancelled (its attempt timed out, or the
                run was aborted); with the permanent ``function_blocked`` BadRequest as
                its argument when the async function was holding its event loop past
                BLOCK_LIMIT_S (the retry loop records that as the attempt's error).
        """
        fn = self._resolve()
        mode = _row_mode(fn)
        request = copy.deepcopy(request)  # the app's own: its edits reach no row, key or retry
        args: tuple[Any, ...] = (request,)
        kwargs: dict[str, Any] = {}
        if mode == "positional":
            args = (request, dict(request.row or {}))
        elif mode == "keyword":
            kwargs = {"row": dict(request.row or {})}
        start = time.perf_counter()
        function = self.model.function or ""
        try:
            if _is_async(fn):
                held = partial(self._held, function, request.sample_id)
                out = await _FUNCTION_LOOP.run(
                    fn(*args, **kwargs), label=request.sample_id, on_held=held
                )
            else:
                out = await in_daemon_thread(partial(_call, fn, args, kwargs), request)
                if inspect.iscoroutine(out):  # a plain def around an async def
                    held = partial(self._held, function, request.sample_id)
                    out = await _FUNCTION_LOOP.run(out, label=request.sample_id, on_held=held)
        except ProviderError:
            raise
        except asyncio.CancelledError as exc:  # its timeout, or the run's abort
            if exc.args and isinstance(exc.args[0], Blocked):
                raise asyncio.CancelledError(_blocked(function, exc.args[0])) from None
            raise
        except Escaped as exc:  # the function's own SystemExit, GeneratorExit...
            said = exception_text(exc.original)
            message = said if said != exc.kind else f"the function raised {exc.kind}"
            raise BadRequest(message, error_type="function_error") from None
        except Exception as exc:  # the user's code: record, never crash the run
            raise BadRequest(exception_text(exc), error_type="function_error") from None
        latency = time.perf_counter() - start
        if isinstance(out, Response):
            out = _checked(out)
            # latency the app did not measure itself: the call's, as for a model
            return out if out.latency_s else replace(out, latency_s=latency)
        if not isinstance(out, str):
            raise BadRequest(
                f"model.function returned {type(out).__name__}; return str or Response",
                error_type="function_error",
            )
        return Response(text=out, served_model=self.model.name, latency_s=latency)

    def _held(self, function: str, sample_id: str, held_s: float, holding: bool) -> None:
        """The async function held its event loop past BLOCK_LIMIT_S on ``sample_id``
        (``held_s`` seconds, so far when ``holding``): the first time in this run (this
        provider), a ``function_held_loop`` warning in the run log and one line on
        stderr."""
        if self._warned:
            return
        self._warned = True
        took = f"held its event loop for {held_s:.1f} s"
        if holding:
            took = f"has {took} so far"
        message = (
            f"model.function {function!r} {took} without awaiting in sample {sample_id!r} "
            f"{_FIX}. Calls that arrive meanwhile run on a fresh event loop beside it, "
            "without its async clients; said once a run"
        )
        self.events.emit(
            "function_held_loop",
            "warning",
            function=function,
            sample_id=sample_id,
            held_s=round(held_s, 3),
            message=message,
        )
        # sys.stderr looked up now: a live progress display that redirects it shows the
        # line above itself
        with contextlib.suppress(OSError, ValueError):  # stderr closed
            print(f"warning: {message}", file=sys.stderr, flush=True)


#: the event loop async functions run on, one for the process while it is healthy (so a
#: module-level async client serves every call), never the run's own loop; replaced for
#: the calls after one that holds it past BLOCK_LIMIT_S (a shorter hold only makes calls
#: wait)
_FUNCTION_LOOP = UserLoop("gradetrail-async-function", held_s=BLOCK_LIMIT_S)

#: what a function that holds its event loop does, and what to do instead
_FIX = (
    "(time.sleep, a blocking client or CPU-bound work in an async def); use await "
    "asyncio.sleep, move blocking code into await asyncio.to_thread(...), or make it a "
    "plain def (gradetrail runs those in threads)"
)


def _blocked(function: str, held: Blocked) -> BadRequest:
    """The permanent ``function_blocked`` error of a call whose attempt timed out while
    it held its event loop without awaiting (``held.held_s`` seconds, past
    BLOCK_LIMIT_S): a retry would only hold another loop."""
    return BadRequest(
        f"model.function {function!r} held its event loop for {held.held_s:.1f} s without "
        f"awaiting in sample {held.label!r}, until its attempt timed out {_FIX}",
        error_type="function_blocked",
    )


def _source_file(fn: Any) -> Path | None:
    """The user's file holding the code ``fn`` runs: through ``functools.partial``, bound
    methods, ``__wrapped__`` (``functools.wraps``) and a callable object's class; None for
    a builtin, code without a file, or a file under ``sys.prefix`` (an installed package:
    its version is not the user's edit)."""
    for _ in range(100):  # layers of wrappers; never a cycle
        if isinstance(fn, partial):
            fn = fn.func
        elif inspect.ismethod(fn):
            fn = fn.__func__
        elif getattr(fn, "__wrapped__", None) is not None:
            fn = fn.__wrapped__
        else:
            break
    target = fn if inspect.isroutine(fn) or inspect.isclass(fn) else type(fn)
    try:
        found = inspect.getsourcefile(target)
    except TypeError:  # a builtin
        return None
    if not found or not Path(found).is_file():
        return None
    path = Path(found).resolve()
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
    return None if any(path.is_relative_to(p) for p in installed) else path


def _is_async(fn: Callable[..., Any]) -> bool:
    """``fn`` is a coroutine function, or an object whose ``__call__`` is one."""
    return inspect.iscoroutinefunction(fn) or (
        not inspect.isroutine(fn) and inspect.iscoroutinefunction(type(fn).__call__)
    )


ACCEPTED = (
    "accepted: def f(request), def f(request, row) or def f(request, *, row), "
    "a plain def or an async def, returning str or Response"
)
"""The signatures ``model.function`` may have, for the line that refuses another."""


def _signature_problem(fn: Callable[..., Any]) -> str | None:
    """Why ``fn`` cannot be called as ``model.function`` (one clause), or None when it can:
    a generator or async generator function (it yields, never returns the response), or a
    signature that cannot take ``(request)``, ``(request, row)`` or ``(request, row=row)``
    as :func:`_row_mode` chooses (three required parameters, none, a required
    keyword-only one). A callable without a signature (a builtin) is let through."""
    call = fn if inspect.isroutine(fn) else type(fn).__call__
    if inspect.isasyncgenfunction(fn) or inspect.isasyncgenfunction(call):
        return "is an async generator function (async def with yield)"
    if inspect.isgeneratorfunction(fn) or inspect.isgeneratorfunction(call):
        return "is a generator function (def with yield)"
    try:
        signature = inspect.signature(fn)
    except (TypeError, ValueError):
        return None
    mode = _row_mode(fn)
    args: tuple[Any, ...] = ("request", "row") if mode == "positional" else ("request",)
    kwargs = {"row": "row"} if mode == "keyword" else {}
    try:
        signature.bind(*args, **kwargs)
    except TypeError as exc:
        return f"has the signature {signature} ({exc})"
    return None


def _row_mode(fn: Callable[..., Any]) -> str | None:
    """How ``fn`` takes the sample's row: ``"keyword"`` (a parameter named ``row``),
    ``"positional"`` (a second positional parameter), or None (``fn(request)`` only)."""
    try:
        params = list(inspect.signature(fn).parameters.values())
    except (TypeError, ValueError):  # a builtin or a callable without a signature
        return None
    if any(p.name == "row" for p in params[1:]):
        return "keyword"
    positional = [
        p
        for p in params
        if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
    ]
    # a bare *args (a decorator's ``wrapper(*args, **kwargs)`` without functools.wraps)
    # does not ask for the row: the function it wraps may take the request alone
    return "positional" if len(positional) >= 2 else None


def _call(fn: Callable[..., Any], args: tuple[Any, ...], kwargs: dict[str, Any], _: Any) -> Any:
    return fn(*args, **kwargs)


def _seconds(value: Any) -> bool:
    """``value`` is a finite non-negative number (not a bool)."""
    return (
        isinstance(value, int | float)
        and not isinstance(value, bool)
        and math.isfinite(value)
        and value >= 0
    )


def _checked(response: Response) -> Response:
    """A Response the user's function built, checked before it is cached or scored.

    Raises:
        BadRequest: a field of the wrong type: ``text`` not a string, a stop reason or
            model name not a string (or None), a token count not a non-negative int,
            ``latency_s``/``ttft_s``/``cost_usd`` not a finite non-negative number,
            blocks or tool calls not lists of dicts, application fields not JSON.
    """
    problems = []
    if not isinstance(response.text, str):
        problems.append(f"text is {type(response.text).__name__}, not str")
    for name in ("stop_reason", "raw_stop_reason", "served_model", "refusal", "service_tier"):
        value = getattr(response, name)
        if value is not None and not isinstance(value, str):
            problems.append(f"{name} is {type(value).__name__}, not str or None")
    for name in ("latency_s", "ttft_s"):
        value = getattr(response, name)
        if (value is not None or name == "latency_s") and not _seconds(value):
            problems.append(f"{name} is {value!r}, not a non-negative number of seconds")
    if not isinstance(response.batch, bool):
        problems.append(f"batch is {response.batch!r}, not a bool")
    uses = response.server_tool_uses
    if not isinstance(uses, dict) or not all(
        isinstance(k, str) and isinstance(v, int) and not isinstance(v, bool) and v >= 0
        for k, v in uses.items()
    ):
        problems.append("server_tool_uses must be a dict of name -> non-negative int")
    for name in ("reasoning_blocks", "content_blocks"):
        blocks = getattr(response, name)
        if not isinstance(blocks, tuple | list) or not all(isinstance(b, dict) for b in blocks):
            problems.append(f"{name} must be a list of dicts")
    for name in (
        "input_tokens",
        "output_tokens",
        "cached_input_tokens",
        "cache_write_tokens",
        "cache_write_1h_tokens",
        "reasoning_tokens",
    ):
        value = getattr(response, name)
        if not isinstance(value, int) or isinstance(value, bool) or value < 0:
            problems.append(f"{name} is {value!r}, not a non-negative int")
    cost = response.cost_usd
    if cost is not None and not (
        isinstance(cost, int | float) and math.isfinite(cost) and cost >= 0
    ):
        problems.append(f"cost_usd is {cost!r}, not a non-negative number or None")
    calls = response.tool_calls
    if not isinstance(calls, tuple | list) or not all(
        isinstance(c, dict) and isinstance(c.get("name"), str) for c in calls
    ):
        problems.append("tool_calls must be a list of {id, name, arguments} dicts")
    if response.reasoning is not None and not isinstance(response.reasoning, str):
        problems.append(f"reasoning is {type(response.reasoning).__name__}, not str or None")
    problems += app_problems(response)
    if problems:
        raise BadRequest(
            f"model.function returned a bad Response: {'; '.join(problems)}",
            error_type="function_error",
        )
    if calls:  # normalized as a model's would be (arguments as an object or JSON text)
        normalized = tuple(
            make_tool_call(c.get("id") or f"call_{i}", c["name"], c.get("arguments"))
            for i, c in enumerate(calls, start=1)
        )
        response = replace(response, tool_calls=normalized)
    return response


def _local_code(module: Any) -> Path | None:
    """Where a top-level ``module`` lives when it is local code a remote worker may lack:
    its package directory or module file (resolved), or None when it has neither (a
    built-in, a namespace package over several directories) or is installed (under
    ``sys.prefix`` or ``sys.base_prefix``)."""
    paths = list(getattr(module, "__path__", None) or ())
    where = Path(paths[0] if len(paths) == 1 else getattr(module, "__file__", None) or "")
    if not where.name or not where.exists():
        return None
    where = where.resolve()
    installed = {Path(p).resolve() for p in (sys.prefix, sys.base_prefix)}
    if any(where.is_relative_to(p) for p in installed):
        return None
    return where
