"""Each per-row fast path of a warm run gives exactly what the general path gives: cache
keys, rendered templates, log lines, result rows and samples.jsonl lines, over awkward
text (quotes, escapes, control characters, non-ASCII, lone surrogates, NaN)."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest
from paths import GSM8K_SPEC

import gradetrail.rundir.runlog as runlog
from gradetrail._util.jsontext import model_json
from gradetrail.prompts.templates import Template
from gradetrail.providers.base import PromptKeys, Request, Response
from gradetrail.rundir.layout import RunDir
from gradetrail.rundir.results import (
    SPARSE_FIELDS,
    JudgeRecord,
    SampleResult,
    SampleScore,
    make_row,
    row_json,
)
from gradetrail.rundir.summary import Tally
from gradetrail.stats.reducers import reduce_scores

TEXTS = [
    "",
    "plain",
    'quote " backslash \\ slash /',
    "tab\tnewline\ncr\r\x00\x01\x1f\x7f",
    "é ü 中文 😀 \u2028",
    "lone \ud800 surrogate \udcff",
]


@pytest.mark.parametrize("text", TEXTS)
@pytest.mark.parametrize("system", [None, "sys", TEXTS[3]])
@pytest.mark.parametrize("per_row", [(), ("sample_id",), ("sample_id", "row_sha256")])
def test_prompt_keys_equal_request_key(text: str, system: str | None, per_row: tuple) -> None:
    """PromptKeys builds Request.key() for one-message requests, per-row identity
    entries included (and overriding a shared entry of the same name)."""
    shared = {"recordings_sha256": "ab" * 32, "nested": [1, {"b": 2.5, "a": None}], "sample_id": 0}
    params = {"temperature": 0.5, "max_tokens": 64, "stop": ["\n\n", "é"]}
    keys = PromptKeys("replay", "m-é", "http://x/v1", params, shared, per_row)
    row = {name: f"{name}:{text}" for name in per_row}
    request = Request(
        "replay",
        "m-é",
        "http://x/v1",
        system,
        ({"role": "user", "content": text},),
        params,
        epoch=3,
        sample_id="s",
        identity={**shared, **row},
    )
    assert keys.key(system, text, 3, row) == request.key()
    assert keys.digest(system, text, 3, row) == bytes.fromhex(request.key())


ROWS = [
    {"question": "q", "answer": 4, "n": None},
    {"question": TEXTS[2], "answer": 2.5, "n": [1, {"a": "b"}]},
    {"question": TEXTS[5], "answer": True, "n": {"x": 1}},
    {"answer": 1},  # no question: the Jinja2 path raises as it always did
    {"question": "q", "answer": 1, "range": "shadows the global"},
]


@pytest.mark.parametrize(
    "source",
    [
        "Q: {{ question }}",
        "{{ question }}{{answer}}\n{{ n }}\n\n",
        "{# a comment #}{{ question }} {{- answer }}",
        "no fields at all",
        "",
        "{{ range }}",  # a Jinja2 global unless the row has the field
        "{{ question | upper }} {{ answer * 2 }}",  # not plain: Jinja2 renders it
    ],
)
@pytest.mark.parametrize("row", ROWS)
def test_plain_templates_render_as_jinja2_does(source: str, row: dict) -> None:
    """A template of text and bare fields renders to Jinja2's text, and fails with Jinja2's
    error."""
    fast = Template(source, "spec.yaml: prompt")
    slow = Template(source, "spec.yaml: prompt")
    slow._plain = None  # the Jinja2 path
    assert (fast._plain is not None) == ("|" not in source and "*" not in source)

    def outcome(template: Template) -> str:
        try:
            return "ok:" + template.render(row)
        except Exception as exc:  # noqa: BLE001 - the error itself is compared
            return f"{type(exc).__name__}:{exc}"

    assert outcome(fast) == outcome(slow)


def test_a_served_call_log_line_is_what_the_general_encoder_writes(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Successful calls (cache hits and calls made) are written from the response's values
    directly: the same bytes as RunLog.call's general encoder, odd values included."""
    monkeypatch.setattr(runlog, "_now_iso", lambda: "2026-12-01T00:00:00.000000Z")
    responses = [
        (TEXTS[0], True, Response("a", served_model="m", latency_s=0.012345)),
        (TEXTS[4], False, Response("b", served_model=None, input_tokens=3, cached_input_tokens=2)),
        (TEXTS[5], True, Response("c", served_model=TEXTS[5], cost_usd=1e-07, latency_s=math.nan)),
        ("s", True, Response("d", cost_usd=0.5, latency_s=math.inf, output_tokens=7)),
        ("s", True, Response("e", input_tokens=3.0, latency_s=7)),  # type: ignore[arg-type]
        ("s", True, Response("f", served_model="100%s %d", cost_usd=2.0)),  # % in a name
    ]
    with RunDir.create(tmp_path / "fast") as run_dir, runlog.RunLog(run_dir) as log:
        for sample_id, cached, response in responses:
            log.served("provider", sample_id, 2, "m", response, cached, 1 - cached)
    with RunDir.create(tmp_path / "general") as run_dir, runlog.RunLog(run_dir) as log:
        for sample_id, cached, response in responses:
            log.call(
                "provider",
                sample_id=sample_id,
                epoch=2,
                model="m",
                served_model=response.served_model,
                latency_ms=response.latency_s * 1000.0,
                input_tokens=response.total_input_tokens,
                output_tokens=response.output_tokens,
                cached_input_tokens=response.cached_input_tokens,
                cost_usd=response.cost_usd,
                cached=cached,
                attempt=1 - cached,
                outcome="ok",
            )
    fast = (tmp_path / "fast" / "log.jsonl").read_text()
    assert fast == (tmp_path / "general" / "log.jsonl").read_text()
    assert len(fast.splitlines()) == len(responses)


