"""Jinja2 templates: one strict, sandboxed environment, compiled once per template string.

Templates render over a row's fields with ``StrictUndefined``, so a name the row lacks
is an error, never an empty string. Regex templates use an environment whose
``finalize`` escapes every rendered value, so a target like ``2.5`` cannot match ``2x5``.

Specs and judge files travel in shared repositories, so every template renders in
Jinja2's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment`: attributes starting with
``_`` (``cycler.__init__.__globals__``), function internals and methods that modify a
list, dict or set are refused with a :class:`~jinja2.exceptions.SecurityError`, which the
pipeline reports as a one-line error naming the template and the sample before any call.
Row values are data: they are inserted as text and never parsed as templates. A
function is never shown as text: a row without a field named like a Jinja2 global
(``range``, ``namespace``...) is refused as missing, and so is a method shown uncalled.

Templates are also bounded in what they may build, so a spec cannot exhaust memory or
time before any call (each limit is refused with a one-line error, exit 2):

- ``*`` builds at most :data:`MAX_PRODUCT` items, ``**`` takes an exponent of at most
  :data:`MAX_EXPONENT`;
- a width, count or length passed to a string method or filter (``center``, ``ljust``,
  ``zfill``, ``indent``, ``slice``, ...), and a width or precision inside a ``%`` or
  ``format`` pattern (``'%0999999999d' % 1``), is at most :data:`MAX_PRODUCT`;
  ``join`` and ``replace`` may not build more than :data:`MAX_RENDERED_CHARS`;
- all the ``range()`` calls of one render go through at most :data:`MAX_RANGE_ITEMS`
  items together (nested loops included);
- one render produces at most :data:`MAX_RENDERED_CHARS` characters.

Templates render the same text every time: the ``random`` filter and ``lipsum``, which
draw anew on each render, are refused (a request is keyed by one rendering and sent from
another). One filter is added to Jinja2's: ``lettered`` renders a list of choices as lettered
options (``{{ choices | lettered }}``, shuffled stably with ``lettered(shuffle_seed=7)``).
"""

from __future__ import annotations

import contextvars
import difflib
import functools
import json
import re
import string
from collections.abc import Callable, Iterable, Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.compiler import CodeGenerator
from jinja2.exceptions import SecurityError
from jinja2.runtime import TemplateReference
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import _PassArg as PassArg
from jinja2.utils import concat

from gradetrail.errors import SpecError
from gradetrail.prompts.choices import lettered

__all__ = [
    "MissingValueShown",
    "Template",
    "compile_template",
    "field_text",
    "holds_missing",
    "target_text",
]


class MissingValueShown(ValueError):
    """A template showed a missing value (a null or a NaN) as text: ``"None"`` or
    ``"nan"`` in a prompt, a data bug the user never sees. Refused where a value becomes
    text: shown (``{{ ctx }}``), through a text filter (``trim``, ``upper``, ``join``...),
    ``~``, ``%`` or ``str.format``.

    Attributes:
        kind: ``null`` or ``NaN``.
        fields: the fields the template reads that hold one (as :meth:`Template.render`
            raises it; empty where it is first raised).
    """

    def __init__(self, kind: str, fields: tuple[str, ...] = ()) -> None:
        text = "None" if kind == "null" else "nan"
        what = (
            f"a {kind} value"
            if not fields
            else f"{', '.join(fields)} {'is' if len(fields) == 1 else 'are'} {kind}"
        )
        super().__init__(f"{what}, which the template would show as the text {text!r}")
        self.kind, self.fields = kind, fields


def holds_missing(value: Any, kind: str, depth: int = 0) -> bool:
    """Whether ``value`` is, or holds, a missing value of ``kind``: ``null`` (None) or
    ``NaN`` (a float that is not equal to itself)."""
    if value is None:
        return kind == "null"
    if isinstance(value, float) and value != value:
        return kind == "NaN"
    if depth > 20:
        return False
    if isinstance(value, dict):
        return any(holds_missing(v, kind, depth + 1) for v in value.values())
    if isinstance(value, list):
        return any(holds_missing(v, kind, depth + 1) for v in value)
    return False


def _is_missing(value: Any) -> bool:
    """None (a null) or a NaN."""
    return value is None or (type(value) is float and value != value)


