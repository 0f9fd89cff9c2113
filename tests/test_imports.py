"""Start-up stays light: `gradetrail --help` and a fully cached run import none of the heavy
libraries (scipy, the provider SDKs, HTTP clients); a cold HTTP run imports only its
transport; `import gradetrail` imports its names on first use, and a command imports only
its own module. Asserted on the set of modules each process imported, never on a time."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from http_support import PROTOCOLS, gsm8k_spec
from paths import GSM8K_SPEC
from protocol_server import protocol_server_fixture

server = protocol_server_fixture(scope="module", name="server")

#: top-level packages a plain run must not pay for unless it uses them
HEAVY = {
    "scipy",
    "numpy",
    "openai",
    "anthropic",
    "aiohttp",
    "httpx",
    "httpx2",
    "httpcore",
    "httpcore2",
    "ray",
    "pandas",
    "pyarrow",
}

#: runs the CLI in this process and writes the modules it imported to argv[1]; with
#: FIRST_ROW set in the environment, also those imported when the first row was counted
CLI = """
import json, os, sys
from gradetrail.cli import main
out, sys.argv = sys.argv[1], ["gradetrail", *sys.argv[2:]]
first_row = None
if os.environ.get("FIRST_ROW"):
    from gradetrail.cli.progress import RunProgress
    update = RunProgress.update

    def counted(self, row, tally):
        global first_row
        if tally.rows == 1:
            first_row = sorted(sys.modules)
        update(self, row, tally)

    RunProgress.update = counted
try:
    main()
except SystemExit as exc:
    code = exc.code
else:
    code = 0
with open(out, "w") as f:
    json.dump({"code": code, "modules": sorted(sys.modules), "first_row": first_row}, f)
