"""The served model: did the model that answered match the one requested?

Providers answer with the model that served the request; an alias (``claude-x-latest``)
is served by a dated snapshot. A served model that is neither the requested one nor its
documented snapshot is a different model, and the run says so (the manifest's
``served_models``; the row's ``served_model``).
"""

from __future__ import annotations

import re

__all__ = ["served_model_matches"]

#: a dated snapshot's suffix: ``-20250101`` or ``-2025-01-01``
_SNAPSHOT_SUFFIX = re.compile(r"-(?:\d{8}|\d{4}-\d{2}-\d{2})$")
#: aliases that name the latest snapshot
_ALIAS_SUFFIXES = ("-latest", "-0")


def served_model_matches(requested: str, served: str | None) -> bool:
    """True when ``served`` is ``requested`` or its documented alias-to-snapshot form:
    ``foo`` served as ``foo-20250101`` or ``foo-2025-01-01``, and ``foo-latest`` /
    ``foo-0`` served as ``foo-<date>`` (Anthropic's aliases for pre-4.6 models)."""
    if served is None:
        return False
    if served == requested:
        return True
    base = _SNAPSHOT_SUFFIX.sub("", served)
    if base == served:
        return False
    if base == requested:
        return True
    return any(requested == base + suffix for suffix in _ALIAS_SUFFIXES)