def _refuse_missing(value: Any) -> None:
    """Raise :class:`MissingValueShown` for a null or a NaN about to become text."""
    if value is None:
        raise MissingValueShown("null")
    if type(value) is float and value != value:
        raise MissingValueShown("NaN")


def _default(value: Any, default_value: Any = "", boolean: bool = False) -> Any:
    """Jinja2's ``default`` filter, also replacing a null or a NaN (a row's missing value:
    Jinja2's own replaces only an undefined name, and ``None | default('')`` showed
    ``None``)."""
    if isinstance(value, jinja2.Undefined) or _is_missing(value) or (boolean and not value):
        return default_value
    return value


#: a default ``repr`` (``<PIL.PngImagePlugin.PngImageFile ... at 0x7f...>``): an object
#: with no text of its own, whose address changes from run to run
_ADDRESS = re.compile(r" at 0x[0-9a-fA-F]{4,}>")


def _shown_value(value: Any) -> Any:
    """``finalize`` of every template: a value as it is, refusing a function, class or
    method shown as text. A row that lacks a field named like one of Jinja2's globals
    (``range``, ``dict``, ``namespace``, ``cycler``, ``joiner``) found the global, and
    ``{{ namespace }}`` put ``<class 'jinja2.utils.Namespace'>`` in the prompt; a method
    shown without its call (``{{ q.upper }}``) put ``<built-in method upper of str object
    at 0x7f...>``, whose address changes from run to run, so the request's key did too.

    Other values are shown as :func:`field_text` shows them: bytes as the text they
    encode, a list or dict as JSON, a null or NaN refused.

    Raises:
        jinja2.UndefinedError: a global (or ``self``) shown in place of a field the row
            lacks.
        MissingValueShown: a null or a NaN.
        TypeError: another function or method shown without its call, binary bytes, or
            an object without a text of its own (:func:`field_text`).
    """
    if type(value) is str:
        return value
    if isinstance(value, TemplateReference):  # ``self``: the template, shown for a field
        raise jinja2.UndefinedError("'self' is undefined (the row has no field 'self')")
    if callable(value) and not isinstance(value, jinja2.Undefined):
        name = next((k for k, v in _ENV.globals.items() if v is value), None)
        if name is not None:
            raise jinja2.UndefinedError(
                f"'{name}' is undefined (the row has no field '{name}', and Jinja2's "
                f"global {name} is a function, not text)"
            )
        what = getattr(value, "__name__", type(value).__name__)
        raise TypeError(
            f"the template shows the function {what!r} instead of a value; call it "
            f"({what}()) or show a field"
        )
    if isinstance(value, jinja2.Undefined | str):
        return value
    return field_text(value)


def _bytes_text(value: bytes | bytearray) -> str:
    """Bytes as the UTF-8 text they hold. A Parquet column of text written without the
    string annotation (as older Hive and Impala write it) reads as bytes, and the prompt
    read ``b'What is 2+2?'``.

    Raises:
        TypeError: the bytes are not UTF-8 (binary data: an image, a hash), naming how
            many; such a value is not text to show.
    """
    try:
        return bytes(value).decode("utf-8")
    except UnicodeDecodeError:
        raise TypeError(
            f"the template shows {len(value):,} bytes of binary data that are not UTF-8 "
            "text; show a text field"
        ) from None


def field_text(value: Any) -> str:
    """A value as a prompt shows it: text as it is; a number or bool as ``str()`` writes
    it; bytes as the text they encode (:func:`_bytes_text`); a list or dict as JSON
    (``["a", "b"]``, ``{"k": 1, "ok": true, "x": null}``, keys in the row's order,
    non-ASCII as is: what an LLM prompt expects, where Python's repr showed ``['a',
    'b']`` and ``True``/``None``); another object as ``str()``.

    Raises:
        MissingValueShown: a null or a NaN (the text ``None`` or ``nan`` in a prompt).
        TypeError: binary bytes, or an object whose text is a default repr with a memory
            address (a Hugging Face image or audio value: ``<PIL.PngImagePlugin...
            at 0x7f...>``), which is no text to show and changes from run to run.
    """
    kind = type(value)
    if kind is str:
        return value
    if kind is int or kind is bool:
        return str(value)
    if kind is float:
        if value != value:
            raise MissingValueShown("NaN")
        return str(value)
    if value is None:
        raise MissingValueShown("null")
    if isinstance(value, bytes | bytearray):
        return _bytes_text(value)
    if isinstance(value, list | tuple | dict):
        return json.dumps(value, ensure_ascii=False, default=_nested_json)
    return _own_text(value)


