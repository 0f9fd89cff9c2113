"""Scorers, built from a spec's ``scorer`` section by :func:`make_scorer`."""

from __future__ import annotations

from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.scorers.exact import ExactScorer
from gradetrail.scorers.numeric import NumericScorer
from gradetrail.scorers.regex import RegexScorer
from gradetrail.spec import EvalSpec, ExactScorerSpec, NumericScorerSpec, RegexScorerSpec

__all__ = ["Score", "ScoreInput", "Scorer", "make_scorer"]


def make_scorer(spec: EvalSpec) -> Scorer:
    """Build the scorer a spec names.

    Raises:
        SpecError: a scorer template does not compile; a judge file or baseline run
            directory cannot be read.
    """
    s = spec.scorer
    if isinstance(s, ExactScorerSpec):
        return ExactScorer(s)
    if isinstance(s, RegexScorerSpec):
        return RegexScorer(s, where=spec.source)
    if isinstance(s, NumericScorerSpec):
        return NumericScorer(s)
    if s.type == "choice":
        from gradetrail.scorers.choice import ChoiceScorer

        return ChoiceScorer(s)
    if s.type == "math":  # math-verify imported only when used
        from gradetrail.scorers.math import MathScorer

        return MathScorer(s)
    if s.type == "judge":  # judges imported only when used
        from gradetrail.scorers.judge import JudgeScorer

        return JudgeScorer(spec)
    if s.type == "tool_calls":
        from gradetrail.scorers.tool_calls import ToolCallsScorer

        return ToolCallsScorer(s)
    if s.type == "json":
        from gradetrail.scorers.json_answer import JsonScorer

        return JsonScorer(s, spec.model.response_format)
    if s.type == "pairwise":
        from gradetrail.scorers.pairwise import PairwiseScorer

        return PairwiseScorer(spec)
    raise TypeError(f"unknown scorer spec {type(s).__name__}")
