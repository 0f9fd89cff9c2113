"""The ``json`` scorer: a structured answer checked against its JSON Schema, then field by
field against the target.

Steps, each recorded in the score's detail:

1. **Parse.** The response's text, stripped (a byte-order mark and backticks around it
   aside), is read as JSON; when it is not, the last fenced block holding JSON
   (```` ```json ... ``` ````, a bare or ``~~~`` fence, one on a single line, or one left
   open at the end) is read instead (``fenced: true``).
   Nothing else is searched for: prose around an object that is not fenced is not JSON.
   Failure: score 0, ``failure: invalid_json`` with the parser's message; when the
   response stopped at max_tokens (its JSON cut short, on any API: Chat Completions'
   ``length``, the Responses API's ``max_output_tokens``, Anthropic's answer tool cut
   mid-input), ``failure: truncated`` and a ``reason`` saying to raise max_tokens; when
   the model declined (stop reason ``refusal``, or ``content_filter``: the provider
   withheld it), ``failure: refusal``, alike on every API (``run.refusals: exclude``
   leaves such rows out before any scorer reads them).
2. **Validate** against the schema (``scorer.schema``, else ``model.response_format``'s)
   with ``jsonschema`` (the draft the schema names; 2020-12 by default). Failure: score
   0, ``failure: schema_violation`` and ``schema_errors``: ``{"path": "/items/0/qty",
   "message"}`` each (JSON Pointer paths, at most 20, in path order). Parseable is not
   correct: the fields are still compared and recorded, for diagnosis, but earn nothing.
3. **Compare** each field of the target (its leaves: ``customer.name``, ``items[0].qty``;
   an empty object or array is a leaf) with the answer's value at the same path, by the
   rule ``scorer.fields`` gives its path (``items[].qty`` names every element's;
   otherwise ``exact``). Arrays compare by position; an answer's array elements past the
   target's each count as a failed field (``items[3]``: ``absent`` expected). Fields the
   target lacks earn nothing and cost nothing (the schema decides whether they may be
   there). ``fields``: path -> credit (1.0 or 0.0); ``mismatches``: path -> ``{"got",
   "want"}`` (``got`` absent when the field is missing).

The score is the mean credit over the counted fields (``score: mean``), or 1 only when
every field matched (``score: all``); a target with no counted field scores 1 when the
answer is valid. The target is JSON text (render it with ``{{ field | tojson }}``); a
target that is not JSON, or does not follow the schema itself, is the dataset's fault:
refused before any call (:meth:`JsonScorer.check_row`).
"""

from __future__ import annotations

import json
import math
import re
from typing import Any

from gradetrail.errors import DatasetError, SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.spec import JsonFieldRule, JsonScorerSpec, ResponseFormat

__all__ = ["JsonScorer", "compare_fields", "parse_answer"]

#: a fenced block: backticks or tildes, an optional language tag, the body on its own
#: lines or on the fence's line (```json {"a": 1} ```), closed or left open at the end
_FENCE = re.compile(
    r"(?P<fence>```|~~~)(?:[A-Za-z0-9_-]*(?=\s))?[ \t]*(?P<body>.*?)(?:(?P=fence)|\Z)", re.DOTALL
)
_INDEX = re.compile(r"\[\d+\]")
_MISSING = object()
_EXACT = JsonFieldRule()
#: schema errors recorded a row at most
MAX_SCHEMA_ERRORS = 20
#: stop reasons of an answer the model declined or its provider withheld
_DECLINED = ("refusal", "content_filter")
_DECLINED_WHY = (
    "the model declined (or its provider withheld the answer) instead of answering in JSON; "
    "its text is in the row's refusal"
)
_CUT = (
    "the response stopped at max_tokens before its JSON was complete; raise model.params.max_tokens"
)


