"""An approved harness: the SHA-256 of every file that decides how a run is graded,
recorded when a person approves it, and checked before a run that requires it.

An unattended optimisation loop (a person or an agent editing a prompt or an app,
re-running, keeping what scores better) may also edit the code that grades it. With
``run.require_approval: true`` (or ``gradetrail run --require-approval``) a run whose
harness changed since ``gradetrail approve`` refuses to start (exit 2), naming each file
that changed, appeared or went, and the approved hash.

**This is a change detector, not a security boundary.** Whatever can edit the scorer can
also edit the approval file, the spec's ``harness:`` list or gradetrail itself, and a
module the harness imports from elsewhere (an installed package) is covered only through
the lockfile. It catches an edit nobody reviewed, by a loop that follows the rules; what
bounds an unattended run is its environment: a sandbox without write access to the
harness, and a budget (tokens, USD) and time limit set outside the loop.

The harness (:func:`harness_files`) is:

- the spec file;
- every file the spec names (``path`` and ``file`` keys at any depth: the dataset, a
  split file, recordings, the judge file);
- every module the spec names (``function: module:function`` of a ``python`` provider or
  scorer at any depth, ``tools_module``), found under the spec's directory and the working
  directory (both: the run imports the working directory's first; an installed module is
  the lockfile's), and every module found there that those import, at any depth;
- the files matching the spec's ``harness:`` globs (relative to the spec's directory);
- the project's lockfiles (``uv.lock``, ``poetry.lock``, ``pdm.lock``, ``Pipfile.lock``,
  ``pylock.toml``, ``requirements*.txt``) in the nearest directory at or above the spec's
  that has any, up to the repository root.

Beside the files, the approval records the spec's grading settings as loaded
(:data:`GRADING_KEYS`: the target, the scorer sections, ``run.refusals``,
``run.truncated``, the reducer, ``harness``, and what decides a split's ids: the hash
split's seed and fractions, the id field), ``--set`` overrides applied: a run whose
overrides (or a sweep's axes) grade otherwise is refused like a changed file, and an
override cannot turn the spec file's ``run.require_approval: true`` off.
"""

from __future__ import annotations

import ast
import hashlib
import json
import os
from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gradetrail._util.canonical import canonical_json
from gradetrail.errors import GradetrailError
from gradetrail.spec import EvalSpec

__all__ = [
    "Approval",
    "ApprovalError",
    "approval_path",
    "approve",
    "check_approval",
    "grading_of",
    "harness_files",
]

#: lockfile names looked for (``requirements*.txt`` too)
LOCKFILES = ("uv.lock", "poetry.lock", "pdm.lock", "Pipfile.lock", "pylock.toml")
#: keys of the spec whose text value names a file (relative to the spec's directory)
_FILE_KEYS = ("path", "file")
#: keys whose value names a Python module (``module`` or ``module:function``)
_MODULE_KEYS = ("function", "tools_module", "module")
#: files shown in a refusal at most
_SHOWN = 8


class ApprovalError(GradetrailError):
    """The harness has no approval, or changed since it; the message says what changed."""

    exit_code = 2


def approval_path(spec: EvalSpec) -> Path:
    """Where ``spec``'s approval is kept: ``run.approval_file`` (relative to the spec's
    directory), else ``<spec name>.approval.json`` beside the spec file."""
    base = spec.base_dir or Path(".")
    chosen = spec.run.approval_file
    if chosen:
        path = Path(chosen).expanduser()
        return path if path.is_absolute() else base / path
    return base / f"{Path(spec.source).stem}.approval.json"


def _walk(value: Any) -> Iterator[tuple[str, Any]]:
    """Every (key, value) of a JSON value, at any depth."""
    stack = [value]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            for key, inner in item.items():
                yield key, inner
                stack.append(inner)
        elif isinstance(item, list):
            stack.extend(item)


