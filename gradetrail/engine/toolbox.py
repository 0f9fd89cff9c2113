"""The user's Python tools module that an agent loop executes (``model.tools_module``).

A tools module names Python functions, sync or async, called with the model's arguments
as keyword arguments; what they return (a string as it is, anything else as JSON) goes
back to the model as the tool result. Without ``tools:`` in the spec, every public
function defined in the module is offered, its schema built from its signature
(pydantic) and its description from its docstring.

A result longer than ``run.max_tool_output`` bytes of UTF-8 (16 KiB by default) is cut
to its first bytes (never inside a character) and sent inside the marker Inspect AI
uses for ``max_tool_output`` ("The output of your call to NAME was too long to be
displayed. Here is a truncated version: <START_TOOL_OUTPUT> ... <END_TOOL_OUTPUT>"),
with its size and the bound added, so the model knows it saw part of it; the
transcript records what the model was sent.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail._util.jsontext import encodable
from gradetrail._util.usercode import import_user_module
from gradetrail._util.userloop import Escaped, UserLoop, in_daemon_thread
from gradetrail.conversation.tools import ToolDef, normalize_tools
from gradetrail.errors import SpecError

__all__ = ["ToolBox", "ToolOutcome"]


@dataclass(frozen=True, slots=True)
class ToolOutcome:
    """One executed tool call.

    Attributes:
        content: the text returned to the model (the error text when ``error``).
        error: ``{"kind", "message"}`` when the tool raised, was unknown, got arguments
            that were not JSON or timed out; None on success.
        latency_s: seconds the tool took.
    """

    content: str
    error: dict[str, str] | None
    latency_s: float


class ToolBox:
    """The Python functions of a tools module, imported once.

    Args:
        module_name: dotted module name (``model.tools_module``).
        base_dir: the spec's directory (put on ``sys.path``, as for the python provider).

    Raises:
        SpecError: the module cannot be imported, or raises while importing.
    """

    def __init__(self, module_name: str, base_dir: Path) -> None:
        module = import_user_module(module_name, base_dir, "model.tools_module")
        self.module = module
        self.name = module_name
        self.functions: dict[str, Callable[..., Any]] = {
            name: fn
            for name, fn in vars(module).items()
            if inspect.isfunction(fn) and fn.__module__ == module.__name__ and name[0] != "_"
        }
        source = getattr(module, "__file__", None)
        self.sha256 = (
            hashlib.sha256(Path(source).read_bytes()).hexdigest()
            if source and Path(source).is_file()
            else ""
        )

    def check(self, tools: Sequence[ToolDef]) -> None:
        """Every defined tool must be a function of the module.

        Raises:
            SpecError: naming the tools the module lacks and those it has.
        """
        missing = [t["name"] for t in tools if t["name"] not in self.functions]
        if missing:
            have = ", ".join(sorted(self.functions)) or "none"
            raise SpecError(
                f"model.tools_module: {self.name!r} has no function "
                f"{', '.join(map(repr, missing))} (it has {have}); define it or fix tools"
            )

    def definitions(self) -> tuple[ToolDef, ...]:
        """Tool definitions derived from the module's public functions: the schema from
        each signature (a pydantic model of its parameters), the description from the
        docstring's first paragraph.

        Raises:
            SpecError: a function whose parameters pydantic cannot describe.
        """
        from pydantic import create_model

        out: list[ToolDef] = []
        for name, fn in self.functions.items():
            fields: dict[str, Any] = {}
            for param in inspect.signature(fn).parameters.values():
                if param.kind in (param.VAR_POSITIONAL, param.VAR_KEYWORD):
                    continue
                annotation = Any if param.annotation is param.empty else param.annotation
                default = ... if param.default is param.empty else param.default
                fields[param.name] = (annotation, default)
            try:
                schema = create_model(f"{name}_arguments", **fields).model_json_schema()
            except Exception as exc:
                raise SpecError(
                    f"model.tools_module: cannot describe {name}()'s parameters ({exc}); "
                    "annotate them or define the tool under tools:"
                ) from None
            schema.pop("title", None)
            for prop in schema.get("properties", {}).values():
                prop.pop("title", None)
            doc = inspect.getdoc(fn) or ""
            out.append(
                {"name": name, "description": doc.split("\n\n")[0].strip(), "parameters": schema}
            )
        if not out:
            raise SpecError(f"model.tools_module: {self.name!r} defines no public function")
        return normalize_tools(out)

    async def execute(
        self,
        name: str,
        arguments: dict[str, Any] | None,
        error: str | None,
        timeout_s: float,
        offered: Sequence[str] | None = None,
        max_output: int = 0,
        schemas: Mapping[str, Any] | None = None,
    ) -> ToolOutcome:
        """Run one tool call; never raises for the tool's own failures (they become the
        result the model sees).

        Args:
            name: the tool the model called.
            arguments: its arguments, or None when they were not a JSON object.
            error: why the arguments are None.
            timeout_s: seconds the tool may take.
            offered: the tools the request offered (None: every function of the module);
                a call to another function of the module is an unknown tool, never run.
            max_output: bytes (UTF-8) of the result sent at most (0: no bound); a longer
                one is cut inside a marker (see the module docstring).
            schemas: tool name -> its ``parameters`` JSON Schema as the request offered
                it: arguments that do not validate (``"5"`` for an integer) are
                ``InvalidArguments`` naming the field, never run (as Inspect AI's tool
                call parsing); arguments the function's signature cannot take (one
                missing, one unknown) are too.
        """
        fn = self.functions.get(name)
        if fn is None or (offered is not None and name not in offered):
            known = ", ".join(sorted(self.functions) if offered is None else offered)
            return _failed("UnknownTool", f"no tool named {name!r}; the tools are {known}", 0.0)
        if arguments is None:
            return _failed("InvalidArguments", error or "arguments are not a JSON object", 0.0)
        invalid = _invalid(fn, arguments, (schemas or {}).get(name))
        if invalid is not None:
            return _failed("InvalidArguments", invalid, 0.0)
        start = time.perf_counter()
        try:
            content = await asyncio.wait_for(_invoke(fn, arguments), timeout_s)
        except TimeoutError:
            took = time.perf_counter() - start
            return _failed("ToolTimeout", f"{name} did not return in {timeout_s:g} s", took)
        except Escaped as exc:
            message = _bounded(name, _message(exc.original), max_output)
            return _failed(exc.kind, message, time.perf_counter() - start)
        except Exception as exc:  # the user's tool: its error goes to the model
            message = _bounded(name, _message(exc), max_output)
            return _failed(type(exc).__name__, message, time.perf_counter() - start)
        return ToolOutcome(_bounded(name, content, max_output), None, time.perf_counter() - start)


def _invalid(fn: Callable[..., Any], arguments: dict[str, Any], schema: Any) -> str | None:
    """Why ``arguments`` cannot be the call's (they break the tool's JSON Schema, or the
    function's signature cannot take them), or None."""
    if isinstance(schema, dict):
        import jsonschema  # imported only by runs that execute tools

        try:
            validator = jsonschema.validators.validator_for(
                schema, default=jsonschema.Draft202012Validator
            )(schema)
            error = jsonschema.exceptions.best_match(validator.iter_errors(arguments))
        except Exception:  # a $ref it cannot resolve: the signature and the tool decide
            error = None
        if error is not None:
            where = "/".join(str(p) for p in error.absolute_path) or "(the arguments)"
            return f"{error.message[:300]} (at {where}); call it as its parameters describe"
    try:
        inspect.signature(fn).bind(**arguments)
    except TypeError as exc:
        return f"{exc}; call it as its parameters describe"
    except ValueError:  # a builtin without a signature: let the call say
        return None
    return None


