"""gradetrail: LLM evals that behave like tests: declarative, cached, reproducible.

The public Python API; everything the CLI does goes through these names::

    import gradetrail

    spec = gradetrail.load_spec("examples/gsm8k.yaml", overrides=["model.name=175b_finetuning"])
    result = gradetrail.run_eval(spec, results_root="results")
    rows = gradetrail.read_results(result.run_dir)
"""

from gradetrail._version import __version__
from gradetrail.agreement import cohen_kappa, measure_agreement
from gradetrail.cache import ResponseCache, default_cache_path
from gradetrail.errors import (
    CacheError,
    DatasetError,
    GradetrailError,
    JudgeError,
    ProviderError,
    RunError,
    SpecError,
    UsageError,
)
from gradetrail.executors.ray import RayOptions
from gradetrail.gate import GateError, GateResult, regression_gate
from gradetrail.providers.base import Provider, Request, Response
from gradetrail.reducers import pass_at_k
from gradetrail.results import (
    SampleResult,
    SampleScore,
    list_runs,
    read_manifest,
    read_results,
    read_samples,
)
from gradetrail.runner import RunPlan, RunResult, plan_run, run_eval
from gradetrail.scorers.base import Score, ScoreInput, Scorer
from gradetrail.spec import EvalSpec, load_spec, spec_json_schema
from gradetrail.stats import PowerPlan, plan_power

__all__ = [
    "CacheError",
    "DatasetError",
    "EvalSpec",
    "GateError",
    "GateResult",
    "GradetrailError",
    "JudgeError",
    "PowerPlan",
    "Provider",
    "RayOptions",
    "ProviderError",
    "Request",
    "Response",
    "ResponseCache",
    "RunError",
    "RunPlan",
    "RunResult",
    "SampleResult",
    "SampleScore",
    "Score",
    "ScoreInput",
    "Scorer",
    "SpecError",
    "UsageError",
    "__version__",
    "cohen_kappa",
    "default_cache_path",
    "list_runs",
    "load_spec",
    "measure_agreement",
    "pass_at_k",
    "plan_power",
    "plan_run",
    "read_manifest",
    "read_results",
    "read_samples",
    "regression_gate",
    "run_eval",
    "spec_json_schema",
]
