"""Dataset splits: named lists of sample ids, checked against the dataset before any call.

A hill-climbing loop tunes on one split and reports on another it never looked at. A
split comes from a split file (JSON ``{"train": [ids], "test": [ids]}``, written by
:func:`write_split_file` / ``gradetrail split``) or from a hash split: an id goes to a
split by ``SHA-256(seed, id)`` read as a number in ``[0, 1)`` and cut at the cumulative
fractions (split names in sorted order), so an id's split depends only on the id and the
seed (adding rows never moves another id) and the fractions hold only approximately.

:func:`select_split` is what :func:`~gradetrail.datasets.loading.load_samples` calls: the
positions of the chosen split's ids and what the manifest records of it.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from gradetrail._util.files import not_a_file
from gradetrail._util.jsontext import encodable
from gradetrail._util.outfiles import write_file
from gradetrail.errors import DatasetError, UsageError
from gradetrail.spec.dataset import FRACTION_TOLERANCE, SplitSpec

__all__ = [
    "check_splits",
    "hash_split",
    "ids_hash",
    "read_split_file",
    "select_split",
    "write_split_file",
]

#: ids shown in an error at most
_SHOWN = 5


def _shown(ids: Sequence[str]) -> str:
    text = ", ".join(repr(i) for i in ids[:_SHOWN])
    return text + (f" and {len(ids) - _SHOWN} more" if len(ids) > _SHOWN else "")


def _position(seed: int, sample_id: str) -> float:
    """Where ``sample_id`` falls in ``[0, 1)`` under ``seed``: the first 8 bytes of
    SHA-256 over ``"<seed>\\0<id>"`` (UTF-8, lone surrogates kept) over 2**64."""
    digest = hashlib.sha256(f"{seed}\0{sample_id}".encode("utf-8", "surrogatepass")).digest()
    return int.from_bytes(digest[:8], "big") / 2.0**64


def hash_split(
    ids: Sequence[str], seed: int, fractions: Mapping[str, float]
) -> dict[str, list[str]]:
    """Split ``ids`` by hash: split name -> its ids, in the order of ``ids``.

    Args:
        ids: the dataset's sample ids.
        seed: the split's seed.
        fractions: split name -> fraction in (0, 1], summing to 1.

    Raises:
        UsageError: fractions out of (0, 1], or not summing to 1.
    """
    names = sorted(fractions)
    if not names or any(not 0.0 < fractions[n] <= 1.0 for n in names):
        raise UsageError("fractions must each be in (0, 1], e.g. train=0.8,test=0.2")
    total = sum(fractions.values())
    if abs(total - 1.0) > FRACTION_TOLERANCE:
        raise UsageError(f"fractions sum to {total:g}; make them sum to 1")
    cuts, acc = [], 0.0
    for name in names:
        acc += fractions[name] / total
        cuts.append(acc)
    out: dict[str, list[str]] = {name: [] for name in names}
    for sample_id in ids:
        at = _position(seed, sample_id)
        for name, cut in zip(names, cuts, strict=True):
            if at < cut:
                out[name].append(sample_id)
                break
        else:  # rounding at the top end: the last split
            out[names[-1]].append(sample_id)
    return out


def read_split_file(path: Path) -> dict[str, list[str]]:
    """A split file's splits: split name -> ids.

    Raises:
        DatasetError: the file is missing, not JSON, or not an object of lists of ids
            (text; numbers are taken as their text).
    """
    problem = not_a_file(path)
    if problem is not None:
        raise DatasetError(f"dataset.split.file: {path} {problem}; write one with gradetrail split")
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, ValueError) as exc:
        raise DatasetError(
            f"dataset.split.file: {path} is not a JSON split file ({exc}); write one with "
            "gradetrail split"
        ) from None
    if not isinstance(data, dict) or not data:
        raise DatasetError(
            f"dataset.split.file: {path} must be a JSON object of split name -> list of "
            'ids, e.g. {"train": ["q1"], "test": ["q2"]}'
        )
    out: dict[str, list[str]] = {}
    for name, ids in data.items():
        if not isinstance(ids, list) or not all(
            isinstance(i, str | int) and not isinstance(i, bool) for i in ids
        ):
            raise DatasetError(
                f"dataset.split.file: {path}: split {name!r} must be a list of sample ids "
                "(text or integers)"
            )
        out[name] = [str(i) for i in ids]
    return out


def check_splits(
    splits: Mapping[str, Sequence[str]], dataset_ids: Sequence[str], where: str
) -> None:
    """Refuse a split naming an id twice, an id in two splits, or an id the dataset lacks.

    Args:
        splits: split name -> ids.
        dataset_ids: every id of the dataset (before shuffle and limit).
        where: what names the splits in the message (a file, ``dataset.split``).

    Raises:
        DatasetError: one line naming the split(s) and up to five ids.
    """
    owner: dict[str, str] = {}
    for name, ids in splits.items():
        seen: set[str] = set()
        twice = [i for i in ids if i in seen or seen.add(i)]  # type: ignore[func-returns-value]
        if twice:
            raise DatasetError(
                f"{where}: split {name!r} lists {len(twice)} ids twice ({_shown(twice)}); "
                "list each id once"
            )
        for i in ids:
            other = owner.setdefault(i, name)
            if other != name:
                shared = [j for j in ids if owner.get(j) == other]
                raise DatasetError(
                    f"{where}: splits {other!r} and {name!r} share {len(shared)} ids "
                    f"({_shown(shared)}); an id belongs to one split"
                )
    known = set(dataset_ids)
    unknown = [i for i in owner if i not in known]
    if unknown:
        raise DatasetError(
            f"{where}: {len(unknown)} split ids are not in the dataset ({_shown(unknown)}); "
            "re-write the split file from this dataset (gradetrail split)"
        )


def ids_hash(ids: Sequence[str]) -> str:
    """SHA-256 hex over the ids in order, each followed by a newline (UTF-8)."""
    digest = hashlib.sha256()
    for sample_id in ids:
        digest.update(sample_id.encode("utf-8", "surrogatepass") + b"\n")
    return digest.hexdigest()


def select_split(
    spec: SplitSpec, dataset_ids: Sequence[str], base_dir: Path, where: str | None = None
) -> tuple[list[int], dict[str, Any]]:
    """The positions (in ``dataset_ids``) of the ids in split ``spec.name``, in dataset
    order, and what the manifest records: ``name``, ``source`` (``file`` or ``hash``),
    ``ids`` (how many), ``ids_sha256`` (:func:`ids_hash` of them, in dataset order; the
    identity's ``split`` hash) and ``splits`` (every split's size).

    Raises:
        DatasetError: the split file cannot be read, fails :func:`check_splits`, has no
            split of that name, or the chosen split selects no id.
    """
    prefix = f"{where}: " if where else ""
    if spec.file is not None:
        path = Path(spec.file).expanduser()
        path = path if path.is_absolute() else base_dir / path
        try:
            splits = read_split_file(path)
        except DatasetError as exc:
            raise DatasetError(f"{prefix}{exc}") from None
        source, label = "file", f"{prefix}dataset.split.file {path}"
    else:
        assert spec.fractions is not None and spec.seed is not None  # the spec's validator
        splits = hash_split(dataset_ids, spec.seed, spec.fractions)
        source, label = "hash", f"{prefix}dataset.split"
    check_splits(splits, dataset_ids, label)
    if spec.name not in splits:
        raise DatasetError(
            f"{label} has no split {spec.name!r} (it has {', '.join(splits)}); set "
            "dataset.split.name to one of them"
        )
    chosen = set(splits[spec.name])
    positions = [k for k, i in enumerate(dataset_ids) if i in chosen]
    if not positions:
        raise DatasetError(f"{label}: split {spec.name!r} selects no sample; give it some ids")
    selected = [dataset_ids[k] for k in positions]
    info = {
        "name": spec.name,
        "source": source,
        "ids": len(positions),
        "ids_sha256": ids_hash(selected),
        "splits": {name: len(ids) for name, ids in splits.items()},
    }
    return positions, info


def write_split_file(path: Path, splits: Mapping[str, Sequence[str]]) -> None:
    """Write a split file (JSON, one split a key, ids in the given order) through
    :func:`gradetrail._util.outfiles.write_file`: atomically (a temporary file renamed
    over ``path``), never through a symlink at ``path``, into a character device or a
    FIFO there (``/dev/null``), never over it.

    Raises:
        UsageError: ``path`` is a symlink, a directory, or cannot be written.
    """
    if path.is_symlink():
        raise UsageError(f"{path} is a symlink; write the split file to a plain path")
    text = json.dumps({k: list(v) for k, v in splits.items()}, ensure_ascii=False, indent=1)
    try:
        # a lone surrogate in an id (a "\ud800" escape in the dataset) as its JSON escape:
        # its UTF-8 bytes (surrogatepass) were no UTF-8, and the file could not be read back
        write_file(path, (encodable(text) + "\n").encode("utf-8"))
    except OSError as exc:
        raise UsageError(f"{path}: cannot write the split file ({exc.strerror})") from None
