"""The ``scorers:`` section: several named scorers a run, one of them primary.

Each entry is a scorer section (any ``type``) with a ``name`` and, on one entry,
``primary: true`` (default: the first entry)::

    scorers:
      - {name: accuracy, primary: true, type: numeric, marker: "A:"}
      - {name: arithmetic, type: python, function: "grading.gsm8k:arithmetic"}

The nested form ``{name: ..., primary: ..., scorer: {type: ...}}`` is accepted too (it is
what a manifest records). A spec gives ``scorer:`` or ``scorers:``; with ``scorers:`` the
spec's ``scorer`` reads as the primary's, so everything that reads one scorer reads the
primary, and a spec with one ``scorer:`` keeps its identity hash.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field, model_validator

from gradetrail.spec.base import _Strict
from gradetrail.spec.scorer import ScorerSpec

__all__ = ["NamedScorer", "check_scorers"]

_METRIC_NAME = r"^[A-Za-z][A-Za-z0-9_-]*$"


class NamedScorer(_Strict):
    """One metric of a run with several scorers."""

    name: str = Field(
        pattern=_METRIC_NAME,
        max_length=64,
        description="The metric's name (letters, digits, _ and -), as summaries, gate "
        "--metric and exports show it.",
    )
    primary: bool = Field(
        False,
        description="The metric gate, --min-score and the summary's headline use (one entry; "
        "default: the first).",
    )
    scorer: ScorerSpec

    @model_validator(mode="before")
    @classmethod
    def _flat(cls, value: Any) -> Any:
        """``{name, primary, type, ...}`` as ``{name, primary, scorer: {type, ...}}``."""
        if isinstance(value, dict) and "scorer" not in value and set(value) - _HEAD:
            rest = {k: v for k, v in value.items() if k not in _HEAD}
            head = {k: value[k] for k in ("name", "primary") if k in value}
            return {**head, "scorer": rest}
        return value


#: the keys of a ``scorers:`` entry that are its own; every other key is its scorer's (a
#: ``type`` misspelt included: read as the scorer's, it gets the scorer's "did you mean")
_HEAD = frozenset({"name", "primary"})


def check_scorers(scorers: list[NamedScorer]) -> NamedScorer:
    """The primary of a valid ``scorers:`` list.

    Raises:
        ValueError: an empty list, two metrics of one name, or more than one primary (a
            one-line message naming the fix).
    """
    if not scorers:
        raise ValueError("scorers is empty; list at least one scorer, or use scorer:")
    names = [s.name for s in scorers]
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise ValueError(f"scorers: the name {twice[0]!r} is used twice; give each a name")
    primaries = [s for s in scorers if s.primary]
    if len(primaries) > 1:
        raise ValueError(
            "scorers: "
            + ", ".join(s.name for s in primaries)
            + " are all primary; mark one with primary: true"
        )
    return primaries[0] if primaries else scorers[0]
