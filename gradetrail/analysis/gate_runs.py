"""Reading the two runs a gate compares, and deciding what in them may be compared.

Each run's rows are reduced to one score per sample by the run's own ``run.reducer``
(the quantity its summary reports), so the gate tests the same number the summaries
show. Every refusal is a :class:`GateError` (exit code 2) whose one-line message says
what to fix.
"""

from __future__ import annotations

import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail.errors import GradetrailError
from gradetrail.rundir.agreement import (
    FIX,
    manifest_reducer,
    refusal,
    results_changed,
    rows_disagree,
)
from gradetrail.rundir.layout import KILLED, KILLED_FIX
from gradetrail.rundir.manifest import scoring_differences
from gradetrail.rundir.truncation import counted_score, policy_of
from gradetrail.stats import intervals as stats
from gradetrail.stats.reducers import REDUCERS, reduce_scores

__all__ = [
    "GateError",
    "GateRun",
    "check_rows",
    "check_same_split",
    "load_run",
    "resolve_reducer",
    "sample_scores",
    "scored_differently",
]


class GateError(GradetrailError):
    """The two runs cannot be compared; the message says what to fix."""

    exit_code = 2


@dataclass(frozen=True)
class GateRun:
    """One run directory as the gate sees it.

    Attributes:
        label: "baseline" or "candidate" (names the run in messages).
        path: the run directory.
        manifest: ``manifest.json`` as a dict.
        rows: ``results.jsonl``, one dict per (sample, epoch).
    """

    label: str
    path: Path
    manifest: dict[str, Any]
    rows: list[dict[str, Any]]

    @property
    def epochs(self) -> int:
        """The run's ``run.epochs`` (else the largest epoch seen)."""
        observed = max((int(r.get("epoch", 1)) for r in self.rows), default=1)
        return int(self.manifest.get("epochs") or observed)

    @property
    def reducer(self) -> tuple[str, int]:
        """``(run.reducer, k)`` from the manifest's spec; k is 1 unless pass_at_k."""
        return manifest_reducer(self.manifest)

    @property
    def status(self) -> str:
        """The manifest's status as :func:`~gradetrail.rundir.results.read_manifest` reads it
        (``killed`` for a run whose process is gone; ``complete`` when there is none)."""
        return str(self.manifest.get("status", "complete"))


def load_run(path: Path | str, label: str) -> GateRun:
    """Read a run directory. Raises GateError naming the run when it cannot be read."""
    from gradetrail.rundir.results import read_manifest, read_results

    try:
        manifest = read_manifest(path)
        rows = read_results(path)
    except GradetrailError as exc:
        raise GateError(f"{label} {exc}") from None
    wrong = _misshapen(manifest)
    if wrong is not None:
        raise GateError(f"{label} run {path}: manifest.json {wrong}: {FIX}")
    return GateRun(label, Path(path), manifest, rows)


#: the manifest fields the gate reads, and the JSON type each must have when present
_OBJECTS = ("spec", "dataset", "score", "counts")
_INTEGERS = ("epochs", "n_samples")


def _misshapen(manifest: dict[str, Any]) -> str | None:
    """Which field the gate reads has the wrong JSON type (an edited manifest: ``"spec":
    "x"`` crashed the gate with a traceback and exit 1, its fail code), or None."""
    for key in _OBJECTS:
        if manifest.get(key) is not None and not isinstance(manifest[key], dict):
            return f"has {key} {manifest[key]!r}, not an object"
    run = (manifest.get("spec") or {}).get("run")
    if run is not None and not isinstance(run, dict):
        return f"has spec.run {run!r}, not an object"
    pass_k = (run or {}).get("pass_k")
    for key, value in [(k, manifest.get(k)) for k in _INTEGERS] + [("spec.run.pass_k", pass_k)]:
        if value is not None and type(value) is not int:
            return f"has {key} {value!r}, not an integer"
    return None


def reducer_label(reducer: str, k: int) -> str:
    """``pass@k`` for pass_at_k, else the reducer's name."""
    return f"pass@{k}" if reducer == "pass_at_k" else reducer


