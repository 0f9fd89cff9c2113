"""The ``run:`` section: execution knobs, epochs and the reducer."""

from __future__ import annotations

from typing import Literal

from pydantic import Field, field_validator, model_validator

from gradetrail.spec.base import _Strict
from gradetrail.stats.reducers import ReducerName

#: documented bounds where nothing natural limits a value (each refused above it, exit 2)
MAX_CONCURRENCY = 10_000
MAX_RETRIES = 100
MAX_EPOCHS = 10_000
#: rows (samples x epochs) one run may hold: each is rendered and keyed before any call
MAX_ROWS = 1_000_000
#: labels a run may carry, and characters a label
MAX_LABELS = 20
MAX_LABEL_CHARS = 100

#: how a response that stopped at max_tokens counts (see gradetrail.rundir.truncation)
TruncatedPolicy = Literal["score", "exclude", "zero"]
#: the longest timeout a spec may set, seconds (one day): every wait has a bound
MAX_TIMEOUT_S = 86_400.0


class RunSettings(_Strict):
    """How the run executes. ``epochs``, ``reducer`` and ``pass_k`` decide the numbers and
    enter the identity hash; the rest are execution-only."""

    concurrency: int = Field(
        16, ge=1, le=MAX_CONCURRENCY, description="Requests in flight at most (up to 10,000)."
    )
    max_retries: int = Field(
        5, ge=0, le=MAX_RETRIES, description="Retries of a transient error per request (up to 100)."
    )
    timeout_s: float = Field(
        120.0, gt=0, le=MAX_TIMEOUT_S, description="Per-attempt timeout, seconds (up to a day)."
    )
    sample_timeout_s: float | None = Field(
        None,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Wall-clock ceiling over all attempts of one request (from its first "
        "attempt, less a server's Retry-After pause that held it first), and over all "
        "turns and tool calls of an agent-loop sample, seconds. A backoff or Retry-After "
        "wait it has no room for is not started: the sample ends as a transient "
        "ProviderTimeout that a re-run retries.",
    )
    score_timeout_s: float | None = Field(
        30.0,
        gt=0,
        le=MAX_TIMEOUT_S,
        description="Seconds a scorer that calls no model (exact, regex, numeric, ...) may "
        "take on one response; past it the row is a judge_error (scorer_timeout) and the run "
        "goes on (null: no bound). Ctrl-C and SIGTERM reach a scorer at any time.",
    )
    requests_per_minute: float | None = Field(
        None, gt=0, description="Cap on requests started per minute (all attempts count)."
    )
    tokens_per_minute: float | None = Field(
        None,
        gt=0,
        description="Cap on tokens per minute: each request reserves its estimated prompt "
        "tokens (characters / 4) plus max_tokens, corrected to the reported usage.",
    )
    adaptive_concurrency: bool = Field(
        True,
        description="On 429s, lower the requests in flight (x0.75); add one back per window of "
        "successes, up to concurrency (AIMD), so a run settles at the provider's real limit.",
    )
    fail_fast: int = Field(
        5,
        ge=0,
        description="Stop the run when the first N completed samples all fail with the same "
        "permanent error (or all fail to reach the endpoint after their retries) and none "
        "succeeded (0: never).",
    )
    max_cost_usd: float | None = Field(
        None,
        gt=0,
        description="A hard ceiling on what the run spends, USD, judges included: no call "
        "starts whose worst case could pass it; the run then stops, resumable. Needs a price "
        "and max_tokens for every model.",
    )
    start_over_budget: bool = Field(
        False,
        description="Start a run whose worst case is over run.max_cost_usd anyway (it stops "
        "at the ceiling); by default such a run is refused before any call.",
    )
    max_turns: int = Field(
        10,
        ge=1,
        le=1000,
        description="Agent loop (model.tools_module): model turns per sample at most; the "
        "last response is scored when the model still calls tools after this many.",
    )
    max_tool_output: int = Field(
        16 * 1024,
        ge=0,
        description="Agent loop: bytes (UTF-8) of a tool's result sent back to the model at "
        "most, as Inspect AI's max_tool_output (16 KiB by default); a longer result is cut "
        "to its first bytes inside a marker saying so and giving its size. 0: no bound.",
    )
    epochs: int = Field(
        1, ge=1, le=MAX_EPOCHS, description="Times every sample is run (up to 10,000)."
    )
    reducer: ReducerName = Field(
        "mean",
        description="How a sample's epoch scores become its one score: mean, max, majority "
        "(ties go to the lowest score) or pass_at_k (unbiased estimator, Chen et al. 2021).",
    )
    pass_k: int | None = Field(
        None, ge=1, description="The k of reducer pass_at_k (default 1); at most run.epochs."
    )
    refusals: Literal["score", "exclude"] = Field(
        "score",
        description="A refusal (the model declined: Anthropic stop reason refusal, OpenAI "
        "message.refusal, or a content filter withholding the output) is a model answer "
        "whose tokens and cost count either way: score scores its visible text as any "
        "answer; exclude leaves it out of the mean (a judge_error row, reason refusal). "
        "Both count refusals in the summary.",
    )
    labels: list[str] = Field(
        default_factory=list,
        max_length=MAX_LABELS,
        description="Names for people (a sweep's cell, a ticket): shown by `gradetrail runs`, "
        "the viewer and the sweep; not part of the identity hash (`--label` on the CLI).",
    )

    @field_validator("labels")
    @classmethod
    def _labels_short(cls, labels: list[str]) -> list[str]:
        for label in labels:
            if not label.strip() or len(label) > MAX_LABEL_CHARS or not label.isprintable():
                raise ValueError(
                    f"label {label[:40]!r} must be 1-{MAX_LABEL_CHARS} printable characters"
                )
        return labels

    require_approval: bool = Field(
        False,
        description="Refuse to start (exit 2) when a file of the harness (the spec, the "
        "files and modules it names, harness: globs, the lockfile) changed since "
        "gradetrail approve recorded it. A change detector, not a security boundary.",
    )
    approval_file: str | None = Field(
        None,
        description="The approval file, relative to the spec file (default "
        "<spec name>.approval.json beside it).",
    )
    progress_file: str | None = Field(
        None,
        description="Also write the run's progress.json (done/total, ok, failed, elapsed_s, "
        "eta_s, cost) to this path (relative to the spec file), rewritten atomically every "
        "2 s and at the end; every run writes it in its run directory.",
    )
    truncated: TruncatedPolicy = Field(
        "score",
        description="A response that stopped at max_tokens: score it like any other (score), "
        "leave it out of the mean (exclude) or count it 0 (zero). The summary, the gate and "
        "the viewer apply it alike; it enters the identity hash.",
    )

    @model_validator(mode="after")
    def _reducer_fields(self) -> RunSettings:
        if self.pass_k is not None and self.reducer != "pass_at_k":
            raise ValueError("pass_k applies only to reducer: pass_at_k; remove it or set that")
        if self.reducer == "pass_at_k" and (self.pass_k or 1) > self.epochs:
            raise ValueError(
                f"pass_k {self.pass_k} is more than epochs {self.epochs}; pass@k needs at "
                "least k epochs per sample, so raise run.epochs or lower run.pass_k"
            )
        return self


#: run settings that do not change any number, so they stay out of the identity hash
EXECUTION_ONLY = (
    "concurrency",
    "max_retries",
    "timeout_s",
    "sample_timeout_s",
    "score_timeout_s",
    "requests_per_minute",
    "tokens_per_minute",
    "adaptive_concurrency",
    "fail_fast",
    "labels",
    "max_cost_usd",
    "start_over_budget",
    "require_approval",
    "approval_file",
    "progress_file",
)
