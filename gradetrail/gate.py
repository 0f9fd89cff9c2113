"""The regression gate: is a candidate run non-inferior to a baseline run?

Two run directories are paired by sample id. Each run's epochs are averaged per sample
first, then the paired difference d_i = candidate_i - baseline_i gets a confidence
interval, and the verdict is non-inferiority: pass iff the interval's lower bound is at
least -margin. The statistics live in :mod:`gradetrail.stats`; this module reads runs,
decides what may be compared, and picks the interval:

- ``tango``: binary scores, one epoch, no clusters (Tango 1998 score interval; it stays
  honest at small n, where the Wald interval collapses to a point);
- ``t``: continuous scores or several epochs (paired t, clustered when the dataset has
  clusters);
- ``z``: the seed formula (paired z, Miller eq. 7-8), on request.

When two runs cannot be compared the gate raises :class:`GateError` (exit code 2) with a
one-line message that says what to fix.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Literal

from gradetrail import stats
from gradetrail.errors import GradetrailError
from gradetrail.manifest import identity_differences

__all__ = ["ErrorPolicy", "GateError", "GateResult", "Method", "regression_gate"]

Method = Literal["auto", "tango", "t", "z"]
ErrorPolicy = Literal["refuse", "as-fail", "exclude"]

_METHODS: tuple[str, ...] = ("auto", "tango", "t", "z")
_ERROR_POLICIES: tuple[str, ...] = ("refuse", "as-fail", "exclude")


class GateError(GradetrailError):
    """The two runs cannot be compared; the message says what to fix."""

    exit_code = 2


@dataclass(frozen=True)
class GateResult:
    """The verdict of one regression gate, and everything it was computed from.

    The difference is candidate - baseline over the n paired samples, so `delta` > 0 means
    the candidate scored higher. `passed` is `lo >= -margin`. `only_baseline` and
    `only_candidate` (samples only that run passed) and `mcnemar_p` are None unless the
    per-sample scores are binary. `missing_in_baseline` names the samples only the
    candidate has, and vice versa; they are not in n. `errored_samples` names the samples
    with a row in an error state, which `errors` scored as 0 ("as-fail") or dropped from
    both runs ("exclude"); `n_errors_handled` counts them. `epochs` is (baseline epochs,
    candidate epochs). `regressed` names the paired samples whose per-sample score is lower in
    the candidate than in the baseline, `improved` those where it is higher, both in the
    baseline's sample order; `paired` names all n paired samples in that order.
    `identity_differences` says where the two runs' identities
    differ (spec keys, dataset hash, file hashes; see
    :func:`gradetrail.manifest.identity_differences`), empty when they match.
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
    identity_differences: tuple[str, ...] = ()
    paired: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        """The result as JSON-ready data: tuples become lists, NaN becomes None."""
        out: dict[str, Any] = {}
        for key, value in asdict(self).items():
            if isinstance(value, tuple):
                value = list(value)
            elif isinstance(value, float) and math.isnan(value):
                value = None
            out[key] = value
        return out


@dataclass(frozen=True)
class _Run:
    label: str
    path: Path
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def epochs(self) -> int:
        observed = max((int(r.get("epoch", 1)) for r in self.rows), default=1)
        return int(self.manifest.get("epochs") or observed)


