"""Whether a complete run's ``results.jsonl`` still holds what its ``manifest.json`` says
it wrote: the rows per state, and the mean and n that the rows, reduced as the summary
reduces them, give.

The gate, ``gradetrail diff`` and a sweep's table refuse a run that disagrees (its rows
were edited or damaged since the run); a sweep runs such a cell again (the run rewrites
its rows from the cache); ``gradetrail runs`` and the viewer mark it and show no mean.
The two files are held against each other, not signed: both rewritten to agree are not
detected. A file with the SHA-256 its manifest records (``results_sha256``, written by
runs since it was added) is the one the run wrote and is not read further; a file with
another SHA-256 was changed since, even when its counts and mean still agree (two
samples' scores swapped forge every paired comparison: a diff's regressions, the gate's
pairs), and disagrees. A manifest without ``results_sha256`` (a run from before it) has
its rows read once, streaming (one row at a time, only the per-sample scores kept).
"""

from __future__ import annotations

import hashlib
import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from gradetrail.errors import UsageError
from gradetrail.rundir.manifest import figures_seal
from gradetrail.rundir.results import RESULTS_FILE, iter_results, open_run_file
from gradetrail.rundir.truncation import counted_score, policy_of
from gradetrail.stats.reducers import reduce_scores

__all__ = [
    "FIX",
    "MARK",
    "copied_from",
    "figures_edited",
    "manifest_reducer",
    "misnamed",
    "refusal",
    "results_changed",
    "rows_disagree",
    "run_disagrees",
    "warning",
]

#: what a run whose rows disagree with its manifest needs, said by every refusal
FIX = (
    "the file was edited or damaged since the run wrote it; run the same spec again to "
    "rewrite it from the cache"
)


def manifest_reducer(manifest: Mapping[str, Any]) -> tuple[str, int]:
    """``(run.reducer, k)`` from a manifest's spec; k is 1 unless pass_at_k."""
    run = (manifest.get("spec") or {}).get("run") or {}
    name = str(run.get("reducer") or "mean")
    return name, int(run.get("pass_k") or 1) if name == "pass_at_k" else 1


def _shown(counter: Counter[str]) -> str:
    parts = ", ".join(f"{n} {state}" for state, n in sorted(counter.items()) if n)
    return f"{counter.total()} rows ({parts or 'none'})"


#: what disagrees when the file is not the one the run wrote (see :func:`results_changed`)
CHANGED = (
    "its results.jsonl is not the file the run wrote (its SHA-256 is not the manifest's "
    "results_sha256: rows edited, swapped, reordered or added since)"
)


