"""``gradetrail run --estimate``: what a run would ask for and pay, without any call.

Per model: the requests to make (after the cache), their input tokens (estimated at
:data:`CHARS_PER_TOKEN` characters a token: no provider's tokenizer is installed with
gradetrail, so this is a stated heuristic), their output tokens at most (``max_tokens``),
and their cost: *about* (estimated input, output at ``max_tokens``) and *at most* (the
budget's worst-case bound, :func:`~gradetrail.executors.budget.worst_case_usd`), at the
batch price with ``batch``. Judges: one call a scored row and judge sample; their prompts
quote responses not yet made, so their tokens and cost are not estimated (the budget
holds them during the run).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from gradetrail.cache.store import ResponseCache, default_cache_path
from gradetrail.engine.rendering import with_hits
from gradetrail.engine.runner import plan_run
from gradetrail.errors import SpecError
from gradetrail.executors.budget import worst_case_usd
from gradetrail.providers.base import Response
from gradetrail.spec import EvalSpec

__all__ = ["CHARS_PER_TOKEN", "Estimate", "estimate_run"]

#: characters a token, for the input estimate (a common rule of thumb for English text)
CHARS_PER_TOKEN = 4.0


@dataclass
class Estimate:
    """What a run would do.

    Attributes:
        model: ``provider:model``.
        requests: rows (samples x epochs).
        to_make: requests the cache lacks.
        input_tokens: their input tokens, estimated.
        max_output_tokens: their output tokens at most (None: no max_tokens).
        cost_usd: about what they cost, USD (None: no price or no max_tokens).
        max_cost_usd: at most what they cost, USD (None: no price or no max_tokens).
        judge_calls: judge calls at most (0 without a judge).
        judge_model: the judge's ``provider:model``, or None.
        price_tier: ``batch`` or ``online``.
    """

    model: str
    requests: int
    to_make: int
    input_tokens: int
    max_output_tokens: int | None
    cost_usd: float | None
    max_cost_usd: float | None
    judge_calls: int
    judge_model: str | None
    price_tier: str

    def to_dict(self) -> dict[str, Any]:
        """JSON-ready."""
        return dict(self.__dict__)

    def lines(self) -> list[str]:
        """The estimate as printed lines."""

        def usd(value: float | None) -> str:
            return "n/a (no price or no max_tokens)" if value is None else f"${value:.4f}"

        out = [
            f"{self.model}: {self.to_make:,} of {self.requests:,} requests to make "
            f"({self.requests - self.to_make:,} cached), {self.price_tier} price",
            f"  input tokens   ~{self.input_tokens:,} (estimated, {CHARS_PER_TOKEN:g} "
            "characters a token)",
            "  output tokens  at most "
            + (
                "unbounded (no max_tokens)"
                if self.max_output_tokens is None
                else f"{self.max_output_tokens:,}"
            ),
            f"  cost           about {usd(self.cost_usd)}, at most {usd(self.max_cost_usd)}",
        ]
        if self.judge_model is not None:
            out.append(
                f"judge {self.judge_model}: up to {self.judge_calls:,} calls (not priced: "
                "their prompts quote the responses)"
            )
        return out


def estimate_run(
    spec: EvalSpec,
    *,
    cache_path: str | Path | None = None,
    use_cache: bool = True,
    batch: bool = False,
) -> Estimate:
    """Estimate ``spec``'s run (see the module docstring); no model call is made.

    Raises:
        SpecError, DatasetError: as :func:`~gradetrail.engine.runner.plan_run`.
    """
    plan = plan_run(spec)
    cache = (
        ResponseCache(Path(cache_path) if cache_path else default_cache_path())
        if use_cache
        else None
    )
    provider = plan.provider
    chars, to_make, output, cost, worst = 0, 0, 0, 0.0, 0.0
    priced = True
    try:
        for item, hit in with_hits(plan.prepared, cache):
            if hit is not None:
                continue
            to_make += 1
            request = item.request
            text = (request.system or "") + "".join(
                str(m.get("content") or "") for m in request.messages
            )
            chars += len(text)
            if not priced:
                continue
            try:
                bound = worst_case_usd(provider, request, batch=batch)
            except SpecError:
                priced = False
                continue
            limit = int(request.params.get("max_tokens") or 0) or _limit(provider)
            output += limit
            worst += bound
            about = provider.price(
                request,
                Response(
                    text="",
                    input_tokens=round(len(text) / CHARS_PER_TOKEN),
                    output_tokens=limit,
                    batch=batch,
                ),
            )
            cost += about or 0.0
    finally:
        if cache is not None:
            cache.close()
    judge = getattr(spec.scorer, "model", None)
    rows_to_score = len(plan.prepared)
    judge_samples = int(getattr(spec.scorer, "samples", 1) or 1)
    return Estimate(
        model=f"{spec.model.provider}:{spec.model.name}",
        requests=len(plan.prepared),
        to_make=to_make,
        input_tokens=round(chars / CHARS_PER_TOKEN),
        max_output_tokens=output if priced else None,
        cost_usd=round(cost, 6) if priced else None,
        max_cost_usd=round(worst, 6) if priced else None,
        judge_calls=rows_to_score * judge_samples if judge is not None else 0,
        judge_model=f"{judge.provider}:{judge.name}" if judge is not None else None,
        price_tier="batch" if batch else "online",
    )


def _limit(provider: Any) -> int:
    value = provider.identity().get("default_max_tokens")
    return int(value) if isinstance(value, int) else 0
