"""What a response cost: the bundled, dated price table and per-spec overrides.

The table is ``gradetrail/data/prices.json``: USD per million tokens (MTok) per
``(provider, model)``, each entry with the date it was read and its source. A spec's
``model.price`` overrides it. A model found in neither has an unknown price: its cost is
``None`` (shown as ``n/a``), never a guess.

Cost of one response (the providers' published billing rule)::

    (input x input_per_mtok + cached_input x cached_input_per_mtok
     + cache_write x cache_write_per_mtok + output x output_per_mtok) / 1,000,000

plus, for each server-side tool the provider bills per use (Anthropic's web search:
``usage.server_tool_use.web_search_requests``), uses x its USD per use, from the table's
``server_tools`` list or the spec's ``model.price.server_tool_usd``; a server tool used
with no known fee makes the cost unknown (None), never a guess. ``input`` excludes
prompt-cache reads and writes. A cached-input or cache-write
price that is not given falls back to the input price. An entry may carry a
``long_context`` tier (``threshold_tokens`` and its own rates) that applies to every token
of a request whose whole prompt (input + cache reads + cache writes) is above the
threshold, as Anthropic bills long prompts.

**Service tiers.** A response the provider says it served on another tier than its
standard one (OpenAI's ``service_tier``: ``flex``, ``priority``, ``scale``; see
:attr:`~gradetrail.providers.base.Response.service_tier`) is priced at that tier's rates
when they are known: an entry's own ``service_tiers`` (``{"priority": {rates, as_of,
source}}``, as OpenAI publishes priority prices a model), else a provider-wide share of
the standard rates from the table's ``service_tiers`` rules (OpenAI's flex: "priced at
Batch API rates", half; Anthropic's batch, half). A tier with neither is priced at the
standard rates (:meth:`Price.for_tier` says so by returning None, and the provider warns):
Anthropic's Priority Tier, sold by commitment, has no per-token price. A tier's rates may
hold only up to a prompt size (``max_prompt_tokens``: OpenAI's priority rates exclude
prompts above 128K tokens); a larger prompt served on that tier has an unknown cost.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any, TypeVar

from gradetrail.errors import GradetrailError

__all__ = [
    "Price",
    "load_price_table",
    "price_for",
    "server_tool_fees",
    "service_tier_shares",
    "snapshot_base",
    "tier_name",
]

T = TypeVar("T")
_SNAPSHOT = re.compile(r"^(?P<base>.+?)-(?:\d{8}|\d{4}-\d{2}-\d{2})$")


@dataclass(frozen=True, slots=True)
class Price:
    """Prices in USD per million tokens.

    Attributes:
        input_per_mtok: input tokens not read from or written to a prompt cache.
        output_per_mtok: output tokens.
        cached_input_per_mtok: prompt-cache reads (None: the input price).
        cache_write_per_mtok: prompt-cache writes (None: the input price).
        cache_write_1h_per_mtok: prompt-cache writes with a one-hour TTL (Anthropic; None:
            twice the input price).
        long_context: ``(threshold_tokens, Price)``: the rates for a request whose prompt
            is above the threshold, or None.
        as_of: the date the price was read (ISO 8601), or "" for a spec override.
        source: where it was read, or "spec" for a spec override.
        per_use: USD per use of a server-side tool, by its usage name
            (``(("web_search_requests", 0.01),)``).
        tiers: the rates of the provider's other service tiers, by the name a response
            gives (``(("flex", Price), ("priority", Price))``); see :meth:`for_tier`.
        max_prompt_tokens: the largest prompt (input + cache reads + cache writes) these
            rates are published for, or None for any: OpenAI publishes priority rates
            "excluding long context", requests estimated above 128K prompt tokens; a
            larger prompt has no known price here (see :meth:`covers`).
    """

    input_per_mtok: float
    output_per_mtok: float
    cached_input_per_mtok: float | None = None
    cache_write_per_mtok: float | None = None
    cache_write_1h_per_mtok: float | None = None
    long_context: tuple[int, Price] | None = None
    as_of: str = ""
    source: str = "spec"
    per_use: tuple[tuple[str, float], ...] = ()
    tiers: tuple[tuple[str, Price], ...] = ()
    max_prompt_tokens: int | None = None

    def covers(self, prompt_tokens: int) -> bool:
        """Whether these rates price a prompt of ``prompt_tokens`` (input, cache reads and
        writes together): False above :attr:`max_prompt_tokens`."""
        return self.max_prompt_tokens is None or prompt_tokens <= self.max_prompt_tokens

    def for_tier(self, tier: str | None) -> Price | None:
        """The rates of a response served on ``tier`` (None: the standard tier, these
        rates); None when this price knows no rates for that tier (the caller prices it at
        the standard rates and says so)."""
        if tier is None:
            return self
        for name, price in self.tiers:
            if name == tier:
                return price
        return None

    def with_tier_shares(self, shares: Mapping[str, float]) -> Price:
        """This price with a tier for each of ``shares`` (tier -> share of these rates,
        e.g. ``{"flex": 0.5}``) that it names no rates for: every token rate scaled by the
        share (the long-context rates too), the per-use fees whole."""
        named = dict(self.tiers)
        for tier, share in shares.items():
            if tier not in named:
                named[tier] = replace(self._scaled(share), as_of=self.as_of, source=self.source)
        return replace(self, tiers=tuple(sorted(named.items())))

    def _scaled(self, share: float) -> Price:
        """Every token rate times ``share``; no tiers of its own."""

        def times(value: float | None) -> float | None:
            return None if value is None else value * share

        long_context = None
        if self.long_context is not None:
            threshold, tier = self.long_context
            long_context = (threshold, tier._scaled(share))
        return replace(
            self,
            input_per_mtok=self.input_per_mtok * share,
            output_per_mtok=self.output_per_mtok * share,
            cached_input_per_mtok=times(self.cached_input_per_mtok),
            cache_write_per_mtok=times(self.cache_write_per_mtok),
            cache_write_1h_per_mtok=times(self.cache_write_1h_per_mtok),
            long_context=long_context,
            tiers=(),
        )

    def tool_fees(self, uses: Mapping[str, int] | None) -> float | None:
        """USD for server-side tool uses (``{"web_search_requests": 3}``): uses x USD per
        use; None when a tool was used whose fee is unknown."""
        if not uses:
            return 0.0
        fees = dict(self.per_use)
        total = 0.0
        for name, count in uses.items():
            if count:
                if name not in fees:
                    return None
                total += count * fees[name]
        return total

    def cost(
        self,
        input_tokens: int,
        output_tokens: int,
        cached_input_tokens: int = 0,
        cache_write_tokens: int = 0,
        cache_write_1h_tokens: int = 0,
    ) -> float:
        """USD for one response's tokens; ``input_tokens`` excludes cache reads and
        writes; of ``cache_write_tokens``, ``cache_write_1h_tokens`` were written with
        Anthropic's one-hour TTL, priced at ``cache_write_1h_per_mtok`` (default twice
        the input price, Anthropic's rule). Server-tool fees: :meth:`tool_fees`."""
        rates = self
        if self.long_context is not None:
            threshold, tier = self.long_context
            if input_tokens + cached_input_tokens + cache_write_tokens > threshold:
                rates = tier
        cached = rates.cached_input_per_mtok
        write = rates.cache_write_per_mtok
        total = (
            input_tokens * rates.input_per_mtok
            + output_tokens * rates.output_per_mtok
            + cached_input_tokens * (rates.input_per_mtok if cached is None else cached)
            + (cache_write_tokens - cache_write_1h_tokens)
            * (rates.input_per_mtok if write is None else write)
        )
        if cache_write_1h_tokens:
            long = rates.cache_write_1h_per_mtok
            total += cache_write_1h_tokens * (2 * rates.input_per_mtok if long is None else long)
        return total / 1_000_000

    @classmethod
    def from_dict(cls, raw: dict[str, Any], *, as_of: str = "", source: str = "spec") -> Price:
        """Build from a mapping with the ``*_per_mtok`` keys (and optional
        ``long_context`` and ``service_tiers``, each tier with its own ``as_of`` and
        ``source``), as in the table or a spec's ``model.price``."""
        tier = raw.get("long_context")
        long_context = None
        if tier:
            long_context = (int(tier["threshold_tokens"]), cls.from_dict(tier))
        tiers = tuple(
            sorted(
                (str(name), cls.from_dict(t, as_of=t["as_of"], source=t["source"]))
                for name, t in (raw.get("service_tiers") or {}).items()
            )
        )
        return cls(
            input_per_mtok=float(raw["input_per_mtok"]),
            output_per_mtok=float(raw["output_per_mtok"]),
            cached_input_per_mtok=_opt(raw.get("cached_input_per_mtok")),
            cache_write_per_mtok=_opt(raw.get("cache_write_per_mtok")),
            cache_write_1h_per_mtok=_opt(raw.get("cache_write_1h_per_mtok")),
            long_context=long_context,
            as_of=as_of,
            source=source,
            per_use=_fees(raw.get("server_tool_usd")),
            tiers=tiers,
            max_prompt_tokens=_opt_int(raw.get("max_prompt_tokens")),
        )

    def with_fees(self, fees: Mapping[str, float]) -> Price:
        """This price with ``fees`` (USD per use by usage name) added where it names none."""
        merged = {**fees, **dict(self.per_use)}
        return replace(self, per_use=tuple(sorted(merged.items())))


