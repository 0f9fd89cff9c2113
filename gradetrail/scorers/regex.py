"""The ``regex`` scorer: a per-sample pattern template; rendered values are escaped.

Patterns run on the ``regex`` package (Python ``re`` syntax, version 0 semantics), whose
``timeout=`` bounds each match: a pattern that backtracks catastrophically on a response
(``(a+)+$`` on a long run of ``a``) stops after ``scorer.timeout_s`` and the row records a
scorer error (``error.kind: scorer_error``, ``reason: regex_timeout``) instead of hanging
the run.
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
        import regex  # imported by runs that use this scorer only

        self._regex = regex
        self.flags = (regex.IGNORECASE if spec.ignore_case else 0) | regex.VERSION0
        self._compile = lru_cache(maxsize=4096)(self._compile_uncached)

    def _compile_uncached(self, pattern: str) -> Any:
        if not pattern:  # a row's empty value ({{ answer }}, a blank CSV cell)
            raise SpecError(
                f"{self.where}: the pattern renders empty, which matches every response; "
                "fill in the row's value or fix the pattern"
            )
        try:
            return self._regex.compile(pattern, self.flags)
        except self._regex.error as exc:
            raise SpecError(
                f"{self.where}: invalid regex {pattern!r}: {exc}; fix the pattern"
            ) from None

    def pattern_for(self, item: ScoreInput) -> Any:
        """The compiled pattern for one sample. Raises SpecError on an invalid regex, or
        one that renders empty (it would match every response)."""
        context = {**item.sample.row, "target": item.target}
        return self._compile(self.template.render(context))

    def check(self, first: ScoreInput) -> None:
        """Check the template's fields and compile the first sample's pattern.

        Raises:
            SpecError: the pattern reads ``{{ target }}`` (unguarded) and the spec has no
                target, a field the first row lacks, or a pattern that does not compile.
        """
        if template_needs_target(self.template):
            require_target(first, f"{self.where}: the pattern reads {{{{ target }}}} and")
        self.template.check(first.sample.row, extra=frozenset({"target"}))
        self.pattern_for(first)

    def check_row(self, item: ScoreInput) -> None:
        """Render and compile this sample's pattern (before any call: a pattern that one
        row's values make invalid stops the run before anything is paid)."""
        try:
            self.pattern_for(item)
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
