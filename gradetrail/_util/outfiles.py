"""Files gradetrail writes at a path the user names outside a run directory (the gate's
``--junit`` and ``--markdown`` reports, GitHub's step summary), or where a file could be
planted in one (a run's ``spending.jsonl``), written so that a link planted at that path
is never written through.

- :func:`write_file` refuses a symlink at the name, writes a temporary file beside it
  (``O_EXCL``, never followed) and renames it onto the name: a hard link at the name
  (a second name for a file elsewhere) is replaced, never written into, and a failed
  write leaves the old file whole and no temporary file behind.
- A character device or a FIFO at the name (``/dev/null``, a named pipe: see
  :func:`written_in_place`) is written into, never replaced: renaming a file onto it, as
  root may, put a regular file in place of ``/dev/null``. Any other kind of file there
  (a directory, a block device, a socket) is refused.
- :func:`append_file` appends to a file that exists or is created, opened with
  ``O_NOFOLLOW`` (a symlink at the name is refused) and refused when it is not a
  regular file or has more than one link.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterable
from pathlib import Path

__all__ = ["append_file", "check_writable", "write_file", "write_in_place", "written_in_place"]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_CLOEXEC = getattr(os, "O_CLOEXEC", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)


def _refuse_link(path: Path) -> None:
    """Raise OSError(ELOOP) when ``path`` is a symlink (a dangling one included)."""
    with contextlib.suppress(FileNotFoundError):
        if stat.S_ISLNK(os.lstat(path).st_mode):
            raise OSError(
                errno.ELOOP, f"{path} is a symlink; gradetrail never writes through a link"
            )


def written_in_place(path: Path) -> bool:
    """Whether ``path`` names a character device or a FIFO (the name itself, no link
    followed), which a writer writes into instead of renaming a new file onto it.

    Raises:
        OSError: something other than a regular file, a symlink, a character device or a
            FIFO is at the name (a directory, a block device, a socket), ``EISDIR`` or
            ``EPERM`` with a message naming it.
    """
    try:
        mode = os.lstat(path).st_mode
    except (FileNotFoundError, NotADirectoryError):
        return False
    if stat.S_ISCHR(mode) or stat.S_ISFIFO(mode):
        return True
    if stat.S_ISDIR(mode):
        raise OSError(errno.EISDIR, f"{path} is a directory; name a file to write")
    if not (stat.S_ISREG(mode) or stat.S_ISLNK(mode)):
        raise OSError(errno.EPERM, f"{path} is not a regular file (a block device or socket)")
    return False


def check_writable(path: Path) -> None:
    """Refuse, before any work, a name :func:`write_file` would refuse or fail at: a
    symlink, a directory (or a block device, a socket), or a name whose directory is
    missing or cannot be written (a device or a FIFO is written in place: its directory
    need not be writable). Writes nothing.

    Raises:
        OSError: with a message naming the path and what is wrong.
    """
    path = Path(path)
    _refuse_link(path)
    if written_in_place(path):
        return
    parent = path.parent
    if not parent.is_dir():
        raise OSError(errno.ENOENT, f"{parent} is not a directory; name a file in one")
    if not os.access(parent, os.W_OK | os.X_OK):
        raise OSError(errno.EACCES, f"{parent} cannot be written; name a file elsewhere")


def write_in_place(path: Path, chunks: Iterable[bytes]) -> None:
    """Write ``chunks`` into the character device or FIFO at ``path`` (see
    :func:`written_in_place`), opened without following a link or creating a file; a FIFO
    waits for its reader, as any writer of one does.

    Raises:
        OSError: it cannot be opened or written, or is no longer a device or a FIFO.
    """
    fd = os.open(path, os.O_WRONLY | _NOFOLLOW | _CLOEXEC)
    try:
        mode = os.fstat(fd).st_mode
        if not (stat.S_ISCHR(mode) or stat.S_ISFIFO(mode)):
            raise OSError(errno.EPERM, f"{path} is no longer a device or a FIFO")
        for data in chunks:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def write_file(path: Path, data: bytes) -> None:
    """Write ``data`` to ``path`` (replacing it), never through a link at the name; into
    a character device or a FIFO at the name (:func:`written_in_place`), never over it.

    Raises:
        OSError: the name is a symlink (``ELOOP``), a directory, a block device or a
            socket, or the file cannot be written.
    """
    path = Path(path)
    _refuse_link(path)
    if written_in_place(path):
        write_in_place(path, [data])
        return
    tmp = path.with_name(f".{path.name}.{os.getpid()}.{id(data):x}.tmp")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW | _CLOEXEC, 0o644)
    try:
        try:
            view = memoryview(data)
            while view:
                view = view[os.write(fd, view) :]
        finally:
            os.close(fd)
        _refuse_link(path)  # planted meanwhile: still never written through
        os.replace(tmp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise


def append_file(path: Path, data: bytes) -> None:
    """Append ``data`` to ``path`` (created if missing), never through a link.

    Raises:
        OSError: the name is a symlink (``ELOOP``), not a regular file, has more than one
            link, or cannot be written.
    """
    path = Path(path)
    flags = os.O_WRONLY | os.O_APPEND | os.O_CREAT | _NOFOLLOW | _NONBLOCK | _CLOEXEC
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(
                errno.ELOOP, f"{path} is a symlink; gradetrail never writes through a link"
            ) from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise OSError(errno.EPERM, f"{path} is not a regular file with one link")
        view = memoryview(data)
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)
