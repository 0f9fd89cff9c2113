"""Which of a run directory's files the viewer may read, and why not the others.

A run directory under the results root can hold anything a tar or a user put there: a
file linked to somewhere outside the root, a FIFO or a directory in place of a file, a
file this user cannot read. The viewer never opens such a file (nothing outside the root
is ever read, and a FIFO would block its reader); the run is still listed, every figure
that does not need the file is shown, and the file's one-line reason is shown with it.
"""

from __future__ import annotations

import errno
import os
import stat
from pathlib import Path

from gradetrail.rundir.results import OUTPUT_FILES

__all__ = ["refusal", "refusals"]


def _inside(path: Path, root: Path) -> bool | None:
    """Whether ``path`` resolves (through every link) inside ``root``; None for a loop."""
    try:
        return path.resolve().is_relative_to(root)
    except (OSError, RuntimeError):  # a link loop (RuntimeError before Python 3.13)
        return None


def refusal(root: Path, path: Path) -> str | None:
    """Why the viewer will not read the file at ``path`` (one line naming it and what is
    wrong, ending ``not read``), or None when it may: absent, or a readable regular file
    whose links, if any, stay inside ``root`` (a resolved, absolute results root).

    Reading is not attempted: only ``lstat``/``stat`` and ``os.access`` are called, so a
    FIFO never blocks and nothing outside the root is opened.
    """
    name = path.name
    try:
        st = path.lstat()
    except (FileNotFoundError, NotADirectoryError):
        return None
    except OSError as exc:
        return f"{name} cannot be examined ({exc.strerror}); not read"
    if stat.S_ISLNK(st.st_mode):
        inside = _inside(path, root)
        if inside is None:
            return f"{name} is a link that loops; not read"
        if not inside:
            return f"{name} links outside the results root; not read"
        try:
            st = path.stat()
        except OSError as exc:
            if exc.errno == errno.ELOOP:  # Python 3.13's resolve() no longer raises
                return f"{name} is a link that loops; not read"
            return f"{name} links to a file that does not exist; not read"
    if stat.S_ISDIR(st.st_mode):
        return f"{name} is a directory, not a file; not read"
    if not stat.S_ISREG(st.st_mode):
        return f"{name} is not a regular file (a FIFO, socket or device); not read"
    if not os.access(path, os.R_OK):
        return f"{name} cannot be read (permission denied); not read"
    return None


def refusals(root: Path, run_dir: Path) -> dict[str, str]:
    """Every file a run writes (:data:`gradetrail.rundir.results.OUTPUT_FILES`) that the viewer
    will not read in ``run_dir``, name -> its :func:`refusal` line, in that order."""
    found = {}
    for name in OUTPUT_FILES:
        why = refusal(root, run_dir / name)
        if why is not None:
            found[name] = why
    return found