def _own_text(value: Any) -> str:
    """``str(value)``, refusing a default repr with a memory address (see
    :func:`field_text`)."""
    text = str(value)
    if _ADDRESS.search(text):
        what = f"{type(value).__module__}.{type(value).__qualname__}"
        raise TypeError(
            f"the template shows a {what} value, which has no text of its own (only a "
            "memory address, which changes every run); show a text field instead (a "
            "caption, a transcript)"
        )
    return text


def _nested_json(value: Any) -> Any:
    """``json.dumps``' answer to a value inside a list or dict that JSON has no form for:
    bytes their text, a missing field refused as missing, another object its own text
    (:func:`_own_text`)."""
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    if isinstance(value, bytes | bytearray):
        return _bytes_text(value)
    return _own_text(value)


#: the magnitude from which ``str(float)`` writes an exponent (``1e+16``)
_EXPONENT_FROM = 1e16


def target_text(value: Any) -> str:
    """A value as a target shows it: ``str(value)``, except that a float holding a whole
    number (below 10**16, where ``str`` would write an exponent) is written as that
    integer: ``18`` for ``18.0``. A column of whole numbers becomes floats wherever one
    value is missing (pandas writes such a column to Parquet or JSON as ``18.0``), and
    the exact scorer then compared a correct ``18`` with ``"18.0"``: a zero."""
    if type(value) is float and value.is_integer() and abs(value) < _EXPONENT_FROM:
        return str(int(value))
    return field_text(value)


def _target_value(value: Any) -> Any:
    """``finalize`` of target templates: :func:`_shown_value`, and a whole-number float
    as :func:`target_text` writes it."""
    if type(value) is float:
        return target_text(value)
    return _shown_value(value)


def _finalize_regex(value: Any) -> str:
    return re.escape(str(_shown_value(value)))


#: the largest string or list ``*`` may build in a template, and the largest ``**`` exponent
MAX_PRODUCT = 1_000_000
MAX_EXPONENT = 10_000
#: the most characters one render may produce (a prompt larger than any context window)
MAX_RENDERED_CHARS = 10_000_000
#: the most items all ``range()`` calls of one render may go through together
MAX_RANGE_ITEMS = 1_000_000

#: what is left of the running render's range budget (a one-item list, mutated)
_RANGE_LEFT: contextvars.ContextVar[list[int] | None] = contextvars.ContextVar(
    "gradetrail_template_range", default=None
)
_PRINTF = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\*|\d+)?(?:\.(\*|\d+))?[a-zA-Z%]")
_NUMBERS = re.compile(r"\d+")
#: string methods whose integer arguments are widths or counts
_SIZED_FILTERS = ("center", "indent", "slice", "batch", "wordwrap", "truncate", "format")


def _over(what: str, size: int, limit: int = MAX_PRODUCT) -> SecurityError:
    return SecurityError(f"{what} of {size:,} is over the template limit of {limit:,}")


def _check_numbers(args: Iterable[Any], what: str) -> None:
    """Refuse an integer (or float) argument above :data:`MAX_PRODUCT`."""
    for arg in args:
        if isinstance(arg, int | float) and not isinstance(arg, bool) and abs(arg) > MAX_PRODUCT:
            raise _over(what, int(arg) if arg == arg and abs(arg) != float("inf") else 10**18)


def _check_printf(pattern: str, args: Any) -> None:
    """Refuse a ``%`` pattern whose width or precision (or a ``*`` argument) is above
    :data:`MAX_PRODUCT`."""
    for width, precision in _PRINTF.findall(pattern):
        for value in (width, precision):
            if value.isdigit() and int(value) > MAX_PRODUCT:
                raise _over("a '%' width", int(value))
        if "*" in (width, precision):
            _check_numbers(args if isinstance(args, tuple) else (args,), "a '%' width")


