"""The run's identity and its manifest.

The identity hash is SHA-256 over canonical JSON of what decides the run's numbers: the
spec without execution-only settings (concurrency, retries, timeouts) and without file
paths, plus the content hash of every file the spec reads (dataset, recordings, judge
files). Two runs are comparable exactly when their identity hashes match.
"""

from __future__ import annotations

import copy
import hashlib
import json
import math
import platform
import subprocess
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, Field

from gradetrail._util.canonical import canonical_json
from gradetrail._util.jsontext import model_json
from gradetrail.conversation.transcript import ConversationStats
from gradetrail.providers.served import served_model_matches
from gradetrail.rundir.judge_stats import JudgeStats
from gradetrail.rundir.layout import RunDir
from gradetrail.spec import EXECUTION_ONLY, EvalSpec
from gradetrail.spec.reasoning import DEFAULT_ANTHROPIC_VERSION
from gradetrail.stats.agreement import AgreementStats

__all__ = [
    "CacheReport",
    "GitProbe",
    "Manifest",
    "git_state",
    "identity_body",
    "paid_usd",
    "identity_differences",
    "identity_hash",
    "run_warnings",
    "scoring_differences",
    "spec_hash",
    "status_text",
    "write_manifest",
]

RunStatus = Literal["running", "complete", "interrupted", "failed"]


def status_text(status: str, counts: dict[str, int]) -> str:
    """A run's status as printed: ``complete`` only when every row scored; ``complete,
    3 of 200 rows errored``; ``complete, but every row errored (200)`` (a run whose
    provider refused every call ended, but measured nothing).

    Args:
        status: the manifest's ``status``.
        counts: rows per state (the manifest's ``counts``).
    """
    rows = sum(n for n in counts.values() if isinstance(n, int))
    errors = rows - int(counts.get("scored", 0) or 0)
    if status != "complete" or errors <= 0:
        return status
    if errors == rows:
        return f"complete, but every row errored ({rows})"
    return f"complete, {errors} of {rows} rows errored"


def spec_hash(spec: EvalSpec) -> str:
    """SHA-256 of the whole spec (execution settings included), as validated; fields
    added later and left at their defaults (:data:`_LATER_DEFAULTS`) are left out, so a
    spec that does not use them hashes as it did before they existed."""
    body = spec.model_dump(mode="json")
    _drop_later_defaults(body)
    return hashlib.sha256(canonical_json(body).encode()).hexdigest()


#: (section, key, default) of spec fields added after runs were recorded without them;
#: section "model" is the model under evaluation and a judge's (scorer.model) alike, ""
#: the spec's top level; a dotted key is a field of a sub-section
_LATER_DEFAULTS: tuple[tuple[str, str, Any], ...] = (
    ("run", "refusals", "score"),
    ("model", "api_version", None),
    ("model", "api_version", DEFAULT_ANTHROPIC_VERSION),  # named or not: the same requests
    ("model", "reasoning", None),
    ("model", "pause_turn_continuations", 0),
    ("model", "stream", None),
    ("model", "headers", None),
    ("model", "query", None),
    ("model", "response_format", None),
    ("model", "recordings.match_fields", []),
    ("scorer", "reasoning_tags", ["think"]),
    ("scorer", "allow_different_data", False),
    ("scorer", "parse.format", "marker"),
    ("run", "truncated", "score"),
    ("run", "labels", []),
    ("run", "max_cost_usd", None),
    ("run", "max_tool_output", 16 * 1024),
    ("run", "start_over_budget", False),
    ("run", "require_approval", False),
    ("run", "approval_file", None),
    ("run", "progress_file", None),
    ("dataset", "split", None),
    ("", "harness", None),
)


def _sections(body: dict[str, Any], name: str) -> list[Any]:
    """The spec sections a later default applies to (``model``: the judge's too)."""
    if not name:  # a top-level key
        return [body]
    if name != "model":
        return [body.get(name)]
    scorer = body.get("scorer")
    return [body.get("model"), scorer.get("model") if isinstance(scorer, dict) else None]


