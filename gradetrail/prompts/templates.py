"""Jinja2 templates: one strict, sandboxed environment, compiled once per template string.

Templates render over a row's fields with ``StrictUndefined``, so a name the row lacks
is an error, never an empty string. Regex templates use an environment whose
``finalize`` escapes every rendered value, so a target like ``2.5`` cannot match ``2x5``.

Specs and judge files travel in shared repositories, so every template renders in
Jinja2's :class:`~jinja2.sandbox.ImmutableSandboxedEnvironment`: attributes starting with
``_`` (``cycler.__init__.__globals__``), function internals and methods that modify a
list, dict or set are refused with a :class:`~jinja2.exceptions.SecurityError`, which the
pipeline reports as a one-line error naming the template and the sample before any call.
Row values are data: they are inserted as text and never parsed as templates.

One filter is added to Jinja2's: ``lettered`` renders a list of choices as lettered
options (``{{ choices | lettered }}``, shuffled stably with ``lettered(shuffle_seed=7)``).
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import jinja2
from jinja2 import meta, nodes
from jinja2.exceptions import SecurityError
from jinja2.sandbox import ImmutableSandboxedEnvironment
from jinja2.utils import concat

from gradetrail.errors import SpecError
from gradetrail.prompts.choices import lettered

__all__ = ["Template", "compile_template"]


def _finalize_regex(value: Any) -> str:
    return re.escape(str(value))


#: the largest string or list ``*`` may build in a template, and the largest ``**`` exponent
MAX_PRODUCT = 1_000_000
MAX_EXPONENT = 10_000


class _Sandbox(ImmutableSandboxedEnvironment):
    """Jinja2's immutable sandbox, also refusing ``*`` and ``**`` that would build a
    value too large to hold (``{{ 'a' * 10**12 }}``): Jinja2 already caps ``range``."""

    intercepted_binops = frozenset({"*", "**"})

    def call_binop(self, context: Any, operator: str, left: Any, right: Any) -> Any:
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


_ENV = _Sandbox(undefined=jinja2.StrictUndefined, keep_trailing_newline=True, autoescape=False)
_REGEX_ENV = _Sandbox(
    undefined=jinja2.StrictUndefined,
    keep_trailing_newline=True,
    autoescape=False,
    finalize=_finalize_regex,
)
# {{ choices | lettered }}: a row's choices as "A. ..." lines (gradetrail.prompts.choices), the
# same lettering (and optional stable shuffle) the choice scorer reads answers by
_ENV.filters["lettered"] = lettered


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
        "where",
    )

    def __init__(self, source: str, where: str, *, regex: bool = False) -> None:
        env = _REGEX_ENV if regex else _ENV
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
        """
        plain = self._plain
        if plain is not None:
            try:
                return "".join(
                    [text if name is None else text + str(context[name]) for text, name in plain]
                )
            except KeyError:  # a name the row lacks: Jinja2 raises, or finds a global
                pass
        return concat(self._root(self._context({**self._globals, **context})))

    def check(self, row: Mapping[str, Any], extra: frozenset[str] = frozenset()) -> None:
        """Check that ``row`` (plus ``extra`` names provided at render time) has every
        field the template reads, unless the template renders on ``row`` without them (a
        field read only under ``is defined`` or through ``default``: optional).

        Raises:
            SpecError: naming the missing fields and those the row has.
        """
        missing = sorted(self.names - set(row) - extra)
        if missing and not self._renders_without(row, extra):
            have = ", ".join(sorted(row)) or "(none)"
            raise SpecError(
                f"{self.where}: template uses {', '.join(missing)} but the first row has "
                f"only {have}; fix the template or the dataset"
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
def compile_template(source: str, where: str, regex: bool = False) -> Template:
    """Compile (once) a template string; ``where`` names it in errors (e.g. ``spec.yaml:
    prompt``). Raises SpecError on a syntax error."""
    return Template(source, where, regex=regex)
