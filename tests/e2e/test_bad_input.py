"""The bad-input corpus (issue 15, Proof): every case in ``data/bad_input.yaml`` is a
spec, dataset, override or command a user can get wrong. Each must be refused the way
docs/spec.md promises: one ``error:`` line on stderr naming what to fix, exit code 2, and
nothing written (no run directory, no cache file, no file at all).

The command runs in this process (``gradetrail.cli.main``), so the whole corpus takes
seconds rather than a Python start-up per case."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import yaml
from cli_support import run_cli

CASES: list[dict[str, Any]] = yaml.safe_load(
    (Path(__file__).parents[1] / "data" / "bad_input.yaml").read_text(encoding="utf-8")
)

APP = 'def answer(request):\n    return "A: " + request.prompt.rsplit("=", 1)[1].strip()\n'
ROWS = [{"id": f"q{i}", "q": f"{i}+{i}", "a": 2 * i} for i in (1, 2, 3)]
BASE: dict[str, Any] = {
    "name": "corpus",
    "dataset": {"path": "data.jsonl"},
    "prompt": "What is {{ q }}? = {{ a }}",
    "target": "{{ a }}",
    "model": {"provider": "python", "name": "app", "function": "app:answer"},
    "scorer": {"type": "numeric", "marker": "A:"},
}


def _alias_bomb() -> str:
    lines = ['a0: &a0 ["x", "x", "x", "x", "x", "x", "x", "x", "x"]']
    for i in range(1, 9):
        refs = ", ".join([f"*a{i - 1}"] * 9)
        lines.append(f"a{i}: &a{i} [{refs}]")
    return "\n".join(lines) + "\nname: bomb\n"


def _set_alias_bomb() -> list[str]:
    parts = ["a0: &a0 [x, x, x, x, x, x, x, x, x]"]
    for i in range(1, 9):
        parts.append(f"a{i}: &a{i} [{', '.join([f'*a{i - 1}'] * 9)}]")
    return ["--set", "model.params.extra={" + ", ".join(parts) + "}"]


def _deep_row(depth: int) -> str:
    return '{"id": "a", "q": "1+1", "a": 2, "deep": ' + "[" * depth + "]" * depth + "}\n"


GENERATORS = {
    "alias_bomb": _alias_bomb,
    "deep_yaml": lambda: "name: " + "[" * 5000 + "]" * 5000 + "\n",
    "rows_200": lambda: "".join(
        json.dumps({"id": f"r{i}", "q": f"{i}+{i}", "a": 2 * i}) + "\n" for i in range(200)
    ),
    "deep_row_200000": lambda: _deep_row(200_000),
    "deep_row_5000": lambda: _deep_row(5_000),
    "set_alias_bomb": _set_alias_bomb,
    "set_deep": lambda: ["--set", "model.params.extra=" + "[" * 5000 + "]" * 5000],
}


def _set(spec: dict[str, Any], dotted: str, value: Any) -> None:
    node = spec
    *parents, last = dotted.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    if value is None:
        node.pop(last, None)
    else:
        node[last] = value


def _write_eval(directory: Path, case: dict[str, Any]) -> Path:
    (directory / "app.py").write_text(APP)
    if "data" in case:
        data = case["data"]
    elif "data_gen" in case:
        data = GENERATORS[case["data_gen"]]()
    else:
        data = "".join(json.dumps(r) + "\n" for r in case.get("data_rows", ROWS))
    (directory / "data.jsonl").write_text(data)
    for name, text in (case.get("files") or {}).items():
        (directory / name).write_text(text)
    for name in case.get("fifos") or []:
        os.mkfifo(directory / name)
    spec_path = directory / "spec.yaml"
    if "spec" in case:
        spec_path.write_text(case["spec"])
    elif "spec_gen" in case:
        spec_path.write_text(GENERATORS[case["spec_gen"]]())
    elif "spec_bytes" in case:
        spec_path.write_bytes(case["spec_bytes"].encode("latin-1"))
    else:
        spec = json.loads(json.dumps(BASE))
        for dotted, value in (case.get("set") or {}).items():
            _set(spec, dotted, value)
        spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec_path


def _files(root: Path) -> set[str]:
    """Every path under ``root`` (bytecode caches of the test's own app aside)."""
    return {str(p.relative_to(root)) for p in root.rglob("*") if "__pycache__" not in p.parts}


def test_the_corpus_is_large_and_named_uniquely() -> None:
    ids = [case["id"] for case in CASES]
    assert len(ids) >= 100 and len(set(ids)) == len(ids)


@pytest.mark.parametrize("case", CASES, ids=[case["id"] for case in CASES])
def test_bad_input_is_one_line_exit_2_nothing_written(
    case: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("ANTHROPIC_API_KEY", raising=False)
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    monkeypatch.delenv("GRADETRAIL_CACHE", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    monkeypatch.chdir(tmp_path)
    spec = _write_eval(tmp_path, case)
    before = _files(tmp_path)
    if "argv" in case:
        argv = list(case["argv"])
    else:
        extra = GENERATORS[case["args_gen"]]() if "args_gen" in case else case.get("args", [])
        argv = ["run", str(spec), "--cache", str(tmp_path / "cache.sqlite")]
        argv += ["--results-root", str(tmp_path / "results"), *extra]
    out = run_cli(*argv)
    assert out.code == 2, (out.code, out.err, out.out)
    assert len(out.err_lines) == 1, out.err
    (line,) = out.err_lines
    assert line.startswith("error: ") and case["expect"] in line, line
    assert "Traceback" not in out.err + out.out
    if "never_shown" in case:  # a secret the input holds: the error never repeats it
        assert case["never_shown"] not in out.err + out.out
    assert _files(tmp_path) == before
