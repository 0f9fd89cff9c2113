"""Files a python app hands back with its answer (``Response.artifacts``), written into
the run directory and nowhere else.

An artifact of sample ``s``, epoch ``e``, named ``n`` goes to
``<run dir>/artifacts/<sample file name>/<e>/<n>``: the sample's directory name is
:func:`~gradetrail.rundir.layout.sample_file_name` (never a path, whatever the id), the
file name must be a plain name (:data:`~gradetrail.providers.base.ARTIFACT_NAME`), and
every directory is opened, and every file created, without following a symlink, so a link
planted anywhere on the way is refused instead of written through. Each file is written
atomically (a temporary file renamed over it).
"""

from __future__ import annotations

import contextlib
import errno
import hashlib
import os
import threading
from collections.abc import Mapping
from typing import Any

from gradetrail.errors import RunError
from gradetrail.providers.base import ARTIFACT_NAME
from gradetrail.rundir.layout import RunDir, sample_file_name

__all__ = ["ARTIFACTS_DIR", "Artifacts"]

ARTIFACTS_DIR = "artifacts"
_NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
_DIRECTORY = getattr(os, "O_DIRECTORY", 0)


class Artifacts:
    """Writes a run's artifacts under its directory (see the module docstring).

    Args:
        run_dir: the open run directory.
    """

    def __init__(self, run_dir: RunDir) -> None:
        self.root = run_dir.path
        self._lock = threading.Lock()

    def save(
        self, sample_id: str, epoch: int, artifacts: Mapping[str, str | bytes]
    ) -> list[dict[str, Any]]:
        """Write one row's artifacts; return what the row records of each: ``name``,
        ``path`` (relative to the run directory, ``/``-separated), ``bytes`` (its size)
        and ``sha256``. Text is written as UTF-8.

        Raises:
            RunError: a name that is not a plain file name, a symlink or something other
                than a directory on the way, or a file that cannot be written.
        """
        parts = [ARTIFACTS_DIR, sample_file_name(sample_id), str(int(epoch))]
        out = []
        with self._lock:
            fd = self._open_dirs(parts)
            try:
                for name, content in artifacts.items():
                    if not ARTIFACT_NAME.fullmatch(name) or ".." in name:
                        raise RunError(f"artifact name {name!r} is not a plain file name")
                    data = (
                        content.encode("utf-8", "surrogatepass")
                        if isinstance(content, str)
                        else content
                    )
                    self._write(fd, name, data, "/".join(parts))
                    out.append(
                        {
                            "name": name,
                            "path": "/".join([*parts, name]),
                            "bytes": len(data),
                            "sha256": hashlib.sha256(data).hexdigest(),
                        }
                    )
            finally:
                os.close(fd)
        return out

    def _open_dirs(self, parts: list[str]) -> int:
        """The innermost directory's descriptor, each directory made and opened from its
        parent's descriptor without following a symlink."""
        try:
            fd = os.open(self.root, os.O_RDONLY | _DIRECTORY | _NOFOLLOW)
        except OSError as exc:
            raise RunError(f"{self.root}: cannot open the run directory ({exc.strerror})") from None
        where = self.root
        try:
            for part in parts:
                where = where / part
                with contextlib.suppress(FileExistsError):
                    os.mkdir(part, 0o755, dir_fd=fd)
                inner = os.open(part, os.O_RDONLY | _DIRECTORY | _NOFOLLOW, dir_fd=fd)
                os.close(fd)
                fd = inner
        except OSError as exc:
            os.close(fd)
            if exc.errno in (errno.ELOOP, errno.ENOTDIR):
                raise RunError(
                    f"{where}: is a symlink or not a directory; refusing to write artifacts "
                    "through it"
                ) from None
            raise RunError(f"{where}: cannot write artifacts ({exc.strerror})") from None
        return fd

    def _write(self, fd: int, name: str, data: bytes, where: str) -> None:
        tmp = name + ".tmp"
        try:
            with contextlib.suppress(FileNotFoundError):
                os.unlink(tmp, dir_fd=fd)
            out = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | _NOFOLLOW, 0o644, dir_fd=fd)
            with os.fdopen(out, "wb") as f:
                f.write(data)
            os.replace(tmp, name, src_dir_fd=fd, dst_dir_fd=fd)
        except OSError as exc:
            raise RunError(f"{self.root / where / name}: cannot write ({exc.strerror})") from None
