"""The run's identity and its manifest.

The identity hash is SHA-256 over canonical JSON of what decides the run's numbers: the
spec without execution-only settings (concurrency, retries, timeouts) and without file
paths, plus the content hash of every file the spec reads (dataset, recordings, judge
files). Two runs are comparable exactly when their identity hashes match.
"""

from __future__ import annotations

import hashlib
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gradetrail.agreement import AgreementStats
from gradetrail.judge_stats import JudgeStats
from gradetrail.providers.base import canonical_json
from gradetrail.rundir import RunDir
from gradetrail.spec import EXECUTION_ONLY, EvalSpec

__all__ = ["Manifest", "git_state", "identity_hash", "spec_hash", "write_manifest"]

RunStatus = Literal["running", "complete", "interrupted", "failed"]


def spec_hash(spec: EvalSpec) -> str:
    """SHA-256 of the whole spec (execution settings included), as validated."""
    return hashlib.sha256(canonical_json(spec.model_dump(mode="json")).encode()).hexdigest()


def identity_hash(spec: EvalSpec, file_hashes: dict[str, str]) -> str:
    """The run's identity hash.

    Args:
        spec: the validated spec.
        file_hashes: role -> SHA-256 of each file the run reads (``dataset``,
            ``recordings``, ``judge``, ``baseline``...).
    """
    body = spec.model_dump(mode="json")
    for key in EXECUTION_ONLY:
        body["run"].pop(key, None)
    body["dataset"].pop("path", None)
    if body["model"].get("recordings"):
        body["model"]["recordings"].pop("path", None)
    # judge file and baseline enter through their content hashes, not their paths
    body["scorer"].pop("file", None)
    body["scorer"].pop("baseline", None)
    payload = {"spec": body, "files": file_hashes}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def git_state(cwd: Path | None = None) -> tuple[str | None, bool | None]:
    """``(sha, dirty)`` of the git repository containing ``cwd``, or ``(None, None)``."""
    try:
        sha = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, timeout=5
        )
        if sha.returncode != 0:
            return None, None
        status = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=cwd,
            capture_output=True,
            text=True,
            timeout=5,
        )
    except (OSError, subprocess.SubprocessError):
        return None, None
    return sha.stdout.strip(), bool(status.stdout.strip())


class ScoreStats(BaseModel):
    """Mean score over samples (each sample's epochs reduced to one score first, by
    run.reducer) with its error bars; the standard error is over samples, not rows."""

    n: int = Field(description="Samples with a reduced score (at least one scored epoch).")
    mean: float | None = Field(description="Mean of per-sample (reduced) scores.")
    se: float | None = Field(description="Standard error of the mean (clustered if clusters).")
    ci_low: float | None = Field(description="Lower bound of the 95% confidence interval.")
    ci_high: float | None = Field(description="Upper bound of the 95% confidence interval.")
    n_clusters: int | None = Field(None, description="Clusters, when the dataset has them.")


class Manifest(BaseModel):
    """What a run was, how it went, and what it cost (``manifest.json``)."""

    name: str
    status: RunStatus = Field(
        description="running (or killed: nothing ended it), complete, interrupted (Ctrl-C or "
        "SIGTERM) or failed (an error stopped it). Only complete means every row is there."
    )
    stop_signal: str | None = Field(
        None, description="SIGINT or SIGTERM when a signal ended the run, else null."
    )
    identity_hash: str
    spec_hash: str
    dataset_hash: str = Field(description="SHA-256 of the dataset file.")
    file_hashes: dict[str, str] = Field(description="SHA-256 of every file the run reads.")
    spec: dict[str, Any] = Field(description="The validated spec, overrides applied.")
    spec_path: str
    overrides: list[str] = Field(default_factory=list)
    requested_model: str
    provider: str
    served_models: dict[str, int] = Field(default_factory=dict, description="model -> rows.")
    gradetrail_version: str
    python_version: str
    git_sha: str | None = None
    git_dirty: bool | None = None
    started_at: str
    ended_at: str | None = None
    wall_time_s: float | None = None
    n_samples: int
    epochs: int
    counts: dict[str, int] = Field(default_factory=dict, description="rows per state.")
    truncated: int = Field(0, description="Rows whose response stopped at max_tokens.")
    input_tokens: int = 0
    output_tokens: int = 0
    cached_input_tokens: int = 0
    cost_usd: float | None = Field(None, description="USD paid this run (cache hits cost 0).")
    cost_usd_cached: float | None = Field(None, description="USD the cache hits once cost.")
    cache_hits: int = 0
    score: ScoreStats | None = None
    judge: JudgeStats | None = Field(
        None, description="Judge calls, cache hits, tokens, cost and errors per reason."
    )
    agreement: AgreementStats | None = Field(
        None, description="Agreement with dataset.label_field: accuracy, Cohen's kappa, confusion."
    )
    top_errors: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The most frequent kinds of error rows: state, kind, error_type, status, "
        "rows and the first row's message.",
    )


def now_iso() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def runtime_versions() -> tuple[str, str]:
    """``(gradetrail version, Python version)``."""
    from gradetrail import __version__

    return __version__, platform.python_version()


def write_manifest(run_dir: RunDir | Path, manifest: Manifest) -> None:
    """Write ``manifest.json`` atomically (temporary file, then rename), never through a
    symlink (see :class:`~gradetrail.rundir.RunDir`).

    Raises:
        RunError: the run directory or the manifest is a symlink, or cannot be written.
    """
    text = manifest.model_dump_json(indent=2) + "\n"
    if isinstance(run_dir, RunDir):
        run_dir.write_atomic("manifest.json", text)
        return
    with RunDir.create(run_dir) as opened:
        opened.write_atomic("manifest.json", text)
