"""Public names imported on first use (PEP 562), for packages whose ``__init__`` only
re-exports: ``import gradetrail`` pays only for what it touches."""

from __future__ import annotations

import importlib as _importlib
import typing as _typing

__all__ = ["lazy_names"]


def lazy_names(
    package: str, exports: dict[str, str], namespace: dict[str, _typing.Any]
) -> tuple[_typing.Callable[[str], _typing.Any], _typing.Callable[[], list[str]]]:
    """PEP 562 ``__getattr__`` and ``__dir__`` for ``package``, whose public names
    (``exports``: name -> the module that defines it) are imported on first use and then
    cached in ``namespace`` (the package's ``globals()``). ``gradetrail`` and
    ``gradetrail.spec`` both use them.

    The returned ``__getattr__`` raises AttributeError for a name not in ``exports`` (then
    ``from package import x`` falls back to the submodule ``package.x``)."""

    def __getattr__(name: str) -> _typing.Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(_importlib.import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted({*namespace, *exports})

    return __getattr__, __dir__
