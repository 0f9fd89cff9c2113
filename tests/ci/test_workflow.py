"""docs/ci.md's GitHub Actions workflow, run locally: its shell steps, as written in the
page, against the local protocol server, with GitHub's step outputs, step summary and
`${{ ... }}` expressions emulated. `uses:` steps (checkout, setup-python, the cache and
artifact actions) and the install step are GitHub's or pip's work and are not run; the
cache steps are checked to keep the file gradetrail writes."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import yaml
from paths import GSM8K_DATA, ROOT
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture

DOC = ROOT / "docs" / "ci.md"
server = protocol_server_fixture(scope="module", name="server")
srv = fresh_protocol_server_fixture("server", name="srv")
SAMPLES = 300  # identical runs of 300 samples pass a 0.02 margin (Tango bound ~0.013)


def _workflow() -> dict:
    """The YAML block of docs/ci.md that defines the workflow."""
    blocks = re.findall(r"```yaml\n(.*?)```", DOC.read_text(), flags=re.S)
    return next(yaml.safe_load(b) for b in blocks if "jobs:" in b)


def _repository(tmp_path: Path, base_url: str, model: str) -> Path:
    """A user's repository as the page lays it out: evals/gsm8k.yaml (the first SAMPLES
    GSM8K problems, served by the local protocol server) and its data."""
    repo = tmp_path / "repo"
    data = repo / "evals" / "data"
    data.mkdir(parents=True, exist_ok=True)
    shutil.copy(GSM8K_DATA / "test.jsonl", data / "test.jsonl")
    spec = {
        "name": "gsm8k",
        "dataset": {"path": "data/test.jsonl", "limit": SAMPLES},
        "prompt": 'Solve the math word problem. End with a line "A: <answer>".\n\n'
        "Q: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {
            "provider": "openai_compatible",
            "name": model,
            "base_url": base_url,
            "api_key_required": False,
        },
        "scorer": {"type": "numeric", "marker": "A:"},
    }
    (repo / "evals" / "gsm8k.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    return repo


def _expand(script: str, outputs: dict[str, dict[str, str]], secrets: dict[str, str]) -> str:
    """GitHub's `${{ steps.ID.outputs.NAME }}` and `${{ secrets.NAME }}` expressions."""

    def value(match: re.Match[str]) -> str:
        expr = match.group(1).strip()
        if m := re.fullmatch(r"steps\.([\w-]+)\.outputs\.([\w-]+)", expr):
            return outputs.get(m.group(1), {}).get(m.group(2), "")
        if m := re.fullmatch(r"secrets\.(\w+)", expr):
            return secrets.get(m.group(1), "")
        raise AssertionError(f"the test cannot evaluate ${{{{ {expr} }}}} in a run step")

    return re.sub(r"\$\{\{(.*?)\}\}", value, script)


def _run_job(repo: Path, tmp_path: Path) -> tuple[list[tuple[str, int, str]], Path]:
    """Run the job's shell steps in order, as GitHub's default `bash -e` does, stopping
    at the first failing step; return (name, exit code, output) per step run and the
    step summary file."""
    job = next(iter(_workflow()["jobs"].values()))
    summary = tmp_path / "step_summary.md"
    summary.write_text("")
    env = {
        **os.environ,
        **{k: str(v) for k, v in job["env"].items() if "${{" not in str(v)},
        "GITHUB_STEP_SUMMARY": str(summary),
        "PATH": f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}",
    }
    outputs: dict[str, dict[str, str]] = {}
    ran = []
    for number, step in enumerate(job["steps"]):
        if "run" not in step or step.get("name") == "Install gradetrail":
            continue
        output_file = tmp_path / f"output-{number}"
        output_file.write_text("")
        proc = subprocess.run(
            ["bash", "-e", "-c", _expand(step["run"], outputs, {})],
            cwd=repo,
            env={**env, "GITHUB_OUTPUT": str(output_file)},
            capture_output=True,
            text=True,
            timeout=300,
        )
        if "id" in step:
            pairs = (ln.split("=", 1) for ln in output_file.read_text().splitlines() if ln)
            outputs[step["id"]] = dict(pairs)
        ran.append((step["name"], proc.returncode, proc.stdout + proc.stderr))
        if proc.returncode:
            break
    return ran, summary


def _make_baseline(repo: Path) -> None:
    """The page's recipe: run the accepted model and copy its run directory to
    evals/baseline."""
    out = subprocess.run(
        [Path(sys.executable).parent / "gradetrail", "run", "evals/gsm8k.yaml", "--print-run-dir"],
        cwd=repo,
        capture_output=True,
        text=True,
        env={**os.environ, "GRADETRAIL_CACHE": str(repo / ".gradetrail" / "cache.sqlite")},
        check=True,
    )
    shutil.copytree(repo / out.stdout.strip(), repo / "evals" / "baseline")
    shutil.rmtree(repo / "results")


