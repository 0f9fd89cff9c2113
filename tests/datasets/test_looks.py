"""Looks at a held-out split (``dataset.split.held_out``, ``max_looks``): every run there
of a new identity is recorded before any call, one past the limit is refused (exit 2),
a sweep that would pass it is refused before its first cell, and the settings change no
identity hash."""

from __future__ import annotations

import fcntl
import json
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml
from cli_support import run_cli, write_eval

ROWS = [{"id": f"r{i}", "q": f"{i}+0", "a": str(i)} for i in range(12)]


def _project(tmp_path: Path, **split: object) -> Path:
    """A python-provider eval of 12 rows, split by a file into train (8) and test (4)."""
    ids = [r["id"] for r in ROWS]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "splits.json").write_text(json.dumps({"train": ids[:8], "test": ids[8:]}))
    return write_eval(
        tmp_path,
        ROWS,
        name="looks",
        dataset={"path": "data.jsonl", "split": {"file": "splits.json", "name": "train", **split}},
    )


def _run(spec: Path, *sets: str):  # noqa: ANN202
    args = [a for s in sets for a in ("--set", s)]
    return run_cli("run", str(spec), "--results-root", str(spec.parent / "r"), "--no-cache", *args)


def test_a_look_past_max_looks_is_refused_before_any_call(tmp_path: Path) -> None:
    """Two prompts on test are two looks (recorded in splits.looks.jsonl); a third prompt
    is refused, exit 2, naming the looks taken, and writes no run; running a recorded one
    again (a re-run) and any run on train are free. Before, a loop could evaluate the
    held-out split as often as it liked and keep the best."""
    spec = _project(tmp_path, held_out="test", max_looks=2)
    prompts = [f"prompt=Variant {k}: {{{{ q }}}} = {{{{ a }}}}" for k in range(3)]
    for prompt in prompts:
        assert _run(spec, prompt).code == 0  # train: not the held-out split
    test = "dataset.split.name=test"
    assert _run(spec, test, prompts[0]).code == 0
    assert _run(spec, test, prompts[1]).code == 0
    runs = len(list((tmp_path / "r").iterdir()))
    third = _run(spec, test, prompts[2])
    assert third.code == 2, third.err
    assert third.err_lines[-1].startswith(
        f"error: {spec}: dataset.split: split 'test' is held out and 2 of its 2 looks are "
        "taken (runs "
    )
    assert len(list((tmp_path / "r").iterdir())) == runs  # nothing run
    assert _run(spec, test, prompts[0]).code == 0  # the same look again
    lines = (tmp_path / "splits.looks.jsonl").read_text().splitlines()
    ledger = [json.loads(line) for line in lines]
    assert [r["model"] for r in ledger] == ["python:app", "python:app"]
    manifests = sorted((tmp_path / "r").glob("*/manifest.json"))
    on_test = {
        m["identity_hash"]
        for m in map(json.loads, (p.read_text() for p in manifests))
        if m["dataset"]["split"]["name"] == "test"
    }
    assert on_test == {r["identity_hash"] for r in ledger}


def test_a_sweep_past_max_looks_is_refused_before_its_first_cell(tmp_path: Path) -> None:
    """Three cells on the held-out split under max_looks 2: exit 2 before any cell runs
    (before, two cells ran and paid and the third was refused)."""
    spec = _project(tmp_path, name="test", held_out="test", max_looks=2)
    sweep = tmp_path / "sweep.yaml"
    variants = {f"v{k}": {"prompt": f"V{k} {{{{ q }}}} = {{{{ a }}}}"} for k in range(3)}
    sweep.write_text(yaml.safe_dump({"name": "s", "spec": spec.name, "axes": {"p": variants}}))
    out = run_cli("sweep", str(sweep), "--results-root", str(tmp_path / "r"), "--no-cache")
    assert out.code == 2, out.err
    assert out.err_lines[-1].endswith("(3 of this sweep's cells would be new looks)")
    assert not list((tmp_path / "r").glob("looks-*"))
    assert not (tmp_path / "splits.looks.jsonl").exists()


def test_held_out_settings_change_no_identity_and_need_each_other(tmp_path: Path) -> None:
    """Declaring the held-out split keeps every run's identity hash (a run dir made before
    is the same run); max_looks without held_out is a one-line error, exit 2."""
    plain = _project(tmp_path / "a")
    held = _project(tmp_path / "b", held_out="test", max_looks=1)
    for spec in (plain, held):
        assert _run(spec, "dataset.split.name=test").code == 0
    names = [p.name for s in (plain, held) for p in (s.parent / "r").iterdir()]
    assert len(names) == 2 and names[0] == names[1]
    bad = _project(tmp_path / "c", max_looks=2)
    out = _run(bad)
    assert out.code == 2 and "dataset.split.max_looks needs dataset.split.held_out" in out.err


BOILERPLATE = "Answer the following question with one single number and nothing else"