def regression_gate(
    baseline: Path | str,
    candidate: Path | str,
    margin: float = 0.02,
    confidence: float = 0.95,
    method: Method = "auto",
    errors: ErrorPolicy = "refuse",
    allow_different_data: bool = False,
    allow_partial: bool = False,
) -> GateResult:
    """Gate `candidate` against `baseline`: pass iff the paired interval's lower bound >= -margin.

    Args:
        baseline: the baseline run directory (results.jsonl and manifest.json).
        candidate: the candidate run directory.
        margin: the non-inferiority margin, on the score scale (0.02 = two points).
        confidence: two-sided confidence of the interval (0.95 tests at one-sided 0.025).
        method: "auto", "tango", "t" or "z" (see the module docstring).
        errors: rows in an error state: "refuse" to compare, score them "as-fail" (0), or
            "exclude" their samples from both runs.
        allow_different_data: compare runs whose dataset content hashes differ.
        allow_partial: compare runs that did not complete, or whose sample sets differ
            (e.g. another ``dataset.limit``), on the samples they share; the others are
            counted and named in the result.

    Raises:
        GateError: the runs cannot be compared (missing files, different datasets, an
            incomplete run or unpaired samples without ``allow_partial``, errors under
            "refuse", no shared samples, too few samples for the method).
    """
    _check_arguments(margin, confidence, method, errors)
    base = _load_run(baseline, "baseline")
    cand = _load_run(candidate, "candidate")
    _check_same_dataset(base, cand, allow_different_data)
    if not allow_partial:
        _check_complete(base)
        _check_complete(cand)
    errored = _errored_ids(base) | _errored_ids(cand)
    if errored and errors == "refuse":
        raise GateError(_refuse_message(base, cand))
    dropped = set(errored) if errors == "exclude" else set()
    base_means = _sample_means(base, dropped)
    cand_means = _sample_means(cand, dropped)
    shared = [sid for sid in base_means if sid in cand_means]
    if shared and not allow_partial:
        _check_paired(base_means, cand_means)
    if not shared:
        raise GateError(
            f"baseline and candidate share no sample ids ({len(base_means)} vs "
            f"{len(cand_means)} samples): gate two runs of the same dataset"
        )
    b = [base_means[sid] for sid in shared]
    c = [cand_means[sid] for sid in shared]
    clusters = _clusters(base, cand, shared)
    binary = stats.is_binary(b) and stats.is_binary(c)
    chosen = _choose_method(method, binary, max(base.epochs, cand.epochs), clusters is not None)
    interval = _interval(chosen, b, c, clusters, confidence)
    discordant = stats.discordant_counts(b, c) if binary else None
    return GateResult(
        passed=interval.lo >= -margin,
        delta=interval.delta,
        lo=interval.lo,
        hi=interval.hi,
        se=interval.se,
        n=len(shared),
        n_clusters=interval.n_clusters,
        epochs=(base.epochs, cand.epochs),
        baseline_mean=math.fsum(b) / len(b),
        candidate_mean=math.fsum(c) / len(c),
        only_baseline=discordant[0] if discordant else None,
        only_candidate=discordant[1] if discordant else None,
        correlation=stats.correlation(b, c),
        margin=margin,
        confidence=confidence,
        method=chosen,
        mcnemar_p=stats.mcnemar_exact(*discordant) if discordant else None,
        missing_in_baseline=tuple(sid for sid in cand_means if sid not in base_means),
        missing_in_candidate=tuple(sid for sid in base_means if sid not in cand_means),
        errors=errors,
        n_errors_handled=len(errored),
        errored_samples=tuple(errored),
        baseline=str(base.path),
        candidate=str(cand.path),
        warnings=_warnings(base, cand),
        regressed=tuple(sid for sid, x, y in zip(shared, b, c, strict=True) if y < x),
        improved=tuple(sid for sid, x, y in zip(shared, b, c, strict=True) if y > x),
        identity_differences=tuple(identity_differences(base.manifest, cand.manifest)),
        paired=tuple(shared),
    )


def _check_arguments(margin: float, confidence: float, method: str, errors: str) -> None:
    if method not in _METHODS:
        raise ValueError(f"method must be one of {', '.join(_METHODS)}, got {method!r}")
    if errors not in _ERROR_POLICIES:
        raise ValueError(f"errors must be one of {', '.join(_ERROR_POLICIES)}, got {errors!r}")
    if not margin >= 0:
        raise ValueError(f"margin must be >= 0, got {margin}")
    if not 0 < confidence < 1:
        raise ValueError(f"confidence must be strictly between 0 and 1, got {confidence}")


def _load_run(path: Path | str, label: str) -> _Run:
    from gradetrail.results import read_manifest, read_results

    try:
        manifest = read_manifest(path)
        rows = read_results(path)
    except GradetrailError as exc:
        raise GateError(f"{label} {exc}") from None
    return _Run(label, Path(path), manifest, rows)


def _check_same_dataset(base: _Run, cand: _Run, allow_different_data: bool) -> None:
    b_hash, c_hash = base.manifest.get("dataset_hash"), cand.manifest.get("dataset_hash")
    if b_hash != c_hash and not allow_different_data:
        raise GateError(
            f"baseline and candidate ran on different datasets (dataset_hash "
            f"{str(b_hash)[:12]} vs {str(c_hash)[:12]}): re-run one on the other's dataset, "
            "or pass --allow-different-data to pair them by sample id anyway"
        )


def _check_complete(run: _Run) -> None:
    status = run.manifest.get("status", "complete")
    if status != "complete":
        raise GateError(
            f"{run.label} run is {status} ({len(run.rows)} of "
            f"{run.manifest.get('n_samples', '?')} samples x {run.epochs} epochs written): "
            "finish it by re-running the same spec, or pass --allow-partial to gate the "
            "samples both runs have"
        )


