"""The agent loop: the model calls Python tools through each provider's native tool API
(the real SDKs against the local protocol server), every turn is cached, and the bundled
calculator example scores 4/5 on GSM8K problems with a re-run making 0 calls."""

from __future__ import annotations

import json
import shutil
import sys
from pathlib import Path

import pytest
import yaml
from paths import EXAMPLES, GSM8K_DATA
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

SCRIPT = EXAMPLES / "data" / "agent" / "server_script.json"
server = protocol_server_fixture(scope="module", name="server", script=str(SCRIPT))
srv = fresh_protocol_server_fixture("server", name="srv")
PROTOCOLS = ["openai_compatible", "anthropic"]
#: GSM8K labels of the first five test problems, and what the scripted agent answers
LABELS = {"1": 18, "2": 3, "3": 70000, "4": 540, "5": 20}
ANSWERS = {"1": "18", "2": "3", "3": "120000", "4": "540", "5": "20"}


@pytest.fixture(autouse=True)
def _key(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", "test-key")


def _overrides(srv, protocol: str, *extra: str) -> list[str]:
    url = srv.anthropic_base_url if protocol == "anthropic" else srv.openai_base_url
    out = [f"model.provider={protocol}", "model.name=scripted-agent", f"model.base_url={url}"]
    if protocol == "openai_compatible":
        out.append("model.api_key_required=false")
    return [*out, *extra]


def _example_copy(tmp_path: Path, module: str) -> Path:
    """The calculator example in tmp_path, its tools module renamed ``module`` (so a test
    can edit it without touching another test's import)."""
    (tmp_path / "data").mkdir()
    shutil.copytree(GSM8K_DATA, tmp_path / "data" / "gsm8k")
    shutil.copy(EXAMPLES / "agent_tools" / "calculator.py", tmp_path / f"{module}.py")
    spec = yaml.safe_load((EXAMPLES / "agent-calculator.yaml").read_text())
    spec["model"]["tools_module"] = module
    path = tmp_path / "agent.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_calculator_example_scores_four_of_five_and_a_rerun_makes_no_call(
    srv, tmp_path: Path, protocol: str
) -> None:
    """Parallel calls, a raising tool, an unknown tool and malformed arguments each go
    back to the model as error results; the answers score 4/5 against the GSM8K labels;
    totals are summed over the turns; a re-run is served from the cache (0 calls)."""
    spec = gradetrail.load_spec(EXAMPLES / "agent-calculator.yaml", _overrides(srv, protocol))
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    rows = {r["sample_id"]: r for r in gradetrail.read_results(result.run_dir)}
    assert {sid: r["target"] for sid, r in rows.items()} == {k: str(v) for k, v in LABELS.items()}
    assert {sid: r["scorer"]["extracted"] for sid, r in rows.items()} == ANSWERS
    assert result.manifest.score.mean == pytest.approx(0.8)
    turns = {sid: len(r["transcript"]["turns"]) for sid, r in rows.items()}
    assert turns == {"1": 2, "2": 3, "3": 2, "4": 3, "5": 3}
    calls = srv.stats()["total"]
    assert calls == sum(turns.values())
    janet = rows["1"]["transcript"]
    assert [r["content"] for r in janet["turns"][0]["tool_results"]] == ["9", "18"]
    assert janet["stopped"] == "answered" and janet["tools"] == ["calculate"]
    robe = rows["2"]["transcript"]["turns"][0]["tool_results"][0]
    assert robe["is_error"] and robe["error"]["kind"] == "ZeroDivisionError"
    unknown = rows["4"]["transcript"]["turns"][0]["tool_results"][0]
    assert unknown["error"]["kind"] == "UnknownTool" and "multiply" in unknown["content"]
    bad = rows["5"]["transcript"]["turns"][0]
    assert bad["tool_calls"][0]["arguments"] is None
    assert bad["tool_results"][0]["error"]["kind"] == "InvalidArguments"
    for row in rows.values():
        t = row["transcript"]["turns"]
        assert row["input_tokens"] == sum(turn["input_tokens"] for turn in t) > 0
        assert row["output_tokens"] == sum(turn["output_tokens"] for turn in t)
        assert row["stop_reason"] == "end_turn" and t[0]["stop_reason"] == "tool_use"
        assert len({turn["key"] for turn in t}) == len(t)
    assert len(rows["1"]["tool_calls"]) == 2 and len(rows["2"]["tool_calls"]) == 2
    conversations = result.manifest.conversations
    assert conversations is not None and conversations.turns == 13
    assert (conversations.rows, conversations.tool_calls, conversations.tool_errors) == (5, 9, 3)
    assert conversations.stopped == {"answered": 5}
    log = [json.loads(line) for line in (result.run_dir / "log.jsonl").read_text().splitlines()]
    turns_logged = {}
    for e in log:
        if e.get("event") == "provider_call":
            turns_logged.setdefault(e["sample_id"], []).append(e["turn"])
    assert turns_logged == {sid: list(range(1, n + 1)) for sid, n in turns.items()}
    tools = [e for e in log if e.get("event") == "tool_call"]
    assert len(tools) == 9 and sum(e["outcome"] == "error" for e in tools) == 3
    assert {(e["sample_id"], e["turn"], e["error"]) for e in tools if e["error"]} == {
        ("2", 1, "ZeroDivisionError"),
        ("4", 1, "UnknownTool"),
        ("5", 1, "InvalidArguments"),
    }
    again = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert srv.stats()["total"] == calls  # every turn replayed from the cache
    assert again.manifest.cache_hits == 5
    assert again.manifest.score.mean == pytest.approx(0.8)
    if protocol == "anthropic":  # the viewer's sample page lists the turns (once is enough)
        _sample_page_shows_the_turns(tmp_path / "results", result.run_dir.name)
    replayed = gradetrail.read_results(again.run_dir)
    assert [_replayable(r) for r in replayed] == [_replayable(r) for r in rows.values()]
    assert all(
        t["cached"] and t["attempts"] == 0 for r in replayed for t in r["transcript"]["turns"]
    )


