"""The viewer's read-only access to a results root: which run directories there are, what
each manifest says (or why it cannot be read), and one row index per run.

Every name that arrives in a URL goes through :meth:`RunStore.resolve`: one path
component, no ``..`` (decoded or not), and after following links still inside the
results root. A run's files are checked one by one (:mod:`gradetrail.view.files`): one
linked outside the root, a FIFO, a directory or an unreadable file is never opened, and
the run is still listed with the reason, showing what does not need that file.
Manifests and rows are read through :mod:`gradetrail.rundir.results`, never parsed here;
nothing under the root is ever written.
"""

from __future__ import annotations

import os
import stat
import threading
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pydantic import ValidationError

from gradetrail.errors import GradetrailError, UsageError
from gradetrail.rundir.agreement import misnamed, run_disagrees
from gradetrail.rundir.layout import KILLED, KILLED_FIX, run_status
from gradetrail.rundir.manifest import Manifest, run_warnings
from gradetrail.rundir.results import (
    MANIFEST_FILE,
    OUTPUT_FILES,
    RESULTS_FILE,
    count_result_lines_from,
    read_manifest,
)
from gradetrail.rundir.summary import Tally
from gradetrail.spec import EvalSpec
from gradetrail.view.files import refusal, refusals
from gradetrail.view.index import RowIndex

__all__ = ["CHECK_BYTES", "Forbidden", "NotFound", "RunInfo", "RunStore", "dir_stamp", "stamp_of"]

#: a results file up to this size is checked against its manifest before its page is
#: sent; a larger one in a background thread (about 1.5 s for 100,000 rows of 1 KB), its
#: score shown once the check is done
CHECK_BYTES = 8 << 20


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
        warnings: one line each: files not read, errors by kind, truncations,
            served-model mismatch, judge errors, a dirty git tree, missing or cut-short
            results.
        refused: the run's files the viewer does not read, name -> why (one line).
        disagrees: a complete run's ``results.jsonl`` disagrees with its manifest: what
            disagrees (:func:`~gradetrail.rundir.agreement.run_disagrees`); the pages
            show this instead of its score, which its rows no longer give.
        checked: its rows have been held against its manifest (or need not be); False
            while a large file is checked in the background, when no score is shown.
    """

    name: str
    path: Path
    manifest: Manifest | None
    problem: str | None
    status: str
    live: bool = False
    warnings: list[str] = field(default_factory=list)
    refused: dict[str, str] = field(default_factory=dict)
    disagrees: str | None = None
    checked: bool = True

    @property
    def score_shown(self) -> bool:
        """The manifest's score may be shown as the run's: its rows agree with it (or it
        is not complete: then its figures are labelled partial where shown)."""
        return self.checked and self.disagrees is None

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
        score = m.score.mean if m.score is not None and self.score_shown else None
        return {
            "date": m.started_at,
            "mean": score,
            "samples": m.n_samples,
            "cost": m.paid_usd,
            "tokens": m.input_tokens + m.output_tokens,
            "wall": m.wall_time_s,
        }.get(key)


def _warnings(raw: dict[str, Any], status: str, path: Path, refused: dict[str, str]) -> list[str]:
    """The manifest's warnings (:func:`gradetrail.rundir.manifest.run_warnings`), with what only
    the viewer can see: a directory named for another run's identity
    (:func:`~gradetrail.rundir.agreement.misnamed`), a run whose process is gone, a
    missing results file."""
    out = [w for w in run_warnings(raw) if not w.startswith("run is ")]
    wrong_name = misnamed(path, raw)
    if wrong_name is not None:
        out.insert(0, wrong_name)
    if status == KILLED:
        out.insert(0, f"the run's process is gone without ending it: {KILLED_FIX}")
    elif status not in ("complete", "running"):
        out.insert(0, f"run is {status}: not every row is there")
    if RESULTS_FILE not in refused and not os.path.lexists(path / RESULTS_FILE):
        out.append(f"no {RESULTS_FILE}")
    return out


def stamp_of(path: Path) -> tuple[Any, ...]:
    """(inode, size, mtime) of a run directory's results file and manifest (None for one
    that cannot be stat'ed): a cached figure of the run holds while these do."""
    out = []
    for name in (RESULTS_FILE, MANIFEST_FILE):
        try:
            st = (path / name).stat()
            out.append((st.st_ino, st.st_size, st.st_mtime_ns))
        except OSError:
            out.append(None)
    return tuple(out)


