"""The request key is defined once (``KEY_FIELDS`` beside :class:`Request`): ``Request.key``
hashes its canonical JSON, and ``PromptKeys``, the fast path of one-message requests, is
generated from the same definition. Both give today's keys byte for byte, over many
requests, and a field added to the definition moves both."""

from __future__ import annotations

import hashlib
import random

import pytest

import gradetrail.providers.base as base
from gradetrail._util.canonical import canonical_json
from gradetrail.providers.base import PromptKeys, Request

TEXTS = [
    "",
    "plain",
    'quote " backslash \\ slash / {"braces": [1]} %s {0}',
    "tab\tnewline\ncr\r\x00\x01\x1f\x7f",
    "é ü 中文 😀 \u2028 \u2029 \ufeff",
    "lone \ud800 surrogate \udcff",
]
SYSTEMS = [None, "", "You are terse.", TEXTS[2], TEXTS[4]]
PARAMS = [
    {},
    {"temperature": 0.0, "max_tokens": 512},
    {
        "temperature": 0.7,
        "top_p": 1e-9,
        "stop": ["\n\n", "é", TEXTS[3]],
        "extra": {"z": 1, "a": [None, True]},
    },
]
SHARED = [
    {},
    {"recordings_sha256": "ab" * 32},
    {"nested": [1, {"b": 2.5, "a": None}], "sample_id": 0, "ü": "中"},
]
PER_ROW = [(), ("sample_id",), ("row_sha256",), ("sample_id", "row_sha256")]
ROW_VALUES = ["s1", TEXTS[2], TEXTS[5], 17, 2.5, None, True, [1, "x"], {"b": 1, "a": "é"}]
RUNS = [
    ("replay", "m", None),
    ("openai", "gpt-4o-mini", "http://127.0.0.1:8000/v1"),
    ("python", 'modèle "q" 😀', "https://x.example/v1?a=1&b=\\"),
]
EPOCHS = [1, 2, 3, 10, 1000]


def requests(count: int, seed: int = 20) -> list[tuple[PromptKeys, dict, Request]]:
    """``count`` one-message requests drawn from awkward values, each with the PromptKeys
    of its run and its per-row identity entries."""
    rng = random.Random(seed)
    found = []
    for _ in range(count):
        provider, model, base_url = rng.choice(RUNS)
        params, shared, per_row = rng.choice(PARAMS), rng.choice(SHARED), rng.choice(PER_ROW)
        keys = PromptKeys(provider, model, base_url, params, shared, per_row)
        row = {name: rng.choice(ROW_VALUES) for name in per_row}
        system, prompt = rng.choice(SYSTEMS), rng.choice(TEXTS) + rng.choice(TEXTS)
        request = Request(
            provider,
            model,
            base_url,
            system,
            ({"role": "user", "content": prompt},),
            params,
            epoch=rng.choice(EPOCHS),
            sample_id="s",
            identity={**shared, **row},
        )
        found.append((keys, row, request))
    return found


def fast_key(keys: PromptKeys, row: dict, request: Request) -> str:
    return keys.key(request.system, request.prompt, request.epoch, row)


def test_the_fast_path_equals_the_definition_over_many_requests() -> None:
    """PromptKeys gives Request.key() for 2,000 one-message requests; both are the SHA-256
    of the canonical JSON of the payload's fields as they have always been written."""
    for keys, row, request in requests(2000):
        payload = {
            "provider": request.provider,
            "model": request.model,
            "base_url": request.base_url,
            "system": request.system,
            "messages": request.messages,
            "params": request.params,
            "epoch": request.epoch,
            "identity": request.identity,
        }
        data = canonical_json(payload).encode("utf-8", "surrogatepass")
        expected = hashlib.sha256(data).hexdigest()
        assert request.key() == expected
        assert fast_key(keys, row, request) == expected
        assert keys.digest(request.system, request.prompt, request.epoch, row).hex() == expected


#: keys computed before the definition moved: a change of a byte in the payload shows here
GOLDEN = {
    "plain": "1cf3ddd3558bfe63c96cdfce5a057e8afc7d6e6f595a93b306ca4050dad0ade7",
    "awkward": "62c340b643668d1a478326f7c7f3864f21925d295d5db4fb18b0e1bafdfa650f",
    "tools": "45b3bc8845c86fedc6c1e059b0b69af9690ae25460a57b51336c6ec671eba27a",
}


def golden_requests() -> dict[str, Request]:
    plain = Request("replay", "m", None, None, ({"role": "user", "content": "Q: 1+1?"},), {})
    awkward = Request(
        "openai",
        "modèle",
        "http://x/v1",
        TEXTS[3],
        ({"role": "user", "content": TEXTS[5] + TEXTS[4]},),
        {"temperature": 0.5, "stop": ["é"]},
        epoch=7,
        identity={"sample_id": "s\u2028", "row_sha256": "cd" * 32},
    )
    tools = Request(
        "anthropic",
        "claude",
        None,
        "sys",
        ({"role": "user", "content": "weather?"},),
        {"max_tokens": 64},
        epoch=2,
        tools=({"name": "get", "description": "d", "parameters": {"type": "object"}},),
        tool_choice="auto",
    )
    return {"plain": plain, "awkward": awkward, "tools": tools}


@pytest.mark.parametrize("name", sorted(GOLDEN))
def test_keys_are_byte_identical_to_before(name: str) -> None:
    """Request.key() of three fixed requests (one with tools) is the key it had before."""
    assert golden_requests()[name].key() == GOLDEN[name]


def test_a_field_added_to_the_definition_moves_both_paths(monkeypatch) -> None:
    """Adding a field to KEY_FIELDS changes Request.key() and PromptKeys alike: the fast
    path is generated from the definition, not restated."""
    sample = requests(50, seed=3)
    before = [req.key() for _, _, req in sample]
    monkeypatch.setattr(base, "KEY_FIELDS", (*base.KEY_FIELDS, "sample_id"))
    for (keys, row, request), old in zip(sample, before, strict=True):
        fresh = PromptKeys(
            request.provider,
            request.model,
            request.base_url,
            request.params,
            {k: v for k, v in request.identity.items() if k not in keys.per_row},
            keys.per_row,
        )
        request.sample_id = ""  # the fast path's requests carry the field's default
        assert request.key() != old
        assert fast_key(fresh, row, request) == request.key()


def test_tools_enter_the_key_only_when_offered() -> None:
    """Offering tools adds them (and tool_choice) to the payload; without them the key is
    the one-message key PromptKeys gives."""
    request = golden_requests()["tools"]
    bare = Request(
        request.provider,
        request.model,
        request.base_url,
        request.system,
        request.messages,
        request.params,
        epoch=request.epoch,
    )
    assert request.key() != bare.key()
    keys = PromptKeys(bare.provider, bare.model, bare.base_url, bare.params, {})
    assert fast_key(keys, {}, bare) == bare.key()
