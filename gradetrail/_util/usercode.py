"""Loading the user's own code: a module the spec names (a python provider's function, an
agent's tools module, a custom scorer)."""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from pathlib import Path
from typing import Any

from gradetrail._util.files import not_a_file
from gradetrail.errors import SpecError

__all__ = ["exception_text", "import_user_module"]


#: the SHA-256 of each module file as gradetrail last executed it (``current=True``)
_LOADED: dict[str, str] = {}


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
    for extra in (str(base_dir), "."):
        if extra not in sys.path:
            sys.path.insert(0, extra)
    try:
        found = importlib.util.find_spec(module_name)
        origin = found.origin if found is not None else None
        problem = not_a_file(Path(origin)) if origin and found.has_location else None
        if problem is not None:
            raise SpecError(f"{where}: {module_name!r} is {origin}, which {problem}")
        loaded = module_name in sys.modules
        module = importlib.import_module(module_name)
        return _current(module, module_name, loaded) if current else module
    except SpecError:
        raise
    except (ImportError, ValueError) as exc:
        raise SpecError(f"{where}: cannot import {module_name!r} ({exc})") from None
    except (Exception, SystemExit, GeneratorExit) as exc:  # the module failed while importing
        raise SpecError(
            f"{where}: importing {module_name!r} raised {exception_text(exc)}; fix the module"
        ) from None


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
