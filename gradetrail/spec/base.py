"""The base of every spec model: strict (``true`` is not ``1``), frozen, unknown keys refused."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True, strict=True)
