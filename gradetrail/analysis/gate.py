"""The regression gate: may a candidate run ship, compared with a baseline run?

Each run's epochs are reduced per sample by its own ``run.reducer`` (what its summary
reports; :mod:`gradetrail.analysis.gate_runs`), then the difference delta = mean(candidate) -
mean(baseline) gets a two-sided confidence interval and a test
(:mod:`gradetrail.stats.hypotheses`): ``non-inferiority`` (default; pass iff the lower bound >=
-margin), ``superiority`` or ``equivalence`` (TOST).

Paired (the default: samples matched by sample id), the interval is

- ``tango``: binary per-sample scores, no clusters (Tango 1998 score interval; honest at
  small n and with no discordant pairs, where the Wald interval collapses to a point);
  with clusters too when every paired difference is equal (the clustering cannot be
  estimated), on the G clusters, one pair a cluster;
- ``t``: otherwise (paired t, clustered CR1 with ``dataset.cluster_field``);
- ``z``: the seed formula (paired z, Miller eq. 7-8), on request;
- ``zero-failure``: in place of a t or z interval of zero width (every paired difference
  equal, as identical runs give): the distribution-free zero-failure bound (Hanley &
  Lippman-Hand 1983, JAMA 249:1743; :func:`gradetrail.stats.intervals.zero_failure_interval`),
  on the n samples or G clusters; identical runs pass non-inferiority at margin m exactly
  when (1 - m)^n <= alpha.

Unpaired (``unpaired=True``, runs on different samples; Miller eq. 5-6):

- ``newcombe``: binary scores (Newcombe 1998 hybrid score interval);
- ``welch``: otherwise (Welch t on SE = sqrt(SE_A^2 + SE_B^2));
- ``z``: Miller eq. 5-6 as written, on request;
- ``zero-failure``: in place of either when a run is constant (below).

A t, z or Welch interval whose standard error is 0 is [delta, delta], which is not
certainty; so is one with a standard error below 10 machine epsilons of the size of the
scores (equal values up to rounding, SE ~1e-17; R's ``t.test``'s "essentially constant"
data). Paired, the gate then takes the zero-failure bound above. Unpaired, a run whose
scores are all equal (up to rounding; non-binary, or with ``--method welch`` or ``z``) has
a standard error of 0, and a Welch or z interval would take its mean as exact (3 samples
all 0.5 as certain as 3000); its interval is then ``zero-failure``
(:func:`gradetrail.stats.intervals.unpaired_bound_interval`): each run's mean bounded
one-sided at alpha/2, a constant run's by the zero-failure bound, the other's by t, and the
two combined by Bonferroni's inequality. Two equal constant runs of n samples each pass
non-inferiority at margin m exactly when (1 - m)^n <= alpha/2.

Binary scores tested against a null boundary of 0 (``superiority`` at margin 0, or
``non-inferiority`` at margin 0) are also held to the exact one-sided test, and the
verdict is never more liberal than it (:attr:`GateResult.exact_p`): paired, McNemar's exact
conditional test (McNemar 1947, Psychometrika 12:153-157; the discordant pairs binomial
at 1/2, as R's ``binom.test``), unpaired, Fisher's exact test (Fisher 1935, J. Royal
Statistical Society 98:39-82; R's ``fisher.test(alternative = "greater")``). The exact
tests, not their mid-p versions: mid-p is less conservative and can fall below alpha
where the exact test does not (0/5 vs 5/5 paired: exact p = 1/32 = 0.031 > 0.025, mid-p
0.016), and the gate must not pass there. Tango's and Newcombe's intervals alone would.
With a positive margin no exact test of the same hypothesis is used: the score interval
decides. Several pairs at once (:func:`gate_family`) are one family
with Holm-adjusted p-values. A verdict explains itself (:attr:`GateResult.reason`): the
interval's half-width against the margin, the minimum detectable effect at this n (Miller
eq. 10), the n that ``gradetrail power`` says would be needed, and the samples that
regressed and improved.

When runs cannot be compared the gate raises :class:`GateError` (exit code 2) with a
one-line message that says what to fix.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Callable, Collection, Sequence
from dataclasses import asdict, dataclass, replace
from pathlib import Path
from typing import Any, Literal

from gradetrail.analysis import gate_runs
from gradetrail.analysis.gate_runs import GateError, GateRun
from gradetrail.rundir.agreement import copied_from, misnamed
from gradetrail.rundir.manifest import identity_differences
from gradetrail.stats import hypotheses
from gradetrail.stats import intervals as stats
from gradetrail.stats.hypotheses import TestKind

__all__ = [
    "ErrorPolicy",
    "GateError",
    "GateFamily",
    "GateResult",
    "Method",
    "correct_family",
    "gate_family",
    "needed_line",
    "regression_gate",
]

Method = Literal["auto", "tango", "t", "z", "welch", "newcombe"]
ErrorPolicy = Literal["refuse", "as-fail", "exclude"]

_PAIRED_METHODS = ("auto", "tango", "t", "z")
_UNPAIRED_METHODS = ("auto", "welch", "newcombe", "z")
_ERROR_POLICIES: tuple[str, ...] = ("refuse", "as-fail", "exclude")
#: the power the gate's explanation plans for (Miller eq. 9-10), as `gradetrail power`
_POWER = 0.8


@dataclass(frozen=True)
class GateResult:
    """The verdict of one gate comparison, and everything it was computed from.

    The difference is candidate - baseline, so `delta` > 0 means the candidate scored
    higher. Scores are per sample, each run's epochs reduced by `reducer` (pass@`pass_k`
    for pass_at_k). Fields in the order a report reads them:

    Attributes:
        passed: the verdict of `test` (see :mod:`gradetrail.stats.hypotheses`); within a family
            of several comparisons, ``p_adjusted <= alpha``.
        delta, lo, hi: the difference and its two-sided interval at `confidence`; when
            every score lies in [0, 1], clipped to [-1, 1], the possible range of their
            difference (see :func:`gradetrail.stats.intervals.clip_interval`).
        unclipped: (lo, hi) before clipping when the method's interval reached past
            [-1, 1] (a t or z interval at small n), else None; the verdict, the p-value
            and `half_width` use these bounds.
        se: the standard error of the difference (for tango and newcombe the Wald SE, for
            reference only: those intervals do not use it).
        n: samples compared: the paired samples, or n_baseline + n_candidate unpaired.
        n_clusters: clusters of a clustered interval, else None.
        epochs: (baseline epochs, candidate epochs).
        baseline_mean, candidate_mean: the two means over the compared samples.
        only_baseline, only_candidate: paired binary scores only: samples only that run
            passed (else None); `mcnemar_p` their exact McNemar p-value.
        correlation: Pearson correlation of the paired scores (None unpaired or constant).
        margin: the margin of the test, on the score scale (>= 0).
        confidence: two-sided confidence of the interval; each one-sided test is at
            `alpha` = (1 - confidence) / 2.
        method: "tango", "t", "z" (paired) or "newcombe", "welch", "z" (unpaired).
        missing_in_baseline: samples only the candidate has (not compared when paired),
            and `missing_in_candidate` vice versa.
        errors, n_errors_handled, errored_samples: the error policy ("refuse"; "as-fail":
            the candidate's error rows scored 0, the baseline's left out of its epochs;
            "exclude": dropped from both runs) and the samples with an error row.
        baseline, candidate: the run directories.
        warnings: things the reader should know that did not stop the gate.
        regressed, improved: paired samples whose score is lower (higher) in the
            candidate, in the baseline's order (all of them; a report shows a few).
        test: "non-inferiority", "superiority" or "equivalence".
        unpaired: True for an unpaired comparison (Miller eq. 5-6).
        reducer, pass_k: how epochs became per-sample scores.
        n_baseline, n_candidate: samples from each run in the comparison.
        alpha: the one-sided level of each test.
        bounds: the null boundaries the interval is held against ((-margin, None) for
            non-inferiority, (margin, None) superiority, (-margin, margin) equivalence).
        p_value: the test's one-sided p-value (TOST: the larger of its two).
        p_adjusted: Holm-adjusted p-value within `family` (None for a single comparison).
        family: the family the comparison was corrected in, e.g. "Holm over 3
            comparisons", or None.
        family_size: comparisons in the family (1 alone).
        half_width: (hi - lo) / 2 of the unclipped interval.
        omega2: the variance of the per-sample difference (paired) or var_A + var_B
            (unpaired), Miller's omega^2, from the data.
        mde: the minimum detectable effect at this n (Miller eq. 10, power 0.8, two-sided
            alpha 1 - confidence, omega2 times `design_effect`), None when omega2 is 0.
        n_needed: samples (per run, unpaired) that would reach the verdict's bound with
            power 0.8 if the true difference were 0 (superiority: if it were `delta`),
            as ``gradetrail power`` computes it; None when no n would (the whole
            interval past the margin).
        power_command: the ``gradetrail power`` command that gives `n_needed`.
        reason: one line saying why the comparison passed or failed.
        identity_differences: where the two runs' identities differ (spec keys, dataset
            hash, file hashes; see :func:`gradetrail.rundir.manifest.identity_differences`),
            empty when they match.
        paired: all n paired sample ids, in the baseline's order (empty when unpaired).
        exact_p: binary scores tested against a null boundary of 0 (superiority, or
            non-inferiority at margin 0): the exact one-sided p-value (paired: McNemar's
            exact conditional test, the discordant pairs binomial at 1/2; unpaired:
            Fisher's exact test), which the verdict may never be more liberal than (the
            comparison fails when it exceeds `alpha`); None otherwise.
        metric: the metric gated (``--metric``), or None for the runs' primary score.
        design_effect: a clustered t or z interval's variance over the one that ignores
            the clusters (CR1 SE^2 over omega2 / n; Kish's deff, measured), which the
            detectable effect and the n needed are planned with; None unclustered.
        quantity: what each run's per-sample score is, in words: "mean score", or for
            runs of a ``pairwise`` scorer the win rate against its baseline, each sample
            weighed once, which is the summary's win rate (under Arena-Hard's battles,
            not its leaderboard's pooled battle rate: the summary's ``battles`` line).
        outcome: "pass"; "fail" when the whole interval lies on the failing side of the
            margin (a regression past it, or for superiority no gain past it: more
            samples would not pass); else "inconclusive" (more samples could pass:
            `n_needed`). Both failures exit 1; CI tells them apart here.
    """

    passed: bool
    delta: float
    lo: float
    hi: float
    se: float
    n: int
    n_clusters: int | None
    epochs: tuple[int, int]
    baseline_mean: float
    candidate_mean: float
    only_baseline: int | None
    only_candidate: int | None
    correlation: float | None
    margin: float
    confidence: float
    method: str
    mcnemar_p: float | None
    missing_in_baseline: tuple[str, ...]
    missing_in_candidate: tuple[str, ...]
    errors: str
    n_errors_handled: int
    errored_samples: tuple[str, ...]
    baseline: str
    candidate: str
    warnings: tuple[str, ...] = ()
    regressed: tuple[str, ...] = ()
    improved: tuple[str, ...] = ()
    test: str = "non-inferiority"
    unpaired: bool = False
    reducer: str = "mean"
    pass_k: int | None = None
    n_baseline: int = 0
    n_candidate: int = 0
    alpha: float = 0.025
    bounds: tuple[float | None, ...] = ()
    p_value: float | None = None
    p_adjusted: float | None = None
    family: str | None = None
    family_size: int = 1
    half_width: float = math.nan
    unclipped: tuple[float, float] | None = None
    omega2: float | None = None
    mde: float | None = None
    n_needed: int | None = None
    power_command: str | None = None
    reason: str = ""
    identity_differences: tuple[str, ...] = ()
    paired: tuple[str, ...] = ()
    exact_p: float | None = None
    metric: str | None = None
    outcome: Literal["pass", "fail", "inconclusive"] = "inconclusive"
    design_effect: float | None = None
    quantity: str = "mean score"

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data: tuples become lists, NaN becomes None."""
        return {key: _json_value(value) for key, value in asdict(self).items()}


