"""Providers, looked up by name; each module (and its SDK) is imported only when used."""

from __future__ import annotations

import importlib
from pathlib import Path

from gradetrail.errors import SpecError
from gradetrail.providers.base import Provider, Request, Response
from gradetrail.spec import ModelSpec

__all__ = ["PROVIDERS", "Provider", "Request", "Response", "make_provider"]

#: provider name -> "module:class"
PROVIDERS: dict[str, str] = {
    "replay": "gradetrail.providers.replay:ReplayProvider",
    "python": "gradetrail.providers.python:PythonProvider",
    "anthropic": "gradetrail.providers.anthropic:AnthropicProvider",
    "openai": "gradetrail.providers.openai:OpenAIProvider",
    "openai_compatible": "gradetrail.providers.openai:OpenAIProvider",
    "openai_responses": "gradetrail.providers.openai_responses:OpenAIResponsesProvider",
}


def make_provider(model: ModelSpec, base_dir: Path) -> Provider:
    """Build the provider a spec's model section names.

    Raises:
        SpecError: the provider is unknown or not available in this build.
    """
    target = PROVIDERS.get(model.provider)
    if target is None:
        known = ", ".join(sorted(PROVIDERS))
        raise SpecError(f"model.provider: {model.provider!r} is not available; use one of {known}")
    module_name, _, cls_name = target.partition(":")
    cls = getattr(importlib.import_module(module_name), cls_name)
    return cls(model, base_dir)
