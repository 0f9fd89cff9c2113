"""Loading a spec file: safe YAML, ``--set`` overrides, validation into :class:`EvalSpec`."""

from __future__ import annotations

import copy
import errno
import os
import stat
from pathlib import Path
from typing import Any

import yaml
from pydantic import ValidationError

from gradetrail.errors import SpecError
from gradetrail.spec.eval import EvalSpec
from gradetrail.spec.field_errors import format_errors


def load_spec(
    path: str | Path, overrides: list[str] | None = None, *, overrides_from: str = "--set"
) -> EvalSpec:
    """Load, override and validate a spec file.

    Args:
        path: the YAML file.
        overrides: ``dotted.key=value`` strings; each value is parsed as YAML
            (so ``run.concurrency=8`` is an int and ``model.params.stop=["A:"]`` a list).
        overrides_from: what an error in an override's value calls it (``--set
            dataset.pth: unknown key``; a sweep's cells say ``axis``).

    Returns:
        The validated, frozen :class:`EvalSpec`, its relative paths anchored at the
        spec file's directory.

    Raises:
        SpecError: unreadable file, invalid YAML, a bad override or a field error; the
            message is one line naming the file, the field and the fix. Also an override
            turning off the file's ``run.require_approval: true``.
    """
    path = Path(path)
    if (refusal := not_this_kind(path, None, "spec")) is not None:
        raise SpecError(refusal)
    try:
        text = _read_spec(path).decode("utf-8")
    except FileNotFoundError:
        raise SpecError(f"{path}: spec file not found") from None
    except UnicodeDecodeError:
        raise SpecError(f"{path}: not UTF-8 text; save the spec as UTF-8 YAML") from None
    except OSError as exc:
        raise SpecError(f"{path}: cannot read spec file ({exc.strerror})") from None
    try:
        raw = yaml.load(text, Loader=_SpecLoader)  # noqa: S506 - a SafeLoader subclass
    except RecursionError:
        raise SpecError(f"{path}: YAML nested too deeply to read; flatten the spec") from None
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" line {mark.line + 1}" if mark else ""
        problem = getattr(exc, "problem", None) or "invalid YAML"
        raise SpecError(f"{path}:{where}: {problem}; fix the YAML syntax") from None
    if (refusal := not_this_kind(path, raw, "spec")) is not None:
        raise SpecError(refusal)
    if not isinstance(raw, dict):
        raise SpecError(f"{path}: a spec must be a YAML mapping with name, dataset, prompt, ...")
    run = raw.get("run")
    required = isinstance(run, dict) and run.get("require_approval") is True
    try:
        _check_expansion(raw, str(path))
        raw = apply_overrides(raw, overrides or [], source=str(path))
        if overrides:
            _check_expansion(raw, f"{path}: --set")
        set_keys = [item.partition("=")[0].strip() for item in overrides or []]
        spec = parse_spec(raw, str(path), set_keys, overrides_from)
    except RecursionError:
        raise SpecError(f"{path}: a value is nested too deeply; flatten the spec") from None
    if required and not spec.run.require_approval:
        raise SpecError(
            f"{path}: run.require_approval is true in the spec file and {overrides_from} cannot "
            "turn it off (an unattended loop could run an unreviewed harness so); edit the "
            "spec file, which its approval covers"
        )
    spec._base_dir = path.resolve().parent
    return spec


#: suffixes of the files a spec's ``dataset.path`` names, never a spec or sweep themselves
DATASET_SUFFIXES = (".jsonl", ".ndjson", ".csv", ".tsv", ".parquet", ".gz", ".zst", ".bz2")
#: top-level keys only a sweep file has, and keys only an eval spec has
_SWEEP_KEYS = frozenset({"spec", "axes"})
_EVAL_KEYS = frozenset({"dataset", "prompt", "model", "scorer", "scorers", "target"})


