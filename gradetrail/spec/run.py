"""The ``run:`` section: execution knobs, epochs and the reducer."""

from __future__ import annotations

from pydantic import Field, model_validator

from gradetrail.reducers import ReducerName
from gradetrail.spec.base import _Strict

#: documented bounds where nothing natural limits a value (each refused above it, exit 2)
MAX_CONCURRENCY = 10_000
MAX_RETRIES = 100
MAX_EPOCHS = 10_000
#: rows (samples x epochs) one run may hold: each is rendered and keyed before any call
MAX_ROWS = 1_000_000
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
        description="Wall-clock ceiling over all attempts of one request, and over all turns "
        "and tool calls of an agent-loop sample, seconds.",
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
    max_turns: int = Field(
        10,
        ge=1,
        le=1000,
        description="Agent loop (model.tools_module): model turns per sample at most; the "
        "last response is scored when the model still calls tools after this many.",
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
)