def _fees(raw: Any) -> tuple[tuple[str, float], ...]:
    """``{usage name: USD per use}`` (or None) as sorted pairs."""
    return tuple(sorted((str(k), float(v)) for k, v in (raw or {}).items()))


def _opt(value: Any) -> float | None:
    return None if value is None else float(value)


def _opt_int(value: Any) -> int | None:
    return None if value is None else int(value)


#: the names an answer gives its provider's standard service tier (OpenAI's ``default``
#: and ``auto``, Groq's ``on_demand``): read as no tier, so such responses are cached and
#: written as before tiers were read
_STANDARD_TIERS = frozenset(["default", "auto", "standard", "on_demand"])


def tier_name(value: Any) -> str | None:
    """A service tier as responses and prices name it (lower case), or None for the
    standard tier (``default``, ``auto``...), an empty value or one that is not text."""
    if not isinstance(value, str) or not value.strip():
        return None
    tier = value.strip().lower()
    return None if tier in _STANDARD_TIERS else tier


def _bundled(read: Callable[[dict[str, Any]], T]) -> T:
    """``read`` applied to the bundled ``prices.json``.

    Raises:
        GradetrailError: the file is missing or malformed (a broken install).
    """
    try:
        text = resources.files("gradetrail").joinpath("data/prices.json").read_text("utf-8")
        return read(json.loads(text))
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GradetrailError(
            f"gradetrail/data/prices.json is unreadable ({exc}); reinstall gradetrail"
        ) from None


