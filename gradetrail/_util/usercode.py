"""Loading the user's own code: a module the spec names (a python provider's function, an
agent's tools module, a custom scorer)."""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.machinery
import importlib.util
import os
import sys
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gradetrail._util.files import not_a_file
from gradetrail.errors import SpecError

__all__ = ["ExitRefused", "exception_text", "exits_refused", "import_user_module"]


class ExitRefused(BaseException):
    """What ``os._exit(code)`` raises in a run's process while the run lasts
    (:func:`exits_refused`): the user's code (a python provider's function, a tool, a
    scorer) asked to end the process at once. A BaseException, as ``SystemExit`` is, so
    the user-code boundary records it as that call's error (an ``Escaped`` one); anywhere
    else it ends the run as a failure, never as a success.

    Attributes:
        code: the exit code asked for.
    """

    def __init__(self, code: int) -> None:
        super().__init__(
            f"os._exit({code}) was called: it would have ended gradetrail's process in the "
            "middle of the run (no row or manifest written, and exit code "
            f"{code} read as the run's); raise an exception to fail a sample instead"
        )
        self.code = code


#: runs in progress that refuse os._exit (several in one process: a sweep's threads)
_REFUSING = 0
_REFUSING_LOCK = threading.Lock()
_REAL_EXIT = os._exit


def _refused_exit(code: int) -> None:
    """``os._exit`` while a run lasts: in the run's own process, raise
    :class:`ExitRefused`; in a child it forked (multiprocessing ends its children with
    ``os._exit``), end that child as ``os._exit`` always does."""
    if os.getpid() != _OWNER_PID:
        _REAL_EXIT(code)
    raise ExitRefused(code)


_OWNER_PID = os.getpid()


@contextlib.contextmanager
def exits_refused() -> Iterator[None]:
    """While the block runs, ``os._exit`` in this process raises :class:`ExitRefused`
    instead of ending it without a word: an application under test that calls
    ``os._exit(0)`` would otherwise end ``gradetrail run`` with exit code 0, read by a CI
    as success, with the run's rows and manifest never written. A forked child still
    exits. Nested and concurrent runs share one guard; ``os._exit`` is restored when the
    last ends."""
    global _REFUSING, _OWNER_PID
    with _REFUSING_LOCK:
        if _REFUSING == 0:
            _OWNER_PID = os.getpid()
            os._exit = _refused_exit
        _REFUSING += 1
    try:
        yield
    finally:
        with _REFUSING_LOCK:
            _REFUSING -= 1
            if _REFUSING == 0 and os._exit is _refused_exit:
                os._exit = _REAL_EXIT


#: the SHA-256 of each module file as gradetrail last executed it (``current=True``)
_LOADED: dict[str, str] = {}
#: top-level name -> the file gradetrail imported that user module (or package) from
_FROM: dict[str, str | None] = {}


def import_user_module(
    module_name: str, base_dir: Path, where: str, *, current: bool = False
) -> Any:
    """Import the user's module (a python provider's function, an agent's tools), the
    spec's directory and the working directory first on ``sys.path``.

    With ``current``, a module already imported in this process is executed again when
    its file is not the one gradetrail last executed (edited since, or imported by
    someone else): a second run in one process (a notebook) runs the code its cache key
    hashes, never the code of the first run under the new code's key.

    Raises:
        SpecError: naming ``where``: the module cannot be found or imported, raises while
            importing, or its file is not a regular file (a FIFO would block the import).
    """
    # Absolute paths, never ".": Python binds a relative sys.path entry to the directory it
    # was first searched from (sys.path_importer_cache keeps that FileFinder), so after an
    # os.chdir "." still found the first directory's app.py and ran its code.
    first = [os.path.abspath("."), os.path.abspath(base_dir)]
    if sys.path[:2] != first:
        for extra in reversed(first):  # first, even when on the path further on
            with contextlib.suppress(ValueError):
                sys.path.remove(extra)
            sys.path.insert(0, extra)
    _forget_another_directorys(module_name)
    try:
        found = importlib.util.find_spec(module_name)
        origin = found.origin if found is not None else None
        problem = not_a_file(Path(origin)) if origin and found.has_location else None
        if problem is not None:
            raise SpecError(f"{where}: {module_name!r} is {origin}, which {problem}")
        loaded = module_name in sys.modules
        module = importlib.import_module(module_name)
        _FROM[module_name.partition(".")[0]] = _top_file(module_name)
        return _current(module, module_name, loaded) if current else module
    except SpecError:
        raise
    except (ImportError, ValueError) as exc:
        fix = _import_fix(module_name, exc, base_dir)
        raise SpecError(f"{where}: cannot import {module_name!r} ({exc}){fix}") from None
    except (Exception, SystemExit, GeneratorExit) as exc:  # the module failed while importing
        raise SpecError(
            f"{where}: importing {module_name!r} raised {exception_text(exc)}; fix the module"
        ) from None