def not_this_kind(path: Path, raw: Any, expected: str) -> str | None:
    """The one-line refusal for a file of another kind than the command reads, or None.

    Args:
        path: the file named on the command line.
        raw: its parsed YAML (None before it is read: only the suffix is checked then).
        expected: ``"spec"`` (``gradetrail run``) or ``"sweep"`` (``gradetrail sweep``).

    A dataset (``.jsonl``, ``.csv``, ...) is named in a spec's ``dataset.path``; a sweep
    file (``spec:`` and ``axes:``) is run by ``gradetrail sweep``; an eval spec by
    ``gradetrail run``. Without this a dataset read as YAML fails on its second line, and
    a file of the other kind gives a line per key, none saying what the file is."""
    if raw is None:
        if path.name.lower().endswith(DATASET_SUFFIXES):
            return (
                f"{path}: a dataset file, not a {expected} file; name it in a spec's "
                f"dataset.path and run the spec (docs/spec.md)"
            )
        return None
    if not isinstance(raw, dict):
        return None
    keys = set(map(str, raw))
    if expected == "spec" and keys >= _SWEEP_KEYS and not keys & _EVAL_KEYS:
        return (
            f"{path}: a sweep file (it has spec and axes), not an eval spec; "
            f"run it with gradetrail sweep {path}"
        )
    if expected == "sweep" and not keys & _SWEEP_KEYS and keys & _EVAL_KEYS:
        return (
            f"{path}: an eval spec, not a sweep file (a sweep names a spec and its axes); "
            f"run it with gradetrail run {path}, or gradetrail run {path} --models A,B "
            f"to compare models (docs/sweeps.md)"
        )
    return None


#: the largest spec file read, bytes (a spec is a page of YAML; its data lives elsewhere)
MAX_SPEC_BYTES = 10 * 1024 * 1024


