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

Each name is imported from its section on first use (PEP 562), so code that needs one
section (a provider on a Ray worker needs only :class:`ModelSpec`) does not build every
section's pydantic models.
"""

import typing as _typing

from gradetrail._util.lazy import lazy_names as _lazy_names

#: public name -> the section (module) that defines it
_EXPORTS = {
    "CiSpec": "gradetrail.spec.ci",
    "MessageTemplate": "gradetrail.spec.conversation",
    "ToolCallsScorerSpec": "gradetrail.spec.conversation",
    "DatasetSpec": "gradetrail.spec.dataset",
    "label_text": "gradetrail.spec.dataset",
    "EvalSpec": "gradetrail.spec.eval",
    "spec_json_schema": "gradetrail.spec.eval",
    "apply_overrides": "gradetrail.spec.loading",
    "load_spec": "gradetrail.spec.loading",
    "parse_spec": "gradetrail.spec.loading",
    "ModelSpec": "gradetrail.spec.model",
    "PriceSpec": "gradetrail.spec.model",
    "ProviderName": "gradetrail.spec.model",
    "ReplaySource": "gradetrail.spec.model",
    "ResponseFormat": "gradetrail.spec.model",
    "SamplingParams": "gradetrail.spec.model",
    "EXECUTION_ONLY": "gradetrail.spec.run",
    "RunSettings": "gradetrail.spec.run",
    "ChoiceScorerSpec": "gradetrail.spec.scorer",
    "ExactScorerSpec": "gradetrail.spec.scorer",
    "GradeParse": "gradetrail.spec.scorer",
    "JsonParse": "gradetrail.spec.scorer",
    "JsonScorerSpec": "gradetrail.spec.scorer",
    "JsonFieldRule": "gradetrail.spec.scorer",
    "JudgeScorerSpec": "gradetrail.spec.scorer",
    "MathScorerSpec": "gradetrail.spec.scorer",
    "NumericParse": "gradetrail.spec.scorer",
    "NumericScorerSpec": "gradetrail.spec.scorer",
    "PairwiseParse": "gradetrail.spec.scorer",
    "PairwiseScorerSpec": "gradetrail.spec.scorer",
    "PythonScorerSpec": "gradetrail.spec.scorer",
    "ParseSpec": "gradetrail.spec.scorer",
    "RegexScorerSpec": "gradetrail.spec.scorer",
    "ScorerSpec": "gradetrail.spec.scorer",
    "regex_compile": "gradetrail.spec.scorer",
    "SweepSpec": "gradetrail.spec.sweep",
    "load_sweep": "gradetrail.spec.sweep",
}

if _typing.TYPE_CHECKING:  # what type checkers see; at run time, __getattr__ below
    from gradetrail.spec.ci import CiSpec
    from gradetrail.spec.conversation import MessageTemplate, ToolCallsScorerSpec
    from gradetrail.spec.dataset import DatasetSpec, label_text
    from gradetrail.spec.eval import EvalSpec, spec_json_schema
    from gradetrail.spec.loading import apply_overrides, load_spec, parse_spec
    from gradetrail.spec.model import (
        ModelSpec,
        PriceSpec,
        ProviderName,
        ReplaySource,
        ResponseFormat,
        SamplingParams,
    )
    from gradetrail.spec.run import EXECUTION_ONLY, RunSettings
    from gradetrail.spec.scorer import (
        ChoiceScorerSpec,
        ExactScorerSpec,
        GradeParse,
        JsonFieldRule,
        JsonParse,
        JsonScorerSpec,
        JudgeScorerSpec,
        MathScorerSpec,
        NumericParse,
        NumericScorerSpec,
        PairwiseParse,
        PairwiseScorerSpec,
        ParseSpec,
        PythonScorerSpec,
        RegexScorerSpec,
        ScorerSpec,
        regex_compile,
    )
    from gradetrail.spec.sweep import SweepSpec, load_sweep


# The public names, each imported from its section on first use.
__getattr__, __dir__ = _lazy_names(__name__, _EXPORTS, globals())


__all__ = [
    "EXECUTION_ONLY",
    "ChoiceScorerSpec",
    "CiSpec",
    "DatasetSpec",
    "EvalSpec",
    "ExactScorerSpec",
    "GradeParse",
    "JsonFieldRule",
    "JsonParse",
    "JsonScorerSpec",
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
    "PythonScorerSpec",
    "RegexScorerSpec",
    "ReplaySource",
    "ResponseFormat",
    "RunSettings",
    "SamplingParams",
    "ToolCallsScorerSpec",
    "ScorerSpec",
    "SweepSpec",
    "apply_overrides",
    "label_text",
    "load_spec",
    "load_sweep",
    "parse_spec",
    "regex_compile",
    "spec_json_schema",
]
