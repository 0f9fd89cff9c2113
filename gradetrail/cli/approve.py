"""``gradetrail approve``: record the harness of a spec as reviewed."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

__all__ = ["register"]


def register(app: typer.Typer) -> None:
    """Add ``approve`` to ``app``."""
    app.command("approve")(approve)


def approve(
    spec: Annotated[Path, typer.Argument(help="The eval spec (YAML) whose harness is approved.")],
    set_: Annotated[
        list[str] | None,
        typer.Option("--set", help="Override a spec field: dotted.key=value (repeatable)."),
    ] = None,
    show: Annotated[bool, typer.Option("--show", help="List the files and their hashes.")] = False,
) -> None:
    """Record the SHA-256 of the spec's harness (the spec, the files and modules it names,
    its harness: globs, the lockfile) in its approval file; a run with
    run.require_approval (or --require-approval) then refuses to start if any of them
    changes. A change detector for unattended loops, not a security boundary."""
    from gradetrail.cli import fail
    from gradetrail.engine.approval import approve as record
    from gradetrail.errors import GradetrailError
    from gradetrail.spec import load_spec

    try:
        path, approval = record(load_spec(spec, list(set_ or [])))
    except GradetrailError as exc:
        raise fail(exc) from None
    print(f"approved {len(approval.files)} files, harness {approval.harness_sha256[:12]}: {path}")
    if show:
        for name, digest in approval.files.items():
            print(f"  {digest[:12]}  {name}")
