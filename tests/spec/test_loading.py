"""Spec loading and validation: every bad input is one line naming file, field and fix,
exit code 2, before any model call."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

import gradetrail
from gradetrail.errors import SpecError
from gradetrail.spec import apply_overrides, load_spec

GOOD = {
    "name": "t",
    "dataset": {"path": "data.jsonl"},
    "prompt": "Q: {{ question }}",
    "target": "{{ answer }}",
    "model": {"provider": "python", "name": "echo", "function": "echo_app:answer"},
    "scorer": {"type": "exact"},
}


@pytest.fixture
def workdir(tmp_path: Path) -> Path:
    """A directory with a two-row dataset and an echo application."""
    rows = [{"question": "1+1?", "answer": "2"}, {"question": "2+2?", "answer": "4"}]
    (tmp_path / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (tmp_path / "echo_app.py").write_text(
        "CALLS = []\n"
        "def answer(request):\n"
        "    CALLS.append(request.prompt)\n"
        "    return '2' if '1+1' in request.prompt else '5'\n"
    )
    return tmp_path


def _write(workdir: Path, spec: dict, name: str = "spec.yaml") -> Path:
    path = workdir / name
    path.write_text(yaml.safe_dump(spec))
    return path


def _error(cli, path: Path, *extra: str) -> str:
    out = cli("run", str(path), *extra)
    assert out.exit_code == 2, (out.stdout, out.stderr)
    lines = out.stderr.strip().splitlines()
    assert len(lines) == 1, lines
    assert lines[0].startswith("error: ")
    return lines[0]


def test_good_spec_runs(cli, workdir: Path) -> None:
    """The reference spec runs and scores one of two samples correct."""
    out = cli("run", str(_write(workdir, GOOD)), "--json")
    assert out.exit_code == 0, out.stderr
    assert json.loads(out.stdout)["score"]["mean"] == 0.5


def test_unknown_key_suggests_the_close_one(cli, workdir: Path) -> None:
    """A typo'd key is named with a 'did you mean'."""
    spec = {**GOOD, "scorer": {"type": "exact", "case_flod": True}}
    line = _error(cli, _write(workdir, spec))
    assert "spec.yaml" in line and "scorer.case_flod" in line
    assert "did you mean 'case_fold'?" in line


def test_unknown_top_level_key(cli, workdir: Path) -> None:
    """An unknown top-level key is named with its closest field."""
    line = _error(cli, _write(workdir, {**GOOD, "promt": "x"}))
    assert "promt: unknown key; did you mean 'prompt'?" in line


def test_unknown_nested_model_param(cli, workdir: Path) -> None:
    """Unknown sampling params are caught, not silently sent."""
    spec = {**GOOD, "model": {**GOOD["model"], "params": {"temprature": 0}}}
    line = _error(cli, _write(workdir, spec))
    assert "model.params.temprature" in line and "temperature" in line


def test_missing_required_field(cli, workdir: Path) -> None:
    """A missing field says to add it."""
    spec = {k: v for k, v in GOOD.items() if k != "prompt"}
    line = _error(cli, _write(workdir, spec))
    assert "prompt: required field is missing" in line


def test_unknown_scorer_type(cli, workdir: Path) -> None:
    """An unknown scorer type lists the known ones."""
    line = _error(cli, _write(workdir, {**GOOD, "scorer": {"type": "fuzzy"}}))
    assert "scorer.type" in line and "'exact'" in line


def test_template_field_missing_from_first_row(cli, workdir: Path) -> None:
    """A template naming a field the rows lack fails before any call."""
    spec = {**GOOD, "prompt": "Q: {{ questoin }}"}
    line = _error(cli, _write(workdir, spec))
    assert "prompt" in line and "questoin" in line and "answer, question" in line
    assert "CALLS" not in line


def test_template_syntax_error(cli, workdir: Path) -> None:
    """A Jinja2 syntax error names the template and line."""
    line = _error(cli, _write(workdir, {**GOOD, "target": "{{ answer "}))
    assert "target: template syntax error on line 1" in line


def test_invalid_regex(cli, workdir: Path) -> None:
    """An invalid regex pattern is caught before any call."""
    spec = {**GOOD, "scorer": {"type": "regex", "pattern": "(unclosed {{ answer }}"}}
    line = _error(cli, _write(workdir, spec))
    assert "scorer.pattern: invalid regex" in line


