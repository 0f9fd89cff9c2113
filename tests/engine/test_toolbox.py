"""Tools that misbehave in the agent loop never end the run: a tool that calls
``sys.exit`` or raises KeyboardInterrupt (sync or async), returns a value with no text
form, returns text UTF-8 cannot encode, or is cut short by run.sample_timeout_s, each
goes back to the model as a recorded result and the sample goes on (the real SDK path
against the local protocol server, through the CLI)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import yaml
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

server = protocol_server_fixture(scope="module", name="server", models=["*"])
srv = fresh_protocol_server_fixture("server", name="srv")

TOOLS = '''
import asyncio, datetime, sys, time


class Opaque:
    def __str__(self):
        raise RuntimeError("no text")

    __repr__ = __str__


def exits(x: int) -> str:
    """sys.exit from a plain function."""
    sys.exit(3)


async def aexits(x: int) -> str:
    """SystemExit from a coroutine."""
    raise SystemExit(4)


def interrupts(x: int) -> str:
    """KeyboardInterrupt raised by the tool itself."""
    raise KeyboardInterrupt


async def ainterrupts(x: int) -> str:
    """KeyboardInterrupt raised by an async tool."""
    raise KeyboardInterrupt


def opaque(x: int):
    """A value whose str and repr raise."""
    return Opaque()


def lone(x: int) -> str:
    """Text with a lone surrogate."""
    return "ok \\ud800 done"


def odd(x: int):
    """A dict JSON cannot hold (a tuple key, a set, a date)."""
    return {(1, 2): {3}, "when": datetime.date(2020, 1, 2)}


def fast(x: int) -> str:
    """Answers at once."""
    return "fast done"


def slow(x: int) -> str:
    """Never returns in time."""
    time.sleep(600)


async def ablock(x: int) -> str:
    """Blocks its event loop: a sync sleep inside a coroutine."""
    time.sleep(600)


STOP_SPINNING = False


async def aspin(x: int) -> str:
    """Spins without ever yielding, until the test that started it sets STOP_SPINNING."""
    while not STOP_SPINNING:
        pass


def touch(x: int) -> str:
    """Leaves a mark: proof that it ran."""
    open("touched", "w").close()
    return "touched"


def loud(x: int) -> str:
    """Raises with a 1 MB message."""
    raise ValueError("e" * 1_000_000)


def wide(x: int) -> str:
    """20,000 bytes of two-byte characters."""
    return "\u00e9" * 10_000


def nothing(x: int) -> None:
    """Returns None."""


class Endless:
    def __str__(self):
        while not STOP_SPINNING:  # until the test that made it stops it
            pass
        return "stopped"


def endless(x: int):
    """A value whose str never returns."""
    return {"v": Endless()}


def raw(x: int) -> bytes:
    """Returns bytes."""
    return b"\\x00\\xff"


async def aok(x: int) -> str:
    """An async tool that behaves."""
    await asyncio.sleep(0)
    return "async done"
'''


def _script(names: list[str]) -> list[dict]:
    rules: list[dict] = []
    for name in names:
        call = {"name": name, "arguments": {"x": 1}}
        rules.append({"contains": f"call {name}", "last": "user", "tool_calls": [call]})
        rules.append(
            {"contains": f"call {name}", "last": "tool", "reply": "got {last_tool_result} A: 1"}
        )
    return rules


def _spec(tmp_path: Path, srv, names: list[str], **run: object) -> Path:  # noqa: ANN001
    module = f"hostile_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(TOOLS)
    (tmp_path / "d.jsonl").write_text(
        "".join(json.dumps({"id": n, "q": f"call {n}"}) + "\n" for n in names)
    )
    spec = {
        "name": "hostile",
        "dataset": {"path": "d.jsonl"},
        "prompt": "{{ q }}",
        "target": "1",
        "model": {
            "provider": "openai_compatible",
            "name": "scripted",
            "base_url": srv.openai_base_url,
            "api_key_required": False,
            "tools_module": module,
        },
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"timeout_s": 5, **run},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


def test_misbehaving_tools_are_results_the_model_sees_and_the_run_goes_on(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """Before: a sync tool calling sys.exit(3) ended the whole run with exit code 3 and
    no summary; a value whose str raised was a traceback. Now each is an error result
    (or, for odd values and lone surrogates, a text result) sent to the model, whose
    second turn echoes it, and the run exits 0 with every row scored."""
    names = ["exits", "aexits", "interrupts", "ainterrupts", "opaque", "lone", "odd"]
    srv.configure(script=_script(names))
    out = cli("run", str(_spec(tmp_path, srv, names)), "--json")
    assert out.exit_code == 0, out.stderr
    rows = {r["sample_id"]: r for r in gradetrail.read_results(json.loads(out.stdout)["run_dir"])}
    assert all(r["state"] == "scored" and r["score"] == 1.0 for r in rows.values())
    results = {n: rows[n]["transcript"]["turns"][0]["tool_results"][0] for n in names}
    kinds = {n: (r["error"] or {}).get("kind") for n, r in results.items()}
    assert kinds == {
        "exits": "SystemExit",
        "aexits": "SystemExit",
        "interrupts": "RuntimeError",  # "the function raised KeyboardInterrupt"
        "ainterrupts": "KeyboardInterrupt",
        "opaque": "UnprintableResult",
        "lone": None,
        "odd": None,
    }
    assert results["exits"]["content"] == "Error: SystemExit: 3"
    assert "Opaque" in results["opaque"]["content"]
    assert results["lone"]["content"] == "ok \\ud800 done"  # the escape, as text
    assert results["odd"]["content"] == "{(1, 2): {3}, 'when': datetime.date(2020, 1, 2)}"
    for name in names:  # the model's second turn saw exactly what was recorded
        assert rows[name]["response"] == f"got {results[name]['content']} A: 1"
    assert srv.stats()["tool_results"] == len(names)


def test_a_sample_timeout_inside_a_tool_keeps_the_results_before_it(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """Two parallel calls, the second cut short by run.sample_timeout_s: the transcript
    keeps the first call's result and records the second as a SampleTimeout (before:
    the turn's results were all dropped)."""
    calls = [{"name": "fast", "arguments": {"x": 1}}, {"name": "slow", "arguments": {"x": 2}}]
    srv.configure(script=[{"contains": "call fast", "tool_calls": calls}])
    out = cli("run", str(_spec(tmp_path, srv, ["fast"], sample_timeout_s=0.5)), "--json")
    assert out.exit_code == 1  # the only row errored
    (row,) = gradetrail.read_results(json.loads(out.stdout)["run_dir"])
    assert row["state"] == "provider_error" and row["error"]["kind"] == "ProviderTimeout"
    (turn,) = row["transcript"]["turns"]
    assert row["transcript"]["stopped"] == "sample_timeout"
    assert [r["name"] for r in turn["tool_results"]] == ["fast", "slow"]
    assert turn["tool_results"][0]["content"] == "fast done"
    assert turn["tool_results"][1]["error"]["kind"] == "SampleTimeout"


