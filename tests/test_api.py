"""The public API: what `gradetrail` exports is what `__all__` says."""

from __future__ import annotations

import subprocess
import sys

import gradetrail


def test_all_names_exist_and_are_documented() -> None:
    """Every name in __all__ is importable from the package and has a docstring."""
    for name in gradetrail.__all__:
        obj = getattr(gradetrail, name)
        if callable(obj):
            assert obj.__doc__, f"{name} has no docstring"


def test_all_lists_every_public_name() -> None:
    """No public name is exported without being in __all__ (modules aside), whether or
    not it has been imported yet (the package imports its names on first use)."""
    import types

    public = {
        n
        for n in dir(gradetrail)
        if not n.startswith("_") and not isinstance(getattr(gradetrail, n), types.ModuleType)
    }
    assert public == set(gradetrail.__all__) - {"__version__"}


def test_import_does_not_load_sdks_or_scipy() -> None:
    """Importing gradetrail (and running the CLI module) stays lean: no SDK, no scipy."""
    code = (
        "import sys, gradetrail, gradetrail.cli, gradetrail.engine.runner;"
        "print(sorted(m for m in ('openai','anthropic','scipy','ray') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_ray_workers_module_imports_only_what_a_call_needs() -> None:
    """Importing the Ray worker's module (what each worker process imports) loads no
    runner, cache, scorers, statistics or dataset loaders, and of the spec's sections only
    the model's (a provider holds its ModelSpec)."""
    code = (
        "import sys, gradetrail.executors._ray_worker;"
        "print(sorted(m for m in ('gradetrail.engine.runner', 'gradetrail.cache.store',"
        " 'gradetrail.scorers', 'gradetrail.stats.intervals', 'gradetrail.stats.agreement',"
        " 'gradetrail.datasets', 'gradetrail.rundir.results',"
        " 'gradetrail.spec.eval', 'gradetrail.spec.scorer', 'gradetrail.spec.loading',"
        " 'jinja2', 'numpy') if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_a_spec_python_scorer_receives_the_exported_scored_sample(tmp_path) -> None:  # noqa: ANN001
    """``scorer: {type: python}`` calls the function with ``gradetrail.ScoredSample`` (the
    public name, so a user can annotate with it); ``run_eval(scorer=fn)`` calls ``fn``
    with ``gradetrail.ScoreInput``."""
    from gradetrail.datasets import Sample
    from gradetrail.scorers.function import as_scorer
    from gradetrail.scorers.python import make_python_scorer
    from gradetrail.spec import PythonScorerSpec

    (tmp_path / "api_grading.py").write_text(
        "import gradetrail\n"
        "def score(sample: gradetrail.ScoredSample) -> gradetrail.Score:\n"
        "    return gradetrail.Score(1.0, {'type': type(sample).__name__,\n"
        "        'exported': isinstance(sample, gradetrail.ScoredSample)})\n"
    )
    spec = PythonScorerSpec(type="python", function="api_grading:score")
    item = gradetrail.ScoreInput(Sample(0, "s1", {"q": "x"}, 1), 1, "p", None, "4", "A: 4")
    detail = make_python_scorer(spec, tmp_path, None).score(item).detail
    assert detail["type"] == "ScoredSample" and detail["exported"] is True
    assert gradetrail.ScoredSample.__module__ == "gradetrail.scorers.python"

    seen: list[type] = []
    as_scorer(lambda got: seen.append(type(got)) or 1.0).score(item)
    assert seen == [gradetrail.ScoreInput]
