"""Files the spec names, checked before they are read."""

from __future__ import annotations

import os
import stat
from pathlib import Path

__all__ = ["not_a_file"]


def path_fix(written: str | Path, base_dir: Path) -> str:
    """The fix to name after a spec path that is no file: ``check the path in the spec``,
    or, when the path as written is relative and names a file from the working directory
    (``--set dataset.path=examples/data/q.jsonl`` typed at the repository's root), that
    spec paths are read from the spec's own directory and the path that reaches it."""
    given = Path(written).expanduser()
    if given.is_absolute() or not given.is_file():
        return "check the path in the spec"
    reach = os.path.relpath(given.resolve(), base_dir.resolve())
    return (
        f"spec paths are relative to the spec's directory ({base_dir}): {written} from "
        f"the working directory is {reach} from there"
    )


def not_a_file(path: Path) -> str | None:
    """Why a file the spec names cannot be read as one, or None when it is a regular file
    (through symlinks): ``"not found"``, ``"is a symlink to nothing"``, or ``"is a FIFO,
    not a regular file"`` (a directory, a device, a socket likewise). Reading a FIFO waits
    for a writer that may never come, so callers refuse it rather than hang."""
    try:
        st = path.stat()
    except FileNotFoundError:
        return "is a symlink to nothing" if path.is_symlink() else "not found"
    except OSError as exc:
        return f"cannot be read ({exc.strerror})"
    if stat.S_ISREG(st.st_mode):
        return None
    kinds = (
        (stat.S_ISDIR, "a directory"),
        (stat.S_ISFIFO, "a FIFO"),
        (stat.S_ISSOCK, "a socket"),
        (stat.S_ISCHR, "a device"),
        (stat.S_ISBLK, "a device"),
    )
    kind = next((name for test, name in kinds if test(st.st_mode)), "not a file")
    return f"is {kind}, not a regular file"