def _check_format(pattern: str) -> None:
    """Refuse a ``str.format`` pattern with a width or precision above :data:`MAX_PRODUCT`
    (nested fields included)."""
    try:
        parsed = list(string.Formatter().parse(pattern))
    except ValueError:
        return  # Python raises the same when it formats
    for _, _, spec, _ in parsed:
        for number in _NUMBERS.findall(spec or ""):
            if int(number) > MAX_PRODUCT:
                raise _over("a format width", int(number))
        if spec and "{" in spec:
            _check_format(spec)


def _range(*args: Any) -> range:
    """Jinja2's sandboxed ``range``, drawing on the render's budget of items."""
    items = range(*args)
    left = _RANGE_LEFT.get()
    if left is not None:
        left[0] -= len(items)
        if left[0] < 0:
            raise SecurityError(
                f"the loops of this template go through more than {MAX_RANGE_ITEMS:,} "
                f"range() items, over the template limit of {MAX_RANGE_ITEMS:,}"
            )
    return items


def _sized_filter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original`` (a filter), refusing a width or count above :data:`MAX_PRODUCT`."""

    @functools.wraps(original)  # keeps Jinja2's pass_environment (truncate, wordwrap)
    def checked(*args: Any, **kwargs: Any) -> Any:
        _check_numbers([*args[1:], *kwargs.values()], f"the {name} filter's argument")
        if name == "format" and args and isinstance(args[0], str):
            _check_printf(args[0], tuple(args[1:]))
        return original(*args, **kwargs)

    return checked


#: Jinja2's filters that make text of the value they filter (``{{ ctx | trim }}``)
_TEXT_FILTERS = (
    "capitalize", "center", "escape", "e", "forceescape", "format", "indent", "join",
    "lower", "replace", "safe", "string", "striptags", "title", "trim", "truncate",
    "upper", "urlencode", "urlize", "wordcount", "wordwrap",
)  # fmt: skip


def _text_filter(name: str, original: Callable[..., Any]) -> Callable[..., Any]:
    """``original``, a filter that makes text of its value, refusing a null or NaN value
    (``{{ ctx | trim }}`` showed ``None``): also among a ``join``'s items and a
    ``format``'s arguments."""
    at = 0 if PassArg.from_obj(original) is None else 1  # after Jinja2's env or context

    @functools.wraps(original)
    def checked(*args: Any, **kwargs: Any) -> Any:
        if len(args) > at:
            value = args[at]
            _refuse_missing(value)
            if name == "join" and isinstance(value, list | tuple):
                for item in value:
                    _refuse_missing(item)
            elif name in ("format", "replace"):  # the arguments shown in the text
                for item in [*args[at + 1 :], *kwargs.values()]:
                    _refuse_missing(item)
        return original(*args, **kwargs)

    return checked


class _Generator(CodeGenerator):
    """Jinja2's code generator, joining ``~`` through :meth:`_Sandbox.joined`."""

    def visit_Concat(self, node: nodes.Concat, frame: Any) -> None:
        """``a ~ b``: Jinja2 writes each part's ``str()`` (a null as ``None``)."""
        self.write("environment.joined((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, also refusing ``*`` and ``**`` that would build a
    value too large to hold (``{{ 'a' * 10**12 }}``): Jinja2 already caps ``range``;
    ``~`` shows each part as a prompt does (:func:`field_text`)."""

    intercepted_binops = frozenset({"*", "**", "%"})
    code_generator_class = _Generator

    @staticmethod
    def joined(parts: Iterable[Any]) -> str:
        """``a ~ b ~ ...``: each part's text as :func:`field_text` writes it (a null or
        NaN refused, a list as JSON)."""
        return "".join([field_text(part) for part in parts])

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """A call in a template; a string method's sizes are checked first."""
        owner = getattr(__obj, "__self__", None)
        if isinstance(owner, str):
            name = getattr(__obj, "__name__", "")
            if name in ("format", "format_map"):
                _check_format(owner)
            elif name == "join" and args:
                _check_join(owner, args[0])
            elif name == "replace" and len(args) >= 2:
                _check_replace(owner, args[0], args[1])
            _check_numbers([*args, *kwargs.values()], f"the argument of str.{name}")
        return super().call(__context, __obj, *args, **kwargs)

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        """``'...'.format`` as Jinja2's sandbox wraps it when read (so :meth:`call` never
        sees it), refusing a null or NaN argument (shown as ``None``)."""
        wrapped = super().wrap_str_format(value)
        if wrapped is None:
            return None

        @functools.wraps(wrapped)
        def checked(*args: Any, **kwargs: Any) -> str:
            for arg in [*args, *kwargs.values()]:
                _refuse_missing(arg)
            return wrapped(*args, **kwargs)

        return checked

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
        if operator == "%" and isinstance(left, str):
            _check_printf(left, right)
            for arg in right if isinstance(right, tuple) else (right,):
                _refuse_missing(arg)
        if operator == "**" and isinstance(right, int) and abs(right) > MAX_EXPONENT:
            raise SecurityError(f"exponent {right} is over the template limit of {MAX_EXPONENT}")
        if operator == "*":
            for seq, times in ((left, right), (right, left)):
                sized = isinstance(seq, str | list | tuple) and isinstance(times, int)
                if sized and len(seq) * times > MAX_PRODUCT:
                    raise SecurityError(
                        f"'*' would build {len(seq) * times:,} items, over the template "
                        f"limit of {MAX_PRODUCT:,}"
                    )
        return super().call_binop(context, operator, left, right)


