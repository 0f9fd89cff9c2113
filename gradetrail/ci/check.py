"""One eval as one CI check: run it through the normal runner and cache, then hold the run
against what the check requires (a minimum score on the interval's lower bound, and/or
non-inferiority to a stored baseline run). The pytest plugin and
:func:`gradetrail.testing.assert_eval` are both this function."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from gradetrail.analysis.gate import GateResult
    from gradetrail.ci.threshold import ThresholdResult
    from gradetrail.engine.runner import RunResult
    from gradetrail.spec import EvalSpec

__all__ = ["EvalCheck", "check_eval"]

#: regressed sample ids a failure report lists before counting the rest
SHOWN_IDS = 10


@dataclass
class EvalCheck:
    """The outcome of one CI check of an eval.

    Attributes:
        run: the run (its directory, manifest and tally).
        threshold: the ``min_score`` check, or None when none was asked.
        gate: the gate against the baseline, or None when none was asked.
        problems: why the check failed, one line each; empty when it passed.
    """

    run: RunResult
    threshold: ThresholdResult | None = None
    gate: GateResult | None = None
    problems: list[str] = field(default_factory=list)

    @property
    def passed(self) -> bool:
        """True when nothing failed."""
        return not self.problems

    def report(self) -> str:
        """The failure report: the problems (a missed min score with its interval), the
        run's summary lines and, after a gate, its interval and the samples that regressed
        (the first few, then a count)."""
        from gradetrail._util.terminal import clean
        from gradetrail.report.run import summary_lines

        lines = [f"eval {self.run.manifest.name}: " + ("passed" if self.passed else "FAILED")]
        lines += [f"  {clean(p)}" for p in self.problems]
        lines += [f"  {label:<11} {clean(text)}" for label, text in summary_lines(self.run)]
        if self.gate is not None:
            g = self.gate
            verdict = "PASS" if g.passed else "FAIL"
            lines.append(
                f"  {'gate':<11} {verdict}: {g.confidence:.0%} interval [{g.lo:+.4f}, "
                f"{g.hi:+.4f}] against margin {g.margin:g}, baseline {g.baseline}"
            )
            if g.regressed:
                shown = ", ".join(clean(sid) for sid in g.regressed[:SHOWN_IDS])
                more = len(g.regressed) - SHOWN_IDS
                tail = f", ... {more} more" if more > 0 else ""
                lines.append(f"  {'regressed':<11} {len(g.regressed)}: {shown}{tail}")
        return "\n".join(lines)


def check_eval(
    spec: EvalSpec | str | Path,
    *,
    min_score: float | None = None,
    baseline: str | Path | None = None,
    margin: float | None = None,
    overrides: list[str] | None = None,
    results_root: str | Path = "results",
    cache_path: str | Path | None = None,
) -> EvalCheck:
    """Run ``spec`` (cached, as ``gradetrail run`` does) and check the run.

    What is required comes from the arguments, else from the spec's ``ci:`` section:
    ``min_score`` (the run's 95% CI lower bound must reach it) and ``baseline`` (a run
    directory the run must be non-inferior to at ``margin``, by
    :func:`gradetrail.regression_gate`; a relative path in the spec is relative to the
    spec file, one given here to the working directory). Every check also requires a
    complete run with at least one scored sample.

    Args:
        spec: a loaded spec, or the path of a spec file.
        min_score: the threshold, overriding ``ci.min_score``.
        baseline: the baseline run directory, overriding ``ci.baseline``.
        margin: the gate's margin, overriding ``ci.margin`` (default 0.02).
        overrides: ``--set`` strings applied when ``spec`` is a path.
        results_root: where run directories go.
        cache_path: the response cache (default: as ``gradetrail run``).

    Raises:
        SpecError, DatasetError, ProviderError, RunError: the eval cannot run at all (as
            ``gradetrail run`` would refuse it). A gate that cannot compare is a problem
            of the check, not an exception.
    """
    from gradetrail.analysis.gate import regression_gate
    from gradetrail.ci.threshold import check_min_score
    from gradetrail.engine.runner import run_eval
    from gradetrail.errors import GradetrailError
    from gradetrail.spec import load_spec

    if not hasattr(spec, "model_dump"):
        spec = load_spec(Path(spec), list(overrides or []))
    ci = spec.ci
    run = run_eval(
        spec,
        results_root=results_root,
        cache_path=cache_path,
        overrides=list(overrides or []),
    )
    check = EvalCheck(run)
    status = run.manifest.status
    if status != "complete":
        check.problems.append(f"the run is {status}, not complete")
    if not run.tally.counts.get("scored"):
        check.problems.append("no sample scored")
    threshold = min_score if min_score is not None else (ci.min_score if ci else None)
    if threshold is not None:
        check.threshold = check_min_score(run.manifest.score, threshold)
        if not check.threshold.passed:
            check.problems.append(f"min score {check.threshold.message()}")
    if baseline is None and ci is not None and ci.baseline is not None:
        baseline = spec.resolve(ci.baseline)
    if baseline is not None:
        chosen_margin = margin if margin is not None else (ci.margin if ci else 0.02)
        confidence = ci.confidence if ci else 0.95
        try:
            check.gate = regression_gate(
                baseline, run.run_dir, margin=chosen_margin, confidence=confidence
            )
        except GradetrailError as exc:
            check.problems.append(f"gate cannot compare: {exc}")
        else:
            if not check.gate.passed:
                check.problems.append(
                    f"not non-inferior to {baseline}: lower bound {check.gate.lo:+.4f} < "
                    f"{-check.gate.margin:g}"
                )
    return check