@dataclass(frozen=True)
class GateFamily:
    """Several comparisons gated at once, Holm-corrected as one family.

    Attributes:
        results: one :class:`GateResult` per (baseline, candidate) pair, in the order
            given, each with its `p_adjusted` and a `passed` decided by it.
        correction: "holm", "bonferroni" or "none" (one comparison, or uncorrected).
        alpha: the family-wise one-sided level.
        passed: every comparison passed.
    """

    results: tuple[GateResult, ...]
    correction: str
    alpha: float

    @property
    def passed(self) -> bool:
        """Every comparison in the family passed."""
        return all(r.passed for r in self.results)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready: ``passed``, ``family`` (correction, size, alpha), ``results``."""
        return {
            "passed": self.passed,
            "family": {
                "correction": self.correction,
                "size": len(self.results),
                "alpha": self.alpha,
            },
            "results": [r.to_dict() for r in self.results],
        }


def _json_value(value: Any) -> Any:
    if isinstance(value, tuple):
        return [_json_value(v) for v in value]
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def regression_gate(
    baseline: Path | str,
    candidate: Path | str,
    margin: float | None = None,
    confidence: float = 0.95,
    method: Method = "auto",
    errors: ErrorPolicy = "refuse",
    allow_different_data: bool = False,
    allow_partial: bool = False,
    *,
    test: TestKind = "non-inferiority",
    unpaired: bool = False,
    reducer: str | None = None,
    pass_k: int | None = None,
    metric: str | None = None,
    samples: Collection[str] | None = None,
    allow_different_splits: bool = False,
    allow_different_scorers: bool = False,
    fail_errors_of: Literal["candidate", "baseline"] = "candidate",
) -> GateResult:
    """Gate `candidate` against `baseline` (see the module docstring for the statistics).

    Args:
        baseline: the baseline run directory (results.jsonl and manifest.json).
        candidate: the candidate run directory.
        margin: the test's margin on the score scale (0.02 = two points), in [0, 1):
            default 0.02 for non-inferiority and equivalence, 0 for superiority.
        confidence: two-sided confidence of the interval (0.95: one-sided tests at 0.025).
        method: "auto", or an interval of the module docstring that fits the pairing.
        errors: rows in an error state: "refuse" to compare; "as-fail": the candidate's
            score 0 (a failure of the model under test) while the baseline's are left out
            of its epochs, as its summary leaves them out (a sample with no scored
            baseline epoch is dropped from both runs), so a baseline's rate limits never
            count as the candidate's gains; or "exclude" their samples from both runs.
        allow_different_data: compare runs whose dataset content hashes differ (implied
            by ``unpaired``).
        allow_partial: compare runs that did not complete, or (paired) whose sample sets
            differ, on the samples they share; the others are counted and named.
        test: "non-inferiority", "superiority" or "equivalence".
        unpaired: compare the two runs' means over their own samples (Miller eq. 5-6),
            for runs on different samples.
        reducer: gate both runs on this reducer instead of their own ``run.reducer``
            (with `pass_k` for pass_at_k).
        metric: runs with several scorers (``scorers:``): gate this metric instead of the
            primary score (a row where it is null counts as an error row).
        samples: gate only these sample ids (a slice of the dataset; a sweep's per-slice
            gates); None gates every sample.
        allow_different_splits: compare runs on different ``dataset.split`` s (another
            split name or other ids, or a split against the whole dataset).
        allow_different_scorers: compare runs whose answers were scored differently
            (another target template, scorer setting, judge file or python scorer).
        fail_errors_of: the run whose error rows "as-fail" scores 0: "candidate", or
            "baseline" for a test that swaps the two (a sweep's inferiority and slice
            regression tests, whose `baseline` argument is the real candidate).

    Raises:
        GateError: the runs cannot be compared (missing files, different datasets,
            scorers or reducers, an incomplete run or unpaired samples without ``allow_partial``,
            errors under "refuse", no shared samples, too few samples or clusters).
        ValueError: an argument out of its range (a margin of 1 or more, which every
            candidate passes, too).
    """
    margin = _check_arguments(margin, confidence, method, errors, test, unpaired)
    if fail_errors_of not in ("candidate", "baseline"):
        raise ValueError(f"fail_errors_of must be candidate or baseline, got {fail_errors_of!r}")
    base = gate_runs.load_run(baseline, "baseline")
    cand = gate_runs.load_run(candidate, "candidate")
    # before --metric re-states the rows; --allow-partial lets rows be missing, not edited
    gate_runs.check_rows(base, partial=allow_partial)
    gate_runs.check_rows(cand, partial=allow_partial)
    if metric is not None:
        from gradetrail.scorers.multi import metric_rows

        try:
            base = replace(base, rows=metric_rows(base.rows, metric, "baseline"))
            cand = replace(cand, rows=metric_rows(cand.rows, metric, "candidate"))
        except ValueError as exc:
            raise GateError(str(exc)) from None
    # runs on different samples are what --unpaired is for: their datasets differ
    gate_runs.check_same_dataset(base, cand, allow_different_data or unpaired)
    gate_runs.check_same_split(base, cand, allow_different_splits)
    gate_runs.check_same_scoring(base, cand, allow_different_scorers)
    gate_runs.truncated_policy(base, cand)
    if not allow_partial:
        gate_runs.check_complete(base)
        gate_runs.check_complete(cand)
    red, k = gate_runs.resolve_reducer(base, cand, reducer, pass_k)
    errored = gate_runs.errored_ids(base) | gate_runs.errored_ids(cand)
    if errored and errors == "refuse":
        raise GateError(gate_runs.refuse_message(base, cand))
    (b_scores, b_unscored), (c_scores, c_unscored) = _sample_scores(
        base, cand, errors, fail_errors_of, paired=not unpaired, reducer=(red, k)
    )
    if samples is not None:  # a slice: the other samples are not part of this comparison
        kept = set(samples)
        b_scores = {sid: v for sid, v in b_scores.items() if sid in kept}
        c_scores = {sid: v for sid, v in c_scores.items() if sid in kept}
    common = {
        "margin": margin,
        "confidence": confidence,
        "errors": errors,
        "n_errors_handled": len(errored),
        "errored_samples": tuple(errored),
        "baseline": str(base.path),
        "candidate": str(cand.path),
        "epochs": (base.epochs, cand.epochs),
        "test": test,
        "reducer": red,
        "pass_k": k if red == "pass_at_k" else None,
        "alpha": (1 - confidence) / 2,
        "identity_differences": tuple(identity_differences(base.manifest, cand.manifest)),
        "metric": metric,
        "quantity": _quantity(base, cand, metric),
    }
    notes = _warnings(base, cand, b_unscored + c_unscored, gate_runs.reducer_label(red, k))
    if errors == "exclude":
        notes += _excluded_warning(base, cand)
    if unpaired:
        result = _unpaired(base, cand, b_scores, c_scores, method, common, notes)
    else:
        result = _paired(base, cand, b_scores, c_scores, method, allow_partial, common, notes)
    return _explain(result)


def _quantity(base: GateRun, cand: GateRun, metric: str | None) -> str:
    """What the per-sample scores compared are (:attr:`GateResult.quantity`)."""
    if metric is not None:
        return f"metric {metric}, per sample"
    scorers = [(run.manifest.get("spec") or {}).get("scorer") or {} for run in (base, cand)]
    if not all(isinstance(s, dict) and s.get("type") == "pairwise" for s in scorers):
        return "mean score"
    line = "win rate against the pairwise baseline, each sample weighed once (the summary's)"
    battles = any(isinstance((r.get("scorer") or {}).get("battles"), int) for r in base.rows)
    if battles or any(isinstance((r.get("scorer") or {}).get("battles"), int) for r in cand.rows):
        line += (
            "; a sample's score is its share of its Arena-Hard battles, so not the "
            "leaderboard's pooled battle rate (the summary's battles line)"
        )
    return line


def _sample_scores(
    base: GateRun,
    cand: GateRun,
    errors: str,
    fail_errors_of: str,
    *,
    paired: bool,
    reducer: tuple[str, int],
) -> tuple[tuple[dict[str, float], list[str]], tuple[dict[str, float], list[str]]]:
    """Each run's per-sample scores (:func:`gate_runs.sample_scores`) under the error
    policy: "exclude" drops every errored sample from both (unpaired, from its own run
    only: the other run's sample of the same id is another sample); "as-fail" scores the charged
    run's error rows 0 and leaves the other's out of its epochs, and (paired) a sample
    the other run then has no score for is dropped from both."""
    red, k = reducer
    b_errored, c_errored = gate_runs.errored_ids(base), gate_runs.errored_ids(cand)
    b_dropped: set[str] = set()
    c_dropped: set[str] = set()
    if errors == "exclude":  # paired: from both runs; unpaired, another run's id is
        b_dropped = set(b_errored) | (set(c_errored) if paired else set())  # another sample
        c_dropped = set(c_errored) | (set(b_errored) if paired else set())
    charged = fail_errors_of == "candidate"
    as_fail = errors == "as-fail"
    b_scores, b_unscored = gate_runs.sample_scores(
        base, b_dropped, red, k, errors_fail=as_fail and not charged
    )
    c_scores, c_unscored = gate_runs.sample_scores(
        cand, c_dropped, red, k, errors_fail=as_fail and charged
    )
    if as_fail and paired:
        spared, other = (base, b_scores) if charged else (cand, c_scores)
        for sid in gate_runs.errored_ids(spared):
            if sid not in other:
                b_scores.pop(sid, None)
                c_scores.pop(sid, None)
    return (b_scores, b_unscored), (c_scores, c_unscored)


def gate_family(pairs: Sequence[tuple[Path | str, Path | str]], **options: Any) -> GateFamily:
    """Gate several (baseline, candidate) pairs as one family, Holm-corrected.

    Each pair is gated by :func:`regression_gate` with the same ``options``; then Holm's
    step-down adjustment (:func:`gradetrail.stats.hypotheses.holm_adjust`) is applied to their
    p-values, and each comparison passes iff its adjusted p-value <= alpha, so the chance
    that any failing candidate passes stays at alpha for the whole family. A single pair
    is returned as it is (correction "none").

    Raises:
        GateError: any pair cannot be compared (the message names the pair).
        ValueError: no pairs, or an argument out of range.
    """
    if not pairs:
        raise ValueError("give at least one (baseline, candidate) pair")
    results = []
    for i, (b, c) in enumerate(pairs, start=1):
        try:
            results.append(regression_gate(b, c, **options))
        except GateError as exc:
            if len(pairs) == 1:
                raise
            raise GateError(f"pair {i} ({b} vs {c}): {exc}") from None
    return correct_family(results, "holm" if len(results) > 1 else "none")


#: the multiplicity corrections a family can take: name -> adjustment of its p-values
CORRECTIONS = {
    "holm": hypotheses.holm_adjust,
    "bonferroni": hypotheses.bonferroni_adjust,
    "none": list,
}


def correct_family(results: Sequence[GateResult], correction: str = "holm") -> GateFamily:
    """Correct already computed comparisons (each from :func:`regression_gate`) as one
    family: their one-sided p-values adjusted by ``correction`` ("holm", "bonferroni" or
    "none"), and each comparison passes iff its adjusted p-value <= alpha. With
    "none", or a single comparison, the results are returned as they are.

    Raises:
        ValueError: no results, an unknown correction, or comparisons at different alphas.
    """
    if not results:
        raise ValueError("give at least one comparison")
    if correction not in CORRECTIONS:
        raise ValueError(f"correction must be one of {', '.join(CORRECTIONS)}, got {correction!r}")
    alpha = results[0].alpha
    if any(r.alpha != alpha for r in results):
        raise ValueError("every comparison of a family must be at the same confidence")
    if len(results) == 1 or correction == "none":
        return GateFamily(tuple(results), "none", alpha)
    adjusted = CORRECTIONS[correction]([r.p_value for r in results])  # type: ignore[misc]
    family = f"{correction.capitalize()} over {len(results)} comparisons"
    corrected = []
    for result, p_adj in zip(results, adjusted, strict=True):
        r = replace(
            result,
            p_adjusted=p_adj,
            family=family,
            family_size=len(results),
            passed=p_adj <= alpha,
        )
        corrected.append(_explain(r, 2 * alpha / len(results)))
    return GateFamily(tuple(corrected), correction, alpha)


def _check_arguments(
    margin: float | None,
    confidence: float,
    method: str,
    errors: str,
    test: str,
    unpaired: bool,
) -> float:
    methods = _UNPAIRED_METHODS if unpaired else _PAIRED_METHODS
    if method not in methods:
        kind = "unpaired" if unpaired else "paired"
        choices = ", ".join(methods)
        raise GateError(f"--method {method} is not a {kind} interval: use one of {choices}")
    if errors not in _ERROR_POLICIES:
        raise ValueError(f"errors must be one of {', '.join(_ERROR_POLICIES)}, got {errors!r}")
    if test not in hypotheses.TESTS:
        raise ValueError(f"test must be one of {', '.join(hypotheses.TESTS)}, got {test!r}")
    if margin is None:
        margin = 0.0 if test == "superiority" else 0.02
    if not margin >= 0 or not math.isfinite(margin):
        raise ValueError(f"margin must be a finite number >= 0, got {margin}")
    if margin >= 1:  # a difference of [0, 1] scores lies in [-1, 1]: every run would pass
        raise ValueError(
            f"margin {margin:g} is on the score scale, where scores lie in [0, 1] and every "
            "candidate would pass: pass a margin below 1 (0.02 is two points)"
        )
    if test == "equivalence" and margin == 0:
        raise ValueError("an equivalence test needs a margin > 0")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")
    return margin


def _paired(
    base: GateRun,
    cand: GateRun,
    b_scores: dict[str, float],
    c_scores: dict[str, float],
    method: str,
    allow_partial: bool,
    common: dict[str, Any],
    notes: list[str],
) -> GateResult:
    shared = [sid for sid in b_scores if sid in c_scores]
    if shared and not allow_partial:
        gate_runs.check_paired(b_scores, c_scores)
    if not shared and common["n_errors_handled"]:
        n_base, n_cand = (len(gate_runs.errored_ids(run)) for run in (base, cand))
        if common["errors"] == "exclude":
            raise GateError(
                f"no sample is left to compare: errors exclude dropped every sample with an "
                f"error row ({n_base} of the baseline's, {n_cand} of the candidate's), and "
                "that is all of them: re-run to complete them, or count them as failures "
                "(errors as-fail)"
            )
        raise GateError(
            "no sample is left to compare: errors as-fail leaves out the samples the run "
            f"it does not charge has no scored epoch on ({n_base} of the baseline's, "
            f"{n_cand} of the candidate's samples have error rows), and that is all of "
            "them: re-run to complete them"
        )
    if not shared:
        raise GateError(
            f"baseline and candidate share no sample ids ({len(b_scores)} vs "
            f"{len(c_scores)} samples): gate two runs of the same samples, or pass "
            "--unpaired to compare their means"
        )
    b = [b_scores[sid] for sid in shared]
    c = [c_scores[sid] for sid in shared]
    clusters, differ = gate_runs.cluster_grouping((base, cand), shared)
    if differ is not None:
        notes.append(differ)
    binary = gate_runs.is_binary(b, c)
    chosen = _choose_paired(method, binary, clusters is not None)
    diffs = stats.paired_differences(b, c)
    counted = None  # the discordant counts the interval and the exact test are on
    if chosen == "t" and method == "auto" and binary and clusters and len(set(diffs)) == 1:
        chosen, counted = "tango", _cluster_pairs(diffs, clusters)
        interval, tails = _tango(*counted, common["confidence"])
        notes.append(
            f"every paired difference is {diffs[0]:+g}, so the clustering cannot be "
            f"estimated: Tango's interval on the {counted[2]} clusters, one pair a cluster "
            "(the largest design effect), as the run summary's Wilson interval takes them"
        )
    else:
        interval, tails = _paired_interval(chosen, b, c, clusters, common["confidence"])
        if interval.method == "zero-failure":
            chosen = interval.method
            notes.append(_zero_failure_note(interval, common))
    interval = _clipped(interval, b, c, notes)
    discordant = stats.discordant_counts(b, c) if binary else None
    verdict = hypotheses.decide(common["test"], *interval.raw, common["margin"], *tails)
    exact = None
    if discordant is not None and _exact_applies(common):
        exact = stats.mcnemar_exact_greater(*(counted[:2] if counted else discordant))
        verdict = _no_more_liberal(verdict, exact, common["alpha"], "McNemar's exact", notes)
    return GateResult(
        **_measured(interval, verdict, b, c),
        n=len(shared),
        only_baseline=discordant[0] if discordant else None,
        only_candidate=discordant[1] if discordant else None,
        correlation=stats.correlation(b, c),
        method=chosen,
        mcnemar_p=stats.mcnemar_exact(*(counted[:2] if counted else discordant))
        if discordant
        else None,
        missing_in_baseline=tuple(sid for sid in c_scores if sid not in b_scores),
        missing_in_candidate=tuple(sid for sid in b_scores if sid not in c_scores),
        warnings=tuple(notes),
        regressed=tuple(sid for sid, x, y in zip(shared, b, c, strict=True) if y < x),
        improved=tuple(sid for sid, x, y in zip(shared, b, c, strict=True) if y > x),
        paired=tuple(shared),
        n_baseline=len(shared),
        n_candidate=len(shared),
        omega2=_variance(diffs),
        design_effect=_design_effect(interval, _variance(diffs) / len(diffs)),
        exact_p=exact,
        **common,
    )


def _unpaired(
    base: GateRun,
    cand: GateRun,
    b_scores: dict[str, float],
    c_scores: dict[str, float],
    method: str,
    common: dict[str, Any],
    notes: list[str],
) -> GateResult:
    b, c = list(b_scores.values()), list(c_scores.values())
    if min(len(b), len(c)) < 2:
        why = ""
        for run, scores in ((base, b), (cand, c)):
            errored = len(gate_runs.errored_ids(run))
            if len(scores) < 2 and errored:
                why += (
                    f"; the {run.label}'s {errored} samples with error rows have no scored "
                    f"epoch under errors {common['errors']}: re-run to complete them"
                )
        raise GateError(
            f"an unpaired comparison needs at least 2 scored samples in each run "
            f"({len(b)} baseline, {len(c)} candidate){why}"
        )
    binary = gate_runs.is_binary(b, c)
    chosen = method if method != "auto" else ("newcombe" if binary else "welch")
    if chosen == "newcombe" and not binary:
        raise GateError("--method newcombe needs binary (0/1) scores: use welch or auto")
    b_clusters = gate_runs.clusters_of((base,), list(b_scores))
    c_clusters = gate_runs.clusters_of((cand,), list(c_scores))
    if (b_clusters or c_clusters) and chosen == "newcombe":
        chosen = "welch"  # Newcombe's interval has no clustered form; Welch takes CR1 SEs
    counts = (round(sum(b)), len(b), round(sum(c)), len(c))  # Fisher's, and Newcombe's
    constant = len(set(b)) == 1 and len(set(c)) == 1  # clustered: each CR1 SE is 0
    if chosen == "welch" and method != "welch" and binary and constant:
        counts = _cluster_counts(b, b_clusters, c, c_clusters)
        chosen = "newcombe"
        notes.append(
            f"each run's scores are all equal, so the clustering cannot be estimated: "
            f"Newcombe's interval on the {counts[1]} and {counts[3]} clusters, one "
            "sample a cluster (the largest design effect)"
        )
    if chosen == "newcombe":
        interval, tails = _newcombe(counts, b, c, common["confidence"])
    else:
        interval, tails = _unpaired_interval(chosen, b, c, b_clusters, c_clusters, common, notes)
        if interval.method == "zero-failure":
            chosen = interval.method
    interval = _clipped(interval, b, c, notes)
    verdict = hypotheses.decide(common["test"], *interval.raw, common["margin"], *tails)
    exact = None
    if binary and _exact_applies(common):
        exact = stats.fisher_exact_greater(*counts)
        verdict = _no_more_liberal(verdict, exact, common["alpha"], "Fisher's exact", notes)
    return GateResult(
        **_measured(interval, verdict, b, c),
        exact_p=exact,
        n=len(b) + len(c),
        only_baseline=None,
        only_candidate=None,
        correlation=None,
        method=chosen,
        mcnemar_p=None,
        missing_in_baseline=(),
        missing_in_candidate=(),
        warnings=tuple(notes),
        unpaired=True,
        n_baseline=len(b),
        n_candidate=len(c),
        omega2=_variance(b) + _variance(c),
        design_effect=_design_effect(interval, _variance(b) / len(b) + _variance(c) / len(c)),
        **common,
    )


def _design_effect(interval: stats.Interval, unclustered: float) -> float | None:
    """A clustered t or z interval's SE^2 over ``unclustered`` (the variance of the same
    estimate with every sample its own cluster): how many times the clusters inflate it,
    which the n needed must be planned with (Kish's design effect, measured). None when
    the interval is not clustered or either variance is 0."""
    if interval.n_clusters is None or interval.method not in ("t", "z", "welch"):
        return None
    if not (unclustered > 0 and interval.se > 0):
        return None
    return interval.se**2 / unclustered


def _exact_applies(common: dict[str, Any]) -> bool:
    """The test's null boundary is 0 (superiority, or non-inferiority at margin 0), where
    an exact test of binary scores exists: McNemar's (paired) or Fisher's (unpaired)."""
    return common["margin"] == 0 and common["test"] in ("superiority", "non-inferiority")


def _no_more_liberal(
    verdict: hypotheses.Verdict, exact: float, alpha: float, name: str, notes: list[str]
) -> hypotheses.Verdict:
    """``verdict`` made no more liberal than the exact one-sided test: it fails when the
    exact p-value exceeds alpha, and reports the larger p-value. The asymptotic intervals
    (Tango's, Newcombe's) can pass on a handful of discordant pairs or samples where the
    exact test cannot reject (0/5 vs 5/5 paired: McNemar's exact one-sided p = 1/32)."""
    if verdict.passed and exact > alpha:
        notes.append(
            f"the interval alone would pass, but {name} one-sided test gives p = {exact:.3g} "
            f"> alpha {alpha:g}: too few samples (or discordant pairs) to conclude"
        )
    return hypotheses.Verdict(
        verdict.passed and exact <= alpha, max(verdict.p_value, exact), verdict.bounds
    )


def _clipped(
    interval: stats.Interval, b: list[float], c: list[float], notes: list[str]
) -> stats.Interval:
    """``interval`` clipped to [-1, 1] when every score lies in [0, 1] (see
    :func:`gradetrail.stats.intervals.clip_interval`), with a note saying so in ``notes``.

    The verdict is still decided on the unclipped interval, so it agrees with the
    method's p-value: at a margin below 1 clipping could not change it anyway (a lower
    bound under -1 is under -margin clipped or not), and at a margin of 1 or more the
    unclipped bound keeps the test from passing on the range alone."""
    if not all(0.0 <= v <= 1.0 for v in b) or not all(0.0 <= v <= 1.0 for v in c):
        return interval
    clipped = stats.clip_interval(interval, -1.0, 1.0)
    if clipped.unclipped is not None:
        lo, hi = clipped.unclipped
        notes.append(
            f"the {interval.method} interval [{lo:+.4f}, {hi:+.4f}] reaches past the "
            "possible range of a difference of [0, 1] scores: shown clipped to "
            f"[{clipped.lo:+.4f}, {clipped.hi:+.4f}]; the verdict uses the unclipped bounds"
        )
    return clipped


def _measured(
    interval: stats.Interval, verdict: hypotheses.Verdict, b: list[float], c: list[float]
) -> dict[str, Any]:
    """The GateResult fields an interval and its verdict decide, paired or not."""
    return {
        "passed": verdict.passed,
        "delta": interval.delta,
        "lo": interval.lo,
        "hi": interval.hi,
        "unclipped": interval.unclipped,
        "se": interval.se,
        "n_clusters": interval.n_clusters,
        "baseline_mean": math.fsum(b) / len(b),
        "candidate_mean": math.fsum(c) / len(c),
        "bounds": verdict.bounds,
        "p_value": verdict.p_value,
        "half_width": (interval.raw[1] - interval.raw[0]) / 2,
    }


def _choose_paired(method: str, binary: bool, clustered: bool) -> str:
    if method == "auto":
        return "tango" if binary and not clustered else "t"
    if method == "tango" and not binary:
        raise GateError(
            "--method tango needs binary (0/1) per-sample scores: use --method t or auto"
        )
    if method == "tango" and clustered:
        raise GateError(
            "--method tango ignores the dataset's clusters: use --method t (clustered) or auto"
        )
    return method


def _zero_failure_note(interval: stats.Interval, common: dict[str, Any]) -> str:
    """Why the interval is the zero-failure bound, and the n at which identical runs pass."""
    trials = "clusters, one trial a cluster" if interval.n_clusters else "samples"
    line = (
        f"every paired difference is {interval.delta:+.4f}, so a t interval would have zero "
        f"width: the zero-failure bound (Hanley & Lippman-Hand 1983) on the {trials}"
    )
    margin = common["margin"]
    if margin > 0 and common["test"] != "superiority":
        need = _zero_failure_n(common["alpha"], margin)
        line += f"; identical runs pass at margin {margin:g} from n = {need} ((1 - m)^n <= alpha)"
    return line


def _zero_failure_n(alpha: float, margin: float) -> int:
    """The smallest n with (1 - margin)^n <= alpha: identical runs of n samples (or
    clusters) pass non-inferiority at ``margin`` (Hanley & Lippman-Hand 1983)."""
    n = math.ceil(math.log(alpha) / math.log1p(-margin) - 1e-9)
    return max(1, n)


def _cluster_pairs(diffs: list[float], clusters: list[str | None]) -> tuple[int, int, int]:
    """(only baseline, only candidate, G) with each of the G clusters one pair, for paired
    binary scores whose differences are all ``diffs[0]`` (a None cluster is a sample's own)."""
    g = len({(0, c) if c is not None else (1, i) for i, c in enumerate(clusters)})
    return (g if diffs[0] < 0 else 0), (g if diffs[0] > 0 else 0), g


def _newcombe(
    counts: tuple[int, int, int, int], b: list[float], c: list[float], confidence: float
) -> tuple[stats.Interval, tuple[hypotheses.TailP, hypotheses.TailP]]:
    """Newcombe's interval and tails on ``counts`` (successes and n of each run: the
    samples, or the clusters of constant clustered runs, then `n_clusters` is set)."""
    xb, nb, xc, nc = counts
    lo, hi = stats.newcombe_interval(*counts, confidence=confidence)
    se = math.hypot(stats.standard_error(b), stats.standard_error(c))
    n_clusters = nb + nc if (nb, nc) != (len(b), len(c)) else None
    interval = stats.Interval(xc / nc - xb / nb, lo, hi, se, "newcombe", None, n_clusters)
    return interval, hypotheses.newcombe_tails(*counts)


def _cluster_counts(
    b: list[float],
    b_clusters: list[str | None] | None,
    c: list[float],
    c_clusters: list[str | None] | None,
) -> tuple[int, int, int, int]:
    """(successes, n) of each of two constant binary runs with each cluster one sample:
    (G_b b[0], G_b, G_c c[0], G_c); a run without clusters counts its samples."""

    def groups(clusters: list[str | None] | None, n: int) -> int:
        if not clusters:
            return n
        return len({(0, k) if k is not None else (1, i) for i, k in enumerate(clusters)})

    gb, gc = groups(b_clusters, len(b)), groups(c_clusters, len(c))
    return round(gb * b[0]), gb, round(gc * c[0]), gc


def _tango(
    only_b: int, only_c: int, n: int, confidence: float
) -> tuple[stats.Interval, tuple[hypotheses.TailP, hypotheses.TailP]]:
    """Tango's interval and tails for ``n`` pairs of which the counts are discordant."""
    lo, hi = stats.tango_interval(only_b, only_c, n, confidence)
    interval = stats.Interval((only_c - only_b) / n, lo, hi, 0.0, "tango", None, n)
    return interval, hypotheses.tango_tails(only_b, only_c, n)


def _paired_interval(
    method: str,
    baseline: list[float],
    candidate: list[float],
    clusters: list[str | None] | None,
    confidence: float,
) -> tuple[stats.Interval, tuple[hypotheses.TailP, hypotheses.TailP]]:
    n = len(baseline)
    if method == "tango":
        only_b, only_c = stats.discordant_counts(baseline, candidate)
        lo, hi = stats.tango_interval(only_b, only_c, n, confidence)
        se = stats.standard_error(stats.paired_differences(baseline, candidate))
        interval = stats.Interval((only_c - only_b) / n, lo, hi, se, "tango")
        return interval, hypotheses.tango_tails(only_b, only_c, n)
    if n < 2:
        raise GateError(
            f"only {n} sample is shared: a {method} interval needs at least 2 "
            "(binary scores can use --method tango)"
        )
    compute = stats.paired_t if method == "t" else stats.paired_z
    try:
        interval = compute(baseline, candidate, clusters, confidence)
    except ValueError as exc:
        raise GateError(f"{exc}: gate runs with more clusters, or without clusters") from None
    if not _has_spread(interval, max(abs(v) for v in (*baseline, *candidate))):
        return _zero_failure(baseline, candidate, interval.n_clusters, confidence)
    return interval, hypotheses.t_tails(interval.delta, interval.se, interval.df)


def _zero_failure(
    baseline: list[float],
    candidate: list[float],
    n_clusters: int | None,
    confidence: float,
) -> tuple[stats.Interval, tuple[hypotheses.TailP, hypotheses.TailP]]:
    """The zero-failure bound (:func:`gradetrail.stats.intervals.zero_failure_interval`)
    for paired differences that are all equal (up to rounding), where a t or z interval
    has zero width: on the n samples, or on the G clusters (one trial a cluster) when the
    samples are clustered."""
    diffs = stats.paired_differences(baseline, candidate)
    lo = max(-1.0, min(diffs))
    hi = min(1.0, max(diffs))
    trials = n_clusters or len(diffs)
    interval = stats.zero_failure_interval(lo, hi, trials, confidence)
    interval = replace(interval, n_clusters=n_clusters)
    return interval, hypotheses.zero_failure_tails(lo, hi, trials)


def _unpaired_interval(
    method: str,
    b: list[float],
    c: list[float],
    b_clusters: list[str | None] | None,
    c_clusters: list[str | None] | None,
    common: dict[str, Any],
    notes: list[str],
) -> tuple[stats.Interval, tuple[hypotheses.TailP, hypotheses.TailP]]:
    confidence = common["confidence"]
    runs = (_run_mean(b, b_clusters, method), _run_mean(c, c_clusters, method))
    if any(run.se == 0 for run in runs):  # a Welch or z interval would take it as exact
        interval = stats.unpaired_bound_interval(*runs, confidence)
        notes.append(_constant_runs_note(runs, common))
        return interval, hypotheses.unpaired_bound_tails(*runs)
    if b_clusters or c_clusters:
        interval = _clustered_unpaired(b, c, b_clusters, c_clusters, method, confidence)
    elif method == "welch":
        interval = stats.welch_interval(b, c, confidence)
    else:  # Miller eq. 5-6 with the normal quantile
        delta = math.fsum(c) / len(c) - math.fsum(b) / len(b)
        se = math.hypot(stats.standard_error(b), stats.standard_error(c))
        z = stats.normal_quantile(confidence)
        interval = stats.Interval(delta, delta - z * se, delta + z * se, se, "z")
    return interval, hypotheses.t_tails(interval.delta, interval.se, interval.df)


def _run_mean(scores: list[float], clusters: list[str | None] | None, method: str) -> stats.RunMean:
    """One run's mean as :func:`gradetrail.stats.intervals.unpaired_bound_interval` takes
    it: its SE (CR1 on its clusters), 0 when it has no spread (:func:`_has_spread`), its
    t degrees of freedom (None for --method z) and its trials (samples or clusters)."""
    mean = min(1.0, max(0.0, math.fsum(scores) / len(scores)))
    if clusters:
        se, trials = stats.clustered_standard_error(scores, clusters)
        if trials < 2 or math.isnan(se):
            raise GateError("each run needs at least 2 clusters for a clustered comparison")
    else:
        se, trials = stats.standard_error(scores), len(scores)
    if not _has_spread(stats.Interval(mean, mean, mean, se, method), abs(mean)):
        se = 0.0
    return stats.RunMean(mean, se, None if method == "z" else trials - 1, trials)


def _constant_runs_note(runs: tuple[stats.RunMean, stats.RunMean], common: dict[str, Any]) -> str:
    """Which run is constant, so the interval bounds its mean by the zero-failure bound."""
    constant = [
        f"every {label} score is {run.mean:.4f}"
        for label, run in zip(("baseline", "candidate"), runs, strict=True)
        if run.se == 0
    ]
    line = (
        f"{' and '.join(constant)}, so a Welch or z interval "
        "would take its mean as exact: each run's mean is bounded at alpha/2 (the "
        "zero-failure bound, Hanley & Lippman-Hand 1983, for a constant run; t for the "
        "other) and the bounds combined (Bonferroni)"
    )
    margin = common["margin"]
    if all(run.se == 0 for run in runs) and margin > 0 and common["test"] != "superiority":
        need = _zero_failure_n(common["alpha"] / 2, margin)
        line += f"; two equal constant runs pass at margin {margin:g} from {need} samples each"
    return line


def _clustered_unpaired(
    b: list[float],
    c: list[float],
    b_clusters: list[str | None] | None,
    c_clusters: list[str | None] | None,
    method: str,
    confidence: float,
) -> stats.Interval:
    """Miller eq. 5-6 with each run's CR1 clustered SE; t on min(G_A, G_B) - 1 df."""
    se_b, g_b = stats.clustered_standard_error(b, b_clusters or [None] * len(b))
    se_c, g_c = stats.clustered_standard_error(c, c_clusters or [None] * len(c))
    delta = math.fsum(c) / len(c) - math.fsum(b) / len(b)
    se = math.hypot(se_b, se_c)
    df = min(g_b, g_c) - 1
    if df < 1 or math.isnan(se):
        raise GateError("each run needs at least 2 clusters for a clustered comparison")
    if method == "z":
        q, df_out = stats.normal_quantile(confidence), None
    else:
        from scipy.stats import t as student_t

        q, df_out = float(student_t.ppf(0.5 + confidence / 2, df)), df
    return stats.Interval(delta, delta - q * se, delta + q * se, se, method, df_out, g_b + g_c)


def _has_spread(interval: stats.Interval, scale: float) -> bool:
    """The interval's standard error is evidence, not rounding: above 10 machine epsilons
    of ``scale`` (the size of the values differenced: the largest score paired, the
    larger mean unpaired), as R's ``t.test`` calls less "essentially constant" data."""
    return interval.se > 10 * sys.float_info.epsilon * abs(scale) and math.isfinite(interval.se)


def _variance(values: Sequence[float]) -> float:
    """Sample variance (n - 1); 0 for fewer than 2 values."""
    n = len(values)
    if n < 2:
        return 0.0
    mean = math.fsum(values) / n
    return math.fsum((v - mean) ** 2 for v in values) / (n - 1)


def _explain(r: GateResult, alpha2: float | None = None) -> GateResult:
    """Add the minimum detectable effect, the n needed and the one-line reason, planned at
    the two-sided level ``alpha2``: 1 - confidence alone; in a family of m comparisons
    2 alpha / m (Bonferroni's level, at which a comparison passes whatever the others do,
    under Holm too), as the family, not the comparison alone, decides."""
    n_per_run = min(r.n_baseline, r.n_candidate)
    mde = n_needed = command = None
    alpha2 = 1 - r.confidence if alpha2 is None else alpha2
    zero_failure = r.method == "zero-failure"  # a bound, not a variance, decides: no power
    if r.omega2 and not zero_failure and n_per_run >= 1 and alpha2 < _POWER:
        omega2 = r.omega2 * (r.design_effect or 1.0)  # clusters: as their interval inflates
        mde = stats.minimum_detectable_effect(n_per_run, omega2, alpha=alpha2, power=_POWER)
        target = _distance_to_bound(r)
        if target is not None and target > 0 and not _past_the_margin(r):
            n_needed = stats.sample_size(target, omega2, alpha=alpha2, power=_POWER)
            command = (
                f"gradetrail power --omega2 {omega2:.6g} --delta {target:.6g} --alpha {alpha2:g}"
            )
    elif zero_failure and r.test != "superiority" and r.margin > 0 and not r.omega2:
        # if the differences stay 0; unpaired, each run's bound is at alpha / 2
        n_needed = _zero_failure_n(alpha2 / (4 if r.unpaired else 2), r.margin)
    elif r.method == "tango" and r.test != "superiority" and not _past_the_margin(r):
        # no discordant pair: Tango's bound is -z^2 / (n + z^2), within the margin from
        # n >= z^2 (1 - margin) / margin on
        z = stats.normal_quantile(1 - alpha2)
        if r.margin > 0:
            n_needed = max(1, math.ceil(z * z * (1 - r.margin) / r.margin - 1e-9))
    outcome = "pass" if r.passed else "fail" if _past_the_margin(r) else "inconclusive"
    out = replace(r, mde=mde, n_needed=n_needed, power_command=command, outcome=outcome)
    return replace(out, reason=_reason(out))


def needed_line(r: GateResult, command: Callable[[str], str] = str) -> str | None:
    """`n_needed` as a report shows it, with what it rests on: ``538 (gradetrail power
    ...)``, ``189 (Tango, no discordant pair)``, ``189 clusters (Tango, one pair a
    cluster)``, ``40 per run (...)``; ``command`` formats the power command (a Markdown
    report puts it in code). None when no n is offered."""
    if r.n_needed is None:
        return None
    unit = " per run" if r.unpaired else ""
    if r.power_command:
        how = command(r.power_command)
    elif r.method == "tango" and r.n_clusters:
        unit, how = " clusters", "Tango, one pair a cluster"
    elif r.method == "zero-failure" and r.unpaired:
        how = "zero-failure bounds, two equal constant runs: (1 - m)^n <= alpha/2"
    elif r.method == "zero-failure":
        unit = " clusters" if r.n_clusters else ""
        how = "zero-failure bound, every difference 0: (1 - m)^n <= alpha"
    else:
        how = "Tango, no discordant pair"
    return f"{r.n_needed}{unit} ({how})"


def _past_the_margin(r: GateResult) -> bool:
    """The whole interval lies on the failing side of the margin (a regression beyond it,
    or for superiority no gain beyond it): more samples would narrow the interval around
    the same difference and not pass it, so no n needed is offered."""
    lo, hi = r.unclipped or (r.lo, r.hi)
    if r.test == "non-inferiority":
        return hi < -r.margin
    if r.test == "superiority":
        return hi <= r.margin
    return hi < -r.margin or lo > r.margin


def _distance_to_bound(r: GateResult) -> float | None:
    """The difference a test must detect: margin + 0 for non-inferiority and equivalence
    (if the true difference were 0), delta - margin for superiority (if it were delta)."""
    if r.test == "superiority":
        return r.delta - r.margin
    return r.margin


def _reason(r: GateResult) -> str:
    """One line: which bound decided, against which margin, and what would change it (in a
    family, the interval is said to be unadjusted: the adjusted p decides)."""
    level = f"{r.confidence:.0%}" + (" unadjusted" if r.p_adjusted is not None else "")
    lo, hi = r.unclipped or (r.lo, r.hi)  # what decided
    if r.test == "non-inferiority":
        decided = f"lower bound {lo:+.4f} {'>=' if lo >= -r.margin else '<'} {-r.margin:+.4f}"
    elif r.test == "superiority":
        decided = f"lower bound {lo:+.4f} {'>' if lo > r.margin else '<='} {r.margin:+.4f}"
    else:
        inside = -r.margin < lo and hi < r.margin
        decided = (
            f"[{lo:+.4f}, {hi:+.4f}] {'inside' if inside else 'not inside'} "
            f"(-{r.margin:g}, +{r.margin:g})"
        )
    gated = f" of metric {r.metric}" if r.metric else ""
    parts = [f"{'PASS' if r.passed else 'FAIL'}: {r.test}{gated}, {level} {decided}"]
    if r.exact_p is not None and r.exact_p > r.alpha:
        exact = "Fisher's" if r.unpaired else "McNemar's"
        parts.append(f"{exact} exact one-sided p {r.exact_p:.3g} > alpha {r.alpha:g}")
    if r.p_adjusted is not None:
        parts.append(
            f"{(r.family or 'Holm').split()[0]}-adjusted p {r.p_adjusted:.3g} "
            f"{'<=' if r.passed else '>'} alpha "
            f"{r.alpha:g} ({r.family})"
        )
    if not r.passed:
        parts.append(f"half-width {r.half_width:.4f} against margin {r.margin:g}")
        level = ""  # a family's: alpha / m, enough whatever the other comparisons do
        if r.p_adjusted is not None:
            level = f" at alpha/{r.family_size} = {r.alpha / r.family_size:.3g}"
        if r.mde is not None:
            n = min(r.n_baseline, r.n_candidate)
            parts.append(f"detectable at n = {n}{level}: {r.mde:.4f}")
        if r.n_needed is not None:
            per = " per run" if r.unpaired else ""
            unit = " clusters" if r.method in ("tango", "zero-failure") and r.n_clusters else ""
            parts.append(f"n needed{per}{level}: {r.n_needed}{unit}")
        elif _past_the_margin(r):
            parts.append("the whole interval is past the margin: more samples would not pass")
        elif r.test == "superiority" and r.delta <= r.margin:
            parts.append("no n would pass at the observed difference")
        if not r.unpaired:
            parts.append(f"{len(r.regressed)} samples regressed, {len(r.improved)} improved")
    return "; ".join(parts)


def _excluded_warning(base: GateRun, cand: GateRun) -> list[str]:
    """A warning when ``--errors exclude`` drops more of the candidate's samples than the
    baseline's: its failures (a timeout on the hard samples) leave the comparison with
    them, and the samples left may flatter it (``--errors as-fail`` counts them)."""
    n_base, n_cand = len(gate_runs.errored_ids(base)), len(gate_runs.errored_ids(cand))
    if n_cand <= n_base:
        return []
    return [
        f"--errors exclude dropped {n_cand} samples the candidate has error rows on "
        f"(the baseline {n_base}): its failures there are not counted; --errors as-fail "
        "counts them as failures"
    ]


def _warnings(base: GateRun, cand: GateRun, unscored: list[str], reducer: str) -> list[str]:
    out = []
    if gate_runs.same_directory(base, cand):
        out.append(
            "baseline and candidate are the same run directory: a run passes against "
            "itself, so this says nothing about a candidate; gate the candidate's run"
        )
    elif copied_from((base.path, base.manifest), (cand.path, cand.manifest)):
        out.append(
            f"candidate {cand.path} is a copy of the baseline run (the same identity, start "
            "time and results.jsonl): a run passes against itself, so this says nothing "
            "about a candidate; gate the candidate's run"
        )
    for run in (base, cand):
        wrong_name = misnamed(run.path, run.manifest)
        if wrong_name is not None:
            out.append(f"{run.label} run {run.path}: {wrong_name}")
    for run in (base, cand):
        if run.status != "complete":
            out.append(f"{run.label} run is {run.status}: samples it did not reach are missing")
    if base.epochs != cand.epochs:
        out.append(
            f"epochs differ ({base.epochs} baseline, {cand.epochs} candidate): per-sample "
            f"{reducer} scores are compared, but their noise differs"
        )
    if unscored:
        shown = ", ".join(unscored[:5]) + (", ..." if len(unscored) > 5 else "")
        out.append(f"{len(unscored)} samples have too few scored epochs for {reducer}: {shown}")
    return out
