"""The base of every spec model: strict (``true`` is not ``1``), frozen, unknown keys
refused, and no infinite or NaN number anywhere (``.inf``, ``.nan``): a timeout, price,
temperature or tolerance that is not finite is refused before any call."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True, allow_inf_nan=False)