def _story(i: int) -> str:
    return f"Sample {i} tells of a traveller who walked {i} miles across the windy hills"


def test_a_tuning_prompt_quoting_a_held_out_row_is_refused(tmp_path: Path) -> None:
    """A train run whose prompt pastes eight words of a held-out row (whitespace aside) is
    refused, exit 2, naming the sample and the words; a train row's text, boilerplate every
    row shares, and the same prompt on the held-out split itself run. Before, a loop could
    tune on train with held-out examples in its prompt."""
    rows = [{**r, "story": _story(k), "note": BOILERPLATE} for k, r in enumerate(ROWS)]
    ids = [r["id"] for r in rows]
    tmp_path.mkdir(parents=True, exist_ok=True)
    (tmp_path / "splits.json").write_text(json.dumps({"train": ids[:8], "test": ids[8:]}))
    split = {"file": "splits.json", "name": "train", "held_out": "test"}
    spec = write_eval(tmp_path, rows, name="quotes", dataset={"path": "data.jsonl", "split": split})

    def prompt(example: str) -> str:
        return f"prompt=Example:  {example}\n A: 1. {BOILERPLATE}. {{{{ q }}}} = {{{{ a }}}}"

    quoted = _run(spec, prompt(_story(9)))
    assert quoted.code == 2, quoted.err
    assert quoted.err_lines[-1] == (
        f"error: {spec}: the prompt quotes held-out sample 'r9' (story: 'Sample 9 tells of a "
        "traveller who walked') of split 'test': a prompt tuned on 'train' must hold no "
        "held-out data; take its examples from 'train'"
    )
    assert _run(spec, prompt(_story(3))).code == 0  # a train row: fine
    assert _run(spec, prompt(_story(9)), "dataset.split.name=test").code == 0


def _waiting_on_lock(pid: int) -> bool:
    """``pid`` is blocked waiting for a lock (a ``->`` line of /proc/locks)."""
    lines = Path("/proc/locks").read_text().splitlines()
    return any(line.split()[1:2] == ["->"] and line.split()[5] == str(pid) for line in lines)


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_two_loops_cannot_both_take_the_last_look(tmp_path: Path) -> None:
    """While another loop holds the ledger (reading it and taking the last of max_looks 1),
    a run on the held-out split waits for it, then reads its look and is refused, exit 2,
    writing no second look. Before, the ledger was read and appended without a lock: both
    loops saw 0 of 1 looks taken and both ran (two looks recorded under a limit of one)."""
    spec = _project(tmp_path, name="test", held_out="test", max_looks=1)
    ledger = tmp_path / "splits.looks.jsonl"
    other = {"identity_hash": "f" * 64, "at": "2026-01-01T00:00:00+00:00", "model": "x:y"}
    with ledger.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)  # the other loop, between its read and its append
        proc = _cli(tmp_path, spec)
        while proc.poll() is None and not _waiting_on_lock(proc.pid):
            time.sleep(0.01)  # polling for the waiter, no time asserted
        assert proc.returncode is None, proc.communicate()  # it ran without waiting
        held.write(json.dumps(other) + "\n")
        held.flush()
    out, err = proc.communicate()
    assert proc.returncode == 2, err
    assert err.splitlines()[-1].startswith(
        f"error: {spec}: dataset.split: split 'test' is held out and 1 of its 1 looks are "
        "taken (runs ffffffffffff), so 1 more would pass dataset.split.max_looks"
    )
    assert [json.loads(line) for line in ledger.read_text().splitlines()] == [other]
    assert not (tmp_path / "r").exists() or not list((tmp_path / "r").iterdir())


def _cli(tmp_path: Path, spec: Path) -> subprocess.Popen[str]:
    """``gradetrail run spec`` in a process of its own."""
    args = ["run", str(spec), "--results-root", str(tmp_path / "r"), "--no-cache"]
    return subprocess.Popen(
        [sys.executable, "-m", "gradetrail", *args],
        cwd=Path(__file__).resolve().parents[2],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


@pytest.mark.skipif(not Path("/proc/locks").exists(), reason="needs Linux's /proc/locks")
def test_a_recorded_look_runs_again_without_the_ledgers_lock(tmp_path: Path) -> None:
    """Re-running a recorded look only reads the ledger: while another loop holds its
    lock the re-run goes ahead (exit 0) instead of waiting on a look it does not take."""
    spec = _project(tmp_path, name="test", held_out="test", max_looks=1)
    assert _run(spec).code == 0
    ledger = tmp_path / "splits.looks.jsonl"
    with ledger.open("a") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        proc = _cli(tmp_path, spec)
        while proc.poll() is None and not _waiting_on_lock(proc.pid):
            time.sleep(0.01)  # polling, no time asserted
        waited = proc.poll() is None
        fcntl.flock(held, fcntl.LOCK_UN)
        out, err = proc.communicate()
    assert not waited and proc.returncode == 0, err
    assert len(ledger.read_text().splitlines()) == 1