def _check_paired(base_means: dict[str, float], cand_means: dict[str, float]) -> None:
    for label, ours, theirs in (
        ("baseline", base_means, cand_means),
        ("candidate", cand_means, base_means),
    ):
        only = [sid for sid in ours if sid not in theirs]
        if only:
            shown = ", ".join(only[:5]) + (", ..." if len(only) > 5 else "")
            raise GateError(
                f"{len(only)} samples are only in the {label} ({shown}): gate runs of the "
                "same samples (same dataset.limit and shuffle_seed), or pass --allow-partial "
                "to gate the shared ones"
            )


def _errored_ids(run: _Run) -> dict[str, None]:
    """Ids of samples with a row in an error state, in row order (a dict as an ordered set)."""
    return {str(r["sample_id"]): None for r in run.rows if r.get("state") != "scored"}


def _refuse_message(base: _Run, cand: _Run) -> str:
    parts = []
    for run in (base, cand):
        states = Counter(r.get("state") for r in run.rows if r.get("state") != "scored")
        if states:
            detail = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            parts.append(f"{run.label} has {detail}")
    return (
        f"{'; '.join(parts)}: re-run to complete them, or pass --errors as-fail "
        "(score them 0) or --errors exclude (drop those samples from both runs)"
    )


def _sample_means(run: _Run, dropped: set[str]) -> dict[str, float]:
    """Per-sample mean score over epochs; error rows score 0, samples in `dropped` are out."""
    triples = []
    for row in run.rows:
        sid = str(row["sample_id"])
        if sid in dropped:
            continue
        score = row.get("score")
        if row.get("state") == "scored":
            if score is None:
                raise GateError(f"{run.label} row {sid!r} is scored but has no score")
        else:
            score = 0.0  # errors="as-fail"; "refuse" never gets here with an error row
        triples.append((sid, int(row.get("epoch", 1)), float(score)))
    try:
        return stats.sample_means(triples)
    except ValueError as exc:
        raise GateError(f"{run.label} run {run.path}: {exc}") from None


def _clusters(base: _Run, cand: _Run, shared: list[str]) -> list[str | None] | None:
    """Each shared sample's cluster (baseline's, else candidate's); None when no sample has one."""
    found: dict[str, str] = {}
    for run in (cand, base):  # baseline last, so its value wins
        for row in run.rows:
            if row.get("cluster") is not None:
                found[str(row["sample_id"])] = str(row["cluster"])
    clusters = [found.get(sid) for sid in shared]
    return clusters if any(c is not None for c in clusters) else None


def _choose_method(method: str, binary: bool, epochs: int, clustered: bool) -> str:
    if method == "auto":
        return "tango" if binary and epochs == 1 and not clustered else "t"
    if method == "tango" and not binary:
        raise GateError(
            "--method tango needs binary (0/1) per-sample scores: use --method t or auto"
        )
    if method == "tango" and clustered:
        raise GateError(
            "--method tango ignores the dataset's clusters: use --method t (clustered) or auto"
        )
    return method


def _interval(
    method: str,
    baseline: list[float],
    candidate: list[float],
    clusters: list[str | None] | None,
    confidence: float,
) -> stats.Interval:
    n = len(baseline)
    if method == "tango":
        only_b, only_c = stats.discordant_counts(baseline, candidate)
        lo, hi = stats.tango_interval(only_b, only_c, n, confidence)
        diffs = stats.paired_differences(baseline, candidate)
        se = stats.standard_error(diffs)
        return stats.Interval((only_c - only_b) / n, lo, hi, se, "tango")
    if n < 2:
        raise GateError(
            f"only {n} sample is shared: a {method} interval needs at least 2 "
            "(binary scores can use --method tango)"
        )
    compute = stats.paired_t if method == "t" else stats.paired_z
    try:
        return compute(baseline, candidate, clusters, confidence)
    except ValueError as exc:
        raise GateError(f"{exc}: gate runs with more clusters, or without clusters") from None


def _warnings(base: _Run, cand: _Run) -> tuple[str, ...]:
    out = []
    for run in (base, cand):
        status = run.manifest.get("status", "complete")
        if status != "complete":
            out.append(f"{run.label} run is {status}: samples it did not reach are missing")
    if base.epochs != cand.epochs:
        out.append(
            f"epochs differ ({base.epochs} baseline, {cand.epochs} candidate): per-sample "
            "means are compared, but their noise differs"
        )
    return tuple(out)