def _sample_page_shows_the_turns(root: Path, run: str) -> None:
    """The sample page renders the transcript: the tool call, the tool's error result
    and the final answer, as distinct entries."""
    from starlette.testclient import TestClient

    from gradetrail.view import create_app

    client = TestClient(create_app(root), base_url="http://127.0.0.1")
    page = client.get(f"/runs/{run}/sample", params={"id": "2"})
    assert page.status_code == 200
    assert "transcript: 3 model turns, stopped: answered" in page.text
    assert page.text.count('class="tool-result error"') == 1
    assert page.text.count('class="tool-result') == 2
    assert "ZeroDivisionError" in page.text and "2 + 2 / 2" in page.text


def _calls_logged(run_dir: Path) -> int:
    """provider_call lines in a run's log so far (complete lines only)."""
    try:
        text = (run_dir / "log.jsonl").read_text()
    except FileNotFoundError:
        return 0
    return sum('"provider_call"' in line for line in text.splitlines(keepends=True)[:-1])


def _replayable(row: dict) -> list:
    """What a re-run must reproduce of a transcript: each turn's key, response, calls and
    the tool results' content."""
    return [
        (t["key"], t["response"], t["tool_calls"], [x["content"] for x in t["tool_results"]])
        for t in row["transcript"]["turns"]
    ]