def _import_fix(module_name: str, exc: BaseException, base_dir: Path) -> str:
    """What to do about a module that could not be found: the user's own (its file is
    looked for beside the spec and in the working directory), or a package it imports
    (to install), or nothing more to say."""
    missing = getattr(exc, "name", None) if isinstance(exc, ModuleNotFoundError) else None
    if not missing:
        return ""
    if module_name == missing or module_name.startswith(f"{missing}."):
        path = module_name.replace(".", "/")
        cwd = Path.cwd()
        if base_dir.resolve() == cwd.resolve():
            return f"; put {path}.py beside the spec ({base_dir}), or install it"
        return (
            f"; put {path}.py beside the spec ({base_dir}) or in the working directory "
            f"({cwd}), or install it"
        )
    return f"; {module_name!r} imports {missing!r}: install it in this environment"


def _top_file(module_name: str) -> str | None:
    """The file the top-level package (or module) of ``module_name`` was imported from."""
    top = sys.modules.get(module_name.partition(".")[0])
    origin = getattr(top, "__file__", None)
    return str(Path(origin).resolve()) if origin else None


def _forget_another_directorys(module_name: str) -> None:
    """Drop from ``sys.modules`` a user module of this name that gradetrail imported from
    another directory than the one it resolves to now (two specs in one process, each
    beside its own ``app.py``): importing by name returned the first spec's module, so
    the second ran the first's code and cached its answers under its own requests. Only a
    module gradetrail itself imported as user code is dropped (never one of the
    standard library or an installed package), with its submodules."""
    top = module_name.partition(".")[0]
    before = _FROM.get(top)
    if before is None or top not in sys.modules:
        return
    spec = importlib.machinery.PathFinder.find_spec(top, sys.path[:2])
    now = str(Path(spec.origin).resolve()) if spec is not None and spec.origin else None
    if now is None or now == before:
        return
    for name in [n for n in sys.modules if n == top or n.startswith(f"{top}.")]:
        del sys.modules[name]
        _LOADED.pop(name, None)
    importlib.invalidate_caches()


def _current(module: Any, module_name: str, loaded: bool) -> Any:
    """``module``, executed again from its file when gradetrail did not execute this
    version of it (``loaded``: it was in ``sys.modules`` before this import)."""
    source = getattr(module, "__file__", None)
    if not source or not Path(source).is_file():
        return module
    digest = hashlib.sha256(Path(source).read_bytes()).hexdigest()
    if loaded and _LOADED.get(module_name) != digest:
        module = importlib.reload(module)
    _LOADED[module_name] = digest
    return module


def exception_text(exc: BaseException, limit: int = 500) -> str:
    """``Type: message`` of an exception the user's code raised, on one line and at most
    ``limit`` characters of message; never raises, also for an exception whose ``__str__``
    raises (then ``Type (its message cannot be printed: ...)``) and for one with no
    message (then ``Type``)."""
    name = type(exc).__name__
    try:
        message = str(exc)
    except Exception as inner:  # noqa: BLE001 - a __str__ of the user's that raises
        return f"{name} (its message cannot be printed: {type(inner).__name__})"
    message = " ".join(message.split())[:limit]
    return f"{name}: {message}" if message else name