def test_regex_pattern_field_missing(cli, workdir: Path) -> None:
    """A pattern naming a missing field is caught against the first row."""
    spec = {**GOOD, "scorer": {"type": "regex", "pattern": "{{ nope }}"}}
    line = _error(cli, _write(workdir, spec))
    assert "scorer.pattern" in line and "nope" in line


def test_missing_dataset_file(cli, workdir: Path) -> None:
    """A missing dataset names the resolved path."""
    spec = {**GOOD, "dataset": {"path": "nowhere.jsonl"}}
    line = _error(cli, _write(workdir, spec))
    assert "nowhere.jsonl not found" in line


def test_missing_spec_file(cli, tmp_path: Path) -> None:
    """A missing spec file is a usage error."""
    line = _error(cli, tmp_path / "nope.yaml")
    assert "spec file not found" in line


def test_invalid_yaml(cli, workdir: Path) -> None:
    """Broken YAML names the line."""
    path = workdir / "bad.yaml"
    path.write_text("name: t\nprompt: [unclosed\n")
    line = _error(cli, path)
    assert "bad.yaml" in line and "line" in line


def test_malformed_dataset_line(cli, workdir: Path) -> None:
    """A dataset line that is not JSON names the file and line."""
    (workdir / "data.jsonl").write_text('{"question": "a", "answer": "1"}\n{broken\n')
    line = _error(cli, _write(workdir, GOOD))
    assert "data.jsonl:2: not valid JSON" in line


def test_python_function_not_importable(cli, workdir: Path) -> None:
    """A wrong module:function stops the run before any sample."""
    spec = {**GOOD, "model": {**GOOD["model"], "function": "echo_app:nope"}}
    line = _error(cli, _write(workdir, spec))
    assert "model.function" in line and "'nope'" in line


def test_bad_set_override(cli, workdir: Path) -> None:
    """--set without '=' says the expected form."""
    line = _error(cli, _write(workdir, GOOD), "--set", "model.name")
    assert "expected dotted.key=value" in line


def test_set_override_of_unknown_field_is_validated(cli, workdir: Path) -> None:
    """An override is validated like the file (did you mean)."""
    line = _error(cli, _write(workdir, GOOD), "--set", "run.concurency=4")
    assert "run.concurency: unknown key; did you mean 'concurrency'?" in line


def test_invalid_value_names_field_and_input(cli, workdir: Path) -> None:
    """A wrong-typed value names the field."""
    line = _error(cli, _write(workdir, GOOD), "--set", "run.concurrency=0")
    assert "run.concurrency" in line and "greater than or equal to 1" in line


def test_override_values_parse_as_yaml() -> None:
    """--set values are YAML: ints, lists, mappings."""
    out = apply_overrides(
        {"run": {}}, ["run.concurrency=8", "model.params.stop=['A:']", "x.y=hello"], "s"
    )
    assert out == {
        "run": {"concurrency": 8},
        "model": {"params": {"stop": ["A:"]}},
        "x": {"y": "hello"},
    }


def test_override_into_scalar_is_an_error() -> None:
    """--set cannot descend into a scalar."""
    with pytest.raises(SpecError, match="name is not a mapping"):
        apply_overrides({"name": "t"}, ["name.x=1"], "s")


def test_relative_paths_resolve_against_spec_dir(workdir: Path, monkeypatch) -> None:
    """dataset.path is relative to the spec file, not the working directory."""
    monkeypatch.chdir("/")
    spec = load_spec(_write(workdir, GOOD))
    assert spec.resolve(spec.dataset.path) == workdir / "data.jsonl"


def test_schema_command_prints_json_schema(cli) -> None:
    """`gradetrail schema` prints a JSON Schema covering every spec section."""
    out = cli("schema")
    assert out.exit_code == 0
    schema = json.loads(out.stdout)
    assert set(schema["properties"]) >= {"name", "dataset", "prompt", "model", "scorer", "run"}
    assert schema["additionalProperties"] is False
    assert schema == gradetrail.spec_json_schema()


JUDGE = {
    "type": "judge",
    "file": "judge.j2",
    "model": {"provider": "python", "name": "j", "function": "echo_app:answer"},
}


