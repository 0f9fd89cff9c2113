"""Progress of the current attempt, told by a streamed answer to the retry loop.

The one context variable that crosses layers, and why: an attempt's timeout is an
``asyncio.timeout`` around the provider's call (the retry loop, ``executors/retry``),
and only the provider's stream reader (``providers/_transport``), deep inside that call,
knows when bytes arrive. ``Provider.complete(request)`` has no argument through which the
loop could hand the reader a callback, and adding one to every provider (a user's
``python`` function included) for the streaming case alone would be worse; so the loop
sets this for the duration of one attempt, and the reader calls :func:`attempt_progress`.
Nothing else is carried this way.
"""

from __future__ import annotations

import contextvars
from collections.abc import Callable

__all__ = ["ATTEMPT_PROGRESS", "attempt_progress"]

#: set by the retry loop around each attempt: restarts the attempt's timeout from now
#: (never past the sample ceiling)
ATTEMPT_PROGRESS: contextvars.ContextVar[Callable[[], None] | None] = contextvars.ContextVar(
    "gradetrail_attempt_progress", default=None
)


def attempt_progress() -> None:
    """Say that the current attempt is still receiving its answer (a stream produced
    bytes): its timeout (``timeout_s``) counts again from now, so a long answer that keeps
    streaming is never cut off and paid twice, while one that stalls for ``timeout_s`` is.
    The per-sample ceiling (``sample_timeout_s``) still bounds it. Outside an attempt it
    does nothing."""
    progress = ATTEMPT_PROGRESS.get()
    if progress is not None:
        progress()
