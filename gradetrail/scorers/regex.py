"""The ``regex`` scorer: a per-sample pattern template; rendered values are escaped."""

from __future__ import annotations

import re
from functools import lru_cache

from gradetrail.errors import DatasetError, SpecError
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.spec import RegexScorerSpec, regex_compile
from gradetrail.templates import compile_template

__all__ = ["RegexScorer"]


class RegexScorer(Scorer):
    """1.0 when the sample's pattern matches the response (``re.search``, or
    ``re.fullmatch`` on the stripped response), else 0.0. The rendered pattern and the
    matched text are recorded.

    Args:
        spec: the scorer section.
        where: names the spec file in errors.
    """

    def __init__(self, spec: RegexScorerSpec, where: str = "spec") -> None:
        self.spec = spec
        self.where = f"{where}: scorer.pattern"
        self.template = compile_template(spec.pattern, self.where, regex=True)
        self.flags = re.IGNORECASE if spec.ignore_case else 0
        self._compile = lru_cache(maxsize=4096)(self._compile_uncached)

    def _compile_uncached(self, pattern: str) -> re.Pattern[str]:
        return regex_compile(pattern, self.flags, self.where)

    def pattern_for(self, item: ScoreInput) -> re.Pattern[str]:
        """The compiled pattern for one sample. Raises SpecError on an invalid regex."""
        context = {**item.sample.row, "target": item.target}
        return self._compile(self.template.render(context))

    def check(self, first: ScoreInput) -> None:
        """Check the template's fields and compile the first sample's pattern."""
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
        """Match the response; the detail records the pattern and the matched text."""
        pattern = self.pattern_for(item)
        if self.spec.match == "fullmatch":
            m = pattern.fullmatch(item.response.strip())
        else:
            m = pattern.search(item.response)
        return Score(
            float(m is not None), {"pattern": pattern.pattern, "matched": m.group(0) if m else None}
        )