RESULT_ROWS = [
    {"sample_id": "s", "state": "scored", "score": 1},  # an int score is written 1.0
    {"sample_id": "s", "epoch": 3, "state": "scored", "score": 0.25, "label": True},
    {"sample_id": "s", "state": "provider_error", "error": {"kind": "X", "message": TEXTS[3]}},
    {
        "sample_id": TEXTS[4],
        "state": "judge_error",
        "score": math.nan,
        "latency_s": 1,
        "cost_usd": 1e-07,
        "scorer": {"inf": math.inf, "values": [1, 2.5, 1e16, None], "text": TEXTS[2]},
        "judge": JudgeRecord(requests=2, calls=1, cost_usd=0.001, outcome="win"),
        "tool_calls": [{"id": "c1", "name": "add", "arguments": {"a": 1}}],
    },
    {"sample_id": TEXTS[5], "state": "scored", "score": 0.0, "response": TEXTS[5]},
]


@pytest.mark.parametrize("fields", RESULT_ROWS)
def test_result_rows_are_written_as_the_model_writes_them(fields: dict) -> None:
    """make_row + row_json give SampleResult's field order, coercions and JSON, byte for
    byte (the escaped fallback for lone surrogates included)."""
    row = make_row(**fields)
    assert list(row) == [n for n in SampleResult.model_fields if n not in SPARSE_FIELDS]
    assert row_json(row) == (model_json(SampleResult(**fields)) + "\n").encode()


def test_samples_lines_are_written_as_the_model_writes_them() -> None:
    """Tally.sample_lines writes what SampleScore's model writes, per reducer, for rows
    counted by sample index and by sample id."""
    index = {"a": 0, "b": 1, TEXTS[5]: 3}
    for reducer, by_index in itertools.product(("mean", "max", "majority", "pass_at_k"), (0, 1)):
        tally = Tally(reducer=reducer, pass_k=2, epochs=2)
        rows = [
            make_row(sample_id="a", epoch=1, state="scored", score=1.0, cluster="c1"),
            make_row(sample_id="a", epoch=2, state="scored", score=0.0, cluster="c1"),
            make_row(sample_id="b", epoch=2, state="provider_error"),
            make_row(sample_id=TEXTS[5], epoch=1, state="scored", score=0.5),
        ]
        for row in rows:
            tally.add(row, index[row["sample_id"]] if by_index else None)
        pairs = [("a", "c1"), ("b", None), ("never", None), (TEXTS[5], None)]
        got = list(tally.sample_lines(pairs))
        expected = []
        for sample_id, cluster in pairs:
            if sample_id == "never":
                continue
            scores = {"a": [1.0, 0.0], "b": [None], TEXTS[5]: [0.5]}[sample_id]
            scored = [s for s in scores if s is not None]
            model = SampleScore(
                sample_id=sample_id,
                score=reduce_scores(scored, reducer, 2),
                epochs=len(scores),
                scored=len(scored),
                scores=scores,
                cluster=cluster,
            )
            expected.append((model_json(model) + "\n").encode())
        assert got == expected
        assert json.loads(got[0])["scores"] == [1.0, 0.0]


