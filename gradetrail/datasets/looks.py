"""Looks at a held-out split: the runs made on it, counted, and a limit on them.

A loop tunes on one split and reports on another (``dataset.split.held_out``). Each run on
the held-out split spends some of its independence: a loop that runs ten candidates there
and keeps the best has tuned on it, and the best one's interval no longer covers its true
score at the stated rate. So every run on the held-out split of an identity hash not seen
there before is a *look*, recorded (before any call) as one JSON line in a ledger,
``<split file stem>.looks.jsonl`` beside the split file (a hash split's:
``<spec stem>.looks.jsonl`` beside the spec): ``{"identity_hash", "at", "model"}``. A run
of an identity already recorded (a re-run, a resumed run) is the same look. With
``dataset.split.max_looks``, a look past the limit is refused before any call.

Like the approval (:mod:`gradetrail.engine.approval`), this is a change detector, not a
security boundary: whatever can write the ledger can empty it.
"""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import UTC, datetime
from pathlib import Path

from gradetrail._util.outfiles import append_file
from gradetrail.errors import SpecError
from gradetrail.spec import EvalSpec

__all__ = ["LOOKS_SUFFIX", "ledger_path", "read_looks", "take_look", "would_look"]

LOOKS_SUFFIX = ".looks.jsonl"


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

    Returns:
        Which look it is (1 the first; a re-run of a recorded identity keeps its number),
        or None when ``spec`` runs on no held-out split.

    Raises:
        SpecError: it would be a look past ``dataset.split.max_looks``, or the ledger
            cannot be read or written.
    """
    path = ledger_path(spec)
    if path is None:
        return None
    looks = read_looks(path)
    if identity_hash in looks:
        return looks.index(identity_hash) + 1
    if (line := refusal(spec, looks, 1)) is not None:
        raise SpecError(line)
    record = {
        "identity_hash": identity_hash,
        "at": datetime.now(UTC).isoformat(timespec="seconds"),
        "model": model,
    }
    try:
        append_file(path, (json.dumps(record) + "\n").encode("utf-8"))
    except OSError as exc:
        raise SpecError(
            f"{path}: cannot record the look at held-out split {spec.dataset.split.held_out!r} "  # type: ignore[union-attr]
            f"({exc.strerror or exc}); make its directory writable"
        ) from None
    return len(looks) + 1
