"""What a tool's parameters schema says of one argument, for the ``tool_calls`` scorer:
the JSON types it admits, an expected value written loosely read as the type the schema
wants, and why a model's value does not fit.

The schema is read the way pydantic, OpenAI function schemas and MCP servers write it:
``type`` (a name or a list, ``["integer", "null"]``), ``anyOf`` / ``oneOf`` (pydantic's
``Optional[int]`` is ``anyOf: [{type: integer}, {type: null}]``), ``allOf``, ``$ref``
into ``$defs`` / ``definitions`` (nested models and enums), ``enum``, ``const``, and
nested ``items`` / ``prefixItems`` / ``properties`` / ``additionalProperties``. Whether a
value fits is decided by the ``jsonschema`` library (the schema's own draft, 2020-12 by
default, as :func:`gradetrail.conversation.tools.normalize_tools` checks it); ``$ref`` is resolved
with ``referencing`` within the schema only (a remote reference is never fetched: what
it describes is unknown here, so nothing is claimed about it).
"""

from __future__ import annotations

import json
import math
from collections.abc import Iterator
from typing import Any

import jsonschema
from referencing import Registry, Resource
from referencing.exceptions import Unresolvable
from referencing.jsonschema import DRAFT202012

__all__ = ["ArgumentSchema", "json_type"]

#: JSON Schema's type names, each tested on a decoded JSON value (2020-12: an integer
#: is any number with a zero fractional part, so 3.0 is an integer)
_FITS: dict[str, Any] = {
    "boolean": lambda v: isinstance(v, bool),
    "integer": lambda v: (
        not isinstance(v, bool)
        and (isinstance(v, int) or (isinstance(v, float) and v.is_integer()))
    ),
    "number": lambda v: not isinstance(v, bool) and isinstance(v, int | float),
    "string": lambda v: isinstance(v, str),
    "array": lambda v: isinstance(v, list),
    "object": lambda v: isinstance(v, dict),
    "null": lambda v: v is None,
}
_ORDER = {name: i for i, name in enumerate(_FITS)}


def json_type(value: Any) -> str:
    """The JSON Schema type name of a decoded JSON value (``integer`` before ``number``;
    a Python type name for anything JSON cannot hold)."""
    for name, fits in _FITS.items():
        if fits(value):
            return name
    return type(value).__name__


def _meet(a: frozenset[str], b: frozenset[str]) -> frozenset[str]:
    """The types both sets admit (an ``integer`` is a ``number``)."""
    out = set(a & b)
    if ("integer" in a and "number" in b) or ("number" in a and "integer" in b):
        out.add("integer")
    return frozenset(out)