def _check_join(sep: str, items: Any) -> None:
    """Refuse a ``join`` that would build more than :data:`MAX_RENDERED_CHARS`."""
    if isinstance(items, str | list | tuple):
        size = len(sep) * max(len(items) - 1, 0) + sum(len(str(i)) for i in items)
        if size > MAX_RENDERED_CHARS:
            raise _over("a join", size, MAX_RENDERED_CHARS)


def _check_replace(text: str, old: Any, new: Any) -> None:
    """Refuse a ``replace`` that would build more than :data:`MAX_RENDERED_CHARS`."""
    if isinstance(old, str) and isinstance(new, str):
        size = len(text) + text.count(old) * (len(new) - len(old))
        if size > MAX_RENDERED_CHARS:
            raise _over("a replace", size, MAX_RENDERED_CHARS)


def _draws_anew(name: str) -> Callable[..., Any]:
    """A stand-in for Jinja2's ``random`` filter and ``lipsum``, which draw anew on every
    render: a request is rendered once to key it and again to send it (a conversation
    always, one message past the held budget), so the text sent would not be the text
    keyed, and a cached response would later be served for another prompt. Refused."""

    def refuse(*args: Any, **kwargs: Any) -> Any:
        raise SecurityError(
            f"{name} gives other text on every render, so a request could not be keyed by "
            "what it sends; draw in the dataset instead (lettered(shuffle_seed=N) shuffles "
            "choices stably)"
        )

    return refuse


class _StrictUndefined(jinja2.StrictUndefined):
    """Jinja2's StrictUndefined, failing when shown by its repr too: a list, dict or
    ``%r`` shows its items so, and StrictUndefined's harmless repr put ``Undefined`` in
    the prompt (``{{ [a, hint] }}`` on a row without ``hint``: ``[2, Undefined]``), where
    every other way of showing a missing field raises."""

    __slots__ = ()
    __repr__ = jinja2.StrictUndefined._fail_with_undefined_error


def _json_default(value: Any) -> Any:
    """``tojson``'s answer to a value JSON has no form for: a missing field is refused as
    missing (not as "Object of type StrictUndefined is not JSON serializable")."""
    if isinstance(value, jinja2.Undefined):
        value._fail_with_undefined_error()
    raise TypeError(f"Object of type {type(value).__name__} is not JSON serializable")


_ENV = _Sandbox(
    undefined=_StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
    finalize=_shown_value,
)
_TARGET_ENV = _Sandbox(
    undefined=_StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
    finalize=_target_value,
)
_REGEX_ENV = _Sandbox(
    undefined=_StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
    finalize=_finalize_regex,
)
# {{ choices | lettered }}: a row's choices as "A. ..." lines (gradetrail.prompts.choices), the
# same lettering (and optional stable shuffle) the choice scorer reads answers by
_ENV.filters["lettered"] = lettered
_TARGET_ENV.filters["lettered"] = lettered
for _env in (_ENV, _TARGET_ENV, _REGEX_ENV):
    _env.policies["json.dumps_kwargs"] = {"sort_keys": True, "default": _json_default}
    _env.globals["range"] = _range
    _env.globals["lipsum"] = _draws_anew("lipsum")
    _env.filters["random"] = _draws_anew("the random filter")
    _env.filters["default"] = _env.filters["d"] = _default
    for _name in _TEXT_FILTERS:
        _env.filters[_name] = _text_filter(_name, _env.filters[_name])
    for _name in _SIZED_FILTERS:
        _env.filters[_name] = _sized_filter(_name, _env.filters[_name])


