"""Two runs side by side: which samples improved, regressed or changed, and why the runs
may not be comparable.

:func:`diff_runs` joins a baseline and a candidate run directory on sample id and epoch.
Each sample is compared on its score: its scored epochs reduced by the run's own
``run.reducer`` (:func:`gradetrail.stats.reducers.reduce_scores`, the per-sample value the
run's summary reports and the regression gate pairs), and gets one kind:

- ``improved`` / ``regressed``: both runs scored every epoch, and the candidate's score
  is higher / lower;
- ``changed``: the same score, but some epoch's response differs;
- ``same``: the same score and the same responses;
- ``error``: a row in an error state on either side, an epoch missing from a run that
  should have it (one within its ``run.epochs``: an incomplete run), or no score from the
  reducer (pass@k over fewer than k epochs);
- ``only_baseline`` / ``only_candidate``: the sample is in one run only.

Runs of different ``run.epochs`` are compared as the gate compares them: each sample's
reduced score, the epochs beyond the shorter run's count being no error. Runs the gate
refuses because their per-sample scores are different quantities are refused here too,
one line (:class:`~gradetrail.errors.UsageError`, exit 2): different reducers, ``max`` or
``majority`` over different numbers of epochs, pass@k with more k than a run has epochs
(:func:`gradetrail.analysis.gate_runs.resolve_reducer`), another ``run.truncated``, and
answers scored differently (another target template, scorer setting, judge file:
:func:`different_scoring`) unless ``allow_different_scorers``; a different dataset unless
``allow_different_data``. A truncated row counts as its run's ``run.truncated`` says.

The verdict and its interval come from :func:`gradetrail.analysis.gate.regression_gate` itself
(never recomputed here); when the gate cannot compare the runs, its one-line reason is
kept instead. :class:`IdentityDiff` says whether the identity hashes differ and where
(:func:`gradetrail.rundir.manifest.identity_differences`: the spec keys in the identity hash,
the dataset hash and every other file hash: judge file, recordings, baseline).

Runs are read through :mod:`gradetrail.rundir.results`; nothing is written.
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from gradetrail.analysis.diff_kinds import KINDS, DiffKind
from gradetrail.analysis.gate import ErrorPolicy, GateResult, regression_gate
from gradetrail.analysis.gate_runs import (
    GateError,
    GateRun,
    resolve_reducer,
    scored_differently,
    truncated_policy,
)
from gradetrail.errors import UsageError
from gradetrail.rundir.agreement import refusal, run_disagrees
from gradetrail.rundir.manifest import identity_differences
from gradetrail.rundir.results import iter_results, read_manifest
from gradetrail.rundir.truncation import counted_score
from gradetrail.stats.reducers import reduce_scores

__all__ = [
    "DISAGREEMENTS",
    "KINDS",
    "LISTED_ORDER",
    "DiffKind",
    "EpochPair",
    "IdentityDiff",
    "RowBrief",
    "RunDiff",
    "SampleDiff",
    "diff_runs",
    "different_data",
    "different_scoring",
]

#: the kinds shown by default: every disagreement
DISAGREEMENTS: frozenset[str] = frozenset(KINDS) - {"same"}
#: the order samples are listed in (:meth:`RunDiff.shown`): score changes first, then rows
#: that could not be compared, then responses that changed with the same score; the
#: baseline's order within a kind
LISTED_ORDER: tuple[DiffKind, ...] = (
    "regressed",
    "improved",
    "error",
    "only_baseline",
    "only_candidate",
    "changed",
    "same",
)
_RANK = {kind: i for i, kind in enumerate(LISTED_ORDER)}

#: characters of each response kept when full responses are not asked for
HEAD_CHARS = 400


@dataclass(frozen=True, slots=True)
class RowBrief:
    """One run's row of one (sample, epoch): its state, score and response (the whole
    text, or its first :data:`HEAD_CHARS` characters; see ``diff_runs(responses=)``), and
    the answer its scorer extracted (``scorer.extracted``, as text; None when the scorer
    records none)."""

    state: str
    score: float | None
    response: str | None
    extracted: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "state": self.state,
            "score": self.score,
            "response": self.response,
            "extracted": self.extracted,
        }


@dataclass(frozen=True, slots=True)
class EpochPair:
    """One epoch of a sample in both runs; a side is None when that run has no row."""

    epoch: int
    baseline: RowBrief | None
    candidate: RowBrief | None
    response_changed: bool

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "epoch": self.epoch,
            "baseline": self.baseline.to_dict() if self.baseline else None,
            "candidate": self.candidate.to_dict() if self.candidate else None,
            "response_changed": self.response_changed,
        }


@dataclass(frozen=True, slots=True)
class SampleDiff:
    """One sample of the join: its kind and each run's score (its scored epochs reduced by
    that run's ``run.reducer``; None when the reducer gives none)."""

    sample_id: str
    kind: DiffKind
    baseline_score: float | None
    candidate_score: float | None
    epochs: tuple[EpochPair, ...]

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "sample_id": self.sample_id,
            "kind": self.kind,
            "baseline_score": self.baseline_score,
            "candidate_score": self.candidate_score,
            "epochs": [e.to_dict() for e in self.epochs],
        }


