"""Bad input is refused before any run directory exists, with one line and exit 2: a
``--cache`` path that cannot be used, and a python provider's ``model.function`` that
cannot be called as ``f(request)``, ``f(request, row)`` or ``f(request, *, row)``."""

from __future__ import annotations

import json
import sqlite3
from pathlib import Path

import pytest
from cli_support import run_cli

APP = """
import asyncio

def three(a, b, c):
    return "A: 1"

def none():
    return "A: 1"

def needs_key(request, *, mode):
    return "A: 1"

async def agen(request):
    yield "A: 1"

def gen(request):
    yield "A: 1"

class NotCallable:
    pass

instance = NotCallable()
number = 3

def plain(request):
    return "A: " + request.prompt

def with_row(request, row):
    return "A: " + row["q"]

def keyword_row(request, *, row, extra=1):
    return "A: " + row["q"]

async def coroutine(request):
    await asyncio.sleep(0)
    return "A: " + request.prompt

def star(*args):
    return "A: " + args[0].prompt
"""


def _eval(tmp_path: Path, function: str) -> Path:
    """A two-sample eval calling ``sigcheck_app:<function>``; the spec's path."""
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"id": f"s{i}", "q": str(i), "t": str(i)}) + "\n" for i in (1, 2))
    )
    (tmp_path / "sigcheck_app.py").write_text(APP)
    spec = tmp_path / f"{function}.yaml"
    spec.write_text(
        f"name: {function}\ndataset: {{path: d.jsonl}}\nprompt: '{{{{ q }}}}'\n"
        f"target: '{{{{ t }}}}'\nmodel: {{provider: python, name: m, "
        f"function: 'sigcheck_app:{function}'}}\n"
        "scorer: {type: numeric, marker: 'A:'}\n"
    )
    return spec


@pytest.mark.parametrize(
    ("function", "said"),
    [
        ("three", "has the signature (a, b, c)"),
        ("none", "has the signature ()"),
        ("needs_key", "has the signature (request, *, mode)"),
        ("agen", "is an async generator function"),
        ("gen", "is a generator function"),
        ("instance", "no callable 'instance' (it is NotCallable)"),
        ("number", "no callable 'number' (it is int)"),
    ],
)
def test_a_function_of_the_wrong_kind_is_refused_before_the_run(
    tmp_path: Path, function: str, said: str
) -> None:
    """Exit 2, one line naming the function and the accepted signatures, no run directory
    (before: a run directory and exit 1 with every row a provider error)."""
    spec = _eval(tmp_path, function)
    out = run_cli("run", str(spec), "--results-root", str(tmp_path / "results"))
    assert out.code == 2, out.err
    (line,) = out.err_lines
    assert f"model.function 'sigcheck_app:{function}'" in line and said in line
    assert "def f(request), def f(request, row) or def f(request, *, row)" in line
    assert not (tmp_path / "results").exists()


@pytest.mark.parametrize("function", ["plain", "with_row", "keyword_row", "coroutine", "star"])
def test_every_accepted_signature_still_runs(tmp_path: Path, function: str) -> None:
    """The accepted forms run and score both samples."""
    spec = _eval(tmp_path, function)
    out = run_cli("run", str(spec), "--results-root", str(tmp_path / "results"), "--json")
    assert out.code == 0, out.err
    assert json.loads(out.out)["counts"] == {"scored": 2}


def _symlink(tmp_path: Path) -> Path:
    (tmp_path / "real.sqlite").touch()
    (tmp_path / "link.sqlite").symlink_to(tmp_path / "real.sqlite")
    return tmp_path / "link.sqlite"


def _directory(tmp_path: Path) -> Path:
    (tmp_path / "dir.sqlite").mkdir()
    return tmp_path / "dir.sqlite"


def _foreign(tmp_path: Path) -> Path:
    db = sqlite3.connect(tmp_path / "other.sqlite")
    db.execute("CREATE TABLE people (name TEXT)")
    db.commit()
    db.close()
    return tmp_path / "other.sqlite"


def _not_sqlite(tmp_path: Path) -> Path:
    (tmp_path / "notes.sqlite").write_text("not a database, just some notes\n" * 100)
    return tmp_path / "notes.sqlite"


@pytest.mark.parametrize("make", [_symlink, _directory, _foreign, _not_sqlite])
@pytest.mark.parametrize("command", ["run", "cache-stats"])
def test_a_cache_path_that_cannot_be_used_exits_2(tmp_path: Path, make, command: str) -> None:  # noqa: ANN001
    """A symlink, a directory, another program's database or a file that is not SQLite:
    one ``error:`` line naming the path and --cache, exit 2 (before: exit 1), and no run
    directory."""
    cache = make(tmp_path)
    if command == "run":
        spec = _eval(tmp_path, "plain")
        args = ["run", str(spec), "--results-root", str(tmp_path / "results")]
        out = run_cli(*args, "--cache", str(cache))
    else:
        out = run_cli("cache", "stats", "--cache", str(cache))
    assert out.code == 2, out.err
    (line,) = out.err_lines
    assert line.startswith("error: ") and str(cache) in line and "--cache" in line
    assert not (tmp_path / "results").exists()