def parse_answer(text: str) -> tuple[Any, bool, str | None]:
    """``(value, fenced, error)``: the JSON value of ``text`` (a byte-order mark, and one
    pair of backticks around the whole text, aside), else of its last fenced block that
    holds JSON (```` ``` ```` or ``~~~``, with or without a language tag, on one line or
    left open at the end: the final answer after an example), whether a fence was read,
    and the parser's message when nothing parses (value None)."""
    bare = text.strip().lstrip("\ufeff").strip()
    if len(bare) > 2 and bare[0] == bare[-1] == "`" and "`" not in bare[1:-1]:
        bare = bare[1:-1].strip()  # `{"a": 1}`, inline code
    try:
        return json.loads(bare), False, None
    except ValueError as exc:
        error = f"{exc.msg} at line {exc.lineno} column {exc.colno}"
    except RecursionError:
        return None, False, "nested too deeply to read"
    fenced_error = None
    for match in reversed(list(_FENCE.finditer(text))):
        try:
            return json.loads(match.group("body").strip()), True, None
        except ValueError as exc:
            at = f"line {exc.lineno} column {exc.colno}"
            fenced_error = fenced_error or f"{exc.msg} at {at} of the fence"
        except RecursionError:
            fenced_error = fenced_error or "nested too deeply to read"
    if fenced_error is not None:
        return None, True, fenced_error
    return None, False, error


def _equal(got: Any, want: Any) -> bool:
    """JSON equality: numbers numerically (2 == 2.0), booleans only with booleans."""
    if isinstance(got, bool) or isinstance(want, bool):
        return isinstance(got, bool) and isinstance(want, bool) and got == want
    if isinstance(got, int | float) and isinstance(want, int | float):
        return got == want
    if isinstance(got, list) and isinstance(want, list):
        return len(got) == len(want) and all(_equal(g, w) for g, w in zip(got, want, strict=True))
    if isinstance(got, dict) and isinstance(want, dict):
        return got.keys() == want.keys() and all(_equal(got[k], want[k]) for k in want)
    return type(got) is type(want) and got == want


def _normalized(text: str) -> str:
    return " ".join(text.split()).casefold()


def _leaf_matches(got: Any, want: Any, rule: JsonFieldRule) -> bool:
    if rule.match == "normalized" and isinstance(got, str) and isinstance(want, str):
        return _normalized(got) == _normalized(want)
    numbers = (
        isinstance(got, int | float)
        and isinstance(want, int | float)
        and not isinstance(got, bool)
        and not isinstance(want, bool)
    )
    if rule.match == "numeric" and numbers:
        return math.isclose(got, want, rel_tol=rule.rel_tol, abs_tol=rule.abs_tol)
    return _equal(got, want)


def compare_fields(
    got: Any, want: Any, rules: dict[str, JsonFieldRule]
) -> tuple[dict[str, float], dict[str, dict[str, Any]]]:
    """Per-field credit of answer ``got`` against target ``want`` (see the module
    docstring): ``(path -> 1.0 or 0.0, path -> {"got", "want"} for each miss)``."""
    credit: dict[str, float] = {}
    misses: dict[str, dict[str, Any]] = {}

    def rule_for(path: str) -> JsonFieldRule:
        return rules.get(path) or rules.get(_INDEX.sub("[]", path)) or _EXACT

    def walk(value: Any, target: Any, path: str) -> None:
        if isinstance(target, dict) and target:
            inner = value if isinstance(value, dict) else {}
            for key, sub in target.items():
                walk(inner.get(key, _MISSING), sub, f"{path}.{key}" if path else key)
            return
        if isinstance(target, list) and target:
            inner = value if isinstance(value, list) else []
            for i, sub in enumerate(target):
                walk(inner[i] if i < len(inner) else _MISSING, sub, f"{path}[{i}]")
            for i in range(len(target), len(inner)):
                credit[f"{path}[{i}]"] = 0.0
                misses[f"{path}[{i}]"] = {"got": inner[i], "want": "absent"}
            return
        where = path or "$"
        rule = rule_for(where)
        if rule.match == "ignore":
            return
        ok = value is not _MISSING and _leaf_matches(value, target, rule)
        credit[where] = 1.0 if ok else 0.0
        if not ok:
            missed = {"want": target} if value is _MISSING else {"got": value, "want": target}
            misses[where] = missed

    walk(got, want, "")
    return credit, misses