@dataclass(frozen=True)
class IdentityDiff:
    """Where two runs' identities differ.

    Attributes:
        same: the identity hashes are equal (the runs are comparable as they are).
        baseline_hash, candidate_hash: the two identity hashes.
        differences: one line each, from :func:`gradetrail.rundir.manifest.identity_differences`
            (``spec model.name: "a" -> "b"``, ``dataset hash ...``, ``judge file hash
            ...``); empty when the hashes match.
    """

    same: bool
    baseline_hash: str | None
    candidate_hash: str | None
    differences: tuple[str, ...] = ()

    @property
    def dataset_differs(self) -> bool:
        """The dataset content hashes differ."""
        return any(line.startswith("dataset hash") for line in self.differences)

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return {
            "same": self.same,
            "baseline_hash": self.baseline_hash,
            "candidate_hash": self.candidate_hash,
            "differences": list(self.differences),
        }


@dataclass(frozen=True)
class RunDiff:
    """The comparison of a candidate run with a baseline run.

    Attributes:
        baseline, candidate: the two run directories.
        baseline_model, candidate_model: ``provider:requested model`` of each run.
        identity: where the identities differ.
        counts: samples per kind (every kind in :data:`KINDS`, zeros included).
        samples: every sample of the join: the baseline's order, then samples only the
            candidate has, in its order.
        gate: the regression gate's result, or None when it cannot compare the runs.
        gate_error: the gate's one-line reason when it cannot (else None).
        metric: the metric compared (``--metric``), or None for the primary score.
        metrics: runs with several scorers: each metric's mean in each run, ``{name:
            {"baseline": mean or None, "candidate": mean or None}}`` (from the
            manifests); empty otherwise.
    """

    baseline: str
    candidate: str
    baseline_model: str
    candidate_model: str
    identity: IdentityDiff
    counts: dict[str, int]
    samples: tuple[SampleDiff, ...]
    gate: GateResult | None
    gate_error: str | None
    metric: str | None = None
    metrics: dict[str, dict[str, float | None]] = field(default_factory=dict)
    _by_id: dict[str, SampleDiff] = field(default_factory=dict, repr=False, compare=False)

    @property
    def paired(self) -> int:
        """Samples present in both runs."""
        return len(self.samples) - self.counts["only_baseline"] - self.counts["only_candidate"]

    def shown(
        self, show_all: bool = False, kinds: frozenset[str] | None = None
    ) -> list[SampleDiff]:
        """The samples to list: the disagreements (every kind but ``same``), everything
        with ``show_all``, or only ``kinds`` when given; regressions first, then
        improvements, then the other kinds in :data:`LISTED_ORDER`."""
        wanted = kinds if kinds is not None else (frozenset(KINDS) if show_all else DISAGREEMENTS)
        return sorted((s for s in self.samples if s.kind in wanted), key=lambda s: _RANK[s.kind])

    def sample(self, sample_id: str) -> SampleDiff | None:
        """One sample of the join by id, or None."""
        if not self._by_id:
            self._by_id.update((s.sample_id, s) for s in self.samples)
        return self._by_id.get(sample_id)

    def to_dict(self, show_all: bool = False) -> dict[str, Any]:
        """JSON-ready: the header (runs, identity, counts, gate) and the shown samples."""
        return {
            "baseline": self.baseline,
            "candidate": self.candidate,
            "baseline_model": self.baseline_model,
            "candidate_model": self.candidate_model,
            "identity": self.identity.to_dict(),
            "paired": self.paired,
            "counts": dict(self.counts),
            "gate": self.gate.to_dict() if self.gate is not None else None,
            "gate_error": self.gate_error,
            "metric": self.metric,
            "metrics": self.metrics,
            "samples": [s.to_dict() for s in self.shown(show_all)],
        }


