"""Reasoning models: the ``model.reasoning`` block, the dated table of what each model
family accepts, and the checks that refuse, before any call, what the API would refuse
on every sample.

The table (:data:`FAMILIES`) maps a provider's model family to how reasoning is asked for
(Anthropic ``thinking`` with a token budget, or adaptive thinking with
``output_config.effort``; OpenAI ``reasoning_effort``), the effort levels it takes, and
whether it takes sampling parameters and stop sequences. Each entry names the date its
facts were read and where. A model the table does not know is sent what the spec asks
for, unchecked; ``openai_compatible`` servers (vLLM, SGLang, gateways) are sent
``reasoning_effort`` as given.

Checks (:func:`problems`), each one line naming the field and the fix (exit 2):

- an effort level the family does not take, or a thinking budget on a family that has
  only adaptive thinking (or no budget at all), or reasoning on a model that does not
  reason;
- Anthropic: a budget below 1,024 tokens or not below ``max_tokens``; ``temperature``
  other than 1, ``top_k``, or ``top_p`` below 0.95 with thinking on; ``temperature``,
  ``top_p`` or ``top_k`` on a family that no longer takes them, or under API version
  2026-10-21 (which takes none on any model);
- OpenAI reasoning families: ``temperature`` or ``top_p`` other than 1, and ``stop`` where
  the family refuses it; a reasoning summary (Chat Completions returns none; the Responses
  API, ``openai_responses``, is sent ``reasoning: {effort, summary: auto}`` and checked
  against the same families). The API's own fields in ``model.params.extra``
  (``reasoning_effort`` on Chat Completions, a ``reasoning`` object on the Responses API)
  are checked as ``model.reasoning`` is: none on a model that does not reason, an effort
  its family takes.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass
from typing import Any, Literal

from pydantic import Field

from gradetrail._util.lazyre import lazy_compile
from gradetrail.spec.base import _Strict

__all__ = [
    "ANTHROPIC_VERSIONS",
    "DEFAULT_ANTHROPIC_VERSION",
    "FAMILIES",
    "Family",
    "ReasoningSpec",
    "anthropic_reasoning_fields",
    "family_of",
    "openai_reasoning_fields",
    "problems",
    "responses_reasoning_fields",
]

Effort = Literal["none", "minimal", "low", "medium", "high", "xhigh", "max"]

#: the ``anthropic-version`` gradetrail sends when the spec names none (the lean client's
#: and, since it is sent explicitly, the SDK's too)
DEFAULT_ANTHROPIC_VERSION = "2023-06-01"
#: the Messages API versions, oldest first; from 2026-10-21 on, temperature, top_p and
#: top_k are refused on every model
ANTHROPIC_VERSIONS = ("2023-01-01", "2023-06-01", "2026-10-21")
#: the first version that refuses sampling parameters
NO_SAMPLING_VERSION = "2026-10-21"
#: Anthropic's least thinking budget, tokens
MIN_THINKING_BUDGET = 1024
#: max_tokens sent to the Messages API when the spec sets none (it requires one)
ANTHROPIC_DEFAULT_MAX_TOKENS = 4096


class ReasoningSpec(_Strict):
    """How much a reasoning model thinks (``model.reasoning``), mapped per provider and
    model family (see :mod:`gradetrail.spec.reasoning`); enters every cache key when set."""

    effort: Effort | None = Field(
        None,
        description="Reasoning effort: OpenAI reasoning_effort (none, minimal, low, medium, "
        "high, xhigh as the model takes them); Anthropic output_config.effort with adaptive "
        "thinking (low, medium, high, xhigh, max as the model takes them).",
    )
    budget_tokens: int | None = Field(
        None,
        ge=1,
        description="Anthropic thinking budget in tokens (thinking type enabled): at least "
        "1,024 and below max_tokens; models from Opus 4.7 on take only effort.",
    )
    summary: bool | None = Field(
        None,
        description="Keep the reasoning text the API returns (Anthropic thinking, summarized "
        "where the model summarizes it; a server's reasoning_content) in each row; false "
        "drops it (the tokens are counted either way). Chat Completions returns no OpenAI "
        "reasoning summary, so true is refused there.",
    )


@dataclass(frozen=True, slots=True, eq=False, repr=False)
class Family:
    """What one model family accepts.

    Attributes:
        provider: ``anthropic`` or ``openai``.
        pattern: a regular expression the model name (its dated snapshot suffix removed)
            fully matches.
        thinking: ``budget`` (Anthropic thinking enabled with budget_tokens), ``adaptive``
            (adaptive thinking with effort, the budget form still taken), ``adaptive_only``
            (adaptive thinking only), ``effort`` (OpenAI reasoning_effort) or None (no
            reasoning).
        efforts: the effort levels taken (empty: none).
        sampling: False when temperature / top_p (and top_k) are refused whatever
            reasoning is set (other than temperature 1).
        stop: False when stop sequences are refused.
        display: True when the API takes ``thinking.display`` (summarized / omitted).
        as_of: the date the facts were read (ISO 8601).
        source: where.
    """

    provider: str
    pattern: str
    thinking: str | None
    efforts: tuple[str, ...]
    sampling: bool = True
    stop: bool = True
    display: bool = False
    as_of: str = ""
    source: str = ""


_A_DOCS = "https://platform.claude.com/docs/en/build-with-claude/extended-thinking"
_A_ADAPTIVE = "https://platform.claude.com/docs/en/build-with-claude/adaptive-thinking"
_A_EFFORT = "https://platform.claude.com/docs/en/build-with-claude/effort"
_O_DOCS = "https://platform.openai.com/docs/guides/reasoning"
_O_REF = "https://platform.openai.com/docs/api-reference/chat/create#reasoning_effort"

#: the dated table, most specific first
FAMILIES: tuple[Family, ...] = (
    # Anthropic: adaptive thinking only, sampling parameters removed (Opus 4.7 on)
    Family(
        "anthropic",
        r"claude-(?:opus-4-[7-9]|(?:opus|sonnet|haiku|mythos|fable)-[5-9](?:-\d+)?|mythos-preview)",
        "adaptive_only",
        ("low", "medium", "high", "xhigh", "max"),
        sampling=False,
        display=True,
        as_of="2026-12-03",
        source=f"{_A_ADAPTIVE}; {_A_EFFORT}; recorded 400s: 'temperature is deprecated for "
        "this model' (claude-opus-4-7), effort xhigh on claude-opus-5",
    ),
    # Anthropic: adaptive thinking, the budget form deprecated but taken (4.6)
    Family(
        "anthropic",
        r"claude-(?:opus|sonnet)-4-6",
        "adaptive",
        ("low", "medium", "high", "max"),
        as_of="2026-12-03",
        source=f"{_A_ADAPTIVE}; recorded 400 on claude-opus-4-6: 'does not support effort "
        "level xhigh. Supported levels: high, low, max, medium'",
    ),
    Family(
        "anthropic",
        r"claude-opus-4-5",
        "budget",
        ("low", "medium", "high"),
        as_of="2026-12-03",
        source=f"{_A_DOCS}; {_A_EFFORT} (effort introduced with Opus 4.5)",
    ),
    # Anthropic: extended thinking with a budget only
    Family(
        "anthropic",
        r"claude-(?:3-7-sonnet|sonnet-4(?:-5)?|opus-4(?:-1)?|haiku-4-5)",
        "budget",
        (),
        as_of="2026-12-03",
        source=f"{_A_DOCS} (supported models; budget_tokens >= 1024 and < max_tokens; "
        "temperature only 1, no top_k, top_p 0.95-1 with thinking)",
    ),
    Family(
        "anthropic",
        r"claude-(?:3-5-sonnet|3-5-haiku|3-opus|3-sonnet|3-haiku)",
        None,
        (),
        as_of="2026-12-03",
        source=_A_DOCS,
    ),
    # OpenAI
    Family(
        "openai",
        r"gpt-5(?:\.\d+)?-chat(?:-latest)?|gpt-4.*|gpt-3\.5.*|chatgpt-4o.*",
        None,
        (),
        as_of="2026-12-03",
        source=f"{_O_DOCS} (not reasoning models)",
    ),
    Family(
        "openai",
        r"gpt-5\.1(?:-codex(?:-mini)?)?",
        "effort",
        ("none", "low", "medium", "high"),
        sampling=False,
        as_of="2026-12-03",
        source=f"{_O_REF}; 400 'minimal is not supported with the gpt-5.1 model. Supported "
        "values are: none, low, medium, and high'",
    ),
    Family(
        "openai",
        r"gpt-5\.1-codex-max|gpt-5\.(?:[2-9]|\d\d)(?:-[a-z]+)*",
        "effort",
        ("none", "low", "medium", "high", "xhigh"),
        sampling=False,
        as_of="2026-12-03",
        source=f"{_O_REF}; recorded 400 on GPT-5.4: 'temperature does not support 0 with this "
        "model. Only the default (1) value is supported'",
    ),
    Family(
        "openai",
        r"gpt-5(?:-mini|-nano|-codex)?",
        "effort",
        ("minimal", "low", "medium", "high"),
        sampling=False,
        stop=False,
        as_of="2026-12-03",
        source=f"{_O_REF}; recorded 400 on gpt-5-mini: 'stop is not supported with this model'",
    ),
    Family(
        "openai",
        r"o1-(?:mini|preview)",
        "effort",
        (),
        sampling=False,
        stop=False,
        as_of="2026-12-03",
        source=f"{_O_DOCS} (o1-mini and o1-preview take no reasoning_effort); recorded 400 "
        "on o1-mini: 'system' role unsupported",
    ),
    Family(
        "openai",
        r"o[134](?:-mini|-pro)?",
        "effort",
        ("low", "medium", "high"),
        sampling=False,
        stop=False,
        as_of="2026-12-03",
        source=f"{_O_DOCS} (o-series: reasoning_effort low, medium, high; no temperature, "
        "top_p or stop)",
    ),
)

_SNAPSHOT = lazy_compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


@functools.cache
def _compiled() -> tuple[tuple[re.Pattern[str], Family], ...]:
    """Each family's pattern, compiled on first use (a run of another provider never
    reads the table)."""
    return tuple((re.compile(f.pattern), f) for f in FAMILIES)


def family_of(provider: str, model: str) -> Family | None:
    """The table's entry for ``model`` served by ``provider`` (a dated snapshot as its
    alias, a ``-latest`` alias as its base), or None when the table does not know it."""
    if provider not in ("anthropic", "openai"):
        return None
    name = _SNAPSHOT.sub("", model.strip().lower()).removesuffix("-latest")
    for pattern, family in _compiled():
        if family.provider == provider and pattern.fullmatch(name):
            return family
    return None


def _thinking_on(reasoning: ReasoningSpec | None, extra: dict[str, Any]) -> bool:
    thinking = extra.get("thinking")
    if isinstance(thinking, dict) and thinking.get("type") in ("enabled", "adaptive"):
        return True
    return reasoning is not None and (
        reasoning.budget_tokens is not None or reasoning.effort is not None
    )


def problems(
    provider: str,
    model: str,
    params: Any,
    reasoning: ReasoningSpec | None,
    api_version: str | None,
    max_tokens_default: int,
) -> list[str]:
    """What the API would refuse in every request of this model section, one line each
    naming the field and the fix (empty: nothing known to be refused).

    Args:
        provider: ``model.provider``.
        model: ``model.name``.
        params: ``model.params`` (a :class:`~gradetrail.spec.model.SamplingParams`).
        reasoning: ``model.reasoning``, or None.
        api_version: ``model.api_version``, or None for the default.
        max_tokens_default: the max_tokens sent when ``params.max_tokens`` is unset.
    """
    out: list[str] = []
    extra: dict[str, Any] = dict(params.extra or {})
    temperature = params.temperature if params.temperature is not None else extra.get("temperature")
    top_p = params.top_p if params.top_p is not None else extra.get("top_p")
    top_k = extra.get("top_k")
    if reasoning is not None:
        for key in ("thinking", "output_config", "reasoning_effort", "reasoning"):
            if key in extra:
                out.append(
                    f"model.params.extra.{key}: model.reasoning sets it; remove one of the two"
                )
    family = family_of(provider, model)
    where = f"{model} ({family.as_of} table)" if family else model
    if provider == "anthropic":
        out += _anthropic(family, where, params, extra, reasoning, api_version, max_tokens_default)
        thinking = _thinking_on(reasoning, extra)
        sampling_gone = family is not None and not family.sampling
        version = api_version or DEFAULT_ANTHROPIC_VERSION
        if version >= NO_SAMPLING_VERSION:
            for name, value in (("temperature", temperature), ("top_p", top_p), ("top_k", top_k)):
                if value is not None:
                    out.append(
                        f"model.params.{name}: API version {version} (model.api_version) takes "
                        f"no {name} on any model; remove it, or set model.api_version: "
                        f"{DEFAULT_ANTHROPIC_VERSION}"
                    )
        elif sampling_gone:
            if temperature is not None and temperature != 1:
                out.append(f"model.params.temperature: {where} takes no temperature; remove it")
            for name, value in (("top_p", top_p), ("top_k", top_k)):
                if value is not None:
                    out.append(f"model.params.{name}: {where} takes no {name}; remove it")
        elif thinking:
            if temperature is not None and temperature != 1:
                out.append(
                    "model.params.temperature: with thinking on, temperature may only be 1; "
                    "remove it or set 1"
                )
            if top_k is not None:
                out.append("model.params.extra.top_k: top_k is refused with thinking on; remove it")
            if top_p is not None and top_p < 0.95:
                out.append(
                    "model.params.top_p: with thinking on, top_p must be between 0.95 and 1; "
                    "remove it or raise it"
                )
    elif provider == "openai":
        out += _openai(family, where, params, reasoning, temperature, top_p)
        if "reasoning_effort" in extra:  # the API's own field, checked as model.reasoning
            effort = extra["reasoning_effort"]
            out += _openai_effort(family, where, "model.params.extra.reasoning_effort", effort)
    elif provider == "openai_responses":  # OpenAI's families, and a summary it returns
        family = family_of("openai", model)
        where = f"{model} ({family.as_of} table)" if family else model
        out += _openai(family, where, params, reasoning, temperature, top_p, summaries=True)
        if "reasoning" in extra:  # the API's own object, checked as model.reasoning
            out += _responses_extra(family, where, extra["reasoning"])
    elif provider == "openai_compatible" and reasoning is not None:
        if reasoning.budget_tokens is not None:
            out.append(
                "model.reasoning.budget_tokens: Chat Completions has no standard thinking "
                "budget; pass the field your server documents in model.params.extra"
            )
    elif reasoning is not None:
        out.append(f"model.reasoning: provider {provider!r} sends no request; remove it")
    if api_version is not None and provider != "anthropic":
        out.append(
            "model.api_version: only the anthropic provider sends an API version "
            "(anthropic-version); remove it"
        )
    return out


def _anthropic(
    family: Family | None,
    where: str,
    params: Any,
    extra: dict[str, Any],
    reasoning: ReasoningSpec | None,
    api_version: str | None,
    max_tokens_default: int,
) -> list[str]:
    out: list[str] = []
    if api_version is not None and api_version not in ANTHROPIC_VERSIONS:
        out.append(
            f"model.api_version: {api_version!r} is not a Messages API version; use one of "
            f"{', '.join(ANTHROPIC_VERSIONS)}"
        )
    budget = reasoning.budget_tokens if reasoning is not None else None
    thinking = extra.get("thinking")
    if budget is None and isinstance(thinking, dict) and thinking.get("type") == "enabled":
        raw = thinking.get("budget_tokens")
        budget = raw if isinstance(raw, int) else None
    max_tokens = params.max_tokens or max_tokens_default
    if budget is not None:
        if family is not None and family.thinking == "adaptive_only":
            out.append(
                f"model.reasoning.budget_tokens: {where} takes only adaptive thinking; set "
                f"model.reasoning.effort ({', '.join(family.efforts)}) instead"
            )
        elif family is not None and family.thinking is None:
            out.append(f"model.reasoning: {where} does not think; remove it")
        if budget < MIN_THINKING_BUDGET:
            out.append(
                f"model.reasoning.budget_tokens: {budget} is below the least budget, "
                f"{MIN_THINKING_BUDGET}; raise it"
            )
        if budget >= max_tokens:
            out.append(
                f"model.reasoning.budget_tokens: {budget} is not below max_tokens "
                f"({max_tokens}); raise model.params.max_tokens above it or lower the budget"
            )
    effort = reasoning.effort if reasoning is not None else None
    if effort is not None and family is not None and effort not in family.efforts:
        takes = ", ".join(family.efforts) if family.efforts else "no effort level"
        fix = "set model.reasoning.budget_tokens instead" if family.thinking else "remove it"
        out.append(f"model.reasoning.effort: {where} takes {takes}, not {effort!r}; {fix}")
    return out


def _openai(
    family: Family | None,
    where: str,
    params: Any,
    reasoning: ReasoningSpec | None,
    temperature: Any,
    top_p: Any,
    summaries: bool = False,
) -> list[str]:
    out: list[str] = []
    if reasoning is not None:
        if reasoning.budget_tokens is not None:
            out.append(
                "model.reasoning.budget_tokens: OpenAI models take an effort, not a budget; "
                "set model.reasoning.effort instead"
            )
        if reasoning.summary and not summaries:
            out.append(
                "model.reasoning.summary: Chat Completions returns no reasoning summary (the "
                "reasoning tokens are counted); remove it"
            )
        asked = reasoning.effort is not None or (summaries and reasoning.summary)
        if family is not None and family.thinking is None and asked:
            out.append(f"model.reasoning: {where} is not a reasoning model; remove it")
        elif family is not None and reasoning.effort is not None:
            out += _openai_effort(family, where, "model.reasoning.effort", reasoning.effort)
    if family is not None and not family.sampling:
        for name, value in (("temperature", temperature), ("top_p", top_p)):
            if value is not None and value != 1:
                out.append(
                    f"model.params.{name}: {where} takes only the default {name} (1); remove it"
                )
    if family is not None and not family.stop and params.stop:
        out.append(f"model.params.stop: {where} takes no stop sequences; remove it")
    return out


def _openai_effort(family: Family | None, where: str, field: str, effort: Any) -> list[str]:
    """What OpenAI refuses in every request of a reasoning ``effort`` given at ``field``
    (model.params.extra's own): any effort on a model the table knows does not reason, an
    effort level its family does not take."""
    if family is None or effort is None:
        return []
    if family.thinking is None:
        return [f"{field}: {where} is not a reasoning model; remove it"]
    if effort not in family.efforts:
        takes = ", ".join(family.efforts) or "no reasoning effort"
        return [f"{field}: {where} takes {takes}, not {effort!r}"]
    return []


def _responses_extra(family: Family | None, where: str, reasoning: Any) -> list[str]:
    """What the Responses API refuses in every request of a ``reasoning`` object given in
    ``model.params.extra``: not an object; an ``effort`` or ``summary`` on a model the
    table knows does not reason; an effort level its family does not take."""
    field = "model.params.extra.reasoning"
    if not isinstance(reasoning, dict):
        return [f"{field}: must be an object such as {{effort: low}}, not {reasoning!r}"]
    asked = [k for k in ("effort", "summary") if reasoning.get(k) is not None]
    if family is not None and family.thinking is None and asked:
        return [f"{field}: {where} is not a reasoning model; remove it"]
    return _openai_effort(family, where, f"{field}.effort", reasoning.get("effort"))


def anthropic_reasoning_fields(model: str, reasoning: ReasoningSpec) -> dict[str, Any]:
    """The Messages body fields for ``reasoning``: ``thinking`` (``enabled`` with
    ``budget_tokens``, or ``adaptive`` with a ``display`` where the family takes one) and
    ``output_config.effort``."""
    family = family_of("anthropic", model)
    fields: dict[str, Any] = {}
    if reasoning.budget_tokens is not None:
        fields["thinking"] = {"type": "enabled", "budget_tokens": reasoning.budget_tokens}
    elif reasoning.effort is not None and (family is None or family.thinking != "budget"):
        fields["thinking"] = {"type": "adaptive"}
    thinking = fields.get("thinking")
    shown = family is not None and family.display and reasoning.summary is not None
    if shown and thinking is not None and thinking["type"] == "adaptive":
        thinking["display"] = "summarized" if reasoning.summary else "omitted"
    if reasoning.effort is not None:
        fields["output_config"] = {"effort": reasoning.effort}
    return fields


def openai_reasoning_fields(reasoning: ReasoningSpec) -> dict[str, Any]:
    """The Chat Completions body fields for ``reasoning``: ``reasoning_effort``."""
    return {} if reasoning.effort is None else {"reasoning_effort": reasoning.effort}


def responses_reasoning_fields(reasoning: ReasoningSpec) -> dict[str, Any]:
    """The Responses API body fields for ``reasoning``: ``reasoning: {effort, summary}``
    (``summary: auto`` when ``reasoning.summary`` is true; none asked for otherwise)."""
    fields: dict[str, Any] = {}
    if reasoning.effort is not None:
        fields["effort"] = reasoning.effort
    if reasoning.summary:
        fields["summary"] = "auto"
    return {"reasoning": fields}