class Template:
    """A compiled template and the top-level names it reads.

    Attributes:
        source: the template text.
        names: the undeclared top-level variables the template reads (row fields).
    """

    __slots__ = (
        "source",
        "names",
        "_template",
        "_root",
        "_globals",
        "_context",
        "_plain",
        "_show",
        "where",
    )

    def __init__(
        self, source: str, where: str, *, regex: bool = False, target: bool = False
    ) -> None:
        env = _REGEX_ENV if regex else _TARGET_ENV if target else _ENV
        self._show = target_text if target else field_text
        try:
            ast = env.parse(source)
            self._template = env.from_string(source)
        except jinja2.TemplateSyntaxError as exc:
            raise SpecError(
                f"{where}: template syntax error on line {exc.lineno}: {exc.message}"
            ) from None
        # render through the root function with a shared context built directly: jinja2's
        # Template.render merges its globals ChainMap into every context, and the Context
        # copies the ChainMap's keys again (globals_keys, only read by {% import %}, which
        # a loader-less template cannot do): most of a render's ~7 us
        self._root = self._template.root_render_func
        self._globals = dict(self._template.globals)
        template = self._template
        context_class, blocks = env.context_class, template.blocks
        self._context = lambda names: context_class(env, names, template.name, blocks)
        self.source = source
        self.where = where
        self.names = frozenset(meta.find_undeclared_variables(ast))
        self._plain = None if regex else _plain_parts(ast)

    def render(self, context: Mapping[str, Any]) -> str:
        """Render over ``context``.

        A template of text and bare ``{{ name }}`` fields only (``Q: {{ question }}``)
        is rendered without Jinja2's machinery, as its compiled code would: each field's
        ``str()`` between the texts (a name the row lacks takes the Jinja2 path, which
        raises or finds a global). Nothing there reaches an attribute or a call, so the
        sandbox has nothing to refuse.

        Raises:
            jinja2.UndefinedError: a name the context lacks (callers add the sample id).
            MissingValueShown: a null or NaN becomes text, naming the fields holding one.
        """
        plain = self._plain
        if plain is not None:
            parts = []  # a loop: a list comprehension's frame costs more than the parts
            show = self._show
            try:
                for text, name in plain:
                    if name is None:
                        parts.append(text)
                        continue
                    value = context[name]  # text, most values are, without a call
                    parts.append(text + (value if type(value) is str else show(value)))
                return "".join(parts)
            except KeyError:  # a name the row lacks: Jinja2 raises, or finds a global
                pass
            except MissingValueShown as exc:
                raise self._naming(exc, context) from None
        names = {**self._globals, **context}
        budget = _RANGE_LEFT.set([MAX_RANGE_ITEMS])
        try:
            chunks = []
            size = 0
            for chunk in self._root(self._context(names)):
                size += len(chunk)
                if size > MAX_RENDERED_CHARS:
                    raise _over("a rendered text", size, MAX_RENDERED_CHARS)
                chunks.append(chunk)
            return concat(chunks)
        except MissingValueShown as exc:
            raise self._naming(exc, context) from None
        finally:
            _RANGE_LEFT.reset(budget)

    def _naming(self, exc: MissingValueShown, context: Mapping[str, Any]) -> MissingValueShown:
        """``exc`` naming the fields of ``context`` the template reads that hold its kind
        of missing value."""
        found = tuple(
            sorted(n for n in self.names if n in context and holds_missing(context[n], exc.kind))
        )
        return MissingValueShown(exc.kind, found)

    def check(self, row: Mapping[str, Any], extra: frozenset[str] = frozenset()) -> None:
        """Check that ``row`` (plus ``extra`` names provided at render time) has every
        field the template reads, unless the template renders on ``row`` without them (a
        field read only under ``is defined`` or through ``default``: optional).

        Raises:
            SpecError: naming the missing fields and those the row has.
        """
        missing = sorted(self.names - set(row) - extra)
        if missing and not self._renders_without(row, extra):
            have = ", ".join(_shown(str(name)) for name in sorted(row)) or "(none)"
            fix = "fix the template or the dataset"
            spaced = [str(c) for c in row if str(c) != str(c).strip() and str(c).strip() in missing]
            if spaced:  # a CSV header written "q, a": the column is ' a'
                names = ", ".join(repr(c) for c in spaced)
                fix = (
                    f"the dataset's column {names} has spaces around its name: remove them, "
                    "or fix the template"
                    if len(spaced) == 1
                    else f"the dataset's columns {names} have spaces around their names: "
                    "remove them, or fix the template"
                )
            elif unreadable := _unreadable(missing, [str(c) for c in row]):
                fix = unreadable
            else:
                fix = _did_you_mean(missing, [str(c) for c in row]) + fix
            raise SpecError(
                f"{self.where}: template uses {', '.join(missing)} but the first row has "
                f"only {have}; {fix}"
            )

    def _renders_without(self, row: Mapping[str, Any], extra: frozenset[str]) -> bool:
        """True unless rendering over ``row`` (``extra`` names given as empty text) finds
        a name undefined; another failure is left to the row's own rendering, which names
        the sample."""
        try:
            self.render({**dict.fromkeys(extra, ""), **row})
        except jinja2.UndefinedError:
            return False
        except Exception:  # noqa: BLE001 - not a missing field: the run's rendering reports it
            return True
        return True