def _pointer(path: Any) -> str:
    return "/" + "/".join(str(p) for p in path) if path else "/"


class JsonScorer(Scorer):
    """See the module docstring.

    Args:
        spec: the scorer's section.
        response_format: the model's ``response_format`` (its schema is the default).

    Raises:
        SpecError: neither the scorer nor the model names a schema.
    """

    reads_target = True

    def __init__(self, spec: JsonScorerSpec, response_format: ResponseFormat | None) -> None:
        import jsonschema

        schema = spec.schema_
        if schema is None and response_format is not None:
            schema = response_format.schema_
        if schema is None:
            raise SpecError(
                "scorer.schema: the json scorer needs a JSON Schema; set scorer.schema or "
                "model.response_format.schema"
            )
        self.spec = spec
        self.schema = schema
        self.wants_meta = True  # a cut answer's failure is truncated, not invalid_json
        cls = jsonschema.validators.validator_for(schema, jsonschema.Draft202012Validator)
        self.validator = cls(schema, format_checker=cls.FORMAT_CHECKER)

    def _target(self, target: str | None) -> tuple[Any, str | None]:
        if target is None:
            return None, "the json scorer needs a target; add target: '{{ field | tojson }}'"
        try:
            return json.loads(target), None
        except ValueError as exc:
            return None, (
                f"the target is not JSON ({exc.msg} at column {exc.colno}): {target[:60]!r}; "
                "render it with {{ field | tojson }}"
            )

    def check(self, first: ScoreInput) -> None:
        """The spec has a target.

        Raises:
            SpecError: no target template.
        """
        if first.target is None:
            raise SpecError("scorer: the json scorer needs a target; add target: '{{ ... }}'")

    def check_row(self, item: ScoreInput) -> None:
        """Every row's target is JSON that follows the schema, before any call.

        Raises:
            DatasetError: naming the sample and what is wrong.
        """
        target, problem = self._target(item.target)
        if problem is None:
            error = next(iter(self.validator.iter_errors(target)), None)
            if error is not None:
                problem = (
                    f"the target does not follow the schema at {_pointer(error.absolute_path)}: "
                    f"{error.message}"
                )
        if problem is not None:
            raise DatasetError(f"sample {item.sample.id!r}: scorer json: {problem}; fix the row")

    def score(self, item: ScoreInput) -> Score:
        """Parse, validate, compare (see the module docstring)."""
        target, problem = self._target(item.target)
        if problem is not None:
            return scorer_error({"target": item.target}, "bad_target", problem)
        value, fenced, error = parse_answer(item.response)
        detail: dict[str, Any] = {"fenced": fenced}
        if error is not None:
            meta = item.response_meta or {}
            if meta.get("stop_reason") in _DECLINED:
                detail.update(failure="refusal", json_error=error, reason=_DECLINED_WHY)
            elif meta.get("truncated"):
                detail.update(failure="truncated", json_error=error, reason=_CUT)
            else:
                detail.update(failure="invalid_json", json_error=error)
            return Score(0.0, detail)
        detail["answer"] = value
        errors = sorted(
            self.validator.iter_errors(value), key=lambda e: [str(p) for p in e.absolute_path]
        )
        credit, misses = compare_fields(value, target, self.spec.fields)
        detail["fields"] = credit
        if misses:
            detail["mismatches"] = misses
        if errors:
            detail["failure"] = "schema_violation"
            detail["schema_errors"] = [
                {"path": _pointer(e.absolute_path), "message": e.message[:300]}
                for e in errors[:MAX_SCHEMA_ERRORS]
            ]
            return Score(0.0, detail)
        if not credit:
            return Score(1.0, detail)
        if self.spec.score == "all":
            return Score(1.0 if all(v == 1.0 for v in credit.values()) else 0.0, detail)
        return Score(sum(credit.values()) / len(credit), detail)
