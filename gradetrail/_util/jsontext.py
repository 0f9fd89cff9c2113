"""JSON text for files gradetrail writes, whatever text the values hold.

Responses, dataset fields and sample ids may hold text that UTF-8 cannot encode: a lone
UTF-16 surrogate (``"\\ud800"`` in a provider's JSON, a recordings file or a dataset row
decodes to one), or the ``\\udcXX`` that Python makes of undecodable bytes in a command
line. pydantic's JSON serializer refuses such text; :func:`model_json` then writes the
same value with JSON escapes (``\\ud800``), which every JSON reader turns back into the
same string, so nothing is lost and no write fails. :func:`encodable` does the same for
text that is not JSON (a CSV or Markdown cell, a Parquet string, a line of output): each
such character becomes its escape, ``\\ud800``, and every other character is kept.

:func:`nests_deeper` bounds how deep a decoded value from outside (a model's tool-call
arguments, a tool's JSON Schema) may nest before code that walks it recursively meets
Python's recursion limit.
"""

from __future__ import annotations

import json
from typing import Any

import pydantic_core
from pydantic import BaseModel
from pydantic_core import PydanticSerializationError

__all__ = ["compact_json", "encodable", "model_json", "nests_deeper", "parsed", "value_json"]


def model_json(model: BaseModel, *, indent: int | None = None) -> str:
    """``model.model_dump_json(indent=indent)``, or, when a value holds text UTF-8 cannot
    encode, the same JSON with non-ASCII characters escaped (lossless)."""
    try:
        return model.model_dump_json(indent=indent)
    except PydanticSerializationError:
        return json.dumps(model.model_dump(mode="json"), indent=indent)


def value_json(value: Any) -> bytes:
    """pydantic's JSON of a plain value (dicts and lists; models inside them serialize as
    themselves): compact, NaN and infinities as null, as ``model_dump_json`` writes a model
    holding the same values; when a value holds text UTF-8 cannot encode, the same JSON
    with non-ASCII characters escaped (lossless), as :func:`model_json` does."""
    try:
        return pydantic_core.to_json(value, inf_nan_mode="null")
    except PydanticSerializationError:
        return json.dumps(pydantic_core.to_jsonable_python(value, inf_nan_mode="null")).encode()


def compact_json(value: Any) -> str:
    """``json.dumps(value, ensure_ascii=False, separators=(",", ":"))`` of a plain value
    (dicts, lists, str, numbers, bools, None): compact, non-ASCII as is, NaN and
    infinities as ``NaN`` and ``Infinity``, written by pydantic-core's serializer (a
    third to a sixth of ``json.dumps``' time). Numbers may be spelled differently
    (``0.00001`` for ``1e-05``), never with another value. A value pydantic refuses (text
    UTF-8 cannot encode) goes through ``json.dumps`` as before, lone surrogates kept.

    Raises:
        TypeError, ValueError: what ``json.dumps`` raises for a value pydantic refuses.
    """
    try:
        return pydantic_core.to_json(value, inf_nan_mode="constants").decode()
    except PydanticSerializationError:
        return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def parsed(data: bytes | str) -> Any:
    """``json.loads(data)``, parsed by pydantic-core (about a third of ``json.loads``'
    time; ``NaN`` and ``Infinity`` read as ``json.loads`` reads them); what it refuses (a
    lone surrogate's escape, UTF-16 or a byte-order mark, nesting deeper than its limit,
    text that is not JSON) is read by ``json.loads``, so the value and the errors are
    ``json.loads``' own.

    Raises:
        ValueError: not JSON (``json.JSONDecodeError``, ``UnicodeDecodeError``).
        RecursionError: nested too deeply for ``json.loads``.
    """
    try:  # keys repeat from value to value; values seldom do (a cache of them costs more)
        return pydantic_core.from_json(data, cache_strings="keys")
    except (ValueError, TypeError):  # TypeError: a str holding a lone surrogate
        return json.loads(data)


def encodable(text: str) -> str:
    """``text`` with every character UTF-8 cannot encode (a lone surrogate) written as its
    backslash escape (``"\\ud800"``, six characters); text without one comes back as is.
    Inside a JSON string that escape is the JSON escape of the same character."""
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return text.encode("utf-8", "backslashreplace").decode("utf-8")
    return text


def nests_deeper(value: Any, limit: int) -> bool:
    """True when ``value`` nests dicts or lists more than ``limit`` levels deep (``{}``
    is one level); walked without recursion, so any depth can be measured."""
    stack = [(value, 1)]
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            return True
        children = item.values() if isinstance(item, dict) else item
        stack.extend((c, depth + 1) for c in children if isinstance(c, dict | list))
    return False
