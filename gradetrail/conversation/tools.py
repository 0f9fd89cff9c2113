"""Tools: definitions (JSON Schema), ``tool_choice``, each provider's native shape, and
the user's Python tools module that an agent loop executes.

A tool definition is OpenAI's function shape, ``{"type": "function", "function": {"name",
"description", "parameters"}}`` (the bare ``{"name", "description", "parameters"}`` is
accepted too), normalized to ``{"name", "description", "parameters"}``. ``parameters``
must be a valid JSON Schema (checked with the ``jsonschema`` library's ``check_schema``
for the schema's own draft, 2020-12 by default) describing an object, as both APIs
require; names are 1-64 of ``[A-Za-z0-9_-]`` and unique.

``tool_choice`` is ``auto`` (the model decides), ``none`` (no tool), ``required`` (at
least one tool) or ``{"name": TOOL}`` (that tool); OpenAI's own object shape
``{"type": "function", "function": {"name": ...}}`` is accepted too.

A tools module (``model.tools_module: mypkg.tools``) names Python functions, sync or
async, called with the model's arguments as keyword arguments; what they return (a
string as it is, anything else as JSON) goes back to the model as the tool result.
Without ``tools:`` in the spec, every public function defined in the module is offered,
its schema built from its signature (pydantic) and its description from its docstring.
"""

from __future__ import annotations

import asyncio
import hashlib
import inspect
import json
import re
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail._util.jsontext import encodable, nests_deeper
from gradetrail._util.userloop import Escaped, UserLoop, in_daemon_thread
from gradetrail.errors import SpecError

__all__ = [
    "ToolBox",
    "ToolError",
    "ToolOutcome",
    "anthropic_tool_choice",
    "anthropic_tools",
    "normalize_tool_choice",
    "normalize_tools",
    "openai_tool_choice",
    "openai_tools",
]

_NAME = re.compile(r"^[A-Za-z0-9_-]{1,64}$")
#: how deep a tool's parameters schema may nest (dicts and lists), far past what the APIs
#: accept for structured arguments
MAX_SCHEMA_DEPTH = 64
ToolDef = dict[str, Any]


class ToolError(ValueError):
    """A tool definition or tool_choice that cannot be sent; callers prefix the spec
    field or the sample and raise SpecError or DatasetError."""


def _check_schema(schema: Any, name: str) -> None:
    import jsonschema  # imported only by specs that define tools

    if not isinstance(schema, dict):
        raise ToolError(f"tool {name!r}: parameters must be a JSON Schema object")
    if nests_deeper(schema, MAX_SCHEMA_DEPTH):  # the checker recurses: a traceback past ~150
        raise ToolError(
            f"tool {name!r}: parameters nest deeper than {MAX_SCHEMA_DEPTH} levels; flatten them"
        )
    validator = jsonschema.validators.validator_for(schema, default=jsonschema.Draft202012Validator)
    try:
        validator.check_schema(schema)
    except jsonschema.SchemaError as exc:
        where = "/".join(str(p) for p in exc.absolute_path) or "(root)"
        raise ToolError(
            f"tool {name!r}: parameters is not valid JSON Schema at {where}: {exc.message[:200]}"
        ) from None
    if schema.get("type", "object") != "object":
        raise ToolError(
            f"tool {name!r}: parameters must describe an object (type: object), not "
            f"{schema.get('type')!r}"
        )


def normalize_tools(raw: Any) -> tuple[ToolDef, ...]:
    """Check and normalize tool definitions.

    Args:
        raw: a list of OpenAI function tools (or bare ``{name, description,
            parameters}``).

    Returns:
        ``({"name", "description", "parameters"}, ...)`` in the given order.

    Raises:
        ToolError: not a list, a malformed entry, a bad name, a duplicate, or parameters
            that are not a valid JSON Schema of an object.
    """
    if not isinstance(raw, list):
        raise ToolError("tools must be a list of function definitions")
    out: list[ToolDef] = []
    seen: set[str] = set()
    for i, item in enumerate(raw, start=1):
        if not isinstance(item, dict):
            raise ToolError(f"tool {i} is not an object")
        if "function" in item:
            if item.get("type", "function") != "function":
                raise ToolError(f"tool {i}: type {item.get('type')!r}; only 'function' tools")
            extra = set(item) - {"type", "function"}
            fn = item["function"]
        else:
            extra, fn = set(), item
        if extra or not isinstance(fn, dict):
            raise ToolError(f"tool {i}: use {{type: function, function: {{name, parameters}}}}")
        unknown = set(fn) - {"name", "description", "parameters", "strict"}
        if unknown:
            raise ToolError(f"tool {i}: unknown key(s) {', '.join(sorted(unknown))}")
        name = fn.get("name")
        if not isinstance(name, str) or not _NAME.match(name):
            raise ToolError(f"tool {i}: name {name!r} must be 1-64 letters, digits, _ or -")
        if name in seen:
            raise ToolError(f"tool {name!r} is defined twice")
        seen.add(name)
        description = fn.get("description", "")
        if not isinstance(description, str):
            raise ToolError(f"tool {name!r}: description must be a string")
        parameters = fn.get("parameters", {"type": "object", "properties": {}})
        _check_schema(parameters, name)
        out.append({"name": name, "description": description, "parameters": parameters})
    return tuple(out)


