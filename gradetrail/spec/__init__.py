"""The eval spec: pydantic models of the YAML file, loading, overrides and validation.

A spec is loaded in three steps, each of which can fail with a one-line
:class:`~gradetrail.errors.SpecError` (exit code 2) naming the file, the field and the fix:

1. YAML parsing, then ``--set dotted.key=value`` overrides applied to the raw mapping;
2. pydantic validation (unknown keys get a "did you mean");
3. :func:`check_against_row`: every template and pattern is rendered against the
   dataset's first row, so a missing field or a bad regex stops the run before any
   model call.

One module a section: ``dataset`` (:class:`DatasetSpec`), ``model`` (:class:`ModelSpec`
and its params, recordings, price), ``scorer`` (every scorer and judge parse spec),
``run`` (:class:`RunSettings`), ``ci`` (:class:`CiSpec`), ``eval`` (:class:`EvalSpec`,
the JSON Schema), ``loading`` (:func:`load_spec`, the one entry, with overrides and safe YAML) and
``field_errors`` (validation errors as one line each). Import from ``gradetrail.spec``.
"""

from gradetrail.spec.ci import CiSpec
from gradetrail.spec.conversation import MessageTemplate, ToolCallsScorerSpec
from gradetrail.spec.dataset import DatasetSpec, label_text
from gradetrail.spec.eval import EvalSpec, spec_json_schema
from gradetrail.spec.loading import apply_overrides, load_spec, parse_spec
from gradetrail.spec.model import ModelSpec, PriceSpec, ProviderName, ReplaySource, SamplingParams
from gradetrail.spec.run import EXECUTION_ONLY, RunSettings
from gradetrail.spec.scorer import (
    ChoiceScorerSpec,
    ExactScorerSpec,
    GradeParse,
    JsonParse,
    JudgeScorerSpec,
    MathScorerSpec,
    NumericParse,
    NumericScorerSpec,
    PairwiseParse,
    PairwiseScorerSpec,
    ParseSpec,
    RegexScorerSpec,
    ScorerSpec,
    regex_compile,
)

__all__ = [
    "EXECUTION_ONLY",
    "ChoiceScorerSpec",
    "CiSpec",
    "DatasetSpec",
    "EvalSpec",
    "ExactScorerSpec",
    "GradeParse",
    "JsonParse",
    "JudgeScorerSpec",
    "MathScorerSpec",
    "MessageTemplate",
    "ModelSpec",
    "NumericParse",
    "NumericScorerSpec",
    "PairwiseParse",
    "PairwiseScorerSpec",
    "ParseSpec",
    "PriceSpec",
    "ProviderName",
    "RegexScorerSpec",
    "ReplaySource",
    "RunSettings",
    "SamplingParams",
    "ToolCallsScorerSpec",
    "ScorerSpec",
    "apply_overrides",
    "label_text",
    "load_spec",
    "parse_spec",
    "regex_compile",
    "spec_json_schema",
]
