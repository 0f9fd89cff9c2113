"""Looks at a held-out split: the runs made on it, counted, and a limit on them.

A loop tunes on one split and reports on another (``dataset.split.held_out``). Each run on
the held-out split spends some of its independence: a loop that runs ten candidates there
and keeps the best has tuned on it, and the best one's interval no longer covers its true
score at the stated rate. So every run on the held-out split of an identity hash not seen
there before is a *look*, recorded (before any call) as one JSON line in a ledger,
``<split file stem>.looks.jsonl`` beside the split file (a hash split's:
``<spec stem>.looks.jsonl`` beside the spec): ``{"identity_hash", "at", "model"}``. A run
of an identity already recorded (a re-run, a resumed run) is the same look. With
``dataset.split.max_looks``, a look past the limit is refused before any call. Reading the
ledger, checking the limit and appending the look happen under an exclusive ``flock`` on
the ledger, so two loops running on the held-out split at once cannot both take its last
look: the second waits for the first's append, then reads it and is refused.

Like the approval (:mod:`gradetrail.engine.approval`), this is a change detector, not a
security boundary: whatever can write the ledger can empty it.
"""

from __future__ import annotations

import contextlib
import errno
import json
import os
import stat
from collections.abc import Iterable, Iterator
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from gradetrail.errors import SpecError
from gradetrail.spec import EvalSpec

__all__ = [
    "LOOKS_SUFFIX",
    "MIN_QUOTE",
    "check_no_held_out_quotes",
    "ledger_path",
    "read_looks",
    "take_look",
    "would_look",
]

LOOKS_SUFFIX = ".looks.jsonl"
#: consecutive words of a held-out row's text that, found in the prompt in the same order,
#: count as quoting it (fewer words, as a number or a yes, occur in prompts by chance)
MIN_QUOTE = 8


def ledger_path(spec: EvalSpec) -> Path | None:
    """The looks ledger of ``spec``'s held-out split, or None when ``spec`` runs on no
    held-out split (no split, no ``held_out``, or another split)."""
    split = spec.dataset.split
    if split is None or split.held_out is None or split.name != split.held_out:
        return None
    base = spec.base_dir or Path(".")
    if split.file is not None:
        path = Path(split.file).expanduser()
        path = path if path.is_absolute() else base / path
        return path.with_name(path.stem + LOOKS_SUFFIX)
    return base / (Path(spec.source).stem + LOOKS_SUFFIX)


def read_looks(path: Path) -> list[str]:
    """The identity hashes the ledger at ``path`` records, each once, in order (none when
    there is no ledger). A line that is not a JSON object with an ``identity_hash`` (a
    torn last line) is skipped.

    Raises:
        SpecError: the ledger exists but cannot be read.
    """
    try:
        text = path.read_text(encoding="utf-8", errors="replace")
    except FileNotFoundError:
        return []
    except OSError as exc:
        raise SpecError(f"{path}: cannot read the held-out looks ({exc.strerror})") from None
    return _parse(text)


def _parse(text: str) -> list[str]:
    """The identity hashes of a ledger's text, each once, in order; lines that are not a
    JSON object with an ``identity_hash`` are skipped."""
    seen: dict[str, None] = {}
    for line in text.splitlines():
        try:
            record = json.loads(line)
        except ValueError:
            continue
        if isinstance(record, dict) and isinstance(record.get("identity_hash"), str):
            seen.setdefault(record["identity_hash"], None)
    return list(seen)


def would_look(spec: EvalSpec, identity_hashes: Iterable[str]) -> tuple[list[str], list[str]]:
    """(the looks recorded, the identities of ``identity_hashes`` that would be new looks)
    for ``spec``'s held-out split; ([], []) when it runs on none."""
    path = ledger_path(spec)
    if path is None:
        return [], []
    looks = read_looks(path)
    new = [h for h in dict.fromkeys(identity_hashes) if h not in looks]
    return looks, new


def refusal(spec: EvalSpec, looks: list[str], new: int) -> str | None:
    """The line refusing ``new`` more looks at ``spec``'s held-out split, or None when
    they fit under ``dataset.split.max_looks``."""
    split = spec.dataset.split
    if split is None or split.max_looks is None or len(looks) + new <= split.max_looks:
        return None
    shown = ", ".join(h[:12] for h in looks[:4]) + (" ..." if len(looks) > 4 else "")
    return (
        f"{spec.source}: dataset.split: split {split.held_out!r} is held out and "
        f"{len(looks)} of its {split.max_looks} looks are taken (runs {shown or 'none'}), so "
        f"{new} more would pass dataset.split.max_looks: a loop that keeps evaluating there "
        "tunes on it. Report the runs already made on it"
    )