def _module_files(name: str, roots: list[Path]) -> list[Path]:
    """The files of module ``name`` (``a.b`` -> ``a/b.py`` or ``a/b/__init__.py``) under
    each of ``roots`` (none: an installed module, or none). Every root's, not the first
    one's: the run imports the working directory's before the spec directory's, so a
    module dropped in either is one the run may import."""
    parts = name.split(".")
    found: list[Path] = []
    for root in roots:
        for candidate in (
            root.joinpath(*parts).with_suffix(".py"),
            root.joinpath(*parts, "__init__.py"),
        ):
            if candidate.is_file():
                found.append(candidate)
                break
    return found


def _imported_names(path: Path) -> Iterator[tuple[Path | None, str]]:
    """What the module at ``path`` imports: (None, dotted name) for an absolute import,
    (package directory, dotted name) for a relative one. A file that does not parse
    imports nothing here (the run refuses it anyway)."""
    try:
        tree = ast.parse(path.read_bytes(), filename=str(path))
    except (SyntaxError, ValueError, OSError):
        return
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield None, alias.name
        elif isinstance(node, ast.ImportFrom):
            where: Path | None = None
            if node.level:
                where = path.parent
                for _ in range(node.level - 1):
                    where = where.parent
            stem = node.module or ""
            if stem:
                yield where, stem
            for alias in node.names:  # `from pkg import mod` imports pkg/mod.py
                if alias.name != "*":
                    yield where, f"{stem}.{alias.name}" if stem else alias.name


def _with_local_imports(module: Path, roots: list[Path]) -> set[Path]:
    """``module`` and every module file it imports, at any depth, found as the run finds
    them (under ``roots``, or beside a relative import's package), each package's
    ``__init__.py`` on the way included: code that runs with it. Installed modules are
    not (the lockfile covers them)."""
    found: set[Path] = set()
    todo = [module]
    while todo:
        path = todo.pop()
        if path in found:
            continue
        found.add(path)
        for where, name in _imported_names(path):
            parts = name.split(".")
            prefixes = [".".join(parts[: i + 1]) for i in range(len(parts))]
            for prefix in prefixes:  # importing a.b.c runs a/__init__.py and a/b/__init__.py
                for hit in _module_files(prefix, [where] if where is not None else roots):
                    todo.append(hit.resolve())
    return found


def _lockfiles(start: Path) -> list[Path]:
    """The lockfiles of the nearest directory at or above ``start`` holding any, not
    past the repository root (a directory with ``.git``)."""
    here = start.resolve()
    for folder in (here, *here.parents):
        found = [folder / n for n in LOCKFILES if (folder / n).is_file()]
        found += sorted(p for p in folder.glob("requirements*.txt") if p.is_file())
        if found:
            return found
        if (folder / ".git").exists():
            break
    return []


def harness_files(spec: EvalSpec) -> list[Path]:
    """The files of ``spec``'s harness (see the module docstring), resolved, each once,
    sorted. A file the spec names that does not exist is left out (the run refuses it
    anyway); a ``harness:`` glob matching nothing is an error.

    Raises:
        ApprovalError: a ``harness:`` entry matches no file.
    """
    base = (spec.base_dir or Path(".")).resolve()
    source = Path(spec.source)
    found: set[Path] = {source.resolve()} if source.is_file() else set()
    dumped = spec.model_dump(mode="json", exclude={"harness"})
    roots = [base, Path.cwd()]
    for key, value in _walk(dumped):
        if not isinstance(value, str) or not value:
            continue
        if key in _FILE_KEYS and "://" not in value:
            path = Path(value).expanduser()
            path = path if path.is_absolute() else base / path
            if path.is_file():
                found.add(path.resolve())
        elif key in _MODULE_KEYS:
            for module in _module_files(value.partition(":")[0], roots):
                found.update(_with_local_imports(module.resolve(), roots))
    for pattern in spec.harness or []:
        matched = [p for p in sorted(base.glob(pattern)) if p.is_file()]
        if not matched:
            raise ApprovalError(
                f"{spec.source}: harness: {pattern!r} matches no file under {base}; fix the "
                "pattern or remove it"
            )
        found.update(p.resolve() for p in matched)
    found.update(p.resolve() for p in _lockfiles(base))
    return sorted(found)


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as f:
        for chunk in iter(lambda: f.read(1 << 20), b""):
            digest.update(chunk)
    return digest.hexdigest()


