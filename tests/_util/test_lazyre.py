"""lazy_compile: a pattern that compiles on first use and then acts as re.compile's."""

from __future__ import annotations

import re

import pytest

from gradetrail._util.lazyre import lazy_compile


def test_compiles_on_first_use_and_matches_as_re_compile() -> None:
    lazy = lazy_compile(r"(?P<word>[a-z]+)\d", re.IGNORECASE)
    assert "match" not in vars(lazy)  # nothing compiled yet
    eager = re.compile(r"(?P<word>[a-z]+)\d", re.IGNORECASE)
    text = "ab1 CD2 ef"
    assert [m.group("word") for m in lazy.finditer(text)] == ["ab", "CD"]
    assert "match" in vars(lazy)  # compiled once, its methods kept
    assert lazy.sub("-", text) == eager.sub("-", text)
    assert lazy.fullmatch("x9") is not None and lazy.search("!!") is None
    assert (lazy.pattern, lazy.flags, lazy.groupindex) == (
        eager.pattern,
        eager.flags,
        eager.groupindex,
    )


def test_a_bad_pattern_fails_on_first_use() -> None:
    lazy = lazy_compile("(")  # importing a module that defines it does not fail
    with pytest.raises(re.error):
        lazy.match("x")
