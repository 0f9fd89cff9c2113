"""Regular expressions compiled on first use: a module that defines many (the number
extractor has a few dozen, one of them large) costs nothing to import, and a process
that never uses them (``gradetrail --help``, a run of another scorer) never compiles
them. After the first use a pattern's methods are plain attribute reads on the compiled
pattern's bound methods: no cost a call."""

from __future__ import annotations

import re
from typing import Any, cast

__all__ = ["lazy_compile"]

#: what a lazy pattern binds from the compiled one at its first use
_ATTRIBUTES = (
    "match",
    "fullmatch",
    "search",
    "finditer",
    "findall",
    "sub",
    "subn",
    "split",
    "pattern",
    "flags",
    "groups",
    "groupindex",
)


class _LazyPattern:
    """Stands for ``re.compile(pattern, flags)`` until an attribute is first read; then
    compiles it and keeps its attributes as its own."""

    def __init__(self, pattern: str, flags: int) -> None:
        self._source = (pattern, flags)

    def __getattr__(self, name: str) -> Any:  # only for attributes not yet bound
        if name.startswith("__"):  # copy, pickle and the like probe dunders: not ours
            raise AttributeError(name)
        compiled = re.compile(*self._source)
        for attribute in _ATTRIBUTES:
            setattr(self, attribute, getattr(compiled, attribute))
        return getattr(compiled, name)

    def __repr__(self) -> str:
        return f"lazy_compile({self._source[0]!r}, {self._source[1]!r})"


def lazy_compile(pattern: str, flags: int | re.RegexFlag = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, compiled when first used (see the module
    docstring); typed as the pattern it stands for."""
    return cast("re.Pattern[str]", _LazyPattern(pattern, int(flags)))