class ArgumentSchema:
    """One tool's ``parameters`` (a JSON Schema of an object), asked about its arguments.

    Args:
        parameters: the tool's parameters schema, its ``properties`` its own or those of
            what it refers to or combines (``$ref``, ``allOf``); anything else (None, a
            schema without properties) declares nothing, and every method then claims
            nothing.
    """

    def __init__(self, parameters: Any) -> None:
        root = parameters if isinstance(parameters, dict) else {}
        cls = jsonschema.validators.validator_for(root, default=jsonschema.Draft202012Validator)
        # an empty registry: a remote $ref is unresolvable, never fetched
        self._validator = cls(root, registry=Registry())
        resource = Resource.from_contents(root, default_specification=DRAFT202012)
        self._resolver = Registry().resolver_with_root(resource)
        self._props: dict[str, Any] = {}  # the root's own properties, or its $ref's / allOf's
        for alt, _ in self._alternatives(root, self._resolver):
            props = alt.get("properties")
            for arg, schema in (props if isinstance(props, dict) else {}).items():
                self._props.setdefault(arg, schema)

    def types(self, arg: str) -> tuple[str, ...]:
        """The JSON types the schema admits for ``arg``, in a fixed order (``boolean,
        integer, number, string, array, object, null``); ``()`` when it admits any type or
        does not describe ``arg``."""
        schema = self._props.get(arg)
        kinds = None if schema is None else self._types(schema, self._resolver, set())
        return tuple(sorted(kinds, key=_ORDER.__getitem__)) if kinds else ()

    def coerce(self, arg: str, value: Any) -> Any:
        """An expected value of ``arg`` read as the schema wants it, when it does not fit
        as written and one reading does: numeric text (``"3"``) as a number, ``"true"`` /
        ``"false"`` as a boolean, a number as its text (``90210`` for a string), inside
        arrays and objects too (BFCL's ``{key: [allowed values]}`` form of an object
        included). The omission marker ``""``, a value that fits and one no reading fits
        are returned unchanged."""
        schema = self._props.get(arg)
        if schema is None or value == "":
            return value
        return self._coerce(value, schema, self._resolver)

    def reason(self, arg: str, value: Any) -> str | None:
        """Why the model's ``value`` for ``arg`` does not fit the schema: ``wrong type
        (string; the schema says integer or null)``, or ``not valid for the schema
        (<jsonschema's message>)`` for a value of an admitted type (an enum member, a
        nested item, a bound); None when it fits or the schema cannot say."""
        schema = self._props.get(arg)
        if schema is None:
            return None
        kinds = self.types(arg)
        if kinds and not any(_FITS[k](value) for k in kinds):
            return f"wrong type ({json_type(value)}; the schema says {' or '.join(kinds)})"
        try:
            error = jsonschema.exceptions.best_match(self._check(schema).iter_errors(value))
        except Unresolvable:
            return None
        if error is None:
            return None
        where = "".join(f"[{p!r}]" for p in error.absolute_path)
        return f"not valid for the schema ({where + ': ' if where else ''}{error.message[:200]})"

    # ------------------------------------------------------------------ reading

    def _check(self, schema: Any) -> Any:
        """A validator of ``schema``, a part of the root: its ``$ref``s resolve in the
        root (``evolve`` keeps the root's resolver)."""
        return self._validator.evolve(schema=schema)

    def _fits(self, value: Any, schema: Any) -> bool:
        try:
            return bool(self._check(schema).is_valid(value))
        except Unresolvable:
            return False

    def _types(self, schema: Any, resolver: Any, seen: set[int]) -> frozenset[str] | None:
        """The types ``schema`` admits, None for any: the meet of its ``type``, ``const``,
        ``enum``, ``$ref``, ``allOf`` and the union of its ``anyOf`` / ``oneOf``."""
        if not isinstance(schema, dict) or id(schema) in seen:  # True, {} or a $ref cycle
            return None
        seen = seen | {id(schema)}
        found: list[frozenset[str]] = []
        kind = schema.get("type")
        if isinstance(kind, str | list):
            names = [kind] if isinstance(kind, str) else kind
            found.append(frozenset(k for k in names if k in _FITS))
        if "const" in schema:
            found.append(frozenset({json_type(schema["const"])}))
        if isinstance(schema.get("enum"), list):
            found.append(frozenset(json_type(v) for v in schema["enum"]))
        for sub, sub_resolver in self._refs(schema, resolver):
            kinds = self._types(sub, sub_resolver, seen)
            if kinds is not None:
                found.append(kinds)
        for key in ("anyOf", "oneOf"):
            members = schema.get(key)
            if isinstance(members, list):
                kinds = [self._types(m, resolver, seen) for m in members]
                if all(k is not None for k in kinds):
                    found.append(frozenset().union(*kinds))  # type: ignore[arg-type]
        members = schema.get("allOf")
        for member in members if isinstance(members, list) else ():
            kinds = self._types(member, resolver, seen)
            if kinds is not None:
                found.append(kinds)
        if not found:
            return None
        out = found[0]
        for kinds in found[1:]:
            out = _meet(out, kinds)
        return out

    def _refs(self, schema: dict[str, Any], resolver: Any) -> Iterator[tuple[Any, Any]]:
        ref = schema.get("$ref")
        if isinstance(ref, str):
            try:
                resolved = resolver.lookup(ref)
            except Unresolvable:
                return
            yield resolved.contents, resolved.resolver

    def _alternatives(self, schema: Any, resolver: Any) -> list[tuple[dict[str, Any], Any]]:
        """``schema`` and every schema it refers to or combines (``$ref``, ``anyOf``,
        ``oneOf``, ``allOf``), each once, with the resolver its own ``$ref``s use."""
        out: list[tuple[dict[str, Any], Any]] = []
        todo, seen = [(schema, resolver)], set()
        while todo:
            node, node_resolver = todo.pop(0)
            if not isinstance(node, dict) or id(node) in seen:
                continue
            seen.add(id(node))
            out.append((node, node_resolver))
            todo.extend(self._refs(node, node_resolver))
            for key in ("anyOf", "oneOf", "allOf"):
                members = node.get(key)
                if isinstance(members, list):
                    todo.extend((m, node_resolver) for m in members)
        return out

    def _coerce(self, value: Any, schema: Any, resolver: Any) -> Any:
        if self._fits(value, schema):
            return value
        if isinstance(value, list | dict):
            best = None
            for alt, alt_resolver in self._alternatives(schema, resolver):
                parts = (
                    self._coerce_items(value, alt, alt_resolver)
                    if isinstance(value, list)
                    else self._coerce_properties(value, alt, alt_resolver)
                )
                if parts is not None and self._fits(parts, schema):
                    return parts
                best = parts if best is None else best
            return value if best is None else best  # BFCL's object form never fits as written
        for reading in _readings(value):
            if self._fits(reading, schema):
                return reading
        return value

    def _coerce_items(self, value: list[Any], alt: dict[str, Any], resolver: Any) -> Any:
        prefix = alt.get("prefixItems") if isinstance(alt.get("prefixItems"), list) else []
        items = alt.get("items")
        if not prefix and not isinstance(items, dict):
            return None
        out = []
        for i, item in enumerate(value):
            sub = prefix[i] if i < len(prefix) else items
            out.append(self._coerce(item, sub, resolver) if isinstance(sub, dict) else item)
        return out

    def _coerce_properties(self, value: dict[str, Any], alt: dict[str, Any], resolver: Any) -> Any:
        props = alt.get("properties") if isinstance(alt.get("properties"), dict) else {}
        extra = alt.get("additionalProperties")
        if not props and not isinstance(extra, dict):
            return None
        out = {}
        for key, item in value.items():
            sub = props.get(key, extra)
            if not isinstance(sub, dict):
                out[key] = item
                continue
            fixed = self._coerce(item, sub, resolver)
            if isinstance(item, list) and not self._fits(fixed, sub):  # {key: [allowed]}
                fixed = [x if x == "" else self._coerce(x, sub, resolver) for x in item]
            out[key] = fixed
        return out


def _readings(value: Any) -> Iterator[Any]:
    """Other JSON types a loosely written scalar may stand for: numeric text as its
    number, ``true`` / ``false`` text as a boolean, a number as its text."""
    if isinstance(value, str):
        text = value.strip()
        try:
            number = json.loads(text)
        except ValueError:
            number = None
        numeric = isinstance(number, int | float) and not isinstance(number, bool)
        if numeric and math.isfinite(number):
            yield number
        if text.lower() in ("true", "false"):
            yield text.lower() == "true"
    elif isinstance(value, int | float) and not isinstance(value, bool):
        yield json.dumps(value)