def resolve_reducer(
    base: GateRun, cand: GateRun, override: str | None = None, pass_k: int | None = None
) -> tuple[str, int]:
    """The reducer both runs are gated on: ``override`` (with ``pass_k``), else the runs'
    own ``run.reducer``, which must then agree.

    Raises:
        GateError: the runs reduce differently; an unknown reducer; a reducer whose
            per-sample quantity depends on the number of epochs (max, majority) on runs
            with different epochs; a pass@k with more k than a run has epochs.
    """
    if override is not None:
        if override not in REDUCERS:
            raise GateError(f"--reducer must be one of {', '.join(REDUCERS)}, got {override!r}")
        chosen = (override, (pass_k or 1) if override == "pass_at_k" else 1)
    else:
        if base.reducer != cand.reducer:
            raise GateError(
                f"the runs reduce epochs differently (baseline {reducer_label(*base.reducer)}, "
                f"candidate {reducer_label(*cand.reducer)}), so their per-sample scores are "
                "different quantities: re-run one with the other's run.reducer, or pass "
                "--reducer to gate both on one"
            )
        chosen = base.reducer
    name, k = chosen
    if name in ("max", "majority") and base.epochs != cand.epochs:
        raise GateError(
            f"reducer {name} over {base.epochs} baseline vs {cand.epochs} candidate epochs "
            f"measures different quantities (the {name} of a different number of tries): "
            "re-run with the same run.epochs, or pass --reducer mean"
        )
    if name == "pass_at_k" and k > min(base.epochs, cand.epochs):
        raise GateError(
            f"pass@{k} needs at least {k} epochs per sample but a run has "
            f"{min(base.epochs, cand.epochs)}: pass a smaller --pass-k"
        )
    return chosen


def same_directory(base: GateRun, cand: GateRun) -> bool:
    """Whether one run directory was given as both baseline and candidate (a pasted
    path, a CI variable never set to the new run): the gate then warns, since a run
    passes against itself. A copy of a run is another directory."""
    try:
        return os.path.samefile(base.path, cand.path)
    except OSError:
        return False


def check_same_dataset(base: GateRun, cand: GateRun, allow_different_data: bool) -> None:
    """Refuse runs of different dataset content unless allowed."""
    b_hash, c_hash = base.manifest.get("dataset_hash"), cand.manifest.get("dataset_hash")
    if b_hash != c_hash and not allow_different_data:
        raise GateError(
            f"baseline and candidate ran on different datasets (dataset_hash "
            f"{str(b_hash)[:12]} vs {str(c_hash)[:12]}): re-run one on the other's dataset, "
            "or pass --allow-different-data to compare them anyway"
        )


def check_same_scoring(base: GateRun, cand: GateRun, allow_different_scorers: bool) -> None:
    """Refuse runs whose answers were scored differently (another target template, scorer
    setting, judge file, python scorer, ``run.refusals``) unless allowed: a candidate
    whose scorer was loosened would pass on the scorer, not the answers."""
    if allow_different_scorers:
        return
    differ = scored_differently(base.manifest, cand.manifest)
    if differ is not None:
        raise GateError(
            f"{differ}: re-score one with the other's scorer (no model call), or pass "
            "--allow-different-scorers to compare them anyway"
        )


def scored_differently(baseline: dict[str, Any], candidate: dict[str, Any]) -> str | None:
    """Why two runs' scores are not one measure of their answers, as one clause naming at
    most three of the differences (:func:`~gradetrail.rundir.manifest.scoring_differences`:
    a target template, scorer setting, judge file, python scorer, ``run.refusals``); None
    when the manifests score alike. The one rule the gate and ``diff`` refuse on."""
    differ = scoring_differences(baseline, candidate)
    if not differ:
        return None
    shown = "; ".join(differ[:3]) + (f"; and {len(differ) - 3} more" if len(differ) > 3 else "")
    return f"baseline and candidate were scored differently ({shown})"


def split_of(run: GateRun) -> dict[str, Any] | None:
    """The run's ``dataset.split`` as its manifest records it (``name``, ``ids_sha256``,
    ...), or None for a run of the whole dataset."""
    split = (run.manifest.get("dataset") or {}).get("split")
    return split if isinstance(split, dict) else None


def check_same_split(base: GateRun, cand: GateRun, allow_different_splits: bool) -> None:
    """Refuse runs on different dataset splits (another split name, other ids, or a split
    against the whole dataset) unless allowed: a loop tunes on one split and reports on
    another, and comparing across them would mix the two."""
    b, c = split_of(base), split_of(cand)
    same = (b or {}).get("ids_sha256") == (c or {}).get("ids_sha256") and (b or {}).get("name") == (
        c or {}
    ).get("name")
    if same or allow_different_splits:
        return

    def shown(split: dict[str, Any] | None) -> str:
        if split is None:
            return "the whole dataset"
        ids_hash = str(split.get("ids_sha256"))[:12]
        return f"split {split.get('name')!r} ({split.get('ids')} ids, {ids_hash})"

    raise GateError(
        f"baseline ran on {shown(b)} but candidate on {shown(c)}: gate runs of the same "
        "dataset.split, or pass --allow-different-splits to compare them anyway"
    )


def truncated_policy(base: GateRun, cand: GateRun) -> str:
    """The ``run.truncated`` both runs were made with, which must agree.

    Raises:
        GateError: the runs count truncated answers differently.
    """
    b, c = policy_of(base.manifest), policy_of(cand.manifest)
    if b != c:
        raise GateError(
            f"the runs count truncated answers differently (baseline run.truncated: {b}, "
            f"candidate: {c}), so their scores are different quantities: re-run one with "
            "the other's run.truncated"
        )
    return b


