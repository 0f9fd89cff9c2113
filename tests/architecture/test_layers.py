"""The package layers: a module imports only from its own layer or a lower one.

Every import of every module under ``gradetrail/`` is read from its syntax tree (imports
inside functions and ``TYPE_CHECKING`` blocks included), so a lazy import cannot hide an
upward dependency. The layers, lowest first, are :data:`LAYERS`; the root's public API
(``gradetrail/__init__.py``, ``__main__``, ``testing``) sits above everything.
"""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[2] / "gradetrail"

#: lowest first; a module may import from its own layer and any layer before it
LAYERS: tuple[tuple[str, ...], ...] = (
    ("errors", "_version", "_util"),
    ("stats",),
    ("conversation",),
    ("spec",),
    ("datasets",),
    ("providers",),
    ("prompts",),
    ("rundir",),
    ("cache",),
    ("executors",),
    ("scorers",),
    ("engine",),
    ("analysis",),
    ("report",),
    ("ci",),
    ("view",),
    ("cli",),
    ("", "__main__", "testing"),
)

#: (importer, imported) pairs allowed to go up a layer, each with its reason. Empty: the
#: optional extras (ray, datasets, pyarrow, starlette, math-verify) are third-party
#: packages, imported lazily inside gradetrail's own layer, and need no exception here.
ALLOWED_UPWARD: dict[tuple[str, str], str] = {}


def layer_of(module: str) -> int:
    """The index in :data:`LAYERS` of a dotted ``gradetrail`` module name."""
    parts = module.split(".")
    top = parts[1] if len(parts) > 1 else ""
    for index, names in enumerate(LAYERS):
        if top in names:
            return index
    raise AssertionError(f"{module}: in no layer; add its package to LAYERS")


def module_name(path: Path) -> str:
    """``gradetrail/a/b.py`` -> ``gradetrail.a.b``; a package's ``__init__`` is the package."""
    parts = list(path.relative_to(PACKAGE.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imports_of(path: Path) -> set[str]:
    """Every ``gradetrail`` module ``path`` imports, anywhere in the file (a ``from
    gradetrail.x import y`` names ``gradetrail.x``, or ``gradetrail.x.y`` when y is a
    module)."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found: set[str] = set()
    for node in ast.walk(ast.parse(path.read_text("utf-8"))):
        if isinstance(node, ast.Import):
            found.update(a.name for a in node.names if a.name.split(".")[0] == "gradetrail")
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join([*anchor, base] if base else anchor)
            if base.split(".")[0] != "gradetrail":
                continue
            for alias in node.names:
                sub = f"{base}.{alias.name}"
                is_module = (PACKAGE.parent / sub.replace(".", "/")).is_dir() or (
                    PACKAGE.parent / (sub.replace(".", "/") + ".py")
                ).exists()
                found.add(sub if is_module else base)
    return found


def upward_imports() -> list[str]:
    """``importer -> imported (layer a < layer b)`` for each import that goes up."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        importer = module_name(path)
        for imported in sorted(imports_of(path)):
            upward = layer_of(imported) > layer_of(importer)
            if upward and (importer, imported) not in ALLOWED_UPWARD:
                bad.append(f"{importer} -> {imported}")
    return bad


def test_no_module_imports_from_a_higher_layer() -> None:
    """Each import stays in its layer or goes down (see LAYERS); the message lists every
    import that goes up."""
    assert upward_imports() == []


def test_every_package_has_a_layer() -> None:
    """A new package must be placed in LAYERS before it can be imported."""
    for path in PACKAGE.iterdir():
        if path.is_dir() and (path / "__init__.py").exists():
            layer_of(f"gradetrail.{path.name}")
        elif path.suffix == ".py":
            layer_of(f"gradetrail.{path.stem}" if path.stem != "__init__" else "gradetrail")


def test_the_root_keeps_only_the_public_api() -> None:
    """Besides packages, ``gradetrail/`` holds only the public API, errors and testing."""
    modules = {p.name for p in PACKAGE.glob("*.py")}
    assert modules == {"__init__.py", "__main__.py", "_version.py", "errors.py", "testing.py"}


@pytest.mark.parametrize(
    ("code", "expected"),
    [
        ("from gradetrail.cli import app", {"gradetrail.cli"}),
        ("def f():\n    from gradetrail.engine import runner", {"gradetrail.engine.runner"}),
        ("import gradetrail.view.app", {"gradetrail.view.app"}),
    ],
)
def test_imports_are_read_inside_functions_too(tmp_path: Path, code: str, expected: set) -> None:
    """The reader sees module-level, function-level and plain ``import`` statements."""
    path = PACKAGE / "stats" / "_layer_probe.py"
    try:
        path.write_text(code)
        assert imports_of(path) == expected
        assert upward_imports() != []
    finally:
        path.unlink()