@cache
def server_tool_fees(provider: str) -> dict[str, float]:
    """The bundled USD per use of ``provider``'s server-side tools, by usage name
    (``{"web_search_requests": 0.01, ...}``; empty for a provider with none).

    Raises:
        GradetrailError: the bundled file is malformed (a broken install).
    """
    return _bundled(
        lambda raw: {
            str(r["usage"]): float(r["usd_per_use"])
            for r in raw.get("server_tools") or []
            if r["provider"] == provider
        }
    )


@cache
def service_tier_shares(provider: str) -> dict[str, float]:
    """The bundled provider-wide tier rules of ``provider``: tier -> share of a model's
    standard rates (``{"flex": 0.5}`` for OpenAI; empty for a provider with none).

    Raises:
        GradetrailError: the bundled file is malformed (a broken install).
    """
    return _bundled(
        lambda raw: {
            str(r["tier"]): float(r["share_of_standard"])
            for r in raw.get("service_tiers") or []
            if r["provider"] == provider
        }
    )


@lru_cache(maxsize=1)
def load_price_table() -> dict[tuple[str, str], Price]:
    """The bundled table as ``{(provider, model): Price}`` (read once), each with its
    service tiers (its own, then the provider's rules: :func:`service_tier_shares`).

    Raises:
        GradetrailError: the bundled file is missing or malformed (a broken install).
    """
    return _bundled(_table)


def _table(raw: dict[str, Any]) -> dict[tuple[str, str], Price]:
    table = {}
    for entry in raw["models"]:
        price = Price.from_dict(entry, as_of=entry["as_of"], source=entry["source"])
        shares = service_tier_shares(entry["provider"])
        table[(entry["provider"], entry["model"])] = price.with_tier_shares(shares)
    return table


def snapshot_base(model: str) -> str | None:
    """The alias a dated snapshot name belongs to (``gpt-4o-2024-08-06`` ->
    ``gpt-4o``, ``claude-sonnet-4-5-20250929`` -> ``claude-sonnet-4-5``), or None."""
    match = _SNAPSHOT.match(model)
    return match.group("base") if match else None


def price_for(provider: str, model: str, served_model: str | None = None) -> Price | None:
    """The bundled price of a model, or None when the table has none.

    Looks up, in order: the served model, the requested model, then the alias of either
    when it is a dated snapshot. ``provider`` is ``anthropic`` or ``openai``; any other
    provider (``openai_compatible``: a server of unknown pricing) has no bundled price.
    """
    if provider not in ("anthropic", "openai"):
        return None
    table = load_price_table()
    names = [n for n in (served_model, model) if n]
    names += [b for b in map(snapshot_base, names) if b]
    for name in names:
        price = table.get((provider, name))
        if price is not None:
            return price
    return None