def diff_runs(
    baseline: Path | str,
    candidate: Path | str,
    margin: float = 0.02,
    errors: ErrorPolicy = "refuse",
    allow_partial: bool = False,
    responses: bool = False,
    metric: str | None = None,
    allow_different_data: bool = False,
    allow_different_scorers: bool = False,
    reducer: str | None = None,
    pass_k: int | None = None,
) -> RunDiff:
    """Join two runs on sample id and epoch, classify each sample, and gate them.

    Args:
        baseline: the baseline run directory.
        candidate: the candidate run directory.
        margin: the gate's non-inferiority margin (score scale).
        errors: the gate's policy for rows in an error state ("refuse", "as-fail",
            "exclude"); it does not change the kinds, where such a sample is ``error``.
        allow_partial: let the gate compare incomplete runs on their shared samples.
        responses: keep each response whole (else its first :data:`HEAD_CHARS`
            characters; whether it changed is decided on the whole text either way).
        metric: runs with several scorers: compare (and gate) this metric instead of the
            primary score; a row where it is null is an ``error`` sample.
        allow_different_data: pair the samples of runs on different dataset content by
            id anyway (the gate still refuses them).
        allow_different_scorers: classify runs whose answers were scored differently
            anyway (and gate them: the gate's ``allow_different_scorers``).
        reducer, pass_k: reduce both runs' epochs with this reducer (pass@``pass_k``)
            instead of their own ``run.reducer``, as the gate's ``--reducer``.

    Returns:
        The :class:`RunDiff`; a gate that cannot compare the runs leaves ``gate`` None
        and its reason in ``gate_error`` (the join is still made).

    Raises:
        UsageError: a directory is not a run directory (no manifest or results file),
            or its manifest is not valid JSON; or, as the gate, a complete run's
            ``results.jsonl`` disagrees with its manifest
            (:func:`~gradetrail.rundir.agreement.run_disagrees`; with ``allow_partial``
            rows may be missing, not re-scored); or ``metric`` is not a metric of a run;
            or the runs' dataset hashes differ (:func:`different_data`) and
            ``allow_different_data`` is false; or they were scored differently
            (:func:`different_scoring`) and ``allow_different_scorers`` is false; or their
            per-sample scores are different quantities (different reducers, max or
            majority over different epochs, pass@k with k above a run's epochs).
    """
    base_manifest = read_manifest(baseline)
    cand_manifest = read_manifest(candidate)
    differ = different_data(base_manifest, cand_manifest)
    if differ is not None and not allow_different_data:
        raise UsageError(f"{differ}; or pass --allow-different-data to pair them by id anyway")
    scored = different_scoring(base_manifest, cand_manifest)
    if scored is not None and not allow_different_scorers:
        raise UsageError(f"{scored}; or pass --allow-different-scorers to compare them anyway")
    runs = (
        GateRun("baseline", Path(baseline), base_manifest, []),
        GateRun("candidate", Path(candidate), cand_manifest, []),
    )
    try:  # the gate's rules: the per-sample scores of both runs must be one quantity
        chosen = resolve_reducer(*runs, reducer, pass_k)
        policy = truncated_policy(*runs)
    except GateError as exc:
        raise UsageError(str(exc)) from None
    for label, run_dir, manifest in (  # as the gate: a complete run's rows are its manifest's
        ("baseline", baseline, base_manifest),
        ("candidate", candidate, cand_manifest),
    ):
        why = run_disagrees(run_dir, manifest, partial=allow_partial)
        if why is not None:
            raise UsageError(refusal(label, run_dir, why))
    base_names: dict[str, None] = {}
    cand_names: dict[str, None] = {}
    base_rows = _collect(baseline, responses, metric, base_names, policy)
    cand_rows = _collect(candidate, responses, metric, cand_names, policy)
    if metric is not None:  # a metric neither run has: refused as the gate refuses it
        from gradetrail.scorers.multi import check_metric

        try:
            check_metric(base_names, metric, "baseline")
            check_metric(cand_names, metric, "candidate")
        except ValueError as exc:
            raise UsageError(str(exc)) from None
    epochs = (_epochs(base_manifest, base_rows), _epochs(cand_manifest, cand_rows))
    samples = _join(base_rows, cand_rows, chosen, epochs)
    counts = dict.fromkeys(KINDS, 0)
    for sample in samples:
        counts[sample.kind] += 1
    gate, gate_error = _gate(
        baseline,
        candidate,
        margin,
        errors,
        allow_partial,
        metric,
        allow_different_scorers=allow_different_scorers,
        reducer=reducer,
        pass_k=pass_k,
    )
    names = dict.fromkeys(
        [*(base_manifest.get("metrics") or {}), *(cand_manifest.get("metrics") or {})]
    )
    metrics = {
        name: {
            side: ((m.get("metrics") or {}).get(name) or {}).get("mean")
            for side, m in (("baseline", base_manifest), ("candidate", cand_manifest))
        }
        for name in names
    }
    return RunDiff(
        baseline=str(baseline),
        candidate=str(candidate),
        baseline_model=_model(base_manifest),
        candidate_model=_model(cand_manifest),
        identity=identity_diff(base_manifest, cand_manifest),
        counts=counts,
        samples=tuple(samples),
        gate=gate,
        gate_error=gate_error,
        metric=metric,
        metrics=metrics,
    )


