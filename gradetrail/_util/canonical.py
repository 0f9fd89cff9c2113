"""Canonical JSON: the one text a value hashes to (cache keys, identity hashes)."""

from __future__ import annotations

import json
from typing import Any

__all__ = ["canonical_json"]


def canonical_json(value: Any) -> str:
    """JSON with sorted keys and no whitespace: the same value always gives the same text.

    Non-ASCII text is kept as is (``ensure_ascii=False``), so a hash over the UTF-8 bytes
    matches one computed by any JSON library that sorts keys the same way."""
    return json.dumps(value, sort_keys=True, separators=(",", ":"), ensure_ascii=False)
