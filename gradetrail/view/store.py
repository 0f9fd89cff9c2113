"""The viewer's read-only access to a results root: which run directories there are, what
each manifest says (or why it cannot be read), and one row index per run.

Every name that arrives in a URL goes through :meth:`RunStore.resolve`: one path
component, no ``..`` (decoded or not), and after following links still inside the
results root, files included. Manifests and rows are read through
:mod:`gradetrail.results`, never parsed here; nothing under the root is ever written.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gradetrail.errors import GradetrailError, UsageError
from gradetrail.manifest import Manifest, run_warnings
from gradetrail.results import MANIFEST_FILE, OUTPUT_FILES, RESULTS_FILE, read_manifest
from gradetrail.rundir import writer_pid
from gradetrail.view.index import RowIndex

__all__ = ["Forbidden", "NotFound", "RunInfo", "RunStore"]


class NotFound(GradetrailError):
    """No run directory of that name under the results root (or no longer)."""


class Forbidden(GradetrailError):
    """The name points outside the results root."""


@dataclass
class RunInfo:
    """One run directory as the pages show it.

    Attributes:
        name: the directory's name under the root (its URL key).
        path: the directory.
        manifest: the validated manifest, or None when it cannot be read (see ``problem``).
        problem: why the manifest cannot be read, one line; else None.
        status: the manifest's status, ``killed`` for a ``running`` run whose process is
            gone, or ``unreadable``.
        live: a process is writing the run now.
        warnings: one line each: errors by kind, truncations, served-model mismatch,
            judge errors, a dirty git tree, missing results.
    """

    name: str
    path: Path
    manifest: Manifest | None
    problem: str | None
    status: str
    live: bool = False
    warnings: list[str] = field(default_factory=list)

    @property
    def rows_expected(self) -> int | None:
        """Rows a complete run has (samples x epochs), when known."""
        m = self.manifest
        return m.n_samples * m.epochs if m is not None else None

    @property
    def model(self) -> str:
        """``provider:requested model``, or ``?``."""
        m = self.manifest
        return f"{m.provider}:{m.requested_model}" if m is not None else "?"

    @property
    def date(self) -> str:
        """The start time, ``YYYY-MM-DD HH:MM`` (UTC), or empty."""
        m = self.manifest
        return m.started_at[:16].replace("T", " ") if m is not None else ""

    def sort_value(self, key: str) -> Any:
        """The value the runs table sorts on for column ``key``."""
        m = self.manifest
        if key == "name":
            return self.name
        if key == "model":
            return self.model
        if key == "status":
            return self.status
        if m is None:
            return None
        score = m.score.mean if m.score is not None else None
        return {
            "date": m.started_at,
            "mean": score,
            "samples": m.n_samples,
            "cost": m.cost_usd,
            "tokens": m.input_tokens + m.output_tokens,
            "wall": m.wall_time_s,
        }.get(key)


def _warnings(raw: dict[str, Any], status: str, path: Path) -> list[str]:
    """The manifest's warnings (:func:`gradetrail.manifest.run_warnings`), with what only
    the viewer can see: a run whose process is gone, a missing results file."""
    out = [w for w in run_warnings(raw) if not w.startswith("run is ")]
    if status == "killed":
        out.insert(0, "the run's process is gone without ending it: run the same command again")
    elif status not in ("complete", "running"):
        out.insert(0, f"run is {status}: not every row is there")
    if not (path / RESULTS_FILE).exists():
        out.append(f"no {RESULTS_FILE}")
    return out


class RunStore:
    """Run directories directly under ``root``, read-only.

    Args:
        root: the results root.

    Raises:
        UsageError: ``root`` is not a directory.
    """

    def __init__(self, root: str | Path) -> None:
        path = Path(root)
        if not path.is_dir():
            raise UsageError(
                f"{root}: no such results directory; pass the directory "
                "holding your run directories (default: results)"
            )
        self.root = path.resolve()
        self._indexes: dict[Path, RowIndex] = {}
        self._warming: set[Path] = set()
        self._lock = threading.Lock()

    def _inside(self, path: Path) -> bool:
        return path.resolve().is_relative_to(self.root)

    def resolve(self, name: str) -> Path:
        """The run directory named ``name``.

        Raises:
            Forbidden: ``name`` is not one plain path component, or the directory or one
                of its files resolves (through links) outside the root.
            NotFound: there is no such run directory (any more).
        """
        if (
            not name
            or name in (".", "..")
            or any(ch in name for ch in "/\\\x00")
            or not name.isprintable()
        ):
            raise Forbidden(f"{name!r} is not a run directory name")
        path = self.root / name
        if not self._inside(path):
            raise Forbidden(f"{name!r} points outside the results root")
        if not path.is_dir():
            raise NotFound(
                f"no run directory {name!r} under {self.root} (it may have been deleted)"
            )
        for output in OUTPUT_FILES:
            if (path / output).is_symlink() and not self._inside(path / output):
                raise Forbidden(f"{name}/{output} points outside the results root")
        return path

    def names(self) -> list[str]:
        """Names of the directories directly under the root (links out of it left out)."""
        try:
            children = list(self.root.iterdir())
        except OSError:
            return []
        return sorted(
            p.name
            for p in children
            if p.is_dir() and self._inside(p) and not p.name.startswith(".")
        )

    def runs(self) -> list[RunInfo]:
        """Every run directory under the root (a readable manifest or not), newest first;
        a directory that vanishes while being listed is left out."""
        found = []
        for name in self.names():
            try:
                found.append(self.info(name))
            except (NotFound, Forbidden):
                continue
        found.sort(key=lambda r: r.manifest.started_at if r.manifest else "", reverse=True)
        return found

    def info(self, name: str) -> RunInfo:
        """One run directory's manifest, status and warnings.

        Raises:
            Forbidden, NotFound: see :meth:`resolve`.
        """
        path = self.resolve(name)
        try:
            raw = read_manifest(path)
        except UsageError as exc:
            if not path.is_dir():
                raise NotFound(f"run directory {name!r} was deleted") from None
            problem = str(exc) if (path / MANIFEST_FILE).exists() else f"no {MANIFEST_FILE}"
            return RunInfo(name, path, None, problem, "unreadable")
        try:
            manifest = Manifest.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            problem = f"{MANIFEST_FILE}: {where}: {first['msg']} ({exc.error_count()} problems)"
            return RunInfo(name, path, None, problem, "unreadable")
        status, live = manifest.status, False
        if status == "running":
            live = writer_pid(path) is not None
            status = "running" if live else "killed"
        return RunInfo(name, path, manifest, None, status, live, _warnings(raw, status, path))

    def fresh_index(self, path: Path) -> RowIndex | None:
        """The run's index if it is built and up to date, else None (see :meth:`warm`)."""
        with self._lock:
            index = self._indexes.get(path)
        return index if index is not None and index.fresh() else None

    def warm(self, path: Path) -> None:
        """Build or refresh the run's index in a background thread (once at a time), so
        the next filtered or sorted page finds it ready."""
        with self._lock:
            if path in self._warming:
                return
            self._warming.add(path)

        def build() -> None:
            try:
                self.index(path)
            except (GradetrailError, OSError):
                pass  # the page that needs it will say what is wrong
            finally:
                with self._lock:
                    self._warming.discard(path)

        threading.Thread(target=build, name=f"index {path.name}", daemon=True).start()

    def index(self, path: Path) -> RowIndex:
        """The run's row index, brought up to date (one index per run, kept).

        Raises:
            UsageError: the run has no results file (any more).
        """
        with self._lock:
            index = self._indexes.get(path)
            if index is None:
                index = self._indexes[path] = RowIndex(path)
        return index.refresh()