def test_the_cache_steps_keep_what_gradetrail_writes() -> None:
    """The cache is restored and saved (always, even after a failed gate) at the directory
    of the job's GRADETRAIL_CACHE, keyed on the spec and dataset files."""
    job = next(iter(_workflow()["jobs"].values()))
    cache_dir = str(Path(job["env"]["GRADETRAIL_CACHE"]).parent)
    steps = {s.get("uses", "").split("@")[0]: s for s in job["steps"] if "uses" in s}
    restore, save = steps["actions/cache/restore"], steps["actions/cache/save"]
    assert restore["with"]["path"] == save["with"]["path"] == cache_dir
    assert save["if"] == "always()" and restore["with"]["key"] == save["with"]["key"]
    assert "hashFiles('evals/*.yaml', 'evals/data/**')" in save["with"]["key"]


def test_workflow_passes_then_is_free_then_catches_a_regression(srv, tmp_path: Path) -> None:
    """Against a baseline of 175b_verification: the same model passes the gate (exit 0,
    a PASS step summary, valid JUnit); the same job again makes no model call; a
    candidate switched to 175b_finetuning fails the gate step (exit 1) with a FAIL summary
    and an ::error annotation."""
    repo = _repository(tmp_path, srv.openai_base_url, "175b_verification")
    _make_baseline(repo)
    calls = srv.stats()["total"]
    assert calls == SAMPLES

    ran, summary = _run_job(repo, tmp_path)
    assert [(name, code) for name, code, _ in ran] == [
        ("Run the candidate", 0),
        ("Gate it against the baseline", 0),
    ]
    assert summary.read_text().startswith("### ✅ gradetrail gate: PASS (non-inferiority)")
    assert (repo / "gate.xml").read_text().startswith("<?xml")
    assert srv.stats()["total"] == calls  # the baseline's responses served the candidate

    shutil.rmtree(repo / "results")
    ran, _ = _run_job(repo, tmp_path)
    assert [code for _, code, _ in ran] == [0, 0]
    assert srv.stats()["total"] == calls  # the restored cache answers every request
    manifest = json.loads(next((repo / "results").glob("*/manifest.json")).read_text())
    assert manifest["cache_hits"] == SAMPLES

    spec = repo / "evals" / "gsm8k.yaml"
    spec.write_text(spec.read_text().replace("175b_verification", "175b_finetuning"))
    ran, summary = _run_job(repo, tmp_path)
    assert [(name, code) for name, code, _ in ran] == [
        ("Run the candidate", 0),
        ("Gate it against the baseline", 1),
    ]
    assert summary.read_text().startswith("### ❌ gradetrail gate: FAIL (non-inferiority)")
    assert "::error title=gradetrail gate failed" in ran[-1][2]
    assert srv.stats()["total"] == calls + SAMPLES  # the new model was asked once per sample


def test_run_steps_use_only_expressions_the_test_evaluates() -> None:
    """Every `${{ ... }}` in a run step is one the local run evaluates (a step output or a
    secret), so none is silently left empty here."""
    job = next(iter(_workflow()["jobs"].values()))
    for step in job["steps"]:
        if "run" in step:
            _expand(step["run"], {}, {})  # raises on any other expression


def test_the_install_step_installs_this_checkout_from_a_wheel(tmp_path: Path) -> None:
    """The page's install step, as written, installs gradetrail from the wheel that `make
    wheel` builds and the page's layout keeps in tools/ (never the registry's unrelated
    `gradetrail`): its dependencies are the test's own (PIP_NO_DEPS), its target a
    folder of its own (PIP_TARGET), so what it installed is what imports there."""
    step = next(
        s
        for s in next(iter(_workflow()["jobs"].values()))["steps"]
        if s.get("name") == "Install gradetrail"
    )
    assert "tools/gradetrail-" in step["run"] and "pip install" in step["run"]
    repo = tmp_path / "repo"
    (repo / "tools").mkdir(parents=True)
    build = subprocess.run(
        [
            sys.executable,
            "-m",
            "pip",
            "wheel",
            "-q",
            "--no-deps",
            "-w",
            str(repo / "tools"),
            str(ROOT),
        ],
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert build.returncode == 0, build.stderr
    site = tmp_path / "site"
    env = {**os.environ, "PIP_NO_DEPS": "1", "PIP_TARGET": str(site), "PIP_NO_INDEX": "1"}
    env["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
    proc = subprocess.run(
        ["bash", "-e", "-c", step["run"]],
        cwd=repo,
        env=env,
        capture_output=True,
        text=True,
        timeout=280,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    probe = "import gradetrail; print(gradetrail.__file__); print(gradetrail.__version__)"
    out = subprocess.run(
        [sys.executable, "-c", probe],
        cwd=tmp_path,
        env={**os.environ, "PYTHONPATH": str(site)},
        capture_output=True,
        text=True,
        timeout=60,
    )
    where, version = out.stdout.split()
    from gradetrail import __version__

    assert Path(where).is_relative_to(site) and version == __version__
    assert (site / "gradetrail" / "view" / "templates" / "diff.html").exists()
    assert (site / "pytest_gradetrail.py").exists()
