"""Text UTF-8 cannot encode (a lone UTF-16 surrogate) never crashes a run: from a provider's
JSON it is cached losslessly and scored; in a recordings file or a dataset row it is
kept in every file the run writes; sent to an HTTP API it is one provider_error row."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from http_support import PROTOCOLS, SECRET_KEY, gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

import gradetrail

server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")

LONE = "A: 18 \ud800 done \udfff"


@pytest.fixture(autouse=True)
def _keys(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("ANTHROPIC_API_KEY", SECRET_KEY)


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_lone_surrogate_in_a_completion_is_cached_losslessly(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
    cache_path: Path,
    protocol: str,
) -> None:
    """The server answers `\\ud800` in its JSON: the run completes (exit 0), the row holds
    the exact text, and a re-run serves it from the cache (before: a traceback on every
    run, each paying again)."""
    srv.configure(script=[{"contains": "Janet", "reply": LONE}])
    gsm8k_spec(tmp_path, srv, protocol, limit=2)
    spec = str(tmp_path / "spec.yaml")
    first = cli("run", spec)
    assert first.exit_code == 0, first.stderr
    assert "scored 2" in first.stdout and "\ud800" not in first.stdout
    again = cli("run", spec, "--json")
    manifest = json.loads(again.stdout)
    assert manifest["cache_hits"] == 2 and srv.stats()["total"] == 2
    rows = gradetrail.read_results(manifest["run_dir"])
    assert rows[0]["response"] == LONE and rows[0]["score"] == 1.0
    assert cli("cache", "check", "--cache", str(cache_path)).exit_code == 0


def _replay_eval(tmp_path: Path, question: str, recorded: str) -> Path:
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"id": "a", "q": question, "t": "1"})
        + "\n"
        + json.dumps({"id": "b", "q": "2", "t": "2"})
        + "\n"
    )
    (tmp_path / "rec.jsonl").write_text(
        json.dumps({"id": "a", "m": recorded}) + "\n" + json.dumps({"id": "b", "m": "A: 2"}) + "\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\ntarget: '{{ t }}'\n"
        "model: {provider: replay, name: m, recordings: {path: rec.jsonl, response_field: m}}\n"
        "scorer: {type: numeric, marker: 'A:'}\n"
    )
    return spec


@pytest.mark.parametrize(
    ("question", "recorded"),
    [("1", "A: 1 \ud800"), ("1 \udc80", "A: 1"), ("\ud83d", "\udfffA: 1")],
    ids=["recordings", "dataset-row", "both"],
)
def test_lone_surrogates_from_recordings_or_a_dataset_row_are_kept(
    cli,  # noqa: ANN001
    tmp_path: Path,
    question: str,
    recorded: str,
) -> None:
    """A recordings file or dataset row with a lone surrogate: the run completes, every
    file holds the exact text (JSON escapes), and a re-run is all cache hits."""
    spec = _replay_eval(tmp_path, question, recorded)
    first = cli("run", str(spec), "--json")
    assert first.exit_code == 0, first.stderr
    manifest = json.loads(first.stdout)
    assert manifest["counts"] == {"scored": 2} and manifest["score"]["mean"] == 1.0
    run_dir = Path(manifest["run_dir"])
    rows = gradetrail.read_results(run_dir)
    assert rows[0]["response"] == recorded
    assert gradetrail.read_manifest(run_dir)["status"] == "complete"
    assert len(gradetrail.read_samples(run_dir)) == 2
    for line in (run_dir / "log.jsonl").read_text().splitlines():
        json.loads(line)
    again = json.loads(cli("run", str(spec), "--json").stdout)
    assert again["cache_hits"] == 2
    assert gradetrail.read_results(run_dir)[0]["response"] == recorded


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_a_dataset_row_an_api_cannot_be_sent_is_one_error_row(
    cli,  # noqa: ANN001
    srv,  # noqa: ANN001
    tmp_path: Path,
    protocol: str,
) -> None:
    """A row whose prompt holds a lone surrogate cannot go out as UTF-8 JSON: that sample
    is a provider_error naming the character and the fix; the other rows are scored."""
    rows = [
        line
        for line in (Path(__file__).parents[2] / "examples/data/gsm8k/test.jsonl")
        .read_text()
        .splitlines()[:3]
    ]
    broken = json.loads(rows[1])
    broken["question"] += " \udc80"
    rows[1] = json.dumps(broken)
    data = tmp_path / "d.jsonl"
    data.write_text("\n".join(rows) + "\n")
    gsm8k_spec(tmp_path, srv, protocol, limit=None)
    spec = (
        (tmp_path / "spec.yaml")
        .read_text()
        .replace(str(Path(__file__).parents[2] / "examples/data/gsm8k/test.jsonl"), str(data))
    )
    (tmp_path / "spec.yaml").write_text(spec)
    out = cli("run", str(tmp_path / "spec.yaml"), "--json")
    assert out.exit_code == 0, out.stderr
    manifest = json.loads(out.stdout)
    assert manifest["counts"] == {"scored": 2, "provider_error": 1}
    row = gradetrail.read_results(manifest["run_dir"])[1]
    assert row["error"]["kind"] == "BadRequest"
    assert "U+DC80, a lone surrogate" in row["error"]["message"]
    assert "fix the dataset row" in row["error"]["message"]
    assert srv.stats()["total"] == 2


def test_a_lone_surrogate_in_a_row_given_to_a_python_function_is_hashed(
    cli,  # noqa: ANN001
    tmp_path: Path,
) -> None:
    """A ``python`` provider taking ``(request, row)`` keys each request on the row's
    SHA-256: a row holding a lone surrogate is hashed (before: a traceback before any
    call), the function receives it, and a re-run is all cache hits."""
    (tmp_path / "d.jsonl").write_text(
        json.dumps({"id": "a", "q": "1", "note": "x \ud800 y", "t": "1"})
        + "\n"
        + json.dumps({"id": "b", "q": "2", "note": "plain", "t": "2"})
        + "\n"
    )
    (tmp_path / "rowapp.py").write_text(
        "def answer(request, row):\n    return f\"A: {row['q']} ({len(row['note'])})\"\n"
    )
    spec = tmp_path / "s.yaml"
    spec.write_text(
        "name: t\ndataset: {path: d.jsonl}\nprompt: '{{ q }}'\ntarget: '{{ t }}'\n"
        "model: {provider: python, name: m, function: 'rowapp:answer'}\n"
        "scorer: {type: numeric, marker: 'A:'}\n"
    )
    first = cli("run", str(spec), "--json")
    assert first.exit_code == 0, first.stderr
    manifest = json.loads(first.stdout)
    assert manifest["counts"] == {"scored": 2} and manifest["score"]["mean"] == 1.0
    assert gradetrail.read_results(manifest["run_dir"])[0]["response"] == "A: 1 (5)"
    assert json.loads(cli("run", str(spec), "--json").stdout)["cache_hits"] == 2


def test_compact_json_writes_what_json_dumps_writes() -> None:
    from gradetrail._util.jsontext import compact_json

    body = {
        "model": "m",
        "messages": [{"role": "user", "content": 'Q: "quoted" \\ naïve 日本 \n\t\x00 end'}],
        "max_tokens": 10,
        "stop": ["\n\n", "A:"],
        "stream": False,
        "seed": None,
        "big": 2**70,
    }
    assert compact_json(body) == json.dumps(body, ensure_ascii=False, separators=(",", ":"))
    floats = {"temperature": 0.7, "top_p": 1e-05, "x": float("nan"), "y": float("-inf")}
    text = compact_json(floats)
    assert "NaN" in text and "-Infinity" in text  # as json.dumps writes them
    again = json.loads(text)
    assert again["temperature"] == 0.7 and again["top_p"] == 1e-05 and again["y"] == float("-inf")


def test_compact_json_keeps_a_lone_surrogate_as_json_dumps_does() -> None:
    from gradetrail._util.jsontext import compact_json

    assert compact_json({"content": LONE}) == json.dumps(
        {"content": LONE}, ensure_ascii=False, separators=(",", ":")
    )


@pytest.mark.parametrize(
    "data",
    [
        b'{"a": [1, 2.5, -0, 1e400, "x\\u00e9\xc3\xa9"], "b": {"c": null, "d": true}}',
        b'{"a": NaN, "b": -Infinity}',
        b'{"a": 1, "a": 2}',
        b'{"text": "A: 18 \\ud800 done"}',  # a lone surrogate's escape
        "\ufeff{}".encode(),  # a byte-order mark
        json.dumps({"a": "b"}).encode("utf-16"),
        "[" * 500 + "]" * 500,
        b'{"n": 123456789012345678901234567890}',
    ],
)
def test_parsed_reads_what_json_loads_reads(data: bytes | str) -> None:
    from gradetrail._util.jsontext import parsed

    assert repr(parsed(data)) == repr(json.loads(data))


@pytest.mark.parametrize("data", [b"", b"{", b"{} x", b"\xff\xfe\xfd", b"'a'"])
def test_parsed_refuses_what_json_loads_refuses(data: bytes) -> None:
    from gradetrail._util.jsontext import parsed

    with pytest.raises(ValueError):
        parsed(data)
    with pytest.raises(ValueError):
        json.loads(data)
