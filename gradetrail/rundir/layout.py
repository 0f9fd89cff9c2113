"""The run directory on disk: created and written without following planted symlinks.

A results directory may be shared, or come from a cloned repository, so a symlink
planted where gradetrail writes (the run directory itself, ``results.jsonl``,
``manifest.json``, ``log.jsonl``, ...) could redirect a write onto any file the user can
write. :class:`RunDir` closes that hole:

- the run directory is opened once with ``O_DIRECTORY | O_NOFOLLOW`` and every file in it
  is opened relative to that descriptor (``dir_fd``) with ``O_NOFOLLOW``, so swapping the
  directory for a link after the check changes nothing;
- :meth:`RunDir.check_outputs` refuses a symlink, anything but a regular file (a FIFO, a
  directory) and a file with more than one hard link (a second name for a file elsewhere,
  which writing would change) at any output name before the first model call, so a run is
  never refused after paying; every open checks the same on the file it opened (``fstat``)
  and never waits on a FIFO (``O_NONBLOCK``);
- temporary files are created with ``O_EXCL`` after removing a stale one (``unlink``
  removes a link itself, never its target) and renamed into place atomically;
- an exclusive lock (``flock`` on ``.lock``) keeps two processes from writing one run
  directory at once (the second is refused; the kernel drops the lock if the holder dies,
  so a ``kill -9`` never leaves a stale lock).

Sample ids come from datasets and may hold ``/``, ``..`` or control characters; a file
named after a sample goes through :func:`sample_file_name`, never the id as-is.

Windows has neither ``O_NOFOLLOW`` nor ``dir_fd``; there each name is checked with
``lstat`` right before it is opened (a narrower guarantee).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import re
import stat
from collections.abc import Iterable
from pathlib import Path
from typing import IO

from gradetrail.errors import RunError, UsageError

__all__ = [
    "KILLED",
    "KILLED_FIX",
    "RunDir",
    "check_results_root",
    "run_status",
    "sample_file_name",
    "writer_pid",
]

_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)
_NONBLOCK = getattr(os, "O_NONBLOCK", 0)
# os.replace takes the same dir_fd arguments as os.rename (it is not listed separately)
_DIR_FD = bool(_NOFOLLOW) and {os.open, os.rename, os.unlink, os.stat} <= os.supports_dir_fd
_SAFE_NAME = re.compile(r"[A-Za-z0-9._-]+")
_LOCK = ".lock"


def sample_file_name(sample_id: str, suffix: str = "") -> str:
    """A file name for a sample that is safe on every filesystem, and distinct per id.

    The id's letters, digits, ``.``, ``_`` and ``-`` are kept (at most 64 of them, for
    reading), every other run of characters becomes ``_``, and the first 12 hex digits of
    the id's SHA-256 are appended, so ids that differ only in unsafe characters or in
    case (``A`` and ``a`` on a case-insensitive disk) never share a file. The result
    never starts with ``.`` and never contains a path separator.

    Args:
        sample_id: the sample id, any string.
        suffix: appended verbatim (e.g. ``".json"``).

    Returns:
        e.g. ``"gsm8k_12-9f86d081884c"`` for ``"gsm8k/12"``.
    """
    readable = "_".join(_SAFE_NAME.findall(sample_id))[:64].lstrip(".") or "sample"
    digest = hashlib.sha256(sample_id.encode("utf-8", "surrogatepass")).hexdigest()[:12]
    return f"{readable}-{digest}{suffix}"


def _not_plain(st: os.stat_result) -> str | None:
    """Why a file cannot be written as an output (a FIFO, device or directory; a file with
    another hard link, whose other name a write would change too), or None."""
    if not stat.S_ISREG(st.st_mode):
        return "is not a regular file"
    if st.st_nlink > 1:
        return f"has {st.st_nlink} hard links (writing it would change another file)"
    return None


def _refuse(path: Path, what: str) -> RunError:
    return RunError(
        f"{path}: {what}; refusing to write results through it (remove it, or pass "
        "--results-root with another directory)"
    )


def check_results_root(root: str | Path) -> None:
    """Refuse a results root no run directory can be made in, before the cache is opened
    or any call is paid for: it (or its nearest existing ancestor) is not a directory
    (a file, ``/dev/null``), or cannot be written (read-only directory or filesystem).

    Raises:
        UsageError: naming the path and what to fix (exit 2).
    """
    path = Path(root)
    if not str(root).strip():
        raise UsageError("the results root is empty; give the directory run directories go in")
    existing = path
    while not os.path.lexists(existing) and existing != existing.parent:
        existing = existing.parent
    fix = "pass another --results-root"
    if not existing.is_dir():
        raise UsageError(f"results root {path}: {existing} is not a directory; {fix}")
    if not os.access(existing, os.W_OK | os.X_OK):
        raise UsageError(f"results root {path}: {existing} is not writable; {fix}")


class RunDir:
    """An open run directory: files are created in it without following symlinks.

    Use :meth:`create`; close with :meth:`close` (or as a context manager).

    Attributes:
        path: the run directory.
    """

    def __init__(self, path: Path, fd: int | None) -> None:
        self.path = path
        self._fd = fd
        self._lock: int | None = None

    @classmethod
    def create(cls, path: str | Path) -> RunDir:
        """Create (or reuse) the run directory ``path`` and open it.

        The parent (the results root) is created if missing; the run directory must not be
        a symlink, and neither may the parent's last component.

        Raises:
            RunError: a symlink or a non-directory in the way, or the directory cannot be
                created or opened.
        """
        path = Path(path)
        parent = path.parent
        if parent.is_symlink():
            raise _refuse(parent, "the results directory is a symlink")
        try:
            parent.mkdir(parents=True, exist_ok=True)
            os.mkdir(path)
        except FileExistsError:
            pass
        except OSError as exc:
            raise RunError(f"{path}: cannot create the run directory ({exc.strerror})") from None
        if path.is_symlink():
            raise _refuse(path, "the run directory is a symlink")
        if not _DIR_FD:
            if not path.is_dir():
                raise _refuse(path, "not a directory")
            return cls(path, None)
        try:
            fd = os.open(path, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
        except OSError as exc:
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise _refuse(path, "not a plain directory") from None
            raise RunError(f"{path}: cannot open the run directory ({exc.strerror})") from None
        return cls(path, fd)

    def __enter__(self) -> RunDir:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    # ------------------------------------------------------------------ low level

    def _open(self, name: str, flags: int, mode: int = 0o644) -> int:
        if "/" in name or os.sep in name or name in ("", ".", ".."):
            raise ValueError(f"{name!r} is not a plain file name")
        try:
            # O_NONBLOCK: opening a FIFO planted at the name must not wait for a reader
            if self._fd is not None:
                fd = os.open(name, flags | _NOFOLLOW | _NONBLOCK, mode, dir_fd=self._fd)
            else:
                target = self.path / name
                if target.is_symlink():
                    raise OSError(errno.ELOOP, "is a symlink")
                fd = os.open(target, flags | _NONBLOCK, mode)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise _refuse(self.path / name, "is a symlink") from None
            if exc.errno in (errno.ENXIO, errno.EISDIR):  # a FIFO with no reader; a directory
                raise _refuse(self.path / name, "is not a regular file") from None
            raise RunError(f"{self.path / name}: cannot write ({exc.strerror})") from None
        problem = _not_plain(os.fstat(fd))  # what was opened, not what a check saw before
        if problem is not None:
            os.close(fd)
            raise _refuse(self.path / name, problem)
        return fd

    def _unlink(self, name: str) -> None:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(name if self._fd is not None else self.path / name, dir_fd=self._fd)

    def _replace(self, src: str, dst: str) -> None:
        if self._fd is not None:
            os.replace(src, dst, src_dir_fd=self._fd, dst_dir_fd=self._fd)
        else:
            os.replace(self.path / src, self.path / dst)

    # ------------------------------------------------------------------ public

    def check_outputs(self, names: tuple[str, ...] | list[str]) -> None:
        """Refuse before any model call when an output name is taken by a symlink, by
        anything but a regular file (a FIFO, a directory), or by a file with more than one
        hard link (a missing name is fine). Every open checks the same again on what it
        opened.

        Raises:
            RunError: naming the first offending path.
        """
        for name in names:
            try:
                if self._fd is not None:
                    st = os.stat(name, dir_fd=self._fd, follow_symlinks=False)
                else:
                    st = os.lstat(self.path / name)
            except FileNotFoundError:
                continue
            problem = "is a symlink" if stat.S_ISLNK(st.st_mode) else _not_plain(st)
            if problem is not None:
                raise _refuse(self.path / name, problem)

    def open_text(self, name: str, *, append: bool = False, buffering: int = -1) -> IO[str]:
        """Open ``name`` for writing text (UTF-8): truncated, or appended to.

        Args:
            name: a plain file name in the run directory.
            append: append (``O_APPEND``) instead of truncating.
            buffering: as for :func:`open` (1: flush every line).

        Raises:
            RunError: the name is a symlink, or the file cannot be opened.
        """
        flags = os.O_WRONLY | os.O_CREAT | (os.O_APPEND if append else os.O_TRUNC)
        fd = self._open(name, flags)
        return os.fdopen(fd, "w", buffering=buffering, encoding="utf-8")

    def open_fd(self, name: str, flags: int) -> int:
        """``os.open`` of ``name`` in the run directory with ``O_NOFOLLOW`` added; the
        caller closes the descriptor.

        Raises:
            RunError: the name is a symlink, or the file cannot be opened.
        """
        return self._open(name, flags)

    def write_atomic(self, name: str, content: str | bytes | Iterable[bytes]) -> None:
        """Replace ``name`` atomically: a temporary file (``name.tmp``, created
        exclusively) is written, flushed and fsynced, then renamed over ``name``, so a
        reader sees the old file or the new one, never a mix.

        Args:
            name: a plain file name in the run directory.
            content: text (written as UTF-8), bytes, or chunks of bytes written in turn.

        Raises:
            RunError: the name is a symlink, or the file cannot be written (a full disk,
                something else in the way), naming the path.
        """
        tmp = name + ".tmp"
        try:
            self._unlink(tmp)
            fd = self._open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL)
        except OSError as exc:
            raise RunError(f"{self.path / name}: cannot write ({exc.strerror})") from None
        try:
            with os.fdopen(fd, "wb") as f:
                if isinstance(content, str):
                    f.write(content.encode("utf-8"))
                elif isinstance(content, bytes):
                    f.write(content)
                else:
                    for chunk in content:
                        f.write(chunk)
                f.flush()
                os.fsync(f.fileno())
            self._replace(tmp, name)
        except OSError as exc:  # a full disk: leave no .tmp behind
            with contextlib.suppress(OSError):
                self._unlink(tmp)
            raise RunError(f"{self.path / name}: cannot write ({exc.strerror})") from None
        except BaseException:  # a signal mid-write: no .tmp behind either
            with contextlib.suppress(OSError):
                self._unlink(tmp)
            raise

    def remove(self, name: str) -> None:
        """Delete ``name`` if it exists (a link itself, never its target)."""
        self._unlink(name)

    def reserve(self, name: str, size: int) -> None:
        """Create ``name`` holding ``size`` bytes of allocated space: freed by
        :meth:`remove` when the disk is full, so the final manifest can still be written.

        Raises:
            RunError: the space cannot be had (the disk is already full).
        """
        fd = self._open(name, os.O_WRONLY | os.O_CREAT | os.O_TRUNC)
        try:
            try:
                os.posix_fallocate(fd, 0, size)
            except (AttributeError, OSError) as exc:
                if getattr(exc, "errno", None) not in (None, errno.EOPNOTSUPP, errno.EINVAL):
                    raise
                os.write(fd, b"\0" * size)  # a filesystem without fallocate
        except OSError as exc:
            os.close(fd)
            self._unlink(name)
            raise RunError(
                f"{self.path / name}: cannot reserve {size // 1024} KiB ({exc.strerror}); "
                "free space on the results disk or pass --results-root elsewhere"
            ) from None
        os.close(fd)

    def rotate(self, name: str, older: tuple[str, ...] | list[str]) -> None:
        """Shift ``name`` to ``older[0]``, ``older[0]`` to ``older[1]``, ...; the last of
        ``older`` is dropped. Missing files are skipped; renames never follow links."""
        for src, dst in zip(reversed([name, *older[:-1]]), reversed(older), strict=True):
            with contextlib.suppress(FileNotFoundError):
                self._replace(src, dst)

    def lock(self) -> None:
        """Take the run directory's exclusive lock for this process (no-op on Windows).

        Raises:
            RunError: another process holds it (naming its pid).
        """
        try:
            import fcntl
        except ImportError:  # Windows
            return
        fd = self._open(_LOCK, os.O_RDWR | os.O_CREAT)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise RunError(
                f"{self.path}: another gradetrail run (pid {holder}) is writing this run "
                "directory; wait for it to finish or stop it first"
            ) from None
        try:
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()}\n".encode())
        except OSError as exc:  # the results disk is full already
            os.close(fd)
            raise RunError(
                f"{self.path}: cannot write in the run directory ({exc.strerror}); free space "
                "on the results disk or pass --results-root elsewhere"
            ) from None
        self._lock = fd
        self._remove_leftovers()

    def _remove_leftovers(self) -> None:
        """Delete the ``*.tmp`` files a killed writer left (a kill -9 during a rewrite):
        with the lock held no other gradetrail process writes here, so none is live.
        Links are removed as names, never followed."""
        try:
            names = os.listdir(self._fd if self._fd is not None else self.path)
        except OSError:
            return
        for name in names:
            if name.endswith(".tmp") and "/" not in name:
                with contextlib.suppress(OSError, RunError):
                    self._unlink(name)

    def close(self) -> None:
        """Release the lock and the directory descriptor."""
        if self._lock is not None:
            os.close(self._lock)
            self._lock = None
        if self._fd is not None:
            os.close(self._fd)
            self._fd = None


def writer_pid(path: str | Path) -> int | None:
    """The pid of the live process writing the run directory at ``path``, or None when no
    process is (it finished, or was killed and left its manifest at ``running``).

    Read-only: the pid comes from ``.lock`` (opened without following a link) and is
    checked with signal 0; the lock itself is never taken, so a run starting at that
    moment is never refused because someone was looking. A reused pid can make a dead
    run look alive; that errs towards "running".
    """
    try:
        fd = os.open(Path(path) / _LOCK, os.O_RDONLY | _NOFOLLOW | _NONBLOCK)
    except OSError:
        return None
    try:
        text = os.read(fd, 32).decode("ascii", "replace").strip()
    finally:
        os.close(fd)
    if not text.isdigit():
        return None
    pid = int(text)
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return None
    except PermissionError:  # alive, owned by another user
        return pid
    except OSError:
        return None
    return pid


KILLED = "killed"
"""The status of a run whose manifest still says ``running`` but whose process is gone
(``kill -9``, a crash, a lost machine): never written to a manifest, only read."""

KILLED_FIX = "re-run the same command to resume it (every response paid for is in the cache)"
"""How to finish a killed run, for messages that name one."""


def run_status(path: str | Path, status: str) -> str:
    """The status of the run directory at ``path`` now, given its manifest's ``status``:
    :data:`KILLED` when that is ``running`` and no live process writes the run
    (:func:`writer_pid`), else ``status`` itself.

    The one liveness check behind every reader: ``gradetrail runs``, gate, diff, ci,
    export, the viewer and :func:`gradetrail.read_manifest`.
    """
    if status == "running" and writer_pid(path) is None:
        return KILLED
    return status