def take_look(spec: EvalSpec, identity_hash: str, model: str) -> int | None:
    """Record a run of ``identity_hash`` on ``spec``'s held-out split (before any call).

    The ledger is read, checked against ``dataset.split.max_looks`` and appended to while
    this process holds an exclusive ``flock`` on it (blocking: another process taking a
    look waits for this one's append, then reads it), so concurrent loops never take more
    looks than the limit between them.

    Returns:
        Which look it is (1 the first; a re-run of a recorded identity keeps its number),
        or None when ``spec`` runs on no held-out split.

    Raises:
        SpecError: it would be a look past ``dataset.split.max_looks``, or the ledger
            cannot be read or written (a symlink, not a regular file, or unwritable).
    """
    path = ledger_path(spec)
    if path is None:
        return None
    held_out = spec.dataset.split.held_out  # type: ignore[union-attr]
    recorded = read_looks(path)  # a re-run needs no lock (nor a writable ledger)
    if identity_hash in recorded:
        return recorded.index(identity_hash) + 1
    try:
        with _locked(path) as fd:
            text = _read_all(fd)
            looks = _parse(text)
            if identity_hash in looks:
                return looks.index(identity_hash) + 1
            if (line := refusal(spec, looks, 1)) is not None:
                raise SpecError(line)
            record = {
                "identity_hash": identity_hash,
                "at": datetime.now(UTC).isoformat(timespec="seconds"),
                "model": model,
            }
            torn = "\n" if text and not text.endswith("\n") else ""  # a killed writer's
            view = memoryview((torn + json.dumps(record) + "\n").encode("utf-8"))
            while view:
                view = view[os.write(fd, view) :]
    except OSError as exc:
        raise SpecError(
            f"{path}: cannot record the look at held-out split {held_out!r} "
            f"({exc.strerror or exc}); make its directory writable"
        ) from None
    return len(looks) + 1


@contextlib.contextmanager
def _locked(path: Path) -> Iterator[int]:
    """The ledger at ``path`` opened for reading and appending (created if missing, never
    through a symlink, refused when not a regular file with one link), held under an
    exclusive ``flock`` until the block ends (waiting for another holder to release it).
    Without ``fcntl`` (Windows) it is opened unlocked.

    Raises:
        OSError: the ledger cannot be opened, is a link or not a regular file.
    """
    flags = os.O_RDWR | os.O_APPEND | os.O_CREAT
    flags |= getattr(os, "O_NOFOLLOW", 0) | getattr(os, "O_CLOEXEC", 0)
    try:
        fd = os.open(path, flags, 0o644)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise OSError(errno.ELOOP, f"{path} is a symlink, never written through") from None
        raise
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode) or st.st_nlink > 1:
            raise OSError(errno.EPERM, f"{path} is not a regular file with one link")
        try:
            import fcntl
        except ImportError:  # Windows: no advisory locks
            yield fd
            return
        fcntl.flock(fd, fcntl.LOCK_EX)  # released when fd closes
        yield fd
    finally:
        os.close(fd)


def _read_all(fd: int) -> str:
    """Everything in the file open at ``fd``, from its start (``pread``: the append offset
    is left alone)."""
    chunks, offset = [], 0
    while chunk := os.pread(fd, 1 << 16, offset):
        chunks.append(chunk)
        offset += len(chunk)
    return b"".join(chunks).decode("utf-8", errors="replace")


def _texts(value: Any, path: str = "") -> Iterator[tuple[str, str]]:
    """(dotted path, text with whitespace collapsed) of every string in a JSON value."""
    if isinstance(value, str):
        yield path, " ".join(value.split())
    elif isinstance(value, dict):
        for key, inner in value.items():
            yield from _texts(inner, f"{path}.{key}" if path else str(key))
    elif isinstance(value, list):
        for index, inner in enumerate(value):
            yield from _texts(inner, f"{path}[{index}]")


def _shingles(text: str) -> Iterator[tuple[str, ...]]:
    """Every run of :data:`MIN_QUOTE` consecutive words of ``text``."""
    words = text.split()
    for k in range(len(words) - MIN_QUOTE + 1):
        yield tuple(words[k : k + MIN_QUOTE])


def check_no_held_out_quotes(spec: EvalSpec, tuning: Iterable[Any]) -> None:
    """Refuse a run on a tuning split whose prompt (``prompt``, ``system``, ``tools``)
    quotes a held-out sample: :data:`MIN_QUOTE` consecutive words of any text of a
    held-out row (whitespace aside) found in it in the same order, and in no row of the
    tuning split (``tuning``: the run's samples), so boilerplate every row shares is not
    a quote. A loop that pastes held-out questions or answers into its prompt as examples
    has seen the split it reports on.

    Raises:
        SpecError: naming the sample, its field and the words quoted.
    """
    from gradetrail.datasets.loading import load_samples

    split = spec.dataset.split
    if split is None or split.held_out is None or split.name == split.held_out:
        return
    prompt = " ".join(t for _, t in _texts(spec.model_dump(include={"prompt", "system", "tools"})))
    quotable = set(_shingles(prompt))
    if not quotable:
        return
    held_split = split.model_copy(update={"name": split.held_out})
    held = spec.dataset.model_copy(update={"split": held_split, "limit": None})
    found: dict[tuple[str, ...], tuple[str, str]] = {}  # words -> (sample id, field)
    for sample in load_samples(held, base_dir=spec.base_dir, where=spec.source):
        for field, text in _texts(sample.row):
            for words in _shingles(text):
                if words in quotable:
                    found.setdefault(words, (sample.id, field))
    if not found:
        return
    for sample in tuning:  # words the tuning split has too are no held-out quote
        for _, text in _texts(sample.row):
            for words in _shingles(text):
                found.pop(words, None)
    if found:
        words, (sample_id, field) = next(iter(found.items()))
        raise SpecError(
            f"{spec.source}: the prompt quotes held-out sample {sample_id!r} "
            f"({field}: {' '.join(words)!r}) of split {split.held_out!r}: a prompt tuned on "
            f"{split.name!r} must hold no held-out data; take its examples from {split.name!r}"
        )
