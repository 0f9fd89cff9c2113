"""The base of every spec model: strict (``true`` is not ``1``), frozen, unknown keys
refused, and no infinite or NaN number anywhere (``.inf``, ``.nan``): a timeout, price,
temperature or tolerance that is not finite is refused before any call."""

from __future__ import annotations

from pydantic import BaseModel, ConfigDict


class _Strict(BaseModel):
    # defer_build: a model's validator is built when first used, not at import. A run
    # validates one EvalSpec (whose validator covers its nested models); the specs of
    # other scorers, sweeps and datasets it never builds at all.
    model_config = ConfigDict(
        extra="forbid", frozen=True, strict=True, allow_inf_nan=False, defer_build=True
    )