_Collected = dict[str, dict[int, tuple[RowBrief, str | None]]]


def _collect(
    run_dir: Path | str,
    whole: bool,
    metric: str | None = None,
    names: dict | None = None,
    policy: str = "score",
) -> _Collected:
    """sample id -> epoch -> (brief row, digest of the whole response), in row order;
    with ``metric``, each row's score is that metric's value (null: an error row), and
    ``names`` gets every metric name the rows hold. A truncated row's score is the one
    it counts with under ``run.truncated`` (``policy``; :func:`counted_score`, as the
    summary and the gate count it: 0 under zero, none under exclude)."""
    if metric is not None:
        from gradetrail.scorers.multi import row_metrics
    out: _Collected = {}
    for row in iter_results(run_dir):
        if metric is not None:
            if names is not None:
                names.update(dict.fromkeys(row_metrics(row)))
            value = row_metrics(row).get(metric)
            row = {
                **row,
                "score": value,
                "state": "scored" if value is not None else "metric_error",
            }
        response = row.get("response")
        text = response if isinstance(response, str) else None
        digest = (
            hashlib.blake2b(text.encode("utf-8", "surrogatepass"), digest_size=16).hexdigest()
            if text
            else None
        )
        score = row.get("score")
        if row.get("truncated") and row.get("state") == "scored" and policy != "score":
            score = counted_score({**row, "truncated": True}, policy)
        scorer = row.get("scorer")
        extracted = scorer.get("extracted") if isinstance(scorer, dict) else None
        if extracted is not None and not isinstance(extracted, str):
            extracted = str(extracted)
        brief = RowBrief(
            state=str(row.get("state")),
            score=float(score) if isinstance(score, int | float) else None,
            response=text if whole or text is None else text[:HEAD_CHARS],
            extracted=extracted if whole or extracted is None else extracted[:HEAD_CHARS],
        )
        out.setdefault(str(row.get("sample_id")), {})[int(row.get("epoch") or 1)] = (
            brief,
            digest,
        )
    return out


_Reducer = tuple[str, int]


def _epochs(manifest: dict[str, Any], rows: _Collected) -> int:
    """The run's ``run.epochs`` as its manifest records it (else the largest epoch seen)."""
    recorded = manifest.get("epochs")
    if type(recorded) is int and recorded > 0:
        return recorded
    return max((e for per in rows.values() for e in per), default=1)


def _join(
    base: _Collected, cand: _Collected, reducer: _Reducer, epochs: tuple[int, int]
) -> list[SampleDiff]:
    ids = list(base) + [sid for sid in cand if sid not in base]
    return [_classify(sid, base.get(sid), cand.get(sid), reducer, epochs) for sid in ids]


def _score(
    epochs: dict[int, tuple[RowBrief, str | None]] | None, reducer: _Reducer
) -> float | None:
    """The scored epochs reduced by the run's reducer, or None."""
    scored = [
        brief.score
        for _, (brief, _) in sorted((epochs or {}).items())
        if brief.state == "scored" and brief.score is not None
    ]
    return reduce_scores(scored, reducer[0], reducer[1]) if scored else None  # type: ignore[arg-type]


