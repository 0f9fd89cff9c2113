"""The ``regex`` scorer: a per-sample pattern template; rendered values are escaped.

Patterns run on the ``regex`` package (Python ``re`` syntax, version 0 semantics), whose
``timeout=`` bounds each match: a pattern that backtracks catastrophically on a response
(``(a+)+$`` on a long run of ``a``) stops after ``scorer.timeout_s`` and the row records a
scorer error (``error.kind: scorer_error``, ``reason: regex_timeout``) instead of hanging
the run. A row whose pattern reads an empty or blank value (``""``, spaces, null) and so
matches a text that says nothing (``{{ answer }}`` rendered ``""``, ``\\b\\b``) would pass
every response: every row is checked before any call (:meth:`RegexScorer.check_row`), and
such a row stops the run naming the sample; scored without that check (the scorer used
directly), it is a scorer error row (``reason: empty_value``), never a pass.
"""

from __future__ import annotations

from functools import lru_cache
from typing import Any

from gradetrail.errors import DatasetError, SpecError
from gradetrail.prompts.templates import compile_template
from gradetrail.scorers.base import Score, ScoreInput, Scorer, scorer_error
from gradetrail.scorers.targets import require_target, template_needs_target
from gradetrail.spec import RegexScorerSpec

__all__ = ["RegexScorer"]


class RegexScorer(Scorer):
    """1.0 when the sample's pattern matches the response (``match: search``: anywhere;
    ``last``: anywhere, the last match recorded; ``fullmatch``: the whole stripped
    response), else 0.0. The rendered pattern, the matched text and its offset are
    recorded; a match that exceeds ``timeout_s`` is a scorer error.

    Args:
        spec: the scorer section.
        where: names the spec file in errors.
    """

    def __init__(self, spec: RegexScorerSpec, where: str = "spec") -> None:
        self.spec = spec
        self.where = f"{where}: scorer.pattern"
        self.template = compile_template(spec.pattern, self.where, regex=True)
        self.reads_target = template_needs_target(self.template)
        import regex  # imported by runs that use this scorer only

        self._regex = regex
        self.flags = (regex.IGNORECASE if spec.ignore_case else 0) | regex.VERSION0
        self._compile = lru_cache(maxsize=4096)(self._compile_uncached)

    def _compile_uncached(self, pattern: str) -> Any:
        try:
            return self._regex.compile(pattern, self.flags)
        except self._regex.error as exc:
            raise SpecError(
                f"{self.where}: invalid regex {pattern!r}: {exc}; fix the pattern"
            ) from None

    def pattern_for(self, item: ScoreInput) -> Any:
        """The compiled pattern for one sample. Raises SpecError on an invalid regex."""
        context = {**item.sample.row, "target": item.target}
        return self._compile(self.template.render(context))

    def _empty_value(self, item: ScoreInput, pattern: Any) -> str | None:
        """The name of an empty value (``""``, blanks or null) the pattern reads when that
        leaves it matching a text that says nothing (``x y``: ``{{ answer }}`` rendered as
        ``""``, ``\\b\\b`` or a blank), else None: such a row would pass every response."""
        row, empty = item.sample.row, []
        for name in sorted(self.template.names):
            value = item.target if name == "target" else row.get(name, 0)  # 0: not in row
            if value is None or (isinstance(value, str) and not value.strip()):
                empty.append(name)
        if not empty:
            return None
        return empty[0] if pattern.search("x y", timeout=self.spec.timeout_s) else None

    def check(self, first: ScoreInput) -> None:
        """Check the template's fields and compile the first sample's pattern.

        Raises:
            SpecError: the pattern reads ``{{ target }}`` (unguarded) and the spec has no
                target, a field the first row lacks, a pattern that does not compile, or
                a first row whose empty value leaves the pattern matching any text.
        """
        if template_needs_target(self.template):
            require_target(first, f"{self.where}: the pattern reads {{{{ target }}}} and")
        self.template.check(first.sample.row, extra=frozenset({"target"}))
        pattern = self.pattern_for(first)
        if (name := self._empty_value(first, pattern)) is not None:
            raise SpecError(
                f"{self.where}: the first sample's {name!r} is empty, so the pattern "
                f"{pattern.pattern!r} matches every response; fix the dataset row"
            )

    def check_row(self, item: ScoreInput) -> None:
        """Render and compile this sample's pattern (before any call: a pattern that one
        row's values make invalid, or that an empty value leaves matching every response,
        stops the run before anything is paid).

        Raises:
            SpecError: naming the sample: an invalid pattern, or an empty value.
            DatasetError: the template fails on this row's data.
        """
        try:
            pattern = self.pattern_for(item)
            if (name := self._empty_value(item, pattern)) is not None:
                raise SpecError(
                    f"{self.where}: the row's {name!r} is empty, so the pattern "
                    f"{pattern.pattern!r} matches every response; fill in the row's value "
                    "or fix the pattern"
                )
        except SpecError as exc:
            raise SpecError(f"{exc} (sample {item.sample.id!r})") from None
        except Exception as exc:  # the template failing on this row's data
            message = getattr(exc, "message", None) or str(exc)
            raise DatasetError(
                f"{self.where}: sample {item.sample.id!r} (line {item.sample.line}): "
                f"{type(exc).__name__}: {message}; fix the pattern or the row"
            ) from None

    def score(self, item: ScoreInput) -> Score:
        """Match the response; the detail records the pattern, the matched text and where
        it starts. A match that runs past ``timeout_s`` is a scorer error row."""
        pattern = self.pattern_for(item)
        timeout = self.spec.timeout_s
        try:
            if (name := self._empty_value(item, pattern)) is not None:
                detail = {"pattern": pattern.pattern, "matched": None}
                message = (
                    f"the row's {name!r} is empty, so the pattern matches every response: "
                    "fix the dataset row"
                )
                return scorer_error(detail, "empty_value", message)
            if self.spec.match == "fullmatch":
                m = pattern.fullmatch(item.response.strip(), timeout=timeout)
            elif self.spec.match == "last":
                m = None
                for m in pattern.finditer(item.response, timeout=timeout):  # noqa: B007
                    pass
            else:
                m = pattern.search(item.response, timeout=timeout)
        except TimeoutError:
            detail = {"pattern": pattern.pattern, "matched": None}
            message = (
                f"the pattern did not finish matching within {timeout:g} s "
                "(catastrophic backtracking?): simplify it or raise scorer.timeout_s"
            )
            return scorer_error(detail, "regex_timeout", message)
        detail = {
            "pattern": pattern.pattern,
            "matched": m.group(0) if m else None,
            "match_start": m.start() if m else None,
        }
        return Score(float(m is not None), detail)