@pytest.fixture(autouse=True)
def _no_stale_module(tmp_path: Path):  # noqa: ANN202
    """Each test imports its own tools module; forget it afterwards."""
    yield
    import sys

    sys.modules.pop(f"hostile_{tmp_path.name.replace('-', '_')}", None)


def test_an_async_tool_that_blocks_its_loop_costs_its_timeout_not_the_run(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """Async tools run on their own event loop: one that blocks (time.sleep in an async
    def) or spins is a ToolTimeout after run.timeout_s and the run goes on, and a
    well-behaved async tool called after them answers on a fresh loop (before: the run's
    loop stopped for good, past every timeout)."""
    names = ["ablock", "aspin", "aok"]
    srv.configure(script=_script(names))
    spec = _spec(tmp_path, srv, names, timeout_s=1, concurrency=1)
    try:
        out = cli("run", str(spec), "--json")
    finally:
        # Python cannot kill the thread the spinning tool holds: stop it, or it keeps half
        # of the GIL for every later test of this session (the suite ran 5x slower).
        sys.modules[f"hostile_{tmp_path.name.replace('-', '_')}"].STOP_SPINNING = True
    assert out.exit_code == 0, out.stderr
    rows = {r["sample_id"]: r for r in gradetrail.read_results(json.loads(out.stdout)["run_dir"])}
    results = {n: rows[n]["transcript"]["turns"][0]["tool_results"][0] for n in names}
    assert results["ablock"]["error"]["kind"] == "ToolTimeout"
    assert results["aspin"]["error"]["kind"] == "ToolTimeout"
    assert results["aok"]["error"] is None and results["aok"]["content"] == "async done"
    assert all(r["state"] == "scored" for r in rows.values())


def test_sigterm_reaches_a_run_whose_async_tool_spins(srv, tmp_path: Path) -> None:  # noqa: ANN001
    """A spinning async tool with a long timeout: SIGTERM still stops the run, exit 143,
    the manifest says interrupted (before: the signal was never handled)."""
    import os
    import signal

    from run_support import only_run_dir, send, start_run, wait_until

    srv.configure(script=_script(["aspin"]))
    spec = _spec(tmp_path, srv, ["aspin"], timeout_s=600)
    cache, results = tmp_path / "cache.sqlite", tmp_path / "results"
    proc = start_run(spec, cache, results, dict(os.environ))
    wait_until(lambda: srv.stats()["total"] >= 1, proc=proc, what="the first turn")
    wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc)
    log = only_run_dir(results) / "log.jsonl"
    wait_until(lambda: log.exists() and '"provider_call"' in log.read_text(), proc=proc)
    send(proc, signal.SIGTERM)
    proc.communicate(timeout=30)
    assert proc.returncode == 143
    manifest = json.loads((only_run_dir(results) / "manifest.json").read_text())
    assert manifest["status"] == "interrupted"