"""

#: the modules of commands other than `run`, and what only they use
NOT_FOR_RUN = {
    "gradetrail.cli.cache",
    "gradetrail.cli.diff",
    "gradetrail.cli.export",
    "gradetrail.cli.gate",
    "gradetrail.cli.runs",
    "gradetrail.cli.view",
    "gradetrail.analysis.diff",
    "gradetrail.analysis.gate",
    "gradetrail.executors.ray",
    "gradetrail.analysis.export",
    "gradetrail.view",
}


def run_cli(tmp_path: Path, *args: str, first_row: bool = False) -> dict:
    """What :data:`CLI` wrote for ``gradetrail ARGS`` (it must exit 0)."""
    out = tmp_path / "modules.json"
    env = {
        **os.environ,
        "ANTHROPIC_API_KEY": "sk-test",
        **({"FIRST_ROW": "1"} if first_row else {}),
    }
    proc = subprocess.run(
        [sys.executable, "-c", CLI, str(out), *args], capture_output=True, text=True, env=env
    )
    result = json.loads(out.read_text())
    assert result["code"] in (0, None), proc.stderr
    return result


def imported(tmp_path: Path, *args: str) -> set[str]:
    """Every module ``gradetrail ARGS`` imported (it must exit 0)."""
    return set(run_cli(tmp_path, *args)["modules"])


def heavy_imports(tmp_path: Path, *args: str) -> set[str]:
    """The heavy packages ``gradetrail ARGS`` imports (it must exit 0)."""
    return HEAVY & {m.split(".")[0] for m in imported(tmp_path, *args)}


def test_import_gradetrail_imports_its_names_on_first_use() -> None:
    """``import gradetrail`` imports no module of its own but the version; a public name
    imports its module when first used."""
    code = (
        "import json, sys, gradetrail; before = sorted(sys.modules);"
        "gradetrail.load_spec; print(json.dumps([before, sorted(sys.modules)]))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    before, after = (set(names) for names in json.loads(out.stdout))
    own = {m for m in before if m.startswith("gradetrail")}
    assert own == {"gradetrail", "gradetrail._version", "gradetrail._util", "gradetrail._util.lazy"}
    assert "pydantic" not in before
    assert {"gradetrail.spec", "gradetrail.spec.loading"} <= after
    assert "gradetrail.engine.runner" not in after


def test_a_command_imports_only_its_own_module(tmp_path: Path) -> None:
    """``gradetrail run`` imports neither the other commands nor what only they use (nor,
    with --json and no terminal, rich); the root ``--help`` lists every command, so it
    imports them all."""
    args = ["run", str(GSM8K_SPEC), "--results-root", str(tmp_path / "r"), "--json"]
    run = imported(tmp_path, *args, "--set", "dataset.limit=3")
    assert run & NOT_FOR_RUN == set()
    assert "rich" not in {m.split(".")[0] for m in run}  # --json prints no rich summary
    assert imported(tmp_path, "run", "--help") & NOT_FOR_RUN == set()
    listed = imported(tmp_path, "--help")
    assert {m for m in NOT_FOR_RUN if m.startswith("gradetrail.cli.")} <= listed


#: what only a run with --batch (or run.max_cost_usd) uses: a plain run never imports it
BATCH_OR_BUDGET_ONLY = {
    "gradetrail.engine.batching",
    "gradetrail.executors.batched",
    "gradetrail.executors.recording",
    "gradetrail.rundir.batches",
    "gradetrail.rundir.spending",
}


def test_a_plain_run_imports_no_batch_or_budget_module(tmp_path: Path) -> None:
    """``gradetrail run`` without --batch or a cost ceiling imports neither the batch
    pass nor the spending log (they are imported when a run has them)."""
    args = ["run", str(GSM8K_SPEC), "--results-root", str(tmp_path / "r"), "--json"]
    assert imported(tmp_path, *args, "--set", "dataset.limit=3") & BATCH_OR_BUDGET_ONLY == set()


#: what a run of a spec without tools and with a numeric scorer uses only at its summary
#: (the intervals and kappa's quantile), or never (the agent loop's tools, other scorers)
NOT_BEFORE_SUMMARY = {
    "gradetrail.engine.toolbox",
    "gradetrail.scorers.exact",
    "gradetrail.scorers.regex",
    "gradetrail.stats.intervals",
    "statistics",
}


def test_a_run_without_tools_imports_no_interval_or_tool_code_before_its_summary(
    tmp_path: Path,
) -> None:
    """When its first row is counted, a run of a spec without tools (GSM8K's, scored by
    the numeric scorer) has imported neither the tools module's loader, nor the summary's
    interval code (the summary imports it), nor the exact and regex scorers."""
    args = ["run", str(GSM8K_SPEC), "--results-root", str(tmp_path / "r"), "--json"]
    result = run_cli(tmp_path, *args, "--set", "dataset.limit=3", first_row=True)
    assert set(result["first_row"]) & NOT_BEFORE_SUMMARY == set()
    assert "gradetrail.stats.intervals" in result["modules"]  # by the summary


def test_help_imports_nothing_heavy(tmp_path: Path) -> None:
    """`gradetrail --help` and `gradetrail run --help` import no heavy library; the root
    help lists every command from its module without what the commands use (the gate,
    the diff, the cache, the spec's models, rich)."""
    assert heavy_imports(tmp_path, "--help") == set()
    assert heavy_imports(tmp_path, "run", "--help") == set()
    listed = imported(tmp_path, "--help")
    used = {"gradetrail.analysis.gate", "gradetrail.analysis.diff", "gradetrail.cache.store"}
    assert listed & (NOT_FOR_RUN | used) <= {
        m for m in NOT_FOR_RUN if m.startswith("gradetrail.cli.")
    }
    assert {m.split(".")[0] for m in listed} & {"pydantic", "rich", "jinja2", "yaml"} == set()


@pytest.mark.parametrize("limit", [200, 1319])
def test_warm_replay_run_imports_nothing_heavy(tmp_path: Path, limit: int) -> None:
    """A re-run of the bundled GSM8K eval imports no heavy library, at 200 samples (the
    summary's Student t interval) as at 1,319 (the normal one)."""
    args = ["run", str(GSM8K_SPEC), "--results-root", str(tmp_path / "r"), "--json"]
    args += ["--set", f"dataset.limit={limit}"]
    assert heavy_imports(tmp_path, *args) == set()  # cold: the replay provider needs none
    assert heavy_imports(tmp_path, *args) == set()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_warm_http_run_imports_nothing_heavy(server, tmp_path: Path, protocol: str) -> None:
    """A fully cached HTTP run imports neither the SDK nor any HTTP client; the cold run
    before it made its calls, to a plain ``http://`` server, through asyncio's own
    streams: no HTTP library either."""
    spec = gsm8k_spec(tmp_path, server, protocol, limit=5, api_key_env="ANTHROPIC_API_KEY")
    args = ["run", str(spec.source), "--results-root", str(tmp_path / "r"), "--json"]
    assert heavy_imports(tmp_path, *args) == set()
    assert heavy_imports(tmp_path, *args) == set()


@pytest.mark.parametrize("protocol", PROTOCOLS)
def test_cold_http_run_imports_only_its_transport(server, tmp_path: Path, protocol: str) -> None:
    """``http_client: aiohttp`` (as ``auto`` for an ``https://`` API) imports aiohttp, and
    nothing heavy besides (no SDK, no scipy)."""
    spec = gsm8k_spec(
        tmp_path, server, protocol, limit=5, api_key_env="ANTHROPIC_API_KEY", http_client="aiohttp"
    )
    args = ["run", str(spec.source), "--results-root", str(tmp_path / "r"), "--json"]
    assert heavy_imports(tmp_path, *args) == {"aiohttp"}