@pytest.mark.parametrize(
    ("scorer", "expected"),
    [
        (
            {**JUDGE, "parse": {"kind": "numeric", "maxx": 5}},
            "scorer.parse.maxx: unknown key; did you mean 'max'?",
        ),
        (
            {**JUDGE, "parse": {"kind": "stars"}},
            "scorer.parse.kind: unknown kind; use one of 'grade', 'numeric', 'json'",
        ),
        (
            {**JUDGE, "parse": {"grades": {"C": 2}}},
            "scorer.parse: grade 'C' maps to 2.0; use a score in [0, 1]",
        ),
        (
            {**JUDGE, "parse": {"pattern": "(G)(C)"}},
            "scorer.parse: pattern '(G)(C)' has 2 groups; capture the verdict in one",
        ),
        (
            {**JUDGE, "parse": {"kind": "numeric", "min": 10, "max": 1}},
            "scorer.parse: max 1 must exceed min 10",
        ),
        ({**JUDGE, "sampels": 3}, "scorer.sampels: unknown key; did you mean 'samples'?"),
        ({**JUDGE, "reduce": "median"}, "scorer.reduce: use 'mean' or 'majority'"),
        ({**JUDGE, "type": "pairwise"}, "scorer.baseline: required field is missing; add it"),
        (
            {**JUDGE, "type": "pairwise", "baseline": "b", "parse": {"verdicts": {"X": "first"}}},
            "scorer.parse: verdicts name no label for second",
        ),
    ],
)
def test_judge_scorer_fields_are_validated(cli, workdir: Path, scorer: dict, expected: str) -> None:
    """Judge and pairwise sections are checked field by field, one line per error."""
    line = _error(cli, _write(workdir, {**GOOD, "scorer": scorer}))
    assert expected in line


def test_label_map_needs_label_field_and_unit_scores(cli, workdir: Path) -> None:
    """label_map without label_field, or mapping to a score outside [0, 1], is refused."""
    line = _error(
        cli, _write(workdir, {**GOOD, "dataset": {"path": "data.jsonl", "label_map": {"yes": 1}}})
    )
    assert "dataset: label_map needs label_field" in line
    spec = {
        **GOOD,
        "dataset": {"path": "data.jsonl", "label_field": "answer", "label_map": {"2": 3}},
    }
    assert "label_map['2'] is 3.0; map labels to scores in [0, 1]" in _error(
        cli, _write(workdir, spec)
    )


def test_label_map_keys_read_yaml_booleans_as_json_text(workdir: Path) -> None:
    """YAML true/false/3 keys of label_map become the label texts 'true', 'false', '3'."""
    text = yaml.safe_dump(GOOD).replace(
        "  path: data.jsonl\n",
        "  path: data.jsonl\n  label_field: answer\n  label_map: {true: 1, false: 0, 3: 0.5}\n",
    )
    path = workdir / "spec.yaml"
    path.write_text(text)
    assert load_spec(path).dataset.label_map == {"true": 1.0, "false": 0.0, "3": 0.5}


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe\x00garbage", "not UTF-8 text"),
        (b"name: a\nname: b\n", "key 'name' appears twice"),
        (b"name: t\nmodel: {params: {extra: {x: &a [*a]}}}\n", "refers to itself"),
        (
            b"a: &a [x, x]\nb: &b [" + b", ".join([b"*a"] * 101) + b"]\n",
            "more than 100 YAML aliases",
        ),
        (
            b"a: &a ["
            + b", ".join([b"x"] * 1000)
            + b"]\nb: &b ["
            + b", ".join([b"*a"] * 50)
            + b"]\nc: &c ["
            + b", ".join([b"*b"] * 50)
            + b"]\n",
            "expand the spec past a million values",
        ),
    ],
)
def test_hostile_yaml_is_a_one_line_error(cli, workdir: Path, content: bytes, message: str) -> None:
    """Non-UTF-8 text, duplicate keys, a self-referencing anchor and an alias bomb are
    refused with one line, exit 2, never a traceback or a hang."""
    path = workdir / "hostile.yaml"
    path.write_bytes(content)
    out = cli("run", str(path))
    assert out.exit_code == 2
    assert message in out.stderr


def test_types_are_strict(cli, workdir: Path) -> None:
    """A boolean is not an integer: dataset.limit=true is refused, not read as 1."""
    line = _error(cli, _write(workdir, GOOD), "--set", "dataset.limit=true")
    assert "dataset.limit: Input should be a valid integer" in line


def test_empty_override_key_part(cli, workdir: Path) -> None:
    """--set .x=1 names the malformed override."""
    line = _error(cli, _write(workdir, GOOD), "--set", ".x=1")
    assert "--set '.x=1': expected dotted.key=value" in line


