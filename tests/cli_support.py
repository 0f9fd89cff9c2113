"""Run the ``gradetrail`` command in this process (its real entry point, ``main()``),
capturing what it prints and its exit code: a hundred refusals cost milliseconds each
instead of a Python start-up each; and write a small python-provider eval to run."""

from __future__ import annotations

import contextlib
import io
import json
import sys
from dataclasses import dataclass
from pathlib import Path

import yaml

from gradetrail.cli import main


@dataclass(frozen=True)
class CliOutcome:
    """Exit code, stdout and stderr of one command."""

    code: int
    out: str
    err: str

    @property
    def err_lines(self) -> list[str]:
        """stderr's non-empty lines."""
        return [line for line in self.err.splitlines() if line.strip()]


def run_cli(*args: str) -> CliOutcome:
    """``gradetrail ARGS...`` through :func:`gradetrail.cli.main`."""
    out, err = io.StringIO(), io.StringIO()
    argv = sys.argv
    sys.argv = ["gradetrail", *args]
    code: int | str | None = 0
    try:
        with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
            main()
    except SystemExit as exc:
        code = exc.code
    finally:
        sys.argv = argv
    return CliOutcome(
        code if isinstance(code, int) else (0 if code is None else 1),
        out.getvalue(),
        err.getvalue(),
    )


APP = """\
from gradetrail.errors import BadRequest


def answer(request):
    if "boom" in request.prompt:
        raise BadRequest("bad\\n  mean score  1.0000\\n  status      complete\\r\\nfake")
    if "echo" in request.prompt:
        return request.prompt
    return "A: " + request.prompt.rsplit("=", 1)[1].strip()
"""


def write_eval(directory: Path, rows: list[dict], **fields) -> Path:
    """A python-provider eval over ``rows`` (fields q, a); ``fields`` override the spec."""
    directory.mkdir(parents=True, exist_ok=True)
    (directory / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (directory / "spoof_app.py").write_text(APP)
    spec = {
        "name": "hostile",
        "dataset": {"path": "data.jsonl"},
        "prompt": "What is {{ q }}? = {{ a }}",
        "target": "{{ a }}",
        "model": {"provider": "python", "name": "app", "function": "spoof_app:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
        **fields,
    }
    path = directory / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path