def _read_spec(path: Path) -> bytes:
    """The bytes of the spec file at ``path``: a regular file of at most
    :data:`MAX_SPEC_BYTES`, opened without waiting (a FIFO or device never hangs or
    floods the read).

    Raises:
        FileNotFoundError: no file.
        SpecError: not a regular file, or too large.
        OSError: it cannot be read.
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | getattr(os, "O_CLOEXEC", 0))
    with os.fdopen(fd, "rb") as f:
        st = os.fstat(f.fileno())
        if stat.S_ISDIR(st.st_mode):
            raise IsADirectoryError(errno.EISDIR, "Is a directory")
        if not stat.S_ISREG(st.st_mode):
            raise SpecError(f"{path}: not a regular file (a pipe or device); give a YAML file")
        data = f.read(MAX_SPEC_BYTES + 1)
    if len(data) > MAX_SPEC_BYTES:
        raise SpecError(
            f"{path}: larger than {MAX_SPEC_BYTES // (1024 * 1024)} MB; a spec is YAML "
            "settings, its samples belong in dataset.path"
        )
    return data


#: values a spec may hold once YAML aliases are expanded (as hashing and JSON see it)
MAX_EXPANDED_VALUES = 1_000_000


def _check_expansion(raw: dict[str, Any], where: str) -> None:
    """Refuse a self-referencing anchor or aliases that expand past
    :data:`MAX_EXPANDED_VALUES`. Raises SpecError."""
    if _has_cycle(raw):
        raise SpecError(f"{where}: a YAML anchor refers to itself; remove the cycle")
    if _expanded_size(raw) > MAX_EXPANDED_VALUES:
        raise SpecError(f"{where}: YAML aliases expand the spec past a million values")


def parse_spec(
    raw: dict[str, Any],
    source: str = "<spec>",
    set_keys: list[str] | None = None,
    set_label: str = "--set",
) -> EvalSpec:
    """Validate a raw mapping as an :class:`EvalSpec`.

    Args:
        raw: the spec mapping, overrides applied.
        source: the spec file, named at the start of each error line.
        set_keys: the dotted keys ``--set`` gave; an error at or under one names it as
            ``--set dataset.pth`` (``set_label``), since the spec file does not hold it.

    Raises:
        SpecError: one line a problem (all of them, newline-separated).
    """
    try:
        spec = EvalSpec.model_validate(raw)
    except ValidationError as exc:
        lines = format_errors(source, exc.errors(), set_keys=set_keys or (), set_label=set_label)
        error = SpecError("\n".join(lines))
        error.problems = lines  # printed one line each, their own line breaks folded
        raise error from None
    spec._source = source
    return spec


def apply_overrides(raw: dict[str, Any], overrides: list[str], source: str) -> dict[str, Any]:
    """Apply ``dotted.key=value`` overrides to a raw spec mapping (a new dict is returned).

    Each value is read with the spec file's own YAML loader, so the same limits hold
    (duplicate keys, at most 100 aliases; :func:`load_spec` checks the expansion after
    the overrides too); a value that is not valid YAML is taken as text.

    Raises:
        SpecError: an override without ``=``, one that descends into a non-mapping, or a
            value over the spec file's YAML limits.
    """
    out = copy.deepcopy(raw)  # keeps shared YAML aliases shared: no exponential copy
    for item in overrides:
        key, sep, value_text = item.partition("=")
        key = key.strip()
        if not sep or not key or "" in key.split("."):
            raise SpecError(f"--set {item!r}: expected dotted.key=value, e.g. model.name=gpt-4o")
        try:
            value = yaml.load(value_text, Loader=_SpecLoader) if value_text.strip() else ""  # noqa: S506
        except RecursionError:
            raise SpecError(f"{source}: --set {key}: value nested too deeply") from None
        except _OverLimit as exc:  # over a limit of the spec file's: never taken as text
            raise SpecError(f"{source}: --set {key}: {exc.problem}") from None
        except yaml.YAMLError:
            value = value_text
        node = out
        parts = key.split(".")
        for depth, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                where = ".".join(parts[: depth + 1])
                raise SpecError(f"{source}: --set {key}: {where} is not a mapping")
            node = child
        node[parts[-1]] = value
    return out


def _has_cycle(value: Any) -> bool:
    """True when a container holds itself (a YAML anchor used inside its own node).
    Depth-first with a finished set, so shared (aliased) nodes are walked once."""
    finished: set[int] = set()
    ancestors: set[int] = set()

    def visit(node: Any) -> bool:
        if not isinstance(node, dict | list) or id(node) in finished:
            return False
        if id(node) in ancestors:
            return True
        ancestors.add(id(node))
        children = node.values() if isinstance(node, dict) else node
        if any(visit(child) for child in children):
            return True
        ancestors.discard(id(node))
        finished.add(id(node))
        return False

    return visit(value)


def _expanded_size(value: Any) -> int:
    """Values in ``value`` once aliases are expanded (as hashing and JSON see it), counted
    with one visit per shared node. Call only on an acyclic value."""
    sizes: dict[int, int] = {}

    def size(node: Any) -> int:
        if not isinstance(node, dict | list):
            return 1
        if id(node) not in sizes:
            children = node.values() if isinstance(node, dict) else node
            sizes[id(node)] = 1 + sum(size(child) for child in children)
        return sizes[id(node)]

    return size(value)


class _OverLimit(yaml.constructor.ConstructorError):
    """A YAML document over one of :class:`_SpecLoader`'s limits."""


class _SpecLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing what makes a spec ambiguous or explosive: a key given
    twice in one mapping (YAML keeps the last silently), and more than 100 aliases (a
    "billion laughs" document expands exponentially once copied or hashed)."""

    max_aliases = 100

    def compose_node(self, parent: Any, index: Any) -> Any:
        if self.check_event(yaml.AliasEvent):
            self._aliases = getattr(self, "_aliases", 0) + 1
            if self._aliases > self.max_aliases:
                mark = self.peek_event().start_mark
                raise _OverLimit(None, None, f"more than {self.max_aliases} YAML aliases", mark)
        return super().compose_node(parent, index)

    def construct_mapping(self, node: Any, deep: bool = False) -> Any:
        seen: set[Any] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if not isinstance(key, str | int | float | bool):
                continue  # an unhashable key: YAML's own constructor refuses it
            if key in seen:
                raise _OverLimit(
                    None, None, f"key {key!r} appears twice in one mapping", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)