def rows_disagree(
    manifest: Mapping[str, Any],
    rows: Iterable[Mapping[str, Any]],
    *,
    partial: bool = False,
    changed: bool = False,
) -> str | None:
    """How the rows of a complete run (as :func:`~gradetrail.rundir.results.read_results`
    reads them: a malformed line is skipped, so it shows as a missing row) disagree with
    its manifest, or None when they agree (or the manifest, written by hand, records
    nothing to hold them against).

    They disagree when the rows per state are not the manifest's ``counts`` (``n_samples``
    x ``epochs`` rows when it has none), when one (sample id, epoch) has two rows or an
    epoch is past the run's ``epochs`` (a row copied over another's place keeps every
    count), when a scored row's score is not a number in
    [0, 1], or when the rows reduced by the run's ``run.reducer`` and ``run.truncated``
    do not give the manifest's ``score.mean`` and ``score.n``. ``rows`` is read once, in
    one pass (a generator does), so memory holds the per-sample scores, not the rows.

    ``partial`` (``--allow-partial``: compare what rows there are) lets rows be missing:
    fewer rows in a state than the manifest counts is not a disagreement, and the mean is
    then not held against the manifest's; a score outside [0, 1], more rows in a state
    than counted, or all the rows there with another mean still are (re-scored rows are
    not a partial run).

    ``changed`` (:func:`results_changed`: the file's SHA-256 is not the one the manifest
    records) makes rows that agree on every count and the mean disagree still
    (:data:`CHANGED`): the per-sample scores a diff and the gate pair were changed; with
    ``partial``, a file with rows missing is let through as above.
    """
    found: Counter[str] = Counter()
    policy = policy_of(manifest)
    epochs_of: dict[str, list[float]] = {}
    bad_score: str | None = None
    seen: set[tuple[str, Any]] = set()
    epochs = manifest.get("epochs")
    misplaced: str | None = None
    for row in rows:
        found[str(row.get("state"))] += 1
        if bad_score is not None:
            continue
        sid = str(row.get("sample_id"))
        where = (sid, row.get("epoch"))
        if misplaced is None and where in seen:
            misplaced = f"sample {sid!r} epoch {where[1]} has two rows (one copied over another's)"
        elif misplaced is None and type(epochs) is int and not 1 <= (where[1] or 1) <= epochs:
            misplaced = f"sample {sid!r} has a row for epoch {where[1]}, past the run's {epochs}"
        seen.add(where)
        per = epochs_of.setdefault(sid, [])
        score = row.get("score")
        if row.get("state") == "scored" and not (
            type(score) in (int, float) and 0.0 <= score <= 1.0  # NaN fails both
        ):
            epoch = row.get("epoch")
            bad_score = f"sample {sid!r} epoch {epoch} has score {score!r}, not a number in [0, 1]"
            continue
        kept = counted_score(
            {"state": row.get("state"), "truncated": row.get("truncated", False), "score": score},
            policy,
        )
        if kept is not None:
            per.append(float(kept))
    counts = manifest.get("counts")
    if isinstance(counts, dict) and counts:
        expected = Counter({str(k): v for k, v in counts.items() if isinstance(v, int)})
    elif isinstance(manifest.get("n_samples"), int):
        expected = Counter({"rows": manifest["n_samples"] * (epochs if type(epochs) is int else 1)})
        found = Counter({"rows": found.total()})
    else:
        expected = found
    missing_only = partial and all(found[state] <= n for state, n in expected.items())
    missing_only = missing_only and set(found) <= set(expected)
    if found != expected and not missing_only:
        return (
            f"its results.jsonl holds {_shown(found)} where its manifest counts {_shown(expected)}"
        )
    if misplaced is not None:
        return misplaced
    recorded = manifest.get("score")
    if not isinstance(recorded, dict) or "mean" not in recorded:
        return CHANGED if changed else None  # by hand: no scores to hold the rows against
    if bad_score is not None:
        return bad_score
    if found != expected:
        return None  # rows missing (partial): no mean to hold them to
    name, k = manifest_reducer(manifest)
    values = [v for per in epochs_of.values() if (v := reduce_scores(per, name, k)) is not None]  # type: ignore[arg-type]
    mean = math.fsum(values) / len(values) if values else None
    want_n, want_mean = recorded.get("n"), recorded.get("mean")
    if isinstance(want_mean, int | float):
        same = mean is not None and abs(mean - want_mean) <= 1e-9
    else:
        same = mean is None and want_mean is None
    if want_n == len(values) and same:
        return CHANGED if changed else None
    got = "no mean" if mean is None else f"mean {mean:.6f}"
    want = f"mean {want_mean:.6f}" if isinstance(want_mean, int | float) else "no mean"
    return (
        f"its results.jsonl gives {got} over {len(values)} samples where its manifest "
        f"records {want} over {want_n}"
    )


def run_disagrees(
    run_dir: str | Path, manifest: Mapping[str, Any], *, partial: bool = False
) -> str | None:
    """:func:`rows_disagree` for a run directory, its ``results.jsonl`` streamed from disk
    (one pass, one row in memory at a time: 100,000 rows of about 1 KB take 1.5 to 3 s on
    a shared 2-core machine, peak RSS 52 MB; reading them into a list first took 480 MB).
    None for a run that is not ``complete`` (its rows are still coming, or never will:
    nothing to hold them against). ``partial``: as :func:`rows_disagree`'s.

    Returns:
        One clause saying what disagrees (``its results.jsonl holds 3 rows (...) where its
        manifest counts 4 rows (...)``, or ``it has no results.jsonl``), or None.
    """
    if manifest.get("status") != "complete":
        return None
    changed = results_changed(run_dir, manifest)
    edited = figures_edited(manifest)
    if edited and not partial:
        return EDITED
    if changed is False and edited is False:
        return None  # the file and the figures the run wrote: its rows agreed with them
    try:
        return rows_disagree(
            manifest, iter_results(run_dir), partial=partial, changed=bool(changed)
        )
    except UsageError:
        return "it has no readable results.jsonl"