def _shown_path(path: Path, base: Path) -> str:
    """``path`` relative to ``base`` (``../data/x.jsonl`` too), so an approval holds when
    the project moves; absolute when on another drive."""
    try:
        return Path(os.path.relpath(path, base)).as_posix()
    except ValueError:
        return str(path)


@dataclass(frozen=True)
class Approval:
    """One approval (the approval file's content).

    Attributes:
        files: path (relative to the spec's directory) -> SHA-256 of the file's bytes.
        harness_sha256: SHA-256 over canonical JSON of ``files``.
        approved_at: when (UTC, ISO 8601).
        grading: the spec's grading settings as approved (:func:`grading_of`), ``--set``
            overrides applied.
    """

    files: dict[str, str]
    harness_sha256: str
    approved_at: str
    grading: dict[str, Any]

    @classmethod
    def of(cls, spec: EvalSpec) -> Approval:
        """The harness of ``spec`` as it is now."""
        base = (spec.base_dir or Path(".")).resolve()
        files = {_shown_path(p, base): _sha256(p) for p in harness_files(spec)}
        digest = hashlib.sha256(canonical_json(files).encode()).hexdigest()
        now = datetime.now(UTC).isoformat(timespec="seconds")
        return cls(files, digest, now, grading_of(spec))

    def to_json(self) -> str:
        """The approval file's text."""
        body = {
            "approved_at": self.approved_at,
            "harness_sha256": self.harness_sha256,
            "files": self.files,
            "grading": self.grading,
        }
        return json.dumps(body, indent=1, ensure_ascii=False) + "\n"


#: the spec's settings that decide how answers are graded and counted, and which samples
#: each split holds, beside the files: a ``--set`` of one of them changes the grader, or
#: moves held-out samples into the split a loop tunes on (another hash-split seed, another
#: id field), without changing any file. ``dataset.split.name`` is not one: a loop tunes
#: on one split and reports on another.
GRADING_KEYS = (
    "target",
    "scorer",
    "scorers",
    "run.refusals",
    "run.truncated",
    "run.reducer",
    "run.pass_k",
    "harness",
    "dataset.hf",
    "dataset.fields",
    "dataset.id_field",
    "dataset.label_field",
    "dataset.label_map",
    "dataset.split.file",
    "dataset.split.seed",
    "dataset.split.fractions",
    "dataset.split.held_out",
    "dataset.split.max_looks",
)


def grading_of(spec: EvalSpec) -> dict[str, Any]:
    """``spec``'s :data:`GRADING_KEYS` (dotted key -> its value as JSON), as loaded: the
    spec file's with its ``--set`` overrides applied; and ``modules_outside_project``: the
    modules it names (``function``, ``tools_module``) that are no file under the spec's
    or the working directory, so no file hash covers them (an installed module, or one
    found elsewhere on ``sys.path``): naming another is running code nobody approved."""
    dumped = spec.model_dump(mode="json")
    out: dict[str, Any] = {}
    for key in GRADING_KEYS:
        value: Any = dumped
        for part in key.split("."):
            value = value.get(part) if isinstance(value, dict) else None
        out[key] = value
    roots = [(spec.base_dir or Path(".")).resolve(), Path.cwd()]
    named = {
        value.partition(":")[0]
        for key, value in _walk(dumped)
        if key in _MODULE_KEYS and isinstance(value, str) and value
    }
    out["modules_outside_project"] = sorted(m for m in named if not _module_files(m, roots))
    return out


