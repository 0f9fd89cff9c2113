"""``gradetrail split``: write a split file (named id lists) from a spec's dataset."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Annotated

import typer

__all__ = ["parse_fractions", "register"]


def register(app: typer.Typer) -> None:
    """Add ``split`` to ``app``."""
    app.command("split")(split)


def parse_fractions(text: str) -> dict[str, float]:
    """``train=0.8,test=0.2`` -> ``{"train": 0.8, "test": 0.2}``.

    Raises:
        UsageError: an item without ``=``, an empty name, a name twice, or a value that
            is not a number.
    """
    from gradetrail.errors import UsageError

    out: dict[str, float] = {}
    for item in text.split(","):
        name, sep, value = item.partition("=")
        name = name.strip()
        try:
            number = float(value) if sep and name else None
        except ValueError:
            number = None
        if number is None or name in out:
            raise UsageError(
                f"--fractions: cannot read {item.strip()!r}; give name=fraction pairs, each "
                "name once, e.g. train=0.8,test=0.2"
            )
        out[name] = number
    return out


def split(
    spec: Annotated[Path, typer.Argument(help="The eval spec whose dataset is split.")],
    out: Annotated[Path, typer.Option("--out", "-o", help="The split file to write (JSON).")],
    fractions: Annotated[
        str, typer.Option("--fractions", help="Split name=fraction pairs summing to 1.")
    ] = "train=0.8,test=0.2",
    seed: Annotated[int, typer.Option("--seed", help="The hash split's seed.")] = 0,
) -> None:
    """Split the spec's dataset ids by hash (each id by SHA-256 of the seed and the id, so
    adding rows moves no other id) and write ``{"train": [ids], "test": [ids]}``. The
    spec's own split, shuffle and limit are ignored: every id of the dataset is split.
    Use it with ``dataset.split: {file: <out>, name: train}``."""
    from gradetrail.cli import fail
    from gradetrail.datasets import load_samples
    from gradetrail.datasets.loading import split_by_position_warning
    from gradetrail.datasets.splits import hash_split, write_split_file
    from gradetrail.errors import GradetrailError, UsageError
    from gradetrail.spec import load_spec

    try:
        shares = parse_fractions(fractions)
        loaded = load_spec(spec)
        dataset = loaded.dataset.model_copy(
            update={"split": None, "shuffle_seed": None, "limit": None}
        )
        samples = load_samples(dataset, base_dir=loaded.base_dir, where=loaded.source)
        splits = hash_split(samples.ids, seed, shares)
        empty = [name for name, ids in splits.items() if not ids]
        if empty:  # a run on it would be refused ("selects no id"): say so before writing
            raise UsageError(
                f"--fractions: split {empty[0]!r} gets none of the {len(samples.ids)} ids "
                f"(fraction {shares[empty[0]]:g}); raise its fraction or drop that split"
            )
        write_split_file(out, splits)
    except GradetrailError as exc:
        raise fail(exc) from None
    if samples.by_position:
        warning = split_by_position_warning(dataset.id_field, samples.by_position, len(samples))
        print(f"warning: {warning}", file=sys.stderr)
    sizes = ", ".join(f"{name} {len(ids)}" for name, ids in splits.items())
    print(f"wrote {out}: {sizes} ids (seed {seed})")
