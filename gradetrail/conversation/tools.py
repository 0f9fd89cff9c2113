"""Tools: definitions (JSON Schema) and ``tool_choice``, provider-neutral. Each provider
sends them in its own shape (``providers/``); the user's Python tools module that an
agent loop executes is :mod:`gradetrail.engine.toolbox`.

A tool definition is OpenAI's function shape, ``{"type": "function", "function": {"name",
"description", "parameters"}}`` (the bare ``{"name", "description", "parameters"}`` is
accepted too), normalized to ``{"name", "description", "parameters"}``, plus ``"strict"``
when the definition sets it (strict schema adherence: sent to every API as its own tool
field, and part of the cache key). ``parameters``
must be a valid JSON Schema (checked with the ``jsonschema`` library's ``check_schema``
for the schema's own draft, 2020-12 by default) describing an object, as both APIs
require; names are 1-64 of ``[A-Za-z0-9_-]`` and unique.

``tool_choice`` is ``auto`` (the model decides), ``none`` (no tool), ``required`` (at
least one tool) or ``{"name": TOOL}`` (that tool); OpenAI's own object shape
``{"type": "function", "function": {"name": ...}}`` is accepted too.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gradetrail._util.jsontext import nests_deeper

__all__ = ["ToolDef", "ToolError", "normalize_tool_choice", "normalize_tools"]

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
        ``({"name", "description", "parameters"}, ...)`` (``"strict"`` too when given) in
        the given order.

    Raises:
        ToolError: not a list, a malformed entry, a bad name, a duplicate, a ``strict``
            that is not a boolean, or parameters
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
        tool = {"name": name, "description": description, "parameters": parameters}
        if "strict" in fn and fn["strict"] is not None:
            if not isinstance(fn["strict"], bool):
                raise ToolError(f"tool {name!r}: strict must be true or false")
            tool["strict"] = fn["strict"]  # only when given: other tools keep their keys
        out.append(tool)
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