def test_one_epoch_sample_scores_are_what_the_reducer_makes_of_them() -> None:
    """With one epoch and the mean reducer the tally reads each sample's score directly;
    it is what reducing the sample's epoch scores gives (-0.0 made 0.0 as the mean makes
    it, error rows and samples without a row left out), and the statistics and the
    samples.jsonl lines follow it."""
    values = [1.0, -0.0, 0.25, None, 0.0, 5e-324, 1.0, None]
    tally = Tally(epochs=1, samples=len(values) + 2)
    for index, value in enumerate(values):
        state = "provider_error" if value is None else "scored"
        tally.add(make_row(sample_id=f"s{index}", epoch=1, state=state, score=value), index)
    fast = list(tally._sample_scores())
    assert repr(fast) == repr(list(tally._reduced_scores()))
    assert [slot for slot, _ in fast] == [0, 1, 2, 4, 5, 6]
    assert repr(fast[1]) == "(1, 0.0)"  # as math.fsum([-0.0]) / 1
    stats = tally.score_stats()
    assert stats.n == 6 and stats.mean == pytest.approx(2.25 / 6)
    pairs = [(f"s{index}", None) for index in range(len(values) + 1)]  # the last: no row
    expected = [
        model_json(
            SampleScore(
                sample_id=f"s{index}",
                score=reduce_scores([] if value is None else [value], "mean"),
                epochs=1,
                scored=0 if value is None else 1,
                scores=[value],
                cluster=None,
            )
        )
        + "\n"
        for index, value in enumerate(values)
    ]
    assert list(tally.sample_lines(pairs)) == [line.encode() for line in expected]


#: Response fields added after caches were written (their entries lack them)
_LATER = ("reasoning", "reasoning_tokens", "reasoning_blocks", "refusal")


def test_cached_responses_parse_as_json_loads_parses_them() -> None:
    """Response.from_json (pydantic-core, json.loads for what it refuses) reads back
    what to_json stored: awkward text, lone surrogates, tool calls, floats to the bit."""
    import random

    rng = random.Random(16)
    for i, text in enumerate(TEXTS):
        value = rng.random() * 10 ** rng.randint(-30, 30)
        response = Response(
            text,
            served_model=text or None,
            latency_s=value,
            cost_usd=1 / (i + 3),
            tool_calls=({"id": "c", "name": "f", "arguments": {"x": [value, text]}},),
        )
        stored = response.to_json()
        assert Response.from_json(stored) == response
        data = json.loads(stored)
        assert Response.from_json(stored) == Response(
            **{
                **data,
                "tool_calls": tuple(data["tool_calls"]),
                "reasoning_blocks": tuple(data["reasoning_blocks"]),
            }
        )
        older = {k: v for k, v in data.items() if k not in _LATER}  # a cache entry of before
        assert Response.from_json(json.dumps(older)) == response


def test_rows_skip_validation_only_when_it_would_change_nothing() -> None:
    """A pipeline row whose values already have their exact field types is what
    validation returns; any other value (an int score, a bool label, a float count, a
    str subclass, a non-str detail key) goes through validation."""
    from gradetrail.rundir.results import is_exact as _exact

    plain = make_row(
        sample_id="s",
        state="scored",
        score=0.5,
        prompt="p",
        response="r",
        served_model="m",
        latency_s=0.25,
        cost_usd=0.001,
        scorer={"extracted": "4", "value": 4.0},
        error=None,
        label=1.0,
        cluster="c",
    )
    assert _exact(plain) and make_row(**plain) == plain

    class Text(str):
        pass

    for name, value in [
        ("score", 1),
        ("label", True),
        ("input_tokens", 3.0),
        ("response", Text("r")),
        ("scorer", {1: "x"}),
        ("error", {"kind": 1, 2: "y"}),
        ("tool_calls", []),
        ("state", "unknown"),
        ("epoch", 1.0),
    ]:
        odd = {**plain, name: value}
        assert not _exact(odd), name


def test_the_exact_row_check_follows_every_field_of_the_model() -> None:
    """The fast check is generated from SampleResult: every field is tested, so a field
    added to the model is covered without editing a second list of types."""
    from gradetrail.rundir.results import SampleResult, is_exact

    plain = make_row(sample_id="s", state="scored", score=1.0)
    for name in SampleResult.model_fields:
        assert is_exact(plain)
        broken = {**plain, name: object()}
        assert not is_exact(broken), name