def _grading_changes(approved: dict[str, Any], spec: EvalSpec) -> list[str]:
    """The grading settings that differ from the approved ones. An approval written before
    they were recorded approved the spec file's own: compared with those, so an override
    is caught there too."""
    recorded = approved.get("grading")
    if not isinstance(recorded, dict):
        from gradetrail.spec import load_spec

        try:
            recorded = grading_of(load_spec(spec.source))
        except GradetrailError:
            return []  # the file no longer loads: its own hash has changed, and says so
    now, was = _leaves(grading_of(spec)), _leaves(recorded)
    differ = [
        key
        for key in sorted(now.keys() | was.keys())
        if canonical_json(now.get(key)) != canonical_json(was.get(key))
    ]
    # another scorer type brings other fields: its type says it, not each field's default
    retyped = [key.removesuffix("type") for key in differ if key.endswith(".type")]
    return [
        f"{key} set to {_short(now.get(key))} (approved: {_short(was.get(key))})"
        for key in differ
        if key.endswith(".type") or not any(key.startswith(p) for p in retyped)
    ]


def _leaves(value: dict[str, Any], prefix: str = "") -> dict[str, Any]:
    """Dotted key -> value of every leaf of nested mappings (a list is one leaf)."""
    out: dict[str, Any] = {}
    for key, inner in value.items():
        if isinstance(inner, dict) and inner:
            out.update(_leaves(inner, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = inner
    return out


def _short(value: Any) -> str:
    text = json.dumps(value, ensure_ascii=False)
    return text if len(text) <= 40 else text[:37] + "..."


def approve(spec: EvalSpec, path: Path | None = None) -> tuple[Path, Approval]:
    """Record ``spec``'s harness as approved: write its approval file atomically (a
    temporary file renamed over it), never through a symlink.

    Returns:
        The approval file written and the approval.

    Raises:
        ApprovalError: the approval file is a symlink or cannot be written; a
            ``harness:`` glob matches nothing.
    """
    target = path or approval_path(spec)
    approval = Approval.of(spec)
    if target.is_symlink():
        raise ApprovalError(f"{target} is a symlink; approve into a plain file")
    tmp = target.with_name(target.name + ".tmp")
    try:
        if tmp.is_symlink() or tmp.exists():
            tmp.unlink()
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW, 0o644)
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(approval.to_json())
        os.replace(tmp, target)
    except OSError as exc:
        raise ApprovalError(f"{target}: cannot write the approval ({exc.strerror})") from None
    return target, approval


def _read(path: Path, spec: EvalSpec) -> dict[str, Any]:
    command = f"gradetrail approve {spec.source}"
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise ApprovalError(
            f"{spec.source}: run.require_approval is set but the harness has no approval "
            f"({path} does not exist); review it, then run {command}"
        ) from None
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise ApprovalError(
            f"{path}: cannot read the approval ({exc}); re-approve with {command}"
        ) from None
    if not isinstance(data, dict) or not isinstance(data.get("files"), dict):
        raise ApprovalError(f"{path} is not an approval file; re-approve with {command}")
    return data


def check_approval(spec: EvalSpec, path: Path | None = None) -> Approval:
    """Refuse a harness that changed since its approval.

    Returns:
        The harness as it is (matching the approval).

    Raises:
        ApprovalError: no approval file, or a file changed, appeared or went since it:
            one line naming the files (up to eight) and the approved harness hash.
    """
    where = path or approval_path(spec)
    approved = _read(where, spec)
    now = Approval.of(spec)
    old: dict[str, str] = approved["files"]
    changes = [
        f"changed {name} (sha256 {old[name][:12]} -> {digest[:12]})"
        for name, digest in now.files.items()
        if name in old and old[name] != digest
    ]
    changes += [f"new {name}" for name in now.files if name not in old]
    changes += [f"gone {name}" for name in old if name not in now.files]
    changes += _grading_changes(approved, spec)
    if changes:
        shown = "; ".join(changes[:_SHOWN])
        if len(changes) > _SHOWN:
            shown += f"; and {len(changes) - _SHOWN} more"
        raise ApprovalError(
            f"{spec.source}: the harness changed since its approval of "
            f"{approved.get('approved_at', '?')} (harness "
            f"{str(approved.get('harness_sha256', '?'))[:12]}): {shown}; review the changes, "
            f"then re-approve with gradetrail approve {spec.source}"
        )
    return now
