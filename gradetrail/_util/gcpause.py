"""The cyclic garbage collector paused over ``gradetrail run``'s start-up.

Start-up (the imports, the spec's models, the plan of every sample) allocates a few
hundred thousand objects and frees almost none: the collector's passes over them before
the first request (about 5% of start-up's CPU) find nothing to free. ``gradetrail run``
pauses it from the process's start to the run's start (:func:`resume`), then freezes what
start-up made (:func:`gc.freeze`: later passes do not walk it again either) and collects
as usual. Objects freed by their reference count are freed at once throughout; only a
reference cycle made during start-up waits, and stays.
"""

from __future__ import annotations

import gc
from collections.abc import Sequence

__all__ = ["pause_for", "resume"]

_paused = False


def pause_for(argv: Sequence[str]) -> None:
    """Pause the collector when ``argv`` (``sys.argv``) runs ``gradetrail run`` and it is
    on (a caller that turned it off keeps it off); other commands are left as they are."""
    global _paused
    if list(argv[1:2]) == ["run"] and gc.isenabled():
        gc.disable()
        _paused = True


def resume() -> None:
    """End the pause, if any: freeze what start-up made, then collect as usual again."""
    global _paused
    if _paused:
        _paused = False
        gc.freeze()
        gc.enable()