#: what disagrees when the manifest's figures are not the ones the run wrote
EDITED = (
    "its manifest's figures are not the ones the run wrote (their SHA-256 is not its "
    "figures_sha256: a mean, count or interval edited since)"
)


def figures_edited(manifest: Mapping[str, Any]) -> bool | None:
    """Whether the manifest's figures (:func:`~gradetrail.rundir.manifest.figures_seal`)
    were edited since the run wrote them: True when their seal is not the recorded
    ``figures_sha256``, False when it is, None when none is recorded (a run from before
    it: its rows are then read and held against the manifest)."""
    recorded = manifest.get("figures_sha256")
    if not isinstance(recorded, str):
        return None
    return figures_seal(dict(manifest)) != recorded


def results_changed(run_dir: str | Path, manifest: Mapping[str, Any]) -> bool | None:
    """Whether the run's ``results.jsonl`` has another SHA-256 than the one its manifest
    records (``results_sha256``): True when it has (the file was changed since the run
    wrote it), False when it is the file the run wrote (its rows agreed with the manifest
    written after it), None when there is nothing to compare (a manifest without
    ``results_sha256``, no readable file). Hashing 100 MB takes about 0.1 s; reading its
    rows, 2 to 3 s."""
    recorded = manifest.get("results_sha256")
    if not isinstance(recorded, str):
        return None
    try:
        with open_run_file(Path(run_dir) / RESULTS_FILE) as f:
            return hashlib.file_digest(f, "sha256").hexdigest() != recorded
    except (OSError, UsageError):
        return None


#: how a listing marks a complete run whose rows disagree with its manifest
MARK = "ROWS DISAGREE"


def warning(run_dir: str | Path, why: str) -> str:
    """The warning line (after ``warning: ``) of a command that reads such a run and goes
    on (``gradetrail runs``, ``gradetrail export``): which run, what disagrees (``why``,
    from :func:`rows_disagree`) and what to do."""
    return f"{run_dir}: {MARK}: complete but {why}: {FIX}"


def refusal(label: str, run_dir: str | Path, why: str) -> str:
    """The one line a command refusing such a run prints: which run (``label`` is
    ``baseline``, ``candidate``...), what disagrees (``why``, from :func:`rows_disagree`)
    and what to do."""
    return f"{label} run {run_dir} is complete but {why}: {FIX}"


_NAMED_HASH = re.compile(r"-([0-9a-f]{12})$")


def misnamed(run_dir: str | Path, manifest: Mapping[str, Any]) -> str | None:
    """One line when the run directory's name ends in an identity hash (``<name>-<12
    hex>``, as ``gradetrail run`` names it) that is not the one its manifest records: a
    run copied or renamed under another run's name, which a CI step or a reader going by
    the name would take for that run. None when the name carries no hash, or the right
    one."""
    found = _NAMED_HASH.search(Path(run_dir).name)
    recorded = manifest.get("identity_hash")
    if found is None or not isinstance(recorded, str) or recorded[:12] == found.group(1):
        return None
    return (
        f"its directory's name says identity {found.group(1)} but its manifest records "
        f"{recorded[:12]}: a run copied or renamed from another directory (the manifest's "
        "identity is the run's)"
    )


def copied_from(
    base: tuple[str | Path, Mapping[str, Any]], cand: tuple[str | Path, Mapping[str, Any]]
) -> bool:
    """Whether two different run directories hold the same run: the same identity hash,
    start time and ``results_sha256`` in both manifests (a copy: gating it against the
    original passes whatever the candidate is)."""
    (base_dir, a), (cand_dir, b) = base, cand
    keys = ("identity_hash", "started_at", "results_sha256")
    return (
        Path(base_dir).resolve() != Path(cand_dir).resolve()
        and all(isinstance(a.get(k), str) for k in keys)
        and all(a.get(k) == b.get(k) for k in keys)
    )