def check_complete(run: GateRun) -> None:
    """Refuse a run that did not complete."""
    if run.status == KILLED:
        raise GateError(
            f"{run.label} run was killed: its process is gone without ending it "
            f"({len(run.rows)} of {run.manifest.get('n_samples', '?')} samples x "
            f"{run.epochs} epochs written): {KILLED_FIX}, or pass --allow-partial to gate "
            "the samples both runs have"
        )
    if run.status != "complete":
        raise GateError(
            f"{run.label} run is {run.status} ({len(run.rows)} of "
            f"{run.manifest.get('n_samples', '?')} samples x {run.epochs} epochs written): "
            "finish it by re-running the same spec, or pass --allow-partial to gate the "
            "samples both runs have"
        )


def check_rows(run: GateRun, *, partial: bool = False) -> None:
    """Refuse a run whose manifest says ``complete`` but whose ``results.jsonl`` disagrees
    with it (:func:`~gradetrail.rundir.agreement.rows_disagree`: rows per state, a score
    outside [0, 1], the mean and n, and a file whose SHA-256 is not the manifest's
    ``results_sha256``): lines deleted, added, re-scored, swapped or damaged since the
    run wrote them; with ``partial`` (``--allow-partial``), rows missing are let
    through, rows re-scored are not."""
    if run.status != "complete":
        return  # check_complete refuses it, naming why
    changed = results_changed(run.path, run.manifest) is True
    why = rows_disagree(run.manifest, run.rows, partial=partial, changed=changed)
    if why is not None:
        raise GateError(refusal(run.label, run.path, why))


def check_paired(base_scores: dict[str, float], cand_scores: dict[str, float]) -> None:
    """Refuse samples present in only one run (the pairing would drop them silently)."""
    for label, ours, theirs in (
        ("baseline", base_scores, cand_scores),
        ("candidate", cand_scores, base_scores),
    ):
        only = [sid for sid in ours if sid not in theirs]
        if only:
            shown = ", ".join(only[:5]) + (", ..." if len(only) > 5 else "")
            raise GateError(
                f"{len(only)} samples are only in the {label} ({shown}): gate runs of the "
                "same samples (same dataset.limit and shuffle_seed), pass --allow-partial "
                "to gate the shared ones, or --unpaired to compare the two runs' means"
            )


def errored_ids(run: GateRun) -> dict[str, None]:
    """Ids of samples with a row in an error state, in row order (a dict as an ordered set)."""
    return {str(r["sample_id"]): None for r in run.rows if r.get("state") != "scored"}


def refuse_message(base: GateRun, cand: GateRun) -> str:
    """Why runs with error rows are refused, counted per state, and the two ways out."""
    parts = []
    for run in (base, cand):
        states = Counter(r.get("state") for r in run.rows if r.get("state") != "scored")
        if states:
            detail = ", ".join(f"{n} {state}" for state, n in sorted(states.items()))
            parts.append(f"{run.label} has {detail}")
    return (
        f"{'; '.join(parts)}: re-run to complete them, or pass --errors as-fail "
        "(the candidate's score 0) or --errors exclude (drop those samples from both runs)"
    )


def sample_scores(
    run: GateRun, dropped: set[str], reducer: str, k: int, *, errors_fail: bool = True
) -> tuple[dict[str, float], list[str]]:
    """Each sample's score, its epochs reduced by ``reducer`` (:mod:`gradetrail.stats.reducers`),
    a truncated row counted as the run's ``run.truncated`` says
    (:func:`~gradetrail.rundir.truncation.counted_score`).

    Error rows score 0 when ``errors_fail`` (the run ``--errors as-fail`` charges: the
    candidate), else they are left out of the sample's epochs, as the run summary leaves
    them out (under "refuse" none reach here); samples in ``dropped`` are left out.
    Returns ``(scores, unscored)``: scores in the run's sample order, and the ids of
    samples the reducer gives no score (pass@k with fewer than k epochs).

    Raises:
        GateError: a scored row without a score, or whose score is not a number in
            [0, 1] (NaN, 7.0, -1; whatever the run's status or manifest), or a
            (sample, epoch) written twice.
    """
    epochs: dict[str, dict[int, float]] = {}
    policy = policy_of(run.manifest)
    for row in run.rows:
        sid = str(row["sample_id"])
        if sid in dropped:
            continue
        score = row.get("score")
        if row.get("state") == "scored":
            if score is None:
                raise GateError(f"{run.label} row {sid!r} is scored but has no score")
            _check_score(run, sid, row.get("epoch"), score)
            if row.get("truncated") and policy != "score":  # run.truncated, as the summary
                score = counted_score(row, policy)
                if score is None:  # exclude: this epoch counts with no score
                    epochs.setdefault(sid, {})
                    continue
        elif errors_fail:
            score = 0.0
        else:
            continue
        per = epochs.setdefault(sid, {})
        epoch = int(row.get("epoch", 1))
        if epoch in per:
            raise GateError(f"{run.label} run {run.path}: sample {sid!r} has epoch {epoch} twice")
        per[epoch] = float(score)
    scores: dict[str, float] = {}
    unscored: list[str] = []
    for sid, per in epochs.items():
        value = reduce_scores(list(per.values()), reducer, k)  # type: ignore[arg-type]
        if value is None:
            unscored.append(sid)
        else:
            scores[sid] = value
    return scores, unscored


