"""Whether a scorer can run without the spec's ``target``: the check every scorer that
compares against a target makes before any call.

A spec without ``target:`` gives every sample the target None. A scorer that compares
against it (``exact``, ``choice``, ``numeric``, ``math``) or a template that renders it
(a ``regex`` pattern or a judge file reading ``{{ target }}``) would score every row
against ``""`` or the text ``None``: a run of zeros with exit 0. Such a spec is refused
with one line naming what to add. A template that reads ``target`` only where a test of
it guards the read (``{% if target %}Reference: {{ target }}{% endif %}``, ``{{ target
if target else 'none' }}``) works without one and is not refused.
"""

from __future__ import annotations

import jinja2
from jinja2 import nodes

from gradetrail.errors import SpecError
from gradetrail.prompts.templates import Template
from gradetrail.scorers.base import ScoreInput

__all__ = ["require_target", "template_needs_target"]

_PARSER = jinja2.Environment()  # parsing only: the same syntax as gradetrail's environments


def require_target(first: ScoreInput, needs: str) -> None:
    """Refuse a run whose spec has no ``target``, before any call.

    Args:
        first: the first sample's score input (``target`` None when the spec has none).
        needs: where and what needs the target, for the message (``scorer: the exact
            scorer``, ``scorer.pattern: the pattern reads {{ target }} and``).

    Raises:
        SpecError: ``first.target`` is None: one line naming ``target:`` to add.
    """
    if first.target is None:
        raise SpecError(
            f"{needs} needs a target, but the spec has none; add target: '{{{{ ... }}}}' "
            "naming the row's answer field"
        )


def template_needs_target(template: Template) -> bool:
    """True when ``template`` reads ``target`` outside a test of it.

    A read in the body of an ``{% if %}`` or ``{% elif %}`` whose test reads target
    (``{% if target %}``, ``{% if target is not none %}``), or in the true branch of
    ``x if target else y``, is guarded; any other read (``{{ target }}``, ``{{ target |
    trim }}``, an ``{% else %}`` branch) is not.
    """
    if "target" not in template.names:  # set or loop variables named target are not reads
        return False
    return _unguarded(_PARSER.parse(template.source), guarded=False)


def _reads(node: nodes.Node) -> bool:
    """Whether the expression ``node`` (itself or within) names ``target``."""
    names = [node] if isinstance(node, nodes.Name) else node.find_all(nodes.Name)
    return any(n.name == "target" for n in names)


def _unguarded(node: nodes.Node, guarded: bool) -> bool:
    """Whether ``node`` holds a read of ``target`` that no enclosing test guards."""
    if isinstance(node, nodes.Name):
        return node.name == "target" and node.ctx == "load" and not guarded
    if isinstance(node, nodes.If):
        inner = guarded or _reads(node.test)
        return any(_unguarded(n, inner) for n in node.body) or any(
            _unguarded(n, guarded) for n in [*node.elif_, *node.else_]
        )
    if isinstance(node, nodes.CondExpr):
        inner = guarded or _reads(node.test)
        rest = [] if node.expr2 is None else [node.expr2]
        return _unguarded(node.expr1, inner) or any(_unguarded(n, guarded) for n in rest)
    return any(_unguarded(child, guarded) for child in node.iter_child_nodes())