def normalize_tool_choice(raw: Any, tools: Sequence[ToolDef] | None) -> str | dict[str, str] | None:
    """``auto``, ``none``, ``required`` or ``{"name": TOOL}``; None when unset. OpenAI's
    object shape (``{"type": "function", "function": {"name"}}``) and Anthropic's
    (``{"type": "auto" | "none" | "any"}``, ``{"type": "tool", "name"}``; ``any`` is
    ``required``) are read as the same choices. ``tools`` None: the tools are known only
    per row, so a named tool is not checked here.

    Raises:
        ToolError: another value, or a named tool that is not defined.
    """
    if raw is None:
        return None
    if isinstance(raw, str) and raw in _CHOICES:
        return _CHOICES[raw]
    if isinstance(raw, dict):
        if set(raw) == {"type"} and raw["type"] in _CHOICES:  # Anthropic's {type: any}
            return _CHOICES[raw["type"]]
        name = raw.get("name")
        if isinstance(raw.get("function"), dict):  # OpenAI's own shape
            name = raw["function"].get("name")
        if isinstance(name, str):
            if tools is not None and name not in {t["name"] for t in tools}:
                known = ", ".join(t["name"] for t in tools) or "none"
                raise ToolError(f"no tool is named {name!r} (the tools: {known})")
            return {"name": name}
    raise ToolError(f"tool_choice {raw!r}: use auto, none, required or {{name: TOOL}}")


#: tool_choice words: OpenAI's, and Anthropic's ``any``
_CHOICES = {"auto": "auto", "none": "none", "required": "required", "any": "required"}


def openai_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """Chat Completions ``tools``: ``{"type": "function", "function": {...}}``."""
    return [{"type": "function", "function": dict(tool)} for tool in tools]


def openai_tool_choice(choice: str | Mapping[str, str]) -> Any:
    """Chat Completions ``tool_choice``."""
    if isinstance(choice, str):
        return choice
    return {"type": "function", "function": {"name": choice["name"]}}


def anthropic_tools(tools: Sequence[ToolDef]) -> list[dict[str, Any]]:
    """Messages API ``tools``: ``{"name", "description", "input_schema"}``."""
    out = []
    for tool in tools:
        entry: dict[str, Any] = {"name": tool["name"], "input_schema": tool["parameters"]}
        if tool["description"]:
            entry["description"] = tool["description"]
        out.append(entry)
    return out


def anthropic_tool_choice(choice: str | Mapping[str, str]) -> dict[str, str]:
    """Messages API ``tool_choice``: ``auto``, ``none``, ``any`` (for ``required``) or
    ``{"type": "tool", "name": ...}``."""
    if isinstance(choice, str):
        return {"type": "any" if choice == "required" else choice}
    return {"type": "tool", "name": choice["name"]}


# --------------------------------------------------------------------------- the module


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
        from gradetrail.providers.python import import_user_module

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
        """
        fn = self.functions.get(name)
        if fn is None or (offered is not None and name not in offered):
            known = ", ".join(sorted(self.functions) if offered is None else offered)
            return _failed("UnknownTool", f"no tool named {name!r}; the tools are {known}", 0.0)
        if arguments is None:
            return _failed("InvalidArguments", error or "arguments are not a JSON object", 0.0)
        start = time.perf_counter()
        try:
            value = await asyncio.wait_for(_invoke(fn, arguments), timeout_s)
            content = _as_text(value)
        except TimeoutError:
            took = time.perf_counter() - start
            return _failed("ToolTimeout", f"{name} did not return in {timeout_s:g} s", took)
        except Escaped as exc:
            return _failed(exc.kind, _message(exc.original), time.perf_counter() - start)
        except Exception as exc:  # the user's tool: its error goes to the model
            return _failed(type(exc).__name__, _message(exc), time.perf_counter() - start)
        return ToolOutcome(content, None, time.perf_counter() - start)


async def _invoke(fn: Callable[..., Any], arguments: dict[str, Any]) -> Any:
    """Call one tool off the run's event loop (:mod:`gradetrail._util.userloop`): a plain
    function in a daemon thread, a coroutine function on the tools' own loop, so that a
    tool that blocks or spins (``time.sleep`` in an ``async def``) costs its timeout, never
    the run's loop and with it the reach of Ctrl-C and SIGTERM.

    Raises:
        Escaped: the tool raised SystemExit or KeyboardInterrupt.
    """
    try:
        if inspect.iscoroutinefunction(fn):
            return await _TOOLS_LOOP.run(fn(**arguments))  # cancelling it cancels the tool
        return await in_daemon_thread(lambda _: fn(**arguments), None)
    except (SystemExit, KeyboardInterrupt) as exc:
        raise Escaped(exc) from None


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