def _drop_later_defaults(body: dict[str, Any]) -> None:
    """Remove from a spec's JSON form, in place, the fields added after runs were
    recorded without them, where they are left at their defaults."""
    for section, dotted, default in _LATER_DEFAULTS:
        *path, key = dotted.split(".")
        for part in _sections(body, section):
            for name in path:
                part = part.get(name) if isinstance(part, dict) else None
            if isinstance(part, dict) and key in part and part[key] == default:
                del part[key]


def identity_body(spec: dict[str, Any]) -> dict[str, Any]:
    """The part of a spec's JSON form (``spec.model_dump(mode="json")``, or a manifest's
    ``spec``) that enters the identity: without execution-only settings and without file
    paths (the files enter through their content hashes). Returns a new dict."""
    body = copy.deepcopy(spec)
    body.pop("ci", None)  # what a CI check requires decides no number
    body.pop("harness", None)  # what an approval covers decides no number either
    for key in EXECUTION_ONLY:
        body.get("run", {}).pop(key, None)
    if body.get("run", {}).get("truncated") == "score":  # the default: older hashes hold
        body["run"].pop("truncated")
    dataset = body.get("dataset", {})
    dataset.pop("path", None)
    # a Hugging Face dataset enters through its resolved revision and fingerprint (the
    # dataset hash), not its name; keys left at their defaults keep older hashes valid
    dataset.pop("hf", None)
    for key in ("format", "fields", "types", "split"):
        if not dataset.get(key):
            dataset.pop(key, None)
    if dataset.get("split"):  # its ids enter through their hash (file role "split")
        dataset["split"].pop("file", None)
        for key in ("held_out", "max_looks"):  # which split is held out decides no number
            dataset["split"].pop(key, None)
    body.get("model", {}).pop("http_client", None)  # how requests are sent, not what
    _drop_later_defaults(body)  # older runs keep their identity hashes
    for model in _sections(body, "model"):
        if not isinstance(model, dict):
            continue
        model.pop("stream", None)  # how answers are sent, not what
        price = model.get("price")
        for key in ("server_tool_usd", "cache_write_1h_per_mtok"):
            if isinstance(price, dict) and price.get(key) is None:
                price.pop(key, None)
    if body.get("model", {}).get("recordings"):
        body["model"]["recordings"].pop("path", None)
        body["model"]["recordings"].pop("match_fields", None)  # a check: decides no number
    # judge file and baseline enter through their content hashes, not their paths
    body.get("scorer", {}).pop("file", None)
    body.get("scorer", {}).pop("baseline", None)
    for named in body.get("scorers") or []:  # several scorers: the same for each
        named.get("scorer", {}).pop("file", None)
        named.get("scorer", {}).pop("baseline", None)
    return body


def identity_hash(spec: EvalSpec, file_hashes: dict[str, str]) -> str:
    """The run's identity hash: SHA-256 of canonical JSON over :func:`identity_body` of the
    spec and the files' content hashes.

    Args:
        spec: the validated spec.
        file_hashes: role -> SHA-256 of each file the run reads (``dataset``,
            ``recordings``, ``judge``, ``baseline``...).
    """
    payload = {"spec": identity_body(spec.model_dump(mode="json")), "files": file_hashes}
    return hashlib.sha256(canonical_json(payload).encode()).hexdigest()