def test_overlong_name_is_refused_before_any_call(cli, workdir: Path) -> None:
    """A name too long for a directory name is a spec error (exit 2)."""
    line = _error(cli, _write(workdir, {**GOOD, "name": "n" * 101}))
    assert "name: String should have at most 100 characters" in line


def test_keys_the_provider_never_reads_are_warned_before_the_run(cli, monkeypatch) -> None:
    """A replay spec switched to openai keeps model.recordings, which no openai request
    reads but the identity hash does: `gradetrail run` says so (and how to drop it)
    before anything else; the spec as written warns of nothing."""
    from paths import GSM8K_SPEC

    assert gradetrail.load_spec(GSM8K_SPEC).model.unused_keys() == []
    switched = ["model.provider=openai", "model.name=gpt-4o-mini"]
    lines = gradetrail.load_spec(GSM8K_SPEC, overrides=switched).model.unused_keys()
    assert len(lines) == 1 and lines[0].startswith("model.recordings has no effect")
    assert "--set model.recordings=null" in lines[0]
    dropped = [*switched, "model.recordings=null"]
    assert gradetrail.load_spec(GSM8K_SPEC, overrides=dropped).model.unused_keys() == []
    monkeypatch.delenv("OPENAI_API_KEY", raising=False)
    out = cli("run", str(GSM8K_SPEC), *(f"--set={s}" for s in switched))
    assert out.exit_code == 1  # no key: nothing is called
    first = out.stderr.splitlines()[0]
    assert first.startswith("warning: model.recordings has no effect with provider 'openai'")


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        # before: "spec.yaml: dataset.pth: ...", a key the file does not hold
        ("dataset.pth=x", "spec.yaml: --set dataset.pth: unknown key; did you mean 'path'?"),
        ("runn.epochs=2", "spec.yaml: --set runn: unknown key; did you mean 'run'?"),
        ("run.epochs=abc", "spec.yaml: --set run.epochs: Input should be a valid integer"),
        ("model={provider: openai, nam: x}", "--set model.nam: unknown key; did you mean 'name'?"),
        ("scorer.type=numerc", "spec.yaml: --set scorer.type: unknown type; use one of"),
    ],
)
def test_an_error_set_by_an_override_names_the_set(
    cli, workdir: Path, override: str, expected: str
) -> None:
    """An error in what --set gave reads `--set KEY`, so nobody looks for it in the file;
    the file's own errors keep their plain field."""
    line = _error(cli, _write(workdir, GOOD), "--set", override)
    assert expected in line
    spec = {**GOOD, "run": {"concurency": 4}}
    line = _error(cli, _write(workdir, spec), "--set", "run.epochs=2")
    assert "spec.yaml: run.concurency: unknown key; did you mean 'concurrency'?" in line


@pytest.mark.parametrize(
    ("scorers", "expected"),
    [
        # before: "scorers.[0].scorer: required field is missing" and
        # "scorers.[0].typ: unknown key; allowed: name, primary, scorer"
        ([{"name": "a", "typ": "exact"}], "scorers[0].typ: unknown key; did you mean 'type'?"),
        ([{"name": "a"}], "scorers[0]: missing 'type'; add type: exact, regex, numeric, ..."),
        (
            [{"name": "a", "type": "exact", "case_flod": True}],
            "scorers[0].case_flod: unknown key; did you mean 'case_fold'?",
        ),
    ],
)
def test_a_scorers_entry_typo_names_the_scorer_key(
    cli, workdir: Path, scorers: list, expected: str
) -> None:
    """A `scorers:` entry is written flat ({name, type, ...}): its mistakes name the key
    as written and suggest the scorer's key, one line."""
    spec = {k: v for k, v in GOOD.items() if k != "scorer"} | {"scorers": scorers}
    assert _error(cli, _write(workdir, spec)) == f"error: {workdir / 'spec.yaml'}: {expected}"


def test_a_misspelt_scorer_type_key_is_suggested(cli, workdir: Path) -> None:
    """Before: `scorer: missing 'type'` for `typ: exact`, the typo not named."""
    spec = {**GOOD, "scorer": {"typ": "exact"}}
    line = _error(cli, _write(workdir, spec))
    assert line.endswith("spec.yaml: scorer.typ: unknown key; did you mean 'type'?")
