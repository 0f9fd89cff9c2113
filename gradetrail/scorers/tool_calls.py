"""The ``tool_calls`` scorer: the model's tool calls against the row's expected calls,
deterministic, with no judge.

Expected calls (the row field ``expected_field``) follow the Berkeley Function Calling
Leaderboard's "possible answer" format (Patil et al., BFCL, 2024): a list of
``{TOOL: {ARG: [allowed values]}}``; ``{"name": TOOL, "arguments": {...}}`` is accepted
too. Each argument lists the values it may take; ``""`` among them means the argument may
be omitted; a value that is not a list is shorthand for a list of that one value (so a
list-valued argument is written ``[[1, 2]]``). A model call matches an expected call when
the names are equal, every argument it passes is expected and takes an allowed value, and
every expected argument it omits may be omitted (a ``null`` passed for it counts as
omitted: OpenAI's strict function calling makes every property required and an optional
one nullable, so the model sends ``null`` where BFCL writes ``""``). Values compare by
JSON type: numbers numerically (``2`` equals ``2.0``; ``true`` is not ``1``), lists
element by element, objects key by key (or, in BFCL's form, each key against its list
of allowed values, ``""`` among them when it may be omitted), and strings, with
``string_match: normalized`` (the default, as BFCL), after case folding and removing
whitespace and ``,./-_*^`` punctuation. Where the tool's parameters schema describes an
argument (its ``type``, or ``anyOf`` / ``oneOf`` / ``allOf``, ``$ref``, ``enum``, ``const``, nested
``items`` and ``properties``, as pydantic, OpenAI and MCP servers write schemas; see
:mod:`gradetrail.scorers.tool_schema`), an expected value written as another type is read
as the type the schema admits (``"3"`` for ``Optional[int]`` is 3, also inside arrays and
objects), and a model value that does not fit fails as ``wrong type`` or ``not valid for
the schema``, with jsonschema's reason.

Modes: ``ordered`` (the calls in the expected order, no others), ``unordered`` (the same
calls in any order, no others) and ``subset`` (every expected call made; other calls
allowed). The score is 1 when the mode is satisfied, else 0; with ``partial_credit:
true`` it is the call-level F1 of the matched calls (precision over the model's calls,
recall over the expected ones; in ``subset`` mode extra calls are not penalized, so the
score is the recall). Matching pairs each expected call with at most one model call:
the longest order-preserving pairing in ``ordered`` mode, a maximum bipartite matching
otherwise. No expected calls and no model calls scores 1 (the model rightly called
nothing).

The detail records the model's calls, and for each expected call which model call
matched it, or, for the closest call to the same tool, which arguments failed and why.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.scorers.tool_schema import ArgumentSchema
from gradetrail.spec import ToolCallsScorerSpec

__all__ = ["ToolCallsScorer", "match_call", "parse_expected"]

_PUNCT = re.compile(r"[\s,./\-_*^]")
Expected = dict[str, Any]  # {"name": str, "arguments": {arg: [allowed, ...]}}


class ExpectedError(ValueError):
    """Expected calls that are not in the BFCL format."""


def parse_expected(raw: Any) -> list[Expected]:
    """Expected calls in the normalized form ``[{"name", "arguments": {arg: [allowed]}}]``.

    Raises:
        ExpectedError: not a list of ``{TOOL: {ARG: [values]}}`` (or ``{name,
            arguments}``) objects.
    """
    if not isinstance(raw, list):
        raise ExpectedError(f"expected calls must be a list, not {type(raw).__name__}")
    out: list[Expected] = []
    for i, item in enumerate(raw, start=1):
        if isinstance(item, dict) and set(item) <= {"name", "arguments"} and "name" in item:
            name, args = item["name"], item.get("arguments", {})
        elif isinstance(item, dict) and len(item) == 1:
            ((name, args),) = item.items()
        else:
            raise ExpectedError(f"expected call {i} must be {{TOOL: {{ARG: [allowed values]}}}}")
        if not isinstance(name, str) or not isinstance(args, dict):
            raise ExpectedError(f"expected call {i}: arguments of {name!r} must be an object")
        allowed = {str(k): v if isinstance(v, list) else [v] for k, v in args.items()}
        out.append({"name": name, "arguments": allowed})
    return out


def _same(got: Any, want: Any, normalized: bool) -> bool:
    if isinstance(want, bool) or isinstance(got, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(want, int | float) and isinstance(got, int | float):
        return got == want
    if isinstance(want, str) and isinstance(got, str):
        if normalized:
            return _PUNCT.sub("", got).casefold() == _PUNCT.sub("", want).casefold()
        return got == want
    if isinstance(want, list) and isinstance(got, list):
        if len(got) != len(want):
            return False
        return all(_same(g, w, normalized) for g, w in zip(got, want, strict=True))
    if isinstance(want, dict) and isinstance(got, dict):
        if set(got) == set(want) and all(_same(got[k], want[k], normalized) for k in want):
            return True
        return _allowed_object(got, want, normalized)
    return got is None and want is None


def _allowed_object(got: dict[str, Any], want: dict[str, Any], normalized: bool) -> bool:
    """BFCL's form of an object argument: each key lists its allowed values (``""``
    among them: the key may be omitted), ``{"unit": ["C", ""], "days": [3]}``."""
    if not want or not all(isinstance(v, list) for v in want.values()) or set(got) - set(want):
        return False
    for key, allowed in want.items():
        if key not in got or _null_for_omitted(got[key], allowed):
            if "" not in allowed:
                return False
        elif not any(_same(got[key], value, normalized) for value in allowed):
            return False
    return True


def _null_for_omitted(value: Any, allowed: list[Any]) -> bool:
    """A null passed for an argument that may be omitted is the argument omitted: under
    OpenAI's strict function calling every property is required and an optional one is
    nullable, so the model sends ``null`` where BFCL's answer writes ``""`` (unless null
    is itself one of the allowed values)."""
    return value is None and "" in allowed and None not in allowed


def match_call(
    call: dict[str, Any], expected: Expected, normalized: bool, schema: Any = None
) -> dict[str, Any]:
    """Compare one model call with one expected call.

    Args:
        call: the model's normalized call.
        expected: one parsed expected call.
        normalized: compare strings case- and punctuation-insensitively.
        schema: the tool's parameters (a JSON Schema, or its
            :class:`~gradetrail.scorers.tool_schema.ArgumentSchema`), or None. Expected
            values written as another type than it declares are read as that type
            (:meth:`ArgumentSchema.coerce`); a model value that does not fit it fails as
            ``wrong type`` or ``not valid for the schema`` (:meth:`ArgumentSchema.reason`).

    Returns:
        ``{"ok": bool, "reason": str | None, "arguments": {arg: {"ok", "got", "allowed",
        "reason"}}}``; ``reason`` names the first failure (wrong tool, arguments not JSON,
        or the failing arguments).
    """
    if call.get("name") != expected["name"]:
        return {"ok": False, "reason": f"called {call.get('name')!r}", "arguments": {}}
    got = call.get("arguments")
    if got is None:
        why = call.get("arguments_error") or "arguments are not a JSON object"
        return {"ok": False, "reason": why, "arguments": {}}
    if not isinstance(schema, ArgumentSchema):
        schema = ArgumentSchema(schema)
    verdicts: dict[str, dict[str, Any]] = {}
    for arg, listed in expected["arguments"].items():
        allowed = [schema.coerce(arg, value) for value in listed]
        if arg not in got or _null_for_omitted(got[arg], allowed):
            optional = "" in allowed
            verdicts[arg] = {
                "ok": optional,
                "got": None,
                "allowed": allowed,
                "reason": None if optional else "missing",
            }
            continue
        ok = any(_same(got[arg], value, normalized) for value in allowed)
        reason = None if ok else schema.reason(arg, got[arg]) or "value not allowed"
        verdicts[arg] = {"ok": ok, "got": got[arg], "allowed": allowed, "reason": reason}
    for arg in got:
        if arg not in expected["arguments"]:
            verdicts[arg] = {"ok": False, "got": got[arg], "allowed": [], "reason": "unexpected"}
    failed = [arg for arg, v in verdicts.items() if not v["ok"]]
    reason = (
        None
        if not failed
        else "arguments " + ", ".join(f"{arg} ({verdicts[arg]['reason']})" for arg in failed)
    )
    return {"ok": not failed, "reason": reason, "arguments": verdicts}


def _ordered_pairs(ok: list[list[bool]]) -> list[tuple[int, int]]:
    """The longest order-preserving pairing (LCS over the match matrix)."""
    n, m = len(ok), len(ok[0]) if ok else 0
    best = [[0] * (m + 1) for _ in range(n + 1)]
    for i in range(n - 1, -1, -1):
        for j in range(m - 1, -1, -1):
            best[i][j] = max(best[i + 1][j], best[i][j + 1], best[i + 1][j + 1] + ok[i][j])
    pairs, i, j = [], 0, 0
    while i < n and j < m:
        if ok[i][j] and best[i][j] == best[i + 1][j + 1] + 1:
            pairs.append((i, j))
            i, j = i + 1, j + 1
        elif best[i + 1][j] >= best[i][j + 1]:
            i += 1
        else:
            j += 1
    return pairs


def _bipartite_pairs(ok: list[list[bool]]) -> list[tuple[int, int]]:
    """A maximum matching of expected calls to model calls (augmenting paths, Kuhn 1955)."""
    owner: dict[int, int] = {}

    def claim(i: int, seen: set[int]) -> bool:
        for j, fits in enumerate(ok[i]):
            if fits and j not in seen:
                seen.add(j)
                if j not in owner or claim(owner[j], seen):
                    owner[j] = i
                    return True
        return False

    for i in range(len(ok)):
        claim(i, set())
    return sorted((i, j) for j, i in owner.items())


class ToolCallsScorer(Scorer):
    """Scores the model's tool calls (the whole trajectory in an agent loop) against the
    row's expected calls."""

    def __init__(self, spec: ToolCallsScorerSpec) -> None:
        self.spec = spec

    def _expected(self, item: ScoreInput) -> list[Expected]:
        value: Any = item.sample.row
        for part in self.spec.expected_field.split("."):
            if not isinstance(value, dict) or part not in value:
                raise ExpectedError(f"the row has no '{self.spec.expected_field}'")
            value = value[part]
        return parse_expected(value)

    def check(self, first: ScoreInput) -> None:
        """The first row's expected calls must be readable.

        Raises:
            SpecError: the field is missing or not in the BFCL format.
        """
        self.check_row(first)

    def check_row(self, item: ScoreInput) -> None:
        """Every row's expected calls must be readable, before any call (a row without
        them would otherwise score 0 as if the model had failed it).

        Raises:
            SpecError: naming the sample whose field is missing, null or not in the BFCL
                format.
        """
        try:
            self._expected(item)
        except ExpectedError as exc:
            raise SpecError(
                f"scorer.expected_field: sample {item.sample.id!r} (line {item.sample.line}): "
                f"{exc}; write e.g. "
                '[{"get_weather": {"city": ["Paris"], "unit": ["", "C"]}}] ([] for no call)'
            ) from None

    def score(self, item: ScoreInput) -> Score:
        """Match, score by mode (or F1), and record every comparison."""
        calls = list(item.tool_calls)
        detail: dict[str, Any] = {"mode": self.spec.mode, "calls": calls}
        try:
            expected = self._expected(item)
        except ExpectedError as exc:
            detail["error"] = str(exc)
            return Score(0.0, detail)
        normalized = self.spec.string_match == "normalized"
        schemas = {tool["name"]: ArgumentSchema(tool.get("parameters")) for tool in item.tools}
        results = [
            [match_call(c, e, normalized, schemas.get(e["name"])) for c in calls] for e in expected
        ]
        ok = [[r["ok"] for r in row] for row in results]
        pairs = _ordered_pairs(ok) if self.spec.mode == "ordered" else _bipartite_pairs(ok)
        matched_call = dict(pairs)
        used = set(matched_call.values())
        detail["expected"] = [
            self._record(e, i, matched_call.get(i), results[i], used)
            for i, e in enumerate(expected)
        ]
        detail["unmatched_calls"] = [j for j in range(len(calls)) if j not in used]
        m = len(pairs)
        if self.spec.mode == "subset":
            full = m == len(expected)
        else:
            full = m == len(expected) == len(calls)
        detail["matched"] = m
        if not self.spec.partial_credit:
            return Score(float(full), detail)
        return Score(self._partial(m, len(expected), len(calls)), detail)

    def _partial(self, m: int, n_expected: int, n_calls: int) -> float:
        if n_expected == 0:
            return 1.0 if n_calls == 0 or self.spec.mode == "subset" else 0.0
        recall = m / n_expected
        if self.spec.mode == "subset":
            return recall
        if m == 0:
            return 0.0
        precision = m / n_calls
        return 2 * precision * recall / (precision + recall)

    @staticmethod
    def _record(
        expected: Expected,
        index: int,
        call: int | None,
        results: Sequence[dict[str, Any]],
        used: set[int],
    ) -> dict[str, Any]:
        """What happened to one expected call: the model call that matched it, else the
        closest call to the same tool (unmatched calls first, then the most arguments
        right) and why it failed."""
        record: dict[str, Any] = {"index": index, "name": expected["name"], "matched_call": call}
        if call is not None:
            record["arguments"] = results[call]["arguments"]
            return record
        same_tool = [(j, r) for j, r in enumerate(results) if r["reason"] is None or r["arguments"]]
        if not same_tool:  # nothing called this tool
            named = [j for j, r in enumerate(results) if not r["reason"].startswith("called ")]
            record["reason"] = (
                results[named[0]]["reason"] if named else f"no call to {expected['name']!r}"
            )
            return record
        j, closest = max(
            same_tool,
            key=lambda jr: (jr[0] not in used, sum(v["ok"] for v in jr[1]["arguments"].values())),
        )
        record["closest_call"] = j
        record["reason"] = closest["reason"] or "its match went to another expected call"
        record["arguments"] = closest["arguments"]
        return record