def test_max_turns_stops_the_loop_and_scores_the_last_response(srv, tmp_path: Path) -> None:
    """With run.max_turns 1 the model's first-turn tool calls are not run; the transcript
    says max_turns and the (numberless) response scores 0."""
    spec = gradetrail.load_spec(
        EXAMPLES / "agent-calculator.yaml",
        _overrides(srv, "openai_compatible", "run.max_turns=1", "dataset.limit=2"),
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    rows = gradetrail.read_results(result.run_dir)
    assert [r["transcript"]["stopped"] for r in rows] == ["max_turns", "max_turns"]
    assert [r["score"] for r in rows] == [0.0, 0.0]
    assert all(r["transcript"]["turns"][0]["tool_results"] == [] for r in rows)
    assert srv.stats()["total"] == 2


def test_editing_a_tool_misses_only_from_the_turn_after_a_tool_result(srv, tmp_path: Path) -> None:
    """The tools module's hash enters the key of turns after a tool result: editing the
    module serves every first turn from the cache and asks again for the later ones; the
    run's identity changes with the module."""
    module = f"calc_{tmp_path.name.replace('-', '_')}"
    path = _example_copy(tmp_path, module)
    spec = gradetrail.load_spec(path, _overrides(srv, "openai_compatible"))
    first = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    before = srv.stats()["total"]
    assert before == 13
    source = tmp_path / f"{module}.py"
    source.write_text(source.read_text() + "\n# edited\n")
    del sys.modules[module]
    second = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    assert srv.stats()["total"] - before == 13 - 5  # all but the five first turns
    assert second.run_dir != first.run_dir
    assert second.manifest.file_hashes["tools_module"] != first.manifest.file_hashes["tools_module"]
    rows = gradetrail.read_results(second.run_dir)
    assert all(r["transcript"]["turns"][0]["cached"] for r in rows)
    assert not any(r["transcript"]["turns"][1]["cached"] for r in rows)


def test_a_run_pays_only_for_the_turns_it_did_not_read_from_the_cache(srv, tmp_path: Path) -> None:
    """After a tools module edit the five first turns come from the cache and the eight
    later ones are paid: the manifest's cost_usd is those eight turns' cost and
    cost_usd_cached the five cached ones' (before, every row was paid in full, the cached
    turns' cost counted as paid this run); the rows still cost the whole conversation."""
    module = f"calc_{tmp_path.name.replace('-', '_')}"
    path = _example_copy(tmp_path, module)
    price = json.dumps({"input_per_mtok": 1.0, "output_per_mtok": 2.0})
    spec = gradetrail.load_spec(path, _overrides(srv, "openai_compatible", f"model.price={price}"))
    first = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    source = tmp_path / f"{module}.py"
    source.write_text(source.read_text() + "\n# edited\n")
    del sys.modules[module]
    second = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    rows = gradetrail.read_results(second.run_dir)
    turns = [t for r in rows for t in r["transcript"]["turns"]]
    paid = sum(t["cost_usd"] for t in turns if not t["cached"])
    cached = sum(t["cost_usd"] for t in turns if t["cached"])
    assert sum(not t["cached"] for t in turns) == 8 and paid > 0 and cached > 0
    assert second.manifest.cost_usd == pytest.approx(paid, rel=1e-9)
    assert second.manifest.cost_usd_cached == pytest.approx(cached, rel=1e-9)
    assert sum(r["cost_usd"] for r in rows) == pytest.approx(paid + cached, rel=1e-9)
    assert first.manifest.cost_usd == pytest.approx(paid + cached, rel=1e-9)
    assert first.manifest.cost_usd_cached is None


@pytest.mark.parametrize("protocol", PROTOCOLS)
@pytest.mark.parametrize("choice", ["required", "{name: calculate}"])
def test_a_forcing_tool_choice_holds_for_the_first_turn_only(
    srv, tmp_path: Path, protocol: str, choice: str
) -> None:
    """tool_choice required (or a named tool) forces the first turn's call; later turns
    are sent auto, so the model can answer from the tool results: 4/5 in 13 turns, as
    without it (before, every turn was forced, the server's model could only call the
    tool again, and every sample ran its six turns to max_turns and scored 0)."""
    spec = gradetrail.load_spec(
        EXAMPLES / "agent-calculator.yaml", _overrides(srv, protocol, f"tool_choice={choice}")
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    rows = gradetrail.read_results(result.run_dir)
    assert {r["sample_id"]: r["transcript"]["stopped"] for r in rows} == dict.fromkeys(
        "12345", "answered"
    )
    assert result.manifest.score.mean == pytest.approx(0.8)
    assert srv.stats()["total"] == sum(len(r["transcript"]["turns"]) for r in rows) == 13


def test_a_hung_tool_ends_at_the_sample_timeout_keeping_the_transcript(srv, tmp_path: Path) -> None:
    """A tool that never returns stops its sample at run.sample_timeout_s: a
    provider_error (ProviderTimeout) whose row keeps the turns so far."""
    module = f"hang_{tmp_path.name.replace('-', '_')}"
    path = _example_copy(tmp_path, module)
    (tmp_path / f"{module}.py").write_text(
        "import time\n\n\ndef calculate(expression: str) -> str:\n"
        '    """Never returns."""\n    time.sleep(600)\n'
    )
    spec = gradetrail.load_spec(
        path,
        # long enough for the first turn's model call on a loaded machine, so the bound
        # always falls in the hung tool
        _overrides(srv, "openai_compatible", "run.sample_timeout_s=3", "dataset.limit=1"),
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    (row,) = gradetrail.read_results(result.run_dir)
    assert row["state"] == "provider_error"
    assert row["error"]["kind"] == "ProviderTimeout"
    assert "sample_timeout_s" in row["error"]["message"]
    assert row["transcript"]["stopped"] == "sample_timeout"
    assert len(row["transcript"]["turns"]) == 1


@pytest.mark.parametrize("signame", ["SIGKILL", "SIGINT"])
def test_a_stop_mid_conversation_then_rerun_pays_only_for_uncached_turns(
    tmp_path: Path, signame: str
) -> None:
    """kill -9 (or Ctrl-C) of a real agent-loop run while conversations are under way,
    then a re-run: the server gets exactly one request per turn not cached yet (a
    conversation resumes from its last cached turn), and the results are those of an
    uninterrupted run. After Ctrl-C the conversations in flight finish their turns, land
    as whole rows and the run exits 130."""
    import os
    import signal

    from protocol_server import running_server
    from run_support import drain_logged, only_run_dir, run_to_end, send, start_run, wait_until

    from gradetrail.cache.store import ResponseCache

    cache, results = tmp_path / "cache.sqlite", tmp_path / "results"
    # requests after the 3rd are held: once both conversations wait on one, the stop comes
    # mid-conversation on any machine (Ctrl-C then releases them, to let them finish)
    hold = [{"kind": "hold", "after": 3}]
    with running_server(latency=0.05, script=str(SCRIPT), faults=hold) as live:
        args = [a for o in _overrides(live, "openai_compatible") for a in ("--set", o)]
        args += ["--set", "run.concurrency=2"]
        spec = EXAMPLES / "agent-calculator.yaml"
        proc = start_run(spec, cache, results, dict(os.environ), *args)
        try:
            wait_until(lambda: results.exists() and any(results.iterdir()), proc=proc)
            run_dir = only_run_dir(results)
            live.wait_held(2)
            send(proc, getattr(signal, signame))
            if signame == "SIGINT":
                wait_until(lambda: drain_logged(run_dir), proc=proc, what="drain")
                live.release()
            proc.communicate(timeout=60)
        finally:
            if proc.poll() is None:
                proc.kill()
                proc.communicate()
        if signame == "SIGINT":
            assert proc.returncode == 130
            landed = gradetrail.read_results(run_dir)
            assert 1 <= len(landed) < 5
            assert all(r["transcript"]["stopped"] == "answered" for r in landed)
        first = live.settled_stats()["total"]
        live.configure(faults=[])
        store = ResponseCache(cache)
        cached = store.stats().entries
        store.close()
        assert 3 <= cached < 13
        code, _, err = run_to_end(spec, cache, results, dict(os.environ), *args)
        after = live.stats()
    assert code == 0, err
    assert after["total"] - first == 13 - cached
    rows = gradetrail.read_results(run_dir)
    assert [r["sample_id"] for r in rows] == ["1", "2", "3", "4", "5"]
    assert {r["sample_id"]: r["scorer"]["extracted"] for r in rows} == ANSWERS
    assert sum(len(r["transcript"]["turns"]) for r in rows) == 13


def test_a_turn_of_unknown_cost_leaves_the_conversations_cost_unknown(
    srv, tmp_path: Path, cli
) -> None:
    """One turn billed a server tool with no known fee has no cost: its conversation's
    cost is unknown (null), not the other turns' sum, the manifest counts the row as
    unpriced and the summary's cost line says unknown (before: the row and the run showed
    the priced turn's cost alone as the conversation's)."""
    srv.configure(
        faults=[
            {"kind": "usage", "first": 1, "usage": {"server_tool_use": {"mystery_requests": 1}}}
        ]
    )
    price = json.dumps({"input_per_mtok": 1.0, "output_per_mtok": 2.0})
    overrides = _overrides(srv, "anthropic", f"model.price={price}", "dataset.limit=2")
    sets = [f"--set={o}" for o in overrides]
    out = cli("run", str(EXAMPLES / "agent-calculator.yaml"), *sets)
    assert out.exit_code == 0, out.stderr
    line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("results "))
    run_dir = Path(line.split(None, 1)[1].strip())
    rows = gradetrail.read_results(run_dir)
    turns = [t["cost_usd"] for t in rows[0]["transcript"]["turns"]]
    assert turns[0] is None and turns[1] > 0
    assert rows[0]["cost_usd"] is None and rows[1]["cost_usd"] > 0
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["unpriced_rows"] == 1
    assert manifest["cost_usd"] == pytest.approx(rows[1]["cost_usd"])
    line = next(ln for ln in out.stdout.splitlines() if ln.strip().startswith("cost "))
    assert "unknown: model $" in line and "1 row paid at no known price" in line


def _echo_agent(tmp_path: Path, srv, protocol: str, **run: object) -> Path:
    """A one-row agent eval whose tools module has ``echo(text)`` and, with the others,
    ``big(n)`` (a result of n characters), ``boom()`` (raises) and ``many()``."""
    module = f"echo_{tmp_path.name.replace('-', '_')}"
    (tmp_path / f"{module}.py").write_text(
        "def echo(text: str) -> str:\n    '''Echo the text.'''\n    return 'got ' + text\n\n\n"
        "def big(n: int) -> str:\n    '''n characters.'''\n    return 'x' * n\n"
    )
    (tmp_path / "data.jsonl").write_text('{"id": "a", "q": "hello"}\n')
    url = srv.anthropic_base_url if protocol == "anthropic" else srv.openai_base_url
    model = {"provider": protocol, "name": "scripted-agent", "base_url": url}
    if protocol == "openai_compatible":
        model["api_key_required"] = False
    spec = {
        "name": "echo-agent",
        "dataset": {"path": "data.jsonl"},
        "prompt": "Q: {{ q }}",
        "target": "x",
        "model": {**model, "tools_module": module},
        "scorer": {"type": "exact"},
        "run": {"max_retries": 0, **run},
    }
    path = tmp_path / "spec.yaml"
    path.write_text(yaml.safe_dump(spec))
    return path


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_lone_surrogate_the_model_wrote_is_named_as_the_models_not_the_datasets(
    srv, tmp_path: Path, protocol: str
) -> None:
    """A model whose tool-call arguments decode to a lone surrogate (an unpaired \\ud800
    escape) and whose text holds one: the call is not run, the model is told its
    arguments are at fault (InvalidArguments, naming U+D800), the conversation goes on and
    the sample is scored (before: the next turn's request could not be encoded and the
    row was a provider_error telling the user to fix the dataset row)."""
    srv.configure(
        script={
            "rules": [
                {
                    "contains": "hello",
                    "last": "user",
                    "reply": "let me see \ud800",
                    "tool_calls": [
                        {"name": "echo", "arguments": {"text": "a\ud800b"}},
                        {"name": "echo\udc00", "arguments": {"text": "c"}, "id": "call_\ud800"},
                    ],
                },
                {"contains": "hello", "last": "tool", "reply": "x"},
            ],
            "models": ["scripted-agent"],
        }
    )
    spec = gradetrail.load_spec(_echo_agent(tmp_path, srv, protocol))
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    (row,) = gradetrail.read_results(result.run_dir)
    assert row["state"] == "scored" and row["score"] == 1.0
    tool, named = row["transcript"]["turns"][0]["tool_results"]
    assert named["error"]["kind"] == "UnknownTool"  # a name the model wrote unencodable
    assert tool["error"]["kind"] == "InvalidArguments"
    assert "the model's arguments hold U+D800" in tool["error"]["message"]
    assert "dataset row" not in json.dumps(row)
    assert srv.stats()["total"] == 2


@pytest.mark.parametrize("limit", [None, 1000, 0])
def test_a_tool_result_past_max_tool_output_is_cut_inside_a_marker(
    srv, tmp_path: Path, limit: int | None
) -> None:
    """A tool returning 5 MB is sent back cut to run.max_tool_output bytes (16 KiB by
    default, as Inspect AI's max_tool_output) inside Inspect's marker, naming the tool,
    the result's size and the bound; 0 sends it whole (before: always whole)."""
    srv.configure(
        script={
            "rules": [
                {
                    "contains": "hello",
                    "last": "user",
                    "tool_calls": [{"name": "big", "arguments": {"n": 5_000_000}}],
                },
                {"contains": "hello", "last": "tool", "reply": "x"},
            ],
            "models": ["scripted-agent"],
        }
    )
    run = {} if limit is None else {"max_tool_output": limit}
    spec = gradetrail.load_spec(_echo_agent(tmp_path, srv, "openai_compatible", **run))
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    (row,) = gradetrail.read_results(result.run_dir)
    assert row["state"] == "scored"
    (tool,) = row["transcript"]["turns"][0]["tool_results"]
    bound = 16 * 1024 if limit is None else limit
    if bound:
        assert tool["content"] == (
            "The output of your call to big was too long to be displayed (5000000 bytes; "
            f"run.max_tool_output is {bound}).\nHere is a truncated version:\n"
            f"<START_TOOL_OUTPUT>\n{'x' * bound}\n<END_TOOL_OUTPUT>"
        )
    else:
        assert tool["content"] == "x" * 5_000_000
    assert not tool["is_error"]


#: a first turn cut at max_tokens while writing its one calculator call, as each API
#: sends it: Chat Completions' finish_reason length with the arguments' prefix, the
#: Responses API's incomplete answer and function_call item, and a Messages tool_use
#: whose input the API parsed from the prefix (here still a valid call, of the wrong sum)
_CUT_TURNS = {
    "openai_compatible": {
        "id": "chatcmpl-cut",
        "object": "chat.completion",
        "created": 1,
        "model": "scripted-agent",
        "choices": [
            {
                "index": 0,
                "message": {
                    "role": "assistant",
                    "content": None,
                    "tool_calls": [
                        {
                            "id": "call_cut",
                            "type": "function",
                            "function": {
                                "name": "calculate",
                                "arguments": '{"expression": "16 - 3',
                            },
                        }
                    ],
                },
                "finish_reason": "length",
            }
        ],
        "usage": {"prompt_tokens": 120, "completion_tokens": 16},
    },
    "openai_responses": {
        "id": "resp_cut",
        "object": "response",
        "created_at": 1,
        "status": "incomplete",
        "incomplete_details": {"reason": "max_output_tokens"},
        "model": "scripted-agent",
        "output": [
            {
                "type": "function_call",
                "id": "fc_cut",
                "call_id": "call_cut",
                "name": "calculate",
                "arguments": '{"expression": "16 - 3',
                "status": "incomplete",
            }
        ],
        "usage": {"input_tokens": 120, "output_tokens": 16},
    },
    "anthropic": {
        "id": "msg_cut",
        "type": "message",
        "role": "assistant",
        "model": "scripted-agent",
        "content": [
            {
                "type": "tool_use",
                "id": "toolu_cut",
                "name": "calculate",
                "input": {"expression": "16 - 3"},
            }
        ],
        "stop_reason": "max_tokens",
        "stop_sequence": None,
        "usage": {"input_tokens": 120, "output_tokens": 16},
    },
}


@pytest.mark.parametrize("client", ["aiohttp", "sdk"])
@pytest.mark.parametrize("protocol", sorted(_CUT_TURNS))
def test_a_turn_cut_at_max_tokens_runs_none_of_its_calls(
    srv, tmp_path: Path, protocol: str, client: str
) -> None:
    """A turn that stopped at max_tokens while writing a tool call ends the conversation:
    the cut call is never run (before: run with its prefix or {}, its result sent back and
    the conversation 'answered', end_turn, not truncated); the row is the truncated turn's
    (stop reason max_tokens, truncated, its tokens), the transcript says max_tokens."""
    srv.configure(
        faults=[{"kind": "answer", "body": _CUT_TURNS[protocol], "status": 200, "first": 1}]
    )
    extra = ["dataset.limit=1", f"model.http_client={client}", "model.params.temperature=null"]
    if protocol == "openai_responses":
        extra.append("model.api_key_required=false")
    spec = gradetrail.load_spec(
        EXAMPLES / "agent-calculator.yaml", _overrides(srv, protocol, *extra)
    )
    result = gradetrail.run_eval(spec, results_root=tmp_path / "results")
    (row,) = gradetrail.read_results(result.run_dir)
    transcript = row["transcript"]
    assert transcript["stopped"] == "max_tokens"
    assert [t["tool_results"] for t in transcript["turns"]] == [[]]
    assert (row["stop_reason"], row["truncated"]) == ("max_tokens", True)
    assert (row["input_tokens"], row["output_tokens"]) == (120, 16)
    assert row["score"] == 0.0 and result.manifest.truncated == 1
    assert srv.stats()["total"] == 1