def _check_score(run: GateRun, sid: str, epoch: object, score: object) -> None:
    """Refuse a scored row whose score is not a number in [0, 1]. Every scorer writes
    one there, so anything else was edited or damaged since; the rows-agree check
    (:func:`check_rows`) holds it only for a complete run whose manifest records a mean,
    and a NaN, a 7.0 or a -1 would otherwise move the mean the gate decides on."""
    if type(score) in (int, float) and 0.0 <= score <= 1.0:  # type: ignore[operator]
        return
    raise GateError(
        f"{run.label} run {run.path}: sample {sid!r} epoch {epoch} has score {score!r}, "
        f"not a number in [0, 1]: {FIX}"
    )


def clusters_of(runs: tuple[GateRun, ...], ids: list[str]) -> list[str | None] | None:
    """Each sample's cluster; None when no sample has one (a sample without one is a
    cluster of its own). Runs that group ``ids`` differently (another ``cluster_field``)
    are clustered on the coarsest grouping both imply, see :func:`cluster_grouping`."""
    return cluster_grouping(runs, ids)[0]


def cluster_grouping(
    runs: tuple[GateRun, ...], ids: list[str]
) -> tuple[list[str | None] | None, str | None]:
    """(each sample's cluster, a note when the runs disagree, else None).

    Runs that cluster ``ids`` the same way (the same groups, whatever their labels) keep
    the first labelled run's labels. Runs that group them differently are clustered on
    the coarsest grouping both imply: two samples share a cluster when they share one in
    any run (the connected components), so every correlation either run declares stays
    within a cluster; a cluster-robust SE on coarser clusters stays valid where the finer
    one may not (Cameron & Miller 2015, "A Practitioner's Guide to Cluster-Robust
    Inference", J. Human Resources 50:317-372, section IV: when unsure, cluster at the
    more aggregate level). Before, the baseline's labels won silently, so swapping the
    two runs changed the interval. A run with no cluster on any sample is not a grouping.
    """
    labelled = []
    for run in runs:
        found = {
            str(row["sample_id"]): str(row["cluster"])
            for row in run.rows
            if row.get("cluster") is not None
        }
        if any(sid in found for sid in ids):
            labelled.append((run, found))
    if not labelled:
        return None, None
    parent = {sid: sid for sid in ids}

    def root(sid: str) -> str:
        while parent[sid] != sid:
            parent[sid] = parent[parent[sid]]
            sid = parent[sid]
        return sid

    for _, found in labelled:
        first: dict[str, str] = {}
        for sid in ids:
            if sid in found:
                other = first.setdefault(found[sid], sid)
                parent[root(sid)] = root(other)
    groups = [root(sid) for sid in ids]
    per_run = [[found.get(sid) for sid in ids] for _, found in labelled]
    if all(_same_partition(groups, labels) for labels in per_run):
        return per_run[0], None
    sizes = Counter(groups)
    merged = [
        f"cluster of {g}" if sizes[g] > 1 or any(r[i] is not None for r in per_run) else None
        for i, g in enumerate(groups)
    ]
    n_clusters = len(sizes)
    each = " vs ".join(str(len(set(_partition_keys(labels)))) for labels in per_run)
    note = (
        f"the runs cluster these samples differently ({each} "
        f"clusters: another dataset.cluster_field?): clustered on the coarsest grouping "
        f"both imply, {n_clusters} clusters (samples sharing a cluster in either run)"
    )
    return merged, note


def _partition_keys(labels: list[str | None]) -> list[tuple[int, str]]:
    """A key per sample: its label, or its own index when it has none."""
    return [(0, lab) if lab is not None else (1, str(i)) for i, lab in enumerate(labels)]


def _same_partition(groups: list[str], labels: list[str | None]) -> bool:
    """``labels`` group the samples exactly as ``groups`` do."""
    keys = _partition_keys(labels)
    return len(set(zip(groups, keys, strict=True))) == len(set(groups)) == len(set(keys))


def is_binary(*score_lists: list[float]) -> bool:
    """Every per-sample score in every list is 0 or 1."""
    return all(stats.is_binary(scores) for scores in score_lists)