def _unreadable(missing: list[str], columns: list[str]) -> str:
    """The fix when a missing name is (part of) a column no template can name, as
    ``question-text`` or ``answer key`` (``{{ question-text }}`` reads question minus
    text): rename it with ``dataset.fields``; else empty."""
    for column in columns:
        if column.isidentifier() or column != column.strip():
            continue
        words = re.findall(r"\w+", column)
        close = difflib.get_close_matches(column, missing, n=1, cutoff=0.75)
        if close or any(w in missing for w in words):
            name = "_".join(words) or "field"
            name = name if name.isidentifier() else f"f_{name}"
            return (
                f"a template cannot name the column {column!r}; rename it for templates "
                f"with dataset.fields: {{{name}: {column!r}}}, and use {{{{ {name} }}}}"
            )
    return ""


def _did_you_mean(missing: list[str], columns: list[str]) -> str:
    """``did you mean question? `` for the missing names a column's name is close to
    (difflib's ratio at least 0.75: ``questoin``, ``answr``), else empty."""
    close = [
        f"{name} -> {match[0]}"
        for name in missing
        if (match := difflib.get_close_matches(name, columns, n=1, cutoff=0.75))
    ]
    if not close:
        return ""
    if len(missing) == 1:
        return f"did you mean {close[0].split(' -> ')[1]}? "
    return f"did you mean {', '.join(close)}? "


def _shown(name: str) -> str:
    """A column name as an error shows it: quoted when spaces at its ends (or none at all)
    would otherwise hide what it is."""
    return repr(name) if not name or name != name.strip() else name


def _plain_parts(ast: nodes.Template) -> tuple[tuple[str, str | None], ...] | None:
    """``(text, field name or None)`` pairs of a template made only of text and bare
    ``{{ name }}`` outputs; None for any other template (filters, attributes, tags...)."""
    parts: list[tuple[str, str | None]] = []
    text = ""
    for node in ast.body:
        if not isinstance(node, nodes.Output):
            return None
        for part in node.nodes:
            if type(part) is nodes.TemplateData:
                text += part.data
            elif type(part) is nodes.Name and part.ctx == "load":
                parts.append((text, part.name))
                text = ""
            else:
                return None
    parts.append((text, None))
    return tuple(parts)


@lru_cache(maxsize=256)
def compile_template(
    source: str, where: str, regex: bool = False, target: bool = False
) -> Template:
    """Compile (once) a template string; ``where`` names it in errors (e.g. ``spec.yaml:
    prompt``). ``regex``: every value shown is escaped (a regex pattern); ``target``: a
    whole-number float is shown as an integer (:func:`target_text`). Raises SpecError on a
    syntax error."""
    return Template(source, where, regex=regex, target=target)