def test_a_module_function_the_spec_does_not_offer_is_never_run(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With tools: naming only `fast`, a model call to `touch` (another public function of
    the module) is an UnknownTool result and the function does not run (before: any
    public function of the module ran when the model named it)."""
    monkeypatch.chdir(tmp_path)
    srv.configure(script=_script(["touch"]))
    path = _spec(tmp_path, srv, ["touch"])
    spec = yaml.safe_load(path.read_text())
    spec["tools"] = [{"type": "function", "function": {"name": "fast", "parameters": {}}}]
    path.write_text(yaml.safe_dump(spec))
    out = cli("run", str(path), "--json")
    assert out.exit_code == 0, out.stderr
    (row,) = gradetrail.read_results(json.loads(out.stdout)["run_dir"])
    (result,) = row["transcript"]["turns"][0]["tool_results"]
    assert result["error"]["kind"] == "UnknownTool"
    assert result["content"] == "Error: UnknownTool: no tool named 'touch'; the tools are fast"
    assert not (tmp_path / "touched").exists()


def test_results_and_errors_past_max_tool_output_are_cut_and_odd_values_are_text(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """A tool's 1 MB error message and a result of multi-byte characters are cut at
    run.max_tool_output bytes (never inside a character) inside the marker; None and
    bytes reach the model as text; every row is scored."""
    names = ["loud", "wide", "nothing", "raw"]
    srv.configure(script=_script(names))
    out = cli("run", str(_spec(tmp_path, srv, names, max_tool_output=1001)), "--json")
    assert out.exit_code == 0, out.stderr
    rows = {r["sample_id"]: r for r in gradetrail.read_results(json.loads(out.stdout)["run_dir"])}
    assert all(r["state"] == "scored" and r["score"] == 1.0 for r in rows.values())
    results = {n: rows[n]["transcript"]["turns"][0]["tool_results"][0] for n in names}
    loud = results["loud"]
    assert loud["error"]["kind"] == "ValueError" and len(loud["content"]) < 1300
    assert "was too long to be displayed (1000000 bytes" in loud["content"]
    wide = results["wide"]["content"]
    assert "(20000 bytes; run.max_tool_output is 1001)" in wide
    assert "\n" + "\u00e9" * 500 + "\n<END_TOOL_OUTPUT>" in wide  # 1000 bytes: no half
    assert results["nothing"]["content"] == "null"
    assert results["raw"]["content"] == json.dumps("b'\\x00\\xff'")  # str(bytes), as JSON


def test_arguments_the_tool_cannot_take_are_invalid_arguments_never_run(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Arguments that break the tool's schema (``"5"`` for an integer, a required one
    missing) or its signature (an unknown one) are InvalidArguments naming the field,
    and the tool does not run (before: ``"5"`` reached the tool and came back as its own
    TypeError, "can't multiply sequence by non-int", as if the tool had failed)."""
    monkeypatch.chdir(tmp_path)
    calls = {"type": {"x": "5"}, "missing": {}, "unknown": {"x": 1, "y": 2}}
    rules: list[dict] = []
    for case, arguments in calls.items():
        call = {"name": "touch", "arguments": arguments}
        rules.append({"contains": f"call {case}", "last": "user", "tool_calls": [call]})
        rules.append({"contains": f"call {case}", "last": "tool", "reply": "A: 1"})
    srv.configure(script=rules)
    out = cli("run", str(_spec(tmp_path, srv, list(calls))), "--json")
    assert out.exit_code == 0, out.stderr
    rows = {r["sample_id"]: r for r in gradetrail.read_results(json.loads(out.stdout)["run_dir"])}
    results = {n: rows[n]["transcript"]["turns"][0]["tool_results"][0] for n in calls}
    assert {n: r["error"]["kind"] for n, r in results.items()} == dict.fromkeys(
        calls, "InvalidArguments"
    )
    assert results["type"]["error"]["message"].startswith("'5' is not of type 'integer' (at x)")
    assert "'x' is a required property" in results["missing"]["error"]["message"]
    assert "unexpected keyword argument 'y'" in results["unknown"]["error"]["message"]
    assert not (tmp_path / "touched").exists()


def test_a_value_whose_text_never_comes_costs_the_tools_timeout_not_the_run(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """A tool returning an object whose str spins forever is a ToolTimeout after
    run.timeout_s and the run ends (before: its value was turned into text on the run's
    own event loop, outside the tool's timeout, and the run never ended)."""
    srv.configure(script=_script(["endless"]))
    try:
        out = cli("run", str(_spec(tmp_path, srv, ["endless"], timeout_s=1)), "--json")
    finally:  # the spinning thread holds half the GIL for every later test: stop it
        sys.modules[f"hostile_{tmp_path.name.replace('-', '_')}"].STOP_SPINNING = True
    assert out.exit_code == 0, out.stderr
    (row,) = gradetrail.read_results(json.loads(out.stdout)["run_dir"])
    (result,) = row["transcript"]["turns"][0]["tool_results"]
    assert result["error"]["kind"] == "ToolTimeout"
    assert row["state"] == "scored"
