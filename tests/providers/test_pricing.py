"""The bundled price table and the cost of a response."""

from __future__ import annotations

import json
import re
from importlib import resources

import pytest

from gradetrail.providers.pricing import Price, load_price_table, price_for, snapshot_base


def test_every_entry_is_dated_and_sourced() -> None:
    """Each (provider, model) in prices.json has an ISO date and a source note, and only
    non-negative prices."""
    raw = json.loads(resources.files("gradetrail").joinpath("data/prices.json").read_text())
    assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", raw["compiled"])
    keys = set()
    for entry in raw["models"]:
        assert entry["provider"] in ("anthropic", "openai")
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", entry["as_of"]), entry
        assert entry["source"].startswith("https://"), entry
        assert entry["input_per_mtok"] >= 0 and entry["output_per_mtok"] >= 0
        keys.add((entry["provider"], entry["model"]))
    assert len(keys) == len(raw["models"]) == len(load_price_table())


def test_cost_follows_the_billing_formula() -> None:
    """USD = (input x in + cached x cached + writes x write + output x out) / 1e6."""
    price = Price(3.0, 15.0, cached_input_per_mtok=0.30, cache_write_per_mtok=3.75)
    assert price.cost(1000, 200, 500, 100) == pytest.approx(
        (1000 * 3.0 + 200 * 15.0 + 500 * 0.30 + 100 * 3.75) / 1e6, rel=1e-12
    )


def test_missing_cache_prices_fall_back_to_the_input_price() -> None:
    """Without cached-input or cache-write prices, those tokens cost the input price."""
    assert Price(2.0, 8.0).cost(0, 0, 1_000_000, 1_000_000) == pytest.approx(4.0)


def test_long_context_tier_prices_every_token_of_a_long_prompt() -> None:
    """Claude Haiku 5.5: a prompt over 100,000 tokens pays the higher tier on all tokens."""
    haiku = price_for("anthropic", "claude-haiku-5-5")
    assert haiku is not None
    assert haiku.cost(100_000, 1000) == pytest.approx((100_000 * 0.10 + 1000 * 0.50) / 1e6)
    assert haiku.cost(90_000, 1000, 10_001) == pytest.approx(
        (90_000 * 0.50 + 1000 * 2.50 + 10_001 * 0.05) / 1e6
    )


def test_dated_snapshots_are_priced_as_their_alias() -> None:
    """gpt-4o-2024-08-06 and claude-sonnet-4-5-20250929 find their alias's price."""
    assert snapshot_base("gpt-4o-2024-08-06") == "gpt-4o"
    assert snapshot_base("claude-sonnet-4-5-20250929") == "claude-sonnet-4-5"
    assert snapshot_base("claude-opus-5") is None
    served = price_for("openai", "gpt-4o", "gpt-4o-2024-08-06")
    assert served is not None and served.input_per_mtok == 2.50
    dated = price_for("anthropic", "claude-sonnet-4-5-20250929")
    assert dated is not None and dated.output_per_mtok == 15.0


def test_unknown_models_and_compatible_servers_have_no_price() -> None:
    """A model absent from the table, or any openai_compatible server, costs None."""
    assert price_for("openai", "my-finetune") is None
    assert price_for("openai_compatible", "gpt-4o") is None


def test_every_service_tier_price_is_dated_and_sourced() -> None:
    """Each model's own tier prices and each provider-wide tier rule carry an ISO date
    and an https source; a rule's share is in (0, 1]."""
    raw = json.loads(resources.files("gradetrail").joinpath("data/prices.json").read_text())
    tiers = [t for e in raw["models"] for t in (e.get("service_tiers") or {}).values()]
    for tier in [*tiers, *raw["service_tiers"]]:
        assert re.fullmatch(r"\d{4}-\d{2}-\d{2}", tier["as_of"]), tier
        assert tier["source"].startswith("https://"), tier
    assert all(0 < rule["share_of_standard"] <= 1 for rule in raw["service_tiers"])
    assert len(tiers) == 12


def test_flex_is_half_the_standard_rates_and_priority_its_own() -> None:
    """gpt-5: flex at half every rate (OpenAI prices flex at Batch API rates), priority
    at the published 2.50 / 0.25 / 20.00; a model without a priority entry (gpt-5-nano)
    has no priority price, and an Anthropic model only its batch tier (half), no priority
    one (Priority Tier is sold by commitment); the priority rates hold up to 128K prompt
    tokens."""
    gpt5 = price_for("openai", "gpt-5")
    assert gpt5 is not None
    flex, priority = gpt5.for_tier("flex"), gpt5.for_tier("priority")
    assert flex is not None and priority is not None
    assert (flex.input_per_mtok, flex.cached_input_per_mtok, flex.output_per_mtok) == (
        0.625,
        0.0625,
        5.0,
    )
    assert (priority.input_per_mtok, priority.cached_input_per_mtok) == (2.5, 0.25)
    assert priority.output_per_mtok == 20.0
    assert gpt5.for_tier(None) is gpt5 and gpt5.for_tier("scale") is None
    nano = price_for("openai", "gpt-5-nano")
    assert nano is not None and nano.for_tier("priority") is None
    opus = price_for("anthropic", "claude-opus-5")
    assert opus is not None and [name for name, _ in opus.tiers] == ["batch"]
    batch = opus.for_tier("batch")
    assert batch is not None and (batch.input_per_mtok, batch.output_per_mtok) == (2.5, 12.5)
    assert (priority.covers(128_000), priority.covers(128_001), gpt5.covers(10**6)) == (
        True,
        False,
        True,
    )


def test_a_tier_share_scales_the_long_context_rates_too() -> None:
    """A share applies to every token rate, the long-context tier's included; fees stay."""
    long = Price(4.0, 20.0)
    price = Price(2.0, 10.0, long_context=(1000, long), per_use=(("web_search_requests", 0.01),))
    flex = price.with_tier_shares({"flex": 0.5}).for_tier("flex")
    assert flex is not None and flex.cost(2000, 100) == pytest.approx(long.cost(2000, 100) / 2)
    assert flex.per_use == price.per_use


def test_sparse_response_fields_are_the_last() -> None:
    """The response fields cached only when set are the dataclass's last fields, so an
    entry of the others alone is read by position."""
    from dataclasses import fields

    from gradetrail.providers.base import SPARSE_FIELDS, Response

    names = tuple(f.name for f in fields(Response))
    assert names[-len(SPARSE_FIELDS) :] == SPARSE_FIELDS