def _bounded(name: str, content: str, max_output: int) -> str:
    """``content`` when it has at most ``max_output`` bytes of UTF-8 (or ``max_output``
    is 0), else its first ``max_output`` bytes (never half a character) inside the
    marker Inspect AI's ``max_tool_output`` uses, naming the tool, the result's size and
    the bound."""
    if not max_output or len(content) * 4 <= max_output:  # no character has 5 bytes
        return content
    data = content.encode("utf-8")
    if len(data) <= max_output:
        return content
    head = data[:max_output].decode("utf-8", "ignore")
    return (
        f"The output of your call to {name} was too long to be displayed ({len(data)} "
        f"bytes; run.max_tool_output is {max_output}).\nHere is a truncated version:\n"
        f"<START_TOOL_OUTPUT>\n{head}\n<END_TOOL_OUTPUT>"
    )


#: the event loop async tools run on, one for the process (so a tool may keep a client
#: session between calls), replaced when a tool holds it
_TOOLS_LOOP = UserLoop("gradetrail-async-tools", held_s=0.5)


def _failed(kind: str, message: str, latency_s: float) -> ToolOutcome:
    message = encodable(message)
    return ToolOutcome(f"Error: {kind}: {message}", {"kind": kind, "message": message}, latency_s)


def _message(exc: BaseException) -> str:
    try:
        return str(exc)
    except Exception:  # an exception whose __str__ raises
        return f"(a {type(exc).__name__} whose message cannot be printed)"


class UnprintableResult(ValueError):
    """A tool returned a value that has no text form (its ``str`` raised)."""


def _as_text(value: Any) -> str:
    """The text a tool's return value goes back to the model as: a string as it is,
    anything else as JSON (``str`` of what JSON cannot hold), characters UTF-8 cannot
    encode (a lone surrogate) as their escapes, so the conversation can be sent on.

    Raises:
        UnprintableResult: the value cannot be turned into text at all.
    """
    if isinstance(value, str):
        return encodable(value)
    try:
        text = json.dumps(value, ensure_ascii=False, default=str)
    except Exception:  # a key JSON cannot hold, a cycle, a __str__ that raises
        try:
            text = str(value)
        except Exception as exc:
            raise UnprintableResult(
                f"the tool returned a {type(value).__name__} that cannot be turned into "
                f"text ({type(exc).__name__}: {_message(exc)}); return a string or JSON values"
            ) from None
    return encodable(text)


async def _invoke(fn: Callable[..., Any], arguments: dict[str, Any]) -> str:
    """Call one tool off the run's event loop (:mod:`gradetrail._util.userloop`) and turn
    its value into text there (:func:`_as_text`): a plain function in a daemon thread, a
    coroutine function on the tools' own loop, so that a tool that blocks or spins
    (``time.sleep`` in an ``async def``), or returns a value whose ``str`` spins or is
    50 MB of JSON, costs its timeout, never the run's loop and with it the reach of
    Ctrl-C and SIGTERM.

    Raises:
        Escaped: the tool raised SystemExit or KeyboardInterrupt.
        UnprintableResult: its value has no text form.
    """

    async def as_text() -> str:
        return _as_text(await fn(**arguments))

    try:
        if inspect.iscoroutinefunction(fn):
            return await _TOOLS_LOOP.run(as_text())  # cancelling it cancels the tool
        return await in_daemon_thread(lambda _: _as_text(fn(**arguments)), None)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise Escaped(exc) from None