def identity_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two runs' identities differ, one line each, from their manifests' JSON form:
    ``spec model.name: 'x' -> 'y'`` for each identity-relevant spec key (dotted path),
    ``dataset hash 1a2b3c4d5e6f -> ...`` and ``<role> file hash ...`` for each file.
    Empty when the identity hashes match."""
    if a.get("identity_hash") == b.get("identity_hash"):
        return []
    out = [line for _, line in _differences(a, b)]
    return out or ["identity hashes differ (another gradetrail version's hashing?)"]


#: spec keys (dotted paths and their prefixes) that decide how an answer is scored
SCORING_KEYS = ("target", "scorer", "scorers", "run.refusals")


def scoring_differences(a: dict[str, Any], b: dict[str, Any]) -> list[str]:
    """Where two runs score answers differently, the lines of :func:`identity_differences`
    that say so: the target template, the scorer section(s), ``run.refusals``, and the
    files a scorer reads (a judge file, a pairwise baseline, a python scorer's module).
    Empty when they score alike."""
    if a.get("identity_hash") == b.get("identity_hash"):
        return []
    return [line for what, line in _differences(a, b) if _scores(what)]


def _scores(what: str) -> bool:
    """Whether a difference's key (a dotted spec key, or ``file:<role>``) is about
    scoring: a :data:`SCORING_KEYS` key, or a file a scorer reads (its roles: ``judge``,
    ``baseline``, ``scorer``, ``custom_scorer``, ``python_scorer:...``, and a metric's
    ``NAME.<role>`` under ``scorers:``)."""
    if what.startswith("file:"):
        role = what.removeprefix("file:")
        return (
            role in ("judge", "baseline", "scorer", "custom_scorer")
            or role.startswith("python_scorer:")
            or "." in role
        )
    return any(what == key or what.startswith(key + ".") for key in SCORING_KEYS)


def _differences(a: dict[str, Any], b: dict[str, Any]) -> list[tuple[str, str]]:
    """``(key, line)`` for each identity difference of two manifests: a dotted spec key,
    or ``file:<role>`` for a file's hash."""
    out = []
    flat_a = _flatten(identity_body(a.get("spec") or {}))
    flat_b = _flatten(identity_body(b.get("spec") or {}))
    for key in sorted(flat_a.keys() | flat_b.keys()):
        if flat_a.get(key, _ABSENT) != flat_b.get(key, _ABSENT):
            was, now = (_shown(f.get(key, _ABSENT)) for f in (flat_a, flat_b))
            out.append((key, f"spec {key}: {was} -> {now}"))
    files_a, files_b = a.get("file_hashes") or {}, b.get("file_hashes") or {}
    for role in sorted(files_a.keys() | files_b.keys()):
        if files_a.get(role) != files_b.get(role):
            was, now = (str(f.get(role) or "none")[:12] for f in (files_a, files_b))
            label = {"dataset": "dataset hash", "split": "split ids hash"}.get(
                role, f"{role} file hash"
            )
            out.append((f"file:{role}", f"{label}: {was} -> {now}"))
    return out


def run_warnings(manifest: dict[str, Any]) -> list[str]:
    """What a reader of a run should be warned about, one line each, from its manifest's
    JSON form: a status other than complete, error rows by kind, truncated responses, a
    served model other than the requested one, judge errors per reason, a dirty git tree.
    Empty for a clean, complete run."""
    out = []
    status = manifest.get("status")
    if status == "killed":  # read_manifest's status of a run whose process is gone
        out.append("run was killed (its process is gone without ending it): not every row is there")
    elif status not in (None, "complete"):
        out.append(f"run is {status}: not every row is there")
    for error in manifest.get("top_errors") or []:
        kind = error.get("kind") or "error"
        if error.get("status"):
            kind += f" {error['status']}"
        out.append(
            f"{error.get('rows')} {error.get('state')} rows ({kind}): {error.get('message')}"
        )
    if manifest.get("truncated"):
        out.append(f"{manifest['truncated']} responses stopped at max_tokens (truncated)")
    if manifest.get("reasoning_exhausted"):
        out.append(
            f"{manifest['reasoning_exhausted']} responses ran out of max_tokens while still "
            "reasoning (no answer): raise model.params.max_tokens or lower the reasoning effort"
        )
    if manifest.get("refusals"):
        out.append(f"{manifest['refusals']} responses were refusals (the model declined)")
    requested = str(manifest.get("requested_model") or "")
    provider = manifest.get("provider")
    if provider not in ("replay", "python"):
        for served, rows in (manifest.get("served_models") or {}).items():
            if not served_model_matches(requested, served):
                out.append(f"{rows} rows were served by {served}, not the requested {requested}")
    judge_errors = (manifest.get("judge") or {}).get("errors") or {}
    for reason, rows in sorted(judge_errors.items()):
        if rows:
            out.append(f"{rows} judge_error rows ({reason})")
    if manifest.get("git_dirty"):
        out.append("the git tree had uncommitted changes when the run started")
    return out


_ABSENT = object()


def _flatten(value: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(value, dict) and value:
        out: dict[str, Any] = {}
        for key, item in value.items():
            out.update(_flatten(item, f"{prefix}{key}."))
        return out
    return {prefix.rstrip("."): value}


def _shown(value: Any, width: int = 60) -> str:
    if value is _ABSENT:
        return "(absent)"
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= width else text[: width - 1] + "…"


#: seconds a git probe may take before the manifest records no git state
GIT_TIMEOUT_S = 5.0


class GitProbe:
    """``git rev-parse HEAD`` and ``git status`` of the repository containing ``cwd``,
    both started at once in the background when the probe is made, so a run's manifest
    learns its git state while the run is planned instead of before its first request
    (``git status`` of a large repository takes a while).

    Use as a context manager, or call :meth:`close`: it ends what has not finished.
    """

    def __init__(self, cwd: Path | None = None) -> None:
        self._procs: list[subprocess.Popen[str]] = []
        self._result: tuple[str | None, bool | None] | None = None
        # --no-optional-locks: status only reads, never refreshes the index under its lock
        # (a run refused before its manifest ends the probe; a lock must not outlive it)
        status = ["git", "--no-optional-locks", "status", "--porcelain", "--untracked-files=no"]
        for args in (["git", "rev-parse", "HEAD"], status):
            try:
                self._procs.append(
                    subprocess.Popen(
                        args,
                        cwd=cwd,
                        stdin=subprocess.DEVNULL,
                        stdout=subprocess.PIPE,
                        stderr=subprocess.DEVNULL,
                        text=True,
                    )
                )
            except OSError:  # no git
                self._result = (None, None)
                break

    def result(self) -> tuple[str | None, bool | None]:
        """``(sha, dirty)``, or ``(None, None)`` outside a repository, without git, or
        when git takes over :data:`GIT_TIMEOUT_S` seconds (waits for git's answers)."""
        if self._result is None and len(self._procs) != 2:  # closed before it answered
            self._result = (None, None)
        if self._result is None:
            try:
                (sha, sha_rc), (status, _) = (self._wait(proc) for proc in self._procs)
            except subprocess.TimeoutExpired:
                self._result = (None, None)
            else:
                self._result = (sha.strip(), bool(status.strip())) if sha_rc == 0 else (None, None)
            self.close()
        return self._result

    def _wait(self, proc: subprocess.Popen[str]) -> tuple[str, int]:
        out, _ = proc.communicate(timeout=GIT_TIMEOUT_S)
        return out, proc.returncode

    def close(self) -> None:
        """End (and reap) the git processes still running: SIGTERM, which git cleans up
        after, then SIGKILL if it has not ended in a second."""
        for proc in self._procs:
            if proc.poll() is None:
                proc.terminate()
            try:
                proc.communicate(timeout=1.0)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.communicate()
        self._procs = []

    def __enter__(self) -> GitProbe:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


def git_state(cwd: Path | None = None) -> tuple[str | None, bool | None]:
    """``(sha, dirty)`` of the git repository containing ``cwd``, or ``(None, None)``."""
    with GitProbe(cwd) as probe:
        return probe.result()


class ScoreStats(BaseModel):
    """Mean score over samples (each sample's epochs reduced to one score first, by
    run.reducer) with its error bars; the standard error is over samples, not rows."""

    n: int = Field(description="Samples with a reduced score (at least one scored epoch).")
    mean: float | None = Field(description="Mean of per-sample (reduced) scores.")
    se: float | None = Field(description="Standard error of the mean (clustered if clusters).")
    ci_low: float | None = Field(description="Lower bound of the 95% confidence interval.")
    ci_high: float | None = Field(description="Upper bound of the 95% confidence interval.")
    n_clusters: int | None = Field(None, description="Clusters, when the dataset has them.")
    ci_method: str | None = Field(
        None,
        description="The interval: 'wilson' (binary scores: Wilson's score interval, valid "
        "at 0% and 100%) or 't' (mean +- t quantile x SE).",
    )


class CacheReport(BaseModel):
    """What the run's cache went through (``manifest.cache``); all zero on a quiet run."""

    path: str = Field(description="The cache file.")
    damaged: int = Field(0, description="Damaged entries found, never served (re-requested).")
    twins: int = Field(
        0, description="Requests answered by an identical request in flight in this run."
    )
    shared: int = Field(
        0, description="Requests answered by another process making them on this cache."
    )
    other_processes: list[str] = Field(
        default_factory=list, description="host:pid of the processes whose claims were waited on."
    )
    took_over: int = Field(
        0,
        description="Claims taken over: their process was gone from this host, or their "
        "heartbeat stood still for the claim TTL on this process's monotonic clock.",
    )
    recreated: int = Field(0, description="Times the file was deleted mid-run and recreated.")
    rescued: int = Field(0, description="Entries copied into a recreated file.")
    unsaved: int = Field(0, description="Responses the cache could not store (kept elsewhere).")
    lost: int = Field(0, description="Responses neither the cache nor the run directory kept.")
    rejected: int = Field(
        0,
        description="Lines of the run directory's pending-cache.jsonl not imported: not "
        "signed by a run on this cache (planted, edited or from another cache).",
    )


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
    stop_reason: str | None = Field(
        None,
        description="Why the run stopped starting calls before its end (the budget, or a "
        "provider quota that ran out), or null.",
    )
    identity_hash: str
    spec_hash: str
    dataset_hash: str = Field(
        description="SHA-256 of the dataset file (for a Hugging Face dataset, of its resolved "
        "revision and fingerprint, or of its files)."
    )
    dataset: dict[str, Any] | None = Field(
        None,
        description="What was read: format; for a Hugging Face dataset also kind (hub, files, "
        "disk), split, the resolved revision (commit SHA), fingerprint and rows.",
    )
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
    input_tokens: int = Field(0, description="Prompt tokens, prompt-cache reads included.")
    output_tokens: int = 0
    cached_input_tokens: int = Field(0, description="Of input_tokens, prompt-cache reads.")
    cache_write_tokens: int = Field(0, description="Of input_tokens, prompt-cache writes.")
    reasoning_tokens: int = Field(
        0, description="Of output_tokens, those spent reasoning (not in the visible answers)."
    )
    reasoning_exhausted: int = Field(
        0, description="Rows whose max_tokens ran out while the model was still reasoning."
    )
    refusals: int = Field(
        0, description="Rows whose model declined (stop reason refusal or content_filter)."
    )
    server_tool_uses: dict[str, int] = Field(
        default_factory=dict,
        description="Server-side tool uses billed per use (e.g. web_search_requests).",
    )
    cost_usd: float | None = Field(
        None,
        description="USD paid this run for the model's calls (cache hits cost 0; the judge's "
        "are in judge.cost_usd), over the rows whose cost is known (see unpriced_rows).",
    )
    unpriced_rows: int = Field(
        0,
        description="Rows paid this run at no known price (a model with no price, or a "
        "conversation with such a turn): cost_usd leaves them out, so the run's cost is "
        "unknown.",
    )
    cost_usd_cached: float | None = Field(None, description="USD the cache hits once cost.")
    cost_usd_unscored: float | None = Field(
        None,
        description="Of cost_usd, USD paid for rows that did not score (a response billed "
        "and then refused, a judge or scorer failing after the model answered); null "
        "while none did.",
    )
    cache_hits: int = 0
    results_sha256: str | None = Field(
        None,
        description="SHA-256 of results.jsonl as the run wrote it (null when it could not "
        "be written). While the file still has it, its rows are known to agree with this "
        "manifest without reading them.",
    )
    figures_sha256: str | None = Field(
        None,
        description="SHA-256 of the figures the rows decide as written (figures_seal: "
        "counts, score, metrics, n_samples, epochs, status, results_sha256): a manifest "
        "whose figures were edited since no longer has it, and its rows are read and held "
        "against it.",
    )
    score: ScoreStats | None = None
    metrics: dict[str, ScoreStats] | None = Field(
        None,
        description="With several scorers (scorers:), each metric's statistics by name, the "
        "primary's equal to score; null with one scorer.",
    )
    judge: JudgeStats | None = Field(
        None, description="Judge calls, cache hits, tokens, cost and errors per reason."
    )
    agreement: AgreementStats | None = Field(
        None, description="Agreement with dataset.label_field: accuracy, Cohen's kappa, confusion."
    )
    cache: CacheReport | None = Field(
        None, description="Damage, sharing and loss the cache saw; null with --no-cache."
    )
    conversations: ConversationStats | None = Field(
        None,
        description="Conversation rows: model turns, tool calls, tool errors and why each "
        "conversation ended; null when no row was a conversation.",
    )
    app_metrics: dict[str, dict[str, float | int]] | None = Field(
        None,
        description="A python app's own metrics (Response.metrics), name -> {rows, mean} "
        "over the rows that reported it; null when none did.",
    )
    executor: dict[str, Any] | None = Field(
        None,
        description="Where provider calls ran (execution only, not in the identity hash): "
        "kind (local, ray), concurrency; for ray the cluster address, workers, nodes, "
        "in-flight share per worker and each worker's node, pid and attempts served.",
    )
    top_errors: list[dict[str, Any]] = Field(
        default_factory=list,
        description="The most frequent kinds of error rows: state, kind, error_type, status, "
        "rows and the first row's message.",
    )

    @property
    def paid_usd(self) -> float | None:
        """Everything this run paid, USD: see :func:`paid_usd`."""
        return paid_usd(self.model_dump(include={"cost_usd", "unpriced_rows", "judge"}))


def paid_usd(manifest: dict[str, Any]) -> float | None:
    """Everything a run paid, USD, from its manifest's JSON form: the model's calls
    (``cost_usd``) and the judge's (``judge.cost_usd``). None when any paid row's price is
    unknown (``unpriced_rows``, ``judge.unpriced_rows``: the priced part would pass for
    the whole) or when nothing is priced."""
    judge = manifest.get("judge") or {}
    if manifest.get("unpriced_rows") or judge.get("unpriced_rows"):
        return None
    parts = [c for c in (manifest.get("cost_usd"), judge.get("cost_usd")) if c is not None]
    return math.fsum(parts) if parts else None


def now_iso() -> str:
    """The current UTC time, ISO 8601."""
    return datetime.now(UTC).isoformat(timespec="milliseconds")


def runtime_versions() -> tuple[str, str]:
    """``(gradetrail version, Python version)``."""
    from gradetrail._version import __version__

    return __version__, platform.python_version()


#: the manifest fields :func:`figures_seal` covers: what the rows decide and the gate,
#: ``runs`` and the viewer show
SEALED_FIELDS = ("counts", "score", "metrics", "n_samples", "epochs", "status", "results_sha256")


def figures_seal(manifest: dict[str, Any]) -> str:
    """SHA-256 (hex) of the canonical JSON of the manifest's :data:`SEALED_FIELDS` (its
    JSON form): ``figures_sha256`` as written. Not a signature (anyone can recompute
    it): it tells a figure edited by hand from the one the run wrote."""
    sealed = {k: manifest.get(k) for k in SEALED_FIELDS}
    return hashlib.sha256(canonical_json(sealed).encode("utf-8")).hexdigest()


def sealed(manifest: Manifest) -> Manifest:
    """``manifest`` with ``figures_sha256`` (:func:`figures_seal`) when its results
    file's SHA-256 is recorded (a run's final manifest), else as it is."""
    if manifest.results_sha256 is None:
        return manifest
    seal = figures_seal(json.loads(model_json(manifest)))
    return manifest.model_copy(update={"figures_sha256": seal})


def write_manifest(run_dir: RunDir | Path, manifest: Manifest) -> None:
    """Write ``manifest.json`` atomically (temporary file, then rename), never through a
    symlink (see :class:`~gradetrail.rundir.layout.RunDir`), with ``figures_sha256``
    (:func:`figures_seal`) when its results file's SHA-256 is recorded.

    Raises:
        RunError: the run directory or the manifest is a symlink, or cannot be written.
    """
    text = model_json(sealed(manifest), indent=2) + "\n"
    if isinstance(run_dir, RunDir):
        run_dir.write_atomic("manifest.json", text)
        return
    with RunDir.create(run_dir) as opened:
        opened.write_atomic("manifest.json", text)