def _classify(
    sample_id: str,
    base: dict[int, tuple[RowBrief, str | None]] | None,
    cand: dict[int, tuple[RowBrief, str | None]] | None,
    reducer: _Reducer,
    epochs: tuple[int, int],
) -> SampleDiff:
    """One sample's kind. An epoch one run lacks is an error only within that run's own
    ``run.epochs`` (a row it should have written); beyond them (runs of 1 and 3 epochs)
    the samples are compared on their reduced scores, as the gate compares them."""
    pairs = []
    for epoch in sorted(set(base or {}) | set(cand or {})):
        b = (base or {}).get(epoch)
        c = (cand or {}).get(epoch)
        changed = b is not None and c is not None and b[1] != c[1]
        pairs.append(EpochPair(epoch, b[0] if b else None, c[0] if c else None, changed))
    kind: DiffKind
    if cand is None:
        kind = "only_baseline"
    elif base is None:
        kind = "only_candidate"
    elif any(
        (p.baseline is None and p.epoch <= epochs[0])
        or (p.candidate is None and p.epoch <= epochs[1])
        or (p.baseline is not None and p.baseline.state != "scored")
        or (p.candidate is not None and p.candidate.state != "scored")
        for p in pairs
    ):
        kind = "error"
    else:
        b_mean, c_mean = _score(base, reducer), _score(cand, reducer)
        if b_mean is None or c_mean is None:  # pass@k with fewer than k epochs
            kind = "error"
        elif c_mean > b_mean:
            kind = "improved"
        elif c_mean < b_mean:
            kind = "regressed"
        elif any(p.response_changed for p in pairs):
            kind = "changed"
        else:
            kind = "same"
    return SampleDiff(sample_id, kind, _score(base, reducer), _score(cand, reducer), tuple(pairs))


def _gate(
    baseline: Path | str,
    candidate: Path | str,
    margin: float,
    errors: ErrorPolicy,
    allow_partial: bool,
    metric: str | None = None,
    **options: Any,
) -> tuple[GateResult | None, str | None]:
    try:
        return (
            regression_gate(
                baseline,
                candidate,
                margin=margin,
                errors=errors,
                allow_partial=allow_partial,
                metric=metric,
                **options,
            ),
            None,
        )
    except (GateError, ValueError) as exc:  # ValueError: a margin the gate refuses (>= 1, inf)
        return None, str(exc)


def different_data(baseline: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """Why two runs' samples cannot be paired by id (their manifests' ``dataset_hash``
    differ: a sample id may name another question in each, and a diff would list a
    different question answered as a regression), one clause; None when they agree."""
    a, b = baseline.get("dataset_hash"), candidate.get("dataset_hash")
    if a == b:
        return None
    return (
        f"baseline and candidate ran on different datasets (dataset hash {str(a)[:12]} vs "
        f"{str(b)[:12]}): a sample id may name a different question in each, so neither "
        "is a regression or an improvement of the other; re-run one on the other's dataset"
    )


def different_scoring(baseline: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """Why two runs' samples cannot be called regressed or improved: their answers were
    scored differently (:func:`gradetrail.analysis.gate_runs.scored_differently`, the rule
    the gate refuses on), one clause; None when they score alike."""
    differ = scored_differently(baseline, candidate)
    if differ is None:
        return None
    return (
        f"{differ}: the same answer may score otherwise on each, so neither is a regression "
        "or an improvement of the other; re-score one with the other's scorer (no model call)"
    )


def _model(manifest: dict[str, Any]) -> str:
    return f"{manifest.get('provider', '?')}:{manifest.get('requested_model', '?')}"


def identity_diff(baseline: dict[str, Any], candidate: dict[str, Any]) -> IdentityDiff:
    """Where two manifests' identities differ (see :class:`IdentityDiff`)."""
    hash_a, hash_b = baseline.get("identity_hash"), candidate.get("identity_hash")
    return IdentityDiff(
        same=hash_a is not None and hash_a == hash_b,
        baseline_hash=hash_a,
        candidate_hash=hash_b,
        differences=tuple(identity_differences(baseline, candidate)),
    )