def dir_stamp(path: Path) -> tuple[Any, ...]:
    """What an ended run's :class:`RunInfo` is kept by: the run directory's own stat
    (its mtime changes when a name in it is created, removed or renamed; its ctime when
    its permissions do) and :func:`_file_stamp` of every file the viewer reads or refuses
    (:data:`~gradetrail.rundir.results.OUTPUT_FILES`). Whether a file is refused
    (:func:`gradetrail.view.files.refusal`) depends on its type, its permissions and, for
    a link, its target's: each changes one of these, so a file made unreadable (chmod, a
    link's target replaced by a FIFO) or readable again is noticed at the next load, not
    only when the directory listing, results file or manifest next change."""
    try:
        st = path.stat()
        own: tuple[Any, ...] | None = (st.st_ino, st.st_mode, st.st_mtime_ns, st.st_ctime_ns)
    except OSError:
        own = None
    return (own, *(_file_stamp(path / name) for name in OUTPUT_FILES))


def _file_stamp(path: Path) -> tuple[Any, ...] | None:
    """The ``lstat`` of ``path`` (type and mode, inode, size, mtime, ctime), and for a
    link its target's ``stat`` too; None when it does not exist."""
    try:
        st = path.lstat()
    except OSError:
        return None
    own = (st.st_mode, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    if not stat.S_ISLNK(st.st_mode):
        return own
    try:
        to = path.stat()
    except OSError as exc:
        return (own, exc.errno)
    return (own, (to.st_mode, to.st_ino, to.st_size, to.st_mtime_ns, to.st_ctime_ns))


def _cut_short(manifest: Manifest, written: int | None) -> list[str]:
    """A line when an ended run's ``results.jsonl`` holds fewer complete rows than its
    manifest counts (a copy cut short, a disk filled, a torn last line)."""
    expected = sum(manifest.counts.values())
    if manifest.status == "running" or written is None or written >= expected:
        return []
    shown = (  # a complete run's score is withheld: its rows disagree with its manifest
        "the table shows the rows there"
        if manifest.status == "complete"
        else "the figures are the manifest's, the table shows the rows there"
    )
    return [
        f"{RESULTS_FILE} holds {written:,} of the {expected:,} rows the manifest counts "
        f"(cut short?): {shown}"
    ]


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
        #: results file -> (its stamp when counted, complete lines, offset past the last)
        self._lines: dict[Path, tuple[tuple[int, ...], int, int]] = {}
        self._warming: set[Path] = set()
        self._counting: set[Path] = set()
        self._agreement: dict[Path, tuple[tuple[Any, ...], str | None]] = {}
        self._infos: dict[Path, tuple[tuple[Any, ...], RunInfo]] = {}
        self._checking: set[Path] = set()
        self._lock = threading.Lock()

    def _inside(self, path: Path) -> bool:
        try:
            return path.resolve().is_relative_to(self.root)
        except (OSError, RuntimeError):  # a link loop
            return False

    def resolve(self, name: str) -> Path:
        """The run directory named ``name``.

        Raises:
            Forbidden: ``name`` is not one plain path component, or the directory
                resolves (through links) outside the root.
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
            raise Forbidden(f"{name} links outside the results root; not read")
        try:
            found = path.is_dir()
        except OSError:  # a name longer than the file system takes (ENAMETOOLONG)
            found = False
        if not found:
            raise NotFound(
                f"no run directory {name!r} under {self.root} (it may have been deleted)"
            )
        return path

    def names(self) -> list[str]:
        """Names of the directories directly under the root, and of the links in it that
        point outside it (listed as refused, never followed); hidden names left out."""
        try:
            children = list(self.root.iterdir())
        except OSError:
            return []
        return sorted(
            p.name
            for p in children
            if not p.name.startswith(".") and (not self._inside(p) or p.is_dir())
        )

    def runs(self) -> list[RunInfo]:
        """Every run directory under the root, newest first: one whose manifest cannot be
        read, or a link out of the root, is listed with the reason (``unreadable``); a
        directory that vanishes while being listed is left out."""
        found = []
        for name in self.names():
            try:
                found.append(self.info(name))
            except Forbidden as exc:
                found.append(RunInfo(name, self.root / name, None, str(exc), "unreadable"))
            except NotFound:
                continue
        found.sort(key=lambda r: r.manifest.started_at if r.manifest else "", reverse=True)
        return found

    def info(self, name: str) -> RunInfo:
        """One run directory's manifest, status and warnings. An ended run's are kept
        while its directory (the names in it) and every file it writes are unchanged
        (:func:`dir_stamp`: contents, permissions, links' targets), so a runs page of
        thousands of runs reads no manifest again.

        Raises:
            Forbidden, NotFound: see :meth:`resolve`.
        """
        path = self.resolve(name)
        stamp = dir_stamp(path)
        with self._lock:
            kept = self._infos.get(path)
        if kept is not None and kept[0] == stamp:
            return kept[1]
        info = self._read_info(name, path)
        ended = info.manifest is not None and info.manifest.status != "running"
        if ended and info.checked:
            with self._lock:
                self._infos[path] = (stamp, info)
        return info

    def _read_info(self, name: str, path: Path) -> RunInfo:
        refused = refusals(self.root, path)
        others = [why for file, why in refused.items() if file != MANIFEST_FILE]

        def unreadable(problem: str) -> RunInfo:
            return RunInfo(name, path, None, problem, "unreadable", False, others, refused)

        if MANIFEST_FILE in refused:
            return unreadable(refused[MANIFEST_FILE])
        try:
            raw = read_manifest(path, as_written=True)  # its figures, if it was killed
        except UsageError as exc:
            if not path.is_dir():
                raise NotFound(f"run directory {name!r} was deleted") from None
            there = os.path.lexists(path / MANIFEST_FILE)
            return unreadable(str(exc) if there else f"no {MANIFEST_FILE}")
        try:
            manifest = Manifest.model_validate(raw)
        except ValidationError as exc:
            first = exc.errors()[0]
            where = ".".join(str(p) for p in first["loc"]) or "(top level)"
            return unreadable(
                f"{MANIFEST_FILE}: {where}: {first['msg']} ({exc.error_count()} problems)"
            )
        status, live = manifest.status, False
        if status == "running":
            status = run_status(path, status)
            live = status != KILLED
        else:
            self._stop_counting(path)
        warnings = others + _warnings(raw, status, path, refused)
        checked, disagrees = True, None
        if manifest.status == "complete" and RESULTS_FILE not in refused:
            checked, disagrees = self.agreement(path, raw)
        if manifest.status != "running":
            warnings += _cut_short(manifest, self.rows_written(path))
        info = RunInfo(name, path, manifest, None, status, live, warnings, refused)
        info.disagrees, info.checked = disagrees, checked
        return info

    def agreement(self, path: Path, manifest: dict[str, Any]) -> tuple[bool, str | None]:
        """``(checked, disagrees)``: whether a complete run's ``results.jsonl`` has been
        held against its manifest (``manifest``, as written), and what disagrees
        (:func:`~gradetrail.rundir.agreement.run_disagrees`) or None. Kept until either
        file changes. A results file over :data:`CHECK_BYTES` is checked in a background
        thread (once at a time): ``(False, None)`` until it is done."""
        stamp = stamp_of(path)
        with self._lock:
            known = self._agreement.get(path)
        if known is not None and known[0] == stamp:
            return True, known[1]
        size = stamp[0][1] if stamp[0] is not None else 0
        if size <= CHECK_BYTES:
            return True, self._check(path, manifest, stamp)
        with self._lock:
            if path in self._checking:
                return False, None
            self._checking.add(path)

        def check() -> None:
            try:
                self._check(path, manifest, stamp)
            finally:
                with self._lock:
                    self._checking.discard(path)

        threading.Thread(target=check, name=f"check {path.name}", daemon=True).start()
        return False, None

    def _check(self, path: Path, manifest: dict[str, Any], stamp: tuple[Any, ...]) -> str | None:
        why = run_disagrees(path, manifest)
        with self._lock:
            self._agreement[path] = (stamp, why)
        return why

    def rows_written(self, path: Path) -> int | None:
        """Complete lines in the run's ``results.jsonl``, or None when there is none or it
        is not read (see :mod:`gradetrail.view.files`). Counted without parsing, and kept:
        a file that only grew since (a live run appending rows: the same device and inode,
        no shorter) has only its new bytes counted, so a progress poll of a 100,000-row
        run reads what was appended since the last one; any other change counts it again."""
        results = path / RESULTS_FILE
        if refusal(self.root, results) is not None:
            return None
        try:
            st = results.stat()
        except OSError:
            return None
        stamp = (st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns)
        with self._lock:
            known = self._lines.get(path)
        if known is not None and known[0] == stamp:
            return known[1]
        count, start = 0, 0
        if known is not None and known[0][:2] == stamp[:2] and st.st_size >= known[0][2]:
            count, start = known[1], known[2]  # appended to: count from the last line end
        try:
            more, end = count_result_lines_from(path, start)
        except (UsageError, OSError):
            return None
        with self._lock:
            self._lines[path] = (stamp, count + more, end)
        return count + more

    def live_figures(self, info: RunInfo, wait: bool = True) -> Manifest | None:
        """For a run whose manifest is still the one written at its start (status
        ``running``: live, or killed), that manifest with every figure the rows decide
        (:meth:`Tally.manifest_figures`) computed from the rows written so far, through
        the run's row index (counting only the rows appended since the last call).

        None for an ended run, when the spec in its manifest or its results file cannot
        be read (then there are no figures beyond the start), or, with ``wait`` false,
        while the rows are first counted in a background thread (:meth:`counting`).
        """
        m = info.manifest
        if m is None or m.status != "running":
            return None
        try:
            spec = EvalSpec.model_validate(m.spec)
        except ValidationError:
            return None

        def tally_of() -> Tally:
            return Tally.for_spec(spec)

        with self._lock:
            kept = self._indexes.get(info.path)
        if not wait and (kept is None or kept.tally is None or not kept.built):
            with self._lock:
                self._counting.add(info.path)
            self.warm(info.path, tally_of)
            return None
        with self._lock:
            self._counting.discard(info.path)
        try:
            figures = self.index(info.path, tally_of).figures(spec)
        except (UsageError, OSError):
            return None
        return m.model_copy(update=figures) if figures is not None else None

    def counting(self, path: Path) -> bool:
        """Whether :meth:`live_figures` left the run's rows to be counted in the
        background, and has not given their figures since."""
        with self._lock:
            return path in self._counting

    def _stop_counting(self, path: Path) -> None:
        """An ended run's index stops counting rows at its next rebuild (the final
        rewrite of results.jsonl), its manifest holding the final figures."""
        with self._lock:
            index = self._indexes.get(path)
        if index is not None:
            index.tally_of = None

    def fresh_index(self, path: Path) -> RowIndex | None:
        """The run's index if it is built and up to date, else None (see :meth:`warm`)."""
        with self._lock:
            index = self._indexes.get(path)
        return index if index is not None and index.fresh() else None

    def warm(self, path: Path, tally_of: Callable[[], Tally] | None = None) -> None:
        """Build or refresh the run's index in a background thread (once at a time), so
        the next filtered or sorted page finds it ready; ``tally_of`` as for
        :meth:`index`."""
        with self._lock:
            if path in self._warming:
                return
            self._warming.add(path)

        def build() -> None:
            try:
                self.index(path, tally_of)
            except (GradetrailError, OSError):
                pass  # the page that needs it will say what is wrong
            finally:
                with self._lock:
                    self._warming.discard(path)

        threading.Thread(target=build, name=f"index {path.name}", daemon=True).start()

    def index(self, path: Path, tally_of: Callable[[], Tally] | None = None) -> RowIndex:
        """The run's row index, brought up to date (one index per run, kept); with
        ``tally_of``, one that counts its rows too (see :class:`RowIndex`), rebuilt so
        if the kept one does not.

        Raises:
            UsageError: the run has no results file (any more), or one the viewer does
                not read (:func:`gradetrail.view.files.refusal`: the reason).
        """
        why = refusal(self.root, path / RESULTS_FILE)
        if why is not None:
            raise UsageError(why)
        with self._lock:
            index = self._indexes.get(path)
            rebuild = tally_of is not None and index is not None and index.tally is None
            if index is None or (rebuild and index.tally_of is None):
                index = self._indexes[path] = RowIndex(path, tally_of=tally_of)
            elif tally_of is not None:
                index.tally_of = tally_of
        return index.refresh()
