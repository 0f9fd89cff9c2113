"""Scorers, built from a spec's ``scorer`` section by :func:`make_scorer`."""

from __future__ import annotations

from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.spec import EvalSpec, ExactScorerSpec, NumericScorerSpec, RegexScorerSpec

__all__ = ["Score", "ScoreInput", "Scorer", "make_scorer"]


def make_scorer(spec: EvalSpec) -> Scorer:
    """Build the scorer a spec names (a :class:`~gradetrail.scorers.multi.MultiScorer`
    for ``scorers:``).

    Raises:
        SpecError: a scorer template does not compile; a judge file or baseline run
            directory cannot be read.
    """
    if spec.scorers is not None:  # several metrics: each built as its own one-scorer spec
        from gradetrail.scorers.multi import MultiScorer

        named = [
            (n.name, make_scorer(spec.model_copy(update={"scorer": n.scorer, "scorers": None})))
            for n in spec.scorers
        ]
        return MultiScorer(named, spec.primary_metric or named[0][0])
    s = spec.scorer
    if isinstance(s, ExactScorerSpec):  # each scorer's module imported only when used
        from gradetrail.scorers.exact import ExactScorer

        return ExactScorer(s)
    if isinstance(s, RegexScorerSpec):
        from gradetrail.scorers.regex import RegexScorer

        return RegexScorer(s, where=spec.source)
    if isinstance(s, NumericScorerSpec):
        from gradetrail.scorers.numeric import NumericScorer

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
    if s.type == "python":  # the user's function, imported only when named
        from gradetrail.scorers.python import make_python_scorer

        return make_python_scorer(s, spec.base_dir, spec.run.score_timeout_s)
    raise TypeError(f"unknown scorer spec {type(s).__name__}")
