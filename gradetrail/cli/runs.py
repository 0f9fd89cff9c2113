"""``gradetrail runs``: which run directory is which."""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import Annotated, Any

import typer

__all__ = ["register", "run_row"]

HEADER = (
    "run directory",
    "identity",
    "model",
    "base url",
    "dataset",
    "status",
    "samples",
    "errors",
    "mean",
    "started",
    "labels",
)


def register(app: typer.Typer) -> None:
    """Add ``runs`` to ``app``."""
    app.command("runs")(runs)


def _get(m: dict[str, Any], *path: str) -> Any:
    value: Any = m
    for part in path:
        value = value.get(part) if isinstance(value, dict) else None
    return value


def path_cell(path: Path) -> str:
    """``path`` as the listing prints it: as is, or, when it holds what the terminal
    must not be sent (a byte that is not UTF-8, a control character, a bidi override:
    :func:`~gradetrail._util.terminal.one_line` would drop it and print another path),
    its bytes as a shell's ``$'...'`` string (``$'results/bad\\xffname'``), which names
    the same directory when pasted."""
    from gradetrail._util.terminal import one_line

    text = str(path)
    if one_line(text) == text:
        return text
    printable = (
        chr(b) if 0x20 <= b < 0x7F and b not in b"'\\" else f"\\x{b:02x}" for b in os.fsencode(path)
    )
    return "$'" + "".join(printable) + "'"


def run_row(path: Path, m: dict[str, Any], disagrees: str | None = None) -> tuple[str, ...]:
    """One listing row for a run directory and its manifest (a dict, possibly malformed):
    what tells runs apart (identity hash, model, base URL, dataset path and content hash)
    and how the run went (status with its errors, samples, error rows, mean score), each
    cell one line of text. With ``disagrees`` (what
    :func:`~gradetrail.rundir.agreement.run_disagrees` found), the status reads
    ``ROWS DISAGREE`` and the mean, which the rows no longer give, ``n/a``."""
    from gradetrail._util.terminal import one_line
    from gradetrail.rundir.agreement import MARK
    from gradetrail.rundir.manifest import status_text

    counts = m.get("counts") if isinstance(m.get("counts"), dict) else {}
    rows = sum(n for n in counts.values() if isinstance(n, int))
    errors = rows - int(counts.get("scored", 0) or 0) if counts else 0
    mean = _get(m, "score", "mean")
    dataset = str(_get(m, "spec", "dataset", "path") or "?")
    dataset_hash = m.get("dataset_hash")
    if isinstance(dataset_hash, str):
        dataset += f" @{dataset_hash[:8]}"
    cells = (
        path_cell(path),
        str(m.get("identity_hash", "?"))[:12],
        f"{m.get('provider', '?')}:{m.get('requested_model', '?')}",
        str(_get(m, "spec", "model", "base_url") or "default"),
        dataset,
        MARK if disagrees else status_text(str(m.get("status", "?")), counts),
        str(m.get("n_samples", "?")),
        str(errors),
        f"{mean:.4f}" if isinstance(mean, int | float) and not disagrees else "n/a",
        str(m.get("started_at", ""))[:19],
        ", ".join(str(x) for x in (_get(m, "spec", "run", "labels") or []))
        if isinstance(_get(m, "spec", "run", "labels"), list)
        else "",
    )
    return tuple(one_line(cell) for cell in cells)


def runs(
    root: Annotated[
        Path | None,
        typer.Argument(
            metavar="RESULTS_ROOT",
            help="Where run directories are, as `gradetrail view` takes it (or --results-root).",
            show_default=False,
        ),
    ] = None,
    results_root: Annotated[
        Path, typer.Option("--results-root", help="Where run directories are.")
    ] = Path("results"),
) -> None:
    """List run directories, newest first: identity hash, model, base URL, dataset (path
    and content hash), status, samples, error rows, mean score, start time, labels. A
    complete run whose results.jsonl disagrees with its manifest reads ROWS DISAGREE, with
    no mean, and a warning line on stderr says what disagrees; so does a run directory
    whose name carries another identity hash than its manifest's (a copied run). Exit
    codes: 0 listed (or none there), 2 the results root does not exist or is not a
    directory."""
    from gradetrail._util.terminal import one_line
    from gradetrail.rundir.agreement import misnamed, run_disagrees, warning
    from gradetrail.rundir.results import list_runs

    if root is not None:
        if results_root != Path("results") and results_root != root:
            from gradetrail.cli import fail
            from gradetrail.errors import UsageError

            raise fail(
                UsageError(f"give the results root once: {root} or --results-root {results_root}")
            )
        results_root = root

    if not results_root.is_dir():  # as `gradetrail view` says it: a path that cannot be used
        from gradetrail._util.terminal import one_line
        from gradetrail.cli import fail
        from gradetrail.errors import UsageError

        what = "is not a directory" if results_root.exists() else "no such results directory"
        raise fail(
            UsageError(
                f"{one_line(str(results_root))}: {what}; pass the directory holding your run "
                "directories (default: results)"
            )
        )
    try:
        found = list_runs(results_root)
    except OSError as exc:  # a root that cannot be listed (no permission)
        from gradetrail.cli import fail
        from gradetrail.errors import UsageError

        raise fail(UsageError(f"{results_root}: cannot list ({exc.strerror or exc})")) from None
    if not found:
        print(f"no runs under {results_root}")
        return
    disagree = [run_disagrees(path, m) for path, m in found]
    rows = [
        HEADER,
        *(run_row(path, m, why) for (path, m), why in zip(found, disagree, strict=True)),
    ]
    widths = [max(len(row[i]) for row in rows) for i in range(len(HEADER))]
    for row in rows:  # plain columns: never truncated, so a path can be copied
        print(
            "  ".join(cell.ljust(width) for cell, width in zip(row, widths, strict=True)).rstrip()
        )
    for (path, manifest), why in zip(found, disagree, strict=True):
        if why:
            print(
                one_line(f"warning: {warning(path_cell(path), why)}"),
                file=sys.stderr,
            )
        wrong_name = misnamed(path, manifest)
        if wrong_name:
            print(one_line(f"warning: {path_cell(path)}: {wrong_name}"), file=sys.stderr)