def test_sorted_keys_are_every_key_in_sorted_order() -> None:
    """PreparedRequests.sorted_keys (bucketed by first byte, for any_missing's reads) is
    exactly sorted(keys()), every epoch's keys included."""
    import gradetrail

    spec = gradetrail.load_spec(GSM8K_SPEC, ["run.epochs=3", "dataset.limit=300"])
    prepared = gradetrail.plan_run(spec).prepared
    assert list(prepared.sorted_keys()) == sorted(prepared.keys())
    assert len(set(prepared.keys())) == 900


def test_a_scorer_that_raises_on_one_response_costs_that_row_not_the_run() -> None:
    """A scorer's own failure on one response (an overflow, say) is that row's
    judge_error, naming the exception, left out of the mean; a failure of the run itself
    (a GradetrailError such as the cache's) still stops the run."""
    import asyncio

    from gradetrail.engine.pipeline import SampleContext, process
    from gradetrail.engine.runner import plan_run
    from gradetrail.errors import CacheError
    from gradetrail.executors.calls import Calls
    from gradetrail.scorers.base import Scorer
    from gradetrail.spec import load_spec

    class Failing(Scorer):
        def __init__(self, exc: Exception) -> None:
            self.exc = exc

        def score(self, item):  # noqa: ANN001, ANN202
            raise self.exc

    plan = plan_run(load_spec(GSM8K_SPEC))
    item = plan.prepared[3]
    hit = Response("so the answer is 1e400", served_model="m")
    calls = Calls(None, None, None)
    ctx = SampleContext(calls, Failing(OverflowError("(34, 'Numerical result')")))
    row = asyncio.run(process(item, ctx, hit))
    assert (row["state"], row["score"], row["sample_id"]) == ("judge_error", None, item.sample.id)
    assert row["error"]["reason"] == "scorer_failed"
    assert "Failing raised OverflowError on this response" in row["error"]["message"]
    assert row["response"] == "so the answer is 1e400"
    tally = Tally.for_spec(plan.spec)
    tally.add(row, item.sample.index)
    assert tally.counts["judge_error"] == 1 and tally.score_stats().n == 0
    ctx.scorer = Failing(CacheError("cache x: write failed (disk full)"))
    with pytest.raises(CacheError):
        asyncio.run(process(item, ctx, hit))


@pytest.mark.parametrize("system", [False, True])
def test_rows_kept_rendered_are_the_rows_rendered_again(
    system: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    """PreparedRequests keeps what its first rows rendered to (up to HELD_BYTES) and
    renders the others again: either way an item is what prepare() renders afresh, in
    every epoch (request, key, target, label)."""
    import gradetrail
    import gradetrail.engine.rendering as rendering

    monkeypatch.setattr(rendering, "HELD_BYTES", 20 * 700)  # about 20 GSM8K rows
    overrides = ["run.epochs=2", "dataset.limit=60"]
    if system:
        overrides.append("system=Answer {{ question | length }} characters.")
    prepared = gradetrail.plan_run(gradetrail.load_spec(GSM8K_SPEC, overrides)).prepared
    assert 0 < len(prepared._held) < 60  # both kinds of row are here
    for i, item in enumerate(prepared):
        fresh = rendering.prepare(item.sample, item.epoch, prepared.renderer)
        assert item.key == fresh.key == prepared.key(i)
        assert item.request == fresh.request
        assert (item.target, item.label, item.epoch) == (fresh.target, fresh.label, fresh.epoch)
        assert (item.request.system is not None) == system


def test_the_runs_pass_lets_held_rows_go_after_their_last_epoch() -> None:
    """with_hits(release=True), the run's own pass, lets each held row's rendering go
    once its last epoch is taken (earlier epochs keep it): every item is still what
    prepare() renders afresh, and read again afterwards it is rendered again, the same."""
    import gradetrail
    import gradetrail.engine.rendering as rendering

    spec = gradetrail.load_spec(GSM8K_SPEC, ["run.epochs=2", "dataset.limit=30"])
    prepared = gradetrail.plan_run(spec).prepared
    assert len(prepared._held) == 30 and all(prepared._held)
    taken = []
    for i, (item, hit) in enumerate(rendering.with_hits(prepared, None, release=True)):
        assert hit is None
        assert all(prepared._held) if i < 30 else prepared._held[i - 30] is None
        taken.append(item)
    assert prepared._held == [None] * 30
    for i, item in enumerate(taken):
        fresh = rendering.prepare(item.sample, item.epoch, prepared.renderer)
        assert (item.key, item.request, item.target) == (fresh.key, fresh.request, fresh.target)
        again = prepared[i]
        assert (again.key, again.request, again.target) == (item.key, item.request, item.target)
