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
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass, replace
from functools import cache, lru_cache
from importlib import resources
from typing import Any

from gradetrail.errors import GradetrailError

__all__ = ["Price", "load_price_table", "price_for", "server_tool_fees", "snapshot_base"]

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
        ``long_context``), as in the table or a spec's ``model.price``."""
        tier = raw.get("long_context")
        long_context = None
        if tier:
            long_context = (int(tier["threshold_tokens"]), cls.from_dict(tier))
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


@cache
def server_tool_fees(provider: str) -> dict[str, float]:
    """The bundled USD per use of ``provider``'s server-side tools, by usage name
    (``{"web_search_requests": 0.01, ...}``; empty for a provider with none).

    Raises:
        GradetrailError: the bundled file is malformed (a broken install).
    """
    try:
        text = resources.files("gradetrail").joinpath("data/prices.json").read_text("utf-8")
        rows = json.loads(text).get("server_tools") or []
        return {str(r["usage"]): float(r["usd_per_use"]) for r in rows if r["provider"] == provider}
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GradetrailError(
            f"gradetrail/data/prices.json is unreadable ({exc}); reinstall gradetrail"
        ) from None


@lru_cache(maxsize=1)
def load_price_table() -> dict[tuple[str, str], Price]:
    """The bundled table as ``{(provider, model): Price}`` (read once).

    Raises:
        GradetrailError: the bundled file is missing or malformed (a broken install).
    """
    try:
        text = resources.files("gradetrail").joinpath("data/prices.json").read_text("utf-8")
        raw = json.loads(text)
        table = {}
        for entry in raw["models"]:
            price = Price.from_dict(entry, as_of=entry["as_of"], source=entry["source"])
            table[(entry["provider"], entry["model"])] = price
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise GradetrailError(
            f"gradetrail/data/prices.json is unreadable ({exc}); reinstall gradetrail"
        ) from None
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
