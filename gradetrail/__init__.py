"""gradetrail: LLM evals that behave like tests: declarative, cached, reproducible.

The public Python API; everything the CLI does goes through these names::

    import gradetrail

    spec = gradetrail.load_spec("examples/gsm8k.yaml", overrides=["model.name=175b_finetuning"])
    result = gradetrail.run_eval(spec, results_root="results")
    rows = gradetrail.read_results(result.run_dir)
"""

import typing as _typing

from gradetrail._util.lazy import lazy_names as _lazy_names
from gradetrail._version import __version__

#: public name -> the module that defines it. Imported on first use (PEP 562), so
#: ``import gradetrail`` (and every ``gradetrail`` command, which imports it first) pays
#: only for what it touches: ``gradetrail run`` never imports the gate, and nothing
#: imports scipy until a statistic needs it.
_EXPORTS = {
    "cohen_kappa": "gradetrail.stats.agreement",
    "measure_agreement": "gradetrail.stats.agreement",
    "ResponseCache": "gradetrail.cache.store",
    "default_cache_path": "gradetrail.cache.store",
    "CacheError": "gradetrail.errors",
    "DatasetError": "gradetrail.errors",
    "GradetrailError": "gradetrail.errors",
    "JudgeError": "gradetrail.errors",
    "ProviderError": "gradetrail.errors",
    "RunError": "gradetrail.errors",
    "SpecError": "gradetrail.errors",
    "UsageError": "gradetrail.errors",
    "RayOptions": "gradetrail.executors.ray",
    "GateError": "gradetrail.analysis.gate",
    "GateResult": "gradetrail.analysis.gate",
    "regression_gate": "gradetrail.analysis.gate",
    "SweepTable": "gradetrail.analysis.sweep",
    "sweep_table": "gradetrail.analysis.sweep",
    "run_sweep": "gradetrail.engine.sweep",
    "load_sweep": "gradetrail.spec.sweep",
    "Provider": "gradetrail.providers.base",
    "Request": "gradetrail.providers.base",
    "Response": "gradetrail.providers.base",
    "pass_at_k": "gradetrail.stats.reducers",
    "SampleResult": "gradetrail.rundir.results",
    "SampleScore": "gradetrail.rundir.results",
    "list_runs": "gradetrail.rundir.results",
    "read_manifest": "gradetrail.rundir.results",
    "read_results": "gradetrail.rundir.results",
    "read_samples": "gradetrail.rundir.results",
    "RunPlan": "gradetrail.engine.runner",
    "RunResult": "gradetrail.engine.runner",
    "plan_run": "gradetrail.engine.runner",
    "run_eval": "gradetrail.engine.runner",
    "Score": "gradetrail.scorers.base",
    "ScoreInput": "gradetrail.scorers.base",
    "ScoredSample": "gradetrail.scorers.python",
    "Scorer": "gradetrail.scorers.base",
    "EvalSpec": "gradetrail.spec",
    "load_spec": "gradetrail.spec",
    "spec_json_schema": "gradetrail.spec",
    "PowerPlan": "gradetrail.stats.intervals",
    "plan_power": "gradetrail.stats.intervals",
}

if _typing.TYPE_CHECKING:  # what type checkers and IDEs see; at run time, __getattr__ below
    from gradetrail.analysis.gate import GateError, GateResult, regression_gate
    from gradetrail.analysis.sweep import SweepTable, sweep_table
    from gradetrail.cache.store import ResponseCache, default_cache_path
    from gradetrail.engine.runner import RunPlan, RunResult, plan_run, run_eval
    from gradetrail.engine.sweep import run_sweep
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
    from gradetrail.providers.base import Provider, Request, Response
    from gradetrail.rundir.results import (
        SampleResult,
        SampleScore,
        list_runs,
        read_manifest,
        read_results,
        read_samples,
    )
    from gradetrail.scorers.base import Score, ScoreInput, Scorer
    from gradetrail.scorers.python import ScoredSample
    from gradetrail.spec import EvalSpec, load_spec, spec_json_schema
    from gradetrail.spec.sweep import load_sweep
    from gradetrail.stats.agreement import cohen_kappa, measure_agreement
    from gradetrail.stats.intervals import PowerPlan, plan_power
    from gradetrail.stats.reducers import pass_at_k


__getattr__, __dir__ = _lazy_names(__name__, _EXPORTS, globals())


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
    "ScoredSample",
    "Scorer",
    "SpecError",
    "SweepTable",
    "UsageError",
    "__version__",
    "cohen_kappa",
    "default_cache_path",
    "list_runs",
    "load_spec",
    "load_sweep",
    "measure_agreement",
    "pass_at_k",
    "plan_power",
    "plan_run",
    "read_manifest",
    "read_results",
    "read_samples",
    "regression_gate",
    "run_eval",
    "run_sweep",
    "spec_json_schema",
    "sweep_table",
]
