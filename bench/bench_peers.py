"""Whole-process benchmarks of gradetrail against its peers (issue 29): Inspect AI,
lm-evaluation-harness and promptfoo doing the same work as ``gradetrail run``.

The work is bench_runs.py's: the 1,319 GSM8K test problems of examples/gsm8k.yaml, sent
to the local OpenAI-protocol server (tests/protocol_server.py, its own process, started
outside the timed ones, so its CPU is not counted) through its Chat Completions endpoint,
model ``175b_verification`` (the server answers with that model's recorded solution),
each reply scored by a numeric match against the number after ``####``. Each peer is
given the same prompt text gradetrail renders and the same numeric match
(bench/peers/numeric_match.py and the task files beside it), so all make 1,319 requests
and score them; each tool's accuracy is printed beside its times (a peer far from
gradetrail's is misconfigured).

Every figure is one whole process under ``/usr/bin/time -v`` (wall, user + system CPU,
peak RSS), the median of ``--repeat`` runs. Runs interleave: for each repeat, each tool
once in turn. ``PYTHONDONTWRITEBYTECODE`` is removed from the children's environment and
each tool runs once untimed first (bytecode caches, the dataset cache lm-eval builds).

Scenarios, each with 64 requests in flight:

- ``a64``: 100 ms server latency, no cache. Ideal: ceil(1319 / 64) x 0.1 s = 2.1 s.
- ``c64``: 0 ms latency, no cache: the tool's own cost, as CPU ms a sample.
- ``warm``: the same run again with every response in the tool's own cache (gradetrail's
  cache; Inspect's model output cache, ``generate(cache=True)``; lm-eval's
  ``--use_cache``; promptfoo's disk cache), filled by one untimed run. The server's
  request count during the timed runs shows whether a cache made the run free (each
  made 0 in the validation run; once promptfoo's disk cache missed 16 of 1,319). No
  peer's cache makes the run cheap: a warm run costs about what a cold one does.

How each tool is run (``--setup`` installs the peers, pinned, into their own virtualenvs /
npm prefix under ``--peers-dir``, default ~/.cache/gradetrail-bench/peers; no peer code
is in this repository and none goes into the project's venv):

- gradetrail: ``python -m gradetrail run examples/gsm8k.yaml`` with the server overrides
  and ``run.concurrency=64`` (``--no-cache`` cold), ``PYTHONPATH=--tree``.
- Inspect AI: ``inspect eval bench/peers/inspect_gsm8k.py --model
  openai-api/local/175b_verification --max-connections 64`` (``-T cache=true`` warm).
- lm-eval: ``lm_eval --model local-chat-completions --model_args
  model=175b_verification,base_url=URL/v1/chat/completions,num_concurrent=64
  --apply_chat_template --tasks gsm8k_gradetrail --include_path bench/peers/lmeval
  --log_samples`` (``--use_cache PATH`` warm).
- promptfoo: ``promptfoo eval`` of a config this script writes (provider
  ``openai:chat:175b_verification`` with ``apiBaseUrl``, the 1,319 rows as tests, the
  assertion bench/peers/promptfoo_numeric.js), ``--max-concurrency 64``
  (``--no-cache`` cold).

Each tool writes its per-sample record as it does by default (gradetrail's run
directory, Inspect's .eval log, lm-eval's ``--log_samples`` file, promptfoo's database
and ``--output`` file). The load average (1 minute) is printed with each scenario: the
machine is shared, so quote ratios with it.

    python bench/bench_peers.py --setup                 # once: the peers' venvs
    python bench/bench_peers.py [--repeat 3] [--only a64 c64 warm]
        [--tools gradetrail inspect lmeval promptfoo] [--tree PATH] [--peers-dir DIR]
"""

from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from bench_runs import Measure, N, http_args, load, measured, report, timed
from protocol_server import ServerHandle, running_server

ROOT = Path(__file__).resolve().parents[1]
PEERS = ROOT / "bench" / "peers"
DATA = ROOT / "examples" / "data" / "gsm8k" / "test.jsonl"
MODEL = "175b_verification"
PROMPT = 'Solve the math word problem. End with a line "A: <answer>".\n\nQ: {{question}}\n'
SCENARIOS = ("a64", "c64", "warm")
TOOLS = ("gradetrail", "inspect", "lmeval", "promptfoo")
CONCURRENCY = 64
#: the pinned peers (checked to run here); lm-eval's torch is the CPU build on local disk
INSPECT_PIP = ["inspect-ai==0.3.285", "openai==3.63.0"]
LMEVAL_PIP = ["lm-eval[api]==0.4.13"]
TORCH_PIP = ["torch==2.13.0"]
PROMPTFOO_NPM = "promptfoo@0.121.5"  # 0.123 asks for node 22; node 20 is here
#: a peer process that runs longer than this is killed and the peer reported as failed
RUN_TIMEOUT_S = 900


def default_peers_dir() -> Path:
    return Path.home() / ".cache" / "gradetrail-bench" / "peers"


def setup(peers: Path) -> None:
    """Make the peers' virtualenvs and npm prefix under ``peers`` (idempotent)."""
    peers.mkdir(parents=True, exist_ok=True)
    python = shutil.which("python3") or sys.executable

    def venv(name: str, *installs: list[str]) -> None:
        where = peers / name
        if not (where / "bin" / "python").exists():
            subprocess.run([python, "-m", "venv", str(where)], check=True)
        for packages in installs:
            cmd = [str(where / "bin" / "pip"), "install", "-q", *packages]
            print("+", " ".join(cmd), flush=True)
            subprocess.run(cmd, check=True)

    venv("inspect", INSPECT_PIP)
    venv("lmeval", TORCH_PIP, LMEVAL_PIP)  # torch first: the local CPU build, not CUDA's
    (peers / "promptfoo").mkdir(exist_ok=True)
    if shutil.which("npm"):
        cmd = ["npm", "install", "--no-fund", "--no-audit", PROMPTFOO_NPM]
        print("+", " ".join(cmd), flush=True)
        subprocess.run(cmd, cwd=peers / "promptfoo", check=True)
    else:
        print("npm not found: promptfoo left out", flush=True)


class PeerFailed(Exception):
    """A peer's process failed, timed out or scored nothing."""


def timed_peer(
    cmd: list[str], env: dict[str, str], cwd: Path, ok: frozenset[int] = frozenset({0})
) -> Measure:
    """Run ``cmd`` under /usr/bin/time -v (its own session, killed whole on a timeout);
    an exit status not in ``ok`` is a failure."""
    started = time.time()
    proc = subprocess.Popen(
        ["/usr/bin/time", "-v", *cmd],
        env=env,
        cwd=cwd,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    try:
        out, err = proc.communicate(timeout=RUN_TIMEOUT_S)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.communicate()
        raise PeerFailed(f"{Path(cmd[0]).name} ran past {RUN_TIMEOUT_S} s") from None
    ended = time.time()
    if proc.returncode not in ok:
        raise PeerFailed(f"exit {proc.returncode}: {(out + err)[-1500:]}")
    measure = measured(err, {"n_samples": N, "stdout": out[-3000:]}, started, ended)
    if measure is None:
        raise PeerFailed(f"no /usr/bin/time -v figures in: {err[-500:]}")
    return measure


@dataclass
class Tool:
    """One tool: how to run it cold (no cache) or warm, and how to read its accuracy."""

    name: str
    #: (server, warm, run number) -> the process's argv and extra environment
    command: Callable[[ServerHandle, bool, int], tuple[list[str], dict[str, str]]]
    #: (the run's Measure, run number) -> accuracy in [0, 1]
    accuracy: Callable[[Measure, int], float]
    #: exit statuses of a run that went through (promptfoo exits 100 when a test failed)
    ok: frozenset[int] = frozenset({0})
    missing: str | None = None  # why it cannot run here
    failed: str | None = None
    runs: dict[str, list[Measure]] = field(default_factory=dict)
    accs: dict[str, list[float]] = field(default_factory=dict)
    requests: dict[str, list[int]] = field(default_factory=dict)


def make_tools(args: argparse.Namespace, env: dict[str, str], work: Path) -> list[Tool]:
    """The tools asked for, each with its command; a peer not installed gets ``missing``."""
    peers: Path = args.peers_dir
    tools: list[Tool] = []

    # gradetrail: bench_runs' spec and overrides; --tree on PYTHONPATH
    def gt_command(srv: ServerHandle, warm: bool, i: int) -> tuple[list[str], dict]:
        more = ["--results-root", str(work / "gt")]
        return http_args(srv, CONCURRENCY, *more, *([] if warm else ["--no-cache"])), {}

    def gt_accuracy(m: Measure, i: int) -> float:
        return float(m.summary["score"]["mean"])

    tools.append(Tool("gradetrail", gt_command, gt_accuracy))

    # Inspect AI: the task file, the openai-api provider named "local"
    inspect_bin = peers / "inspect" / "bin" / "inspect"

    def inspect_command(srv: ServerHandle, warm: bool, i: int) -> tuple[list[str], dict]:
        cmd = [str(inspect_bin), "eval", str((PEERS / "inspect_gsm8k.py").relative_to(ROOT))]
        cmd += ["--model", f"openai-api/local/{MODEL}", "--max-connections", str(CONCURRENCY)]
        cmd += ["--log-dir", str(work / "inspect" / f"run{i}"), "--display", "none"]
        cmd += ["-T", f"cache={str(warm).lower()}"]
        extra = {
            "LOCAL_BASE_URL": srv.openai_base_url,
            "LOCAL_API_KEY": "test",
            "INSPECT_CACHE_DIR": str(work / "inspect-cache"),
        }
        return cmd, extra

    def inspect_accuracy(m: Measure, i: int) -> float:
        logs = sorted((work / "inspect" / f"run{i}").glob("*.eval"))
        if not logs:
            raise PeerFailed("Inspect wrote no .eval log")
        code = (
            "import json, sys; from inspect_ai.log import read_eval_log\n"
            "log = read_eval_log(sys.argv[1], header_only=True)\n"
            "acc = log.results.scores[0].metrics['accuracy'].value if log.results else None\n"
            "print(json.dumps({'status': log.status, 'error': str(log.error), 'acc': acc}))"
        )
        proc = subprocess.run(
            [str(peers / "inspect" / "bin" / "python"), "-c", code, str(logs[-1])],
            capture_output=True,
            text=True,
        )
        if proc.returncode != 0:
            raise PeerFailed(f"reading Inspect's log: {proc.stderr[-1000:]}")
        header = json.loads(proc.stdout)
        if header["status"] != "success":
            raise PeerFailed(f"Inspect's log says {header['status']}: {header['error']}")
        return float(header["acc"])

    tools.append(Tool("inspect", inspect_command, inspect_accuracy))

    # lm-evaluation-harness: local-chat-completions, the task YAML under bench/peers/lmeval
    lmeval_bin = peers / "lmeval" / "bin" / "lm_eval"

    def lmeval_command(srv: ServerHandle, warm: bool, i: int) -> tuple[list[str], dict]:
        model_args = (
            f"model={MODEL},base_url={srv.openai_base_url}/chat/completions,"
            f"num_concurrent={CONCURRENCY},max_retries=3,tokenized_requests=False"
        )
        cmd = [str(lmeval_bin), "--model", "local-chat-completions", "--model_args", model_args]
        cmd += ["--apply_chat_template", "--tasks", "gsm8k_gradetrail"]
        cmd += ["--include_path", str(PEERS / "lmeval"), "--log_samples"]
        cmd += ["--output_path", str(work / "lmeval" / f"run{i}")]
        if warm:
            cmd += ["--use_cache", str(work / "lmeval-cache" / "gsm8k")]
        extra = {
            "OPENAI_API_KEY": "test",
            "HF_DATASETS_OFFLINE": "1",
            "HF_HUB_OFFLINE": "1",
            "HF_HOME": str(work / "hf"),
            "TOKENIZERS_PARALLELISM": "false",
        }
        return cmd, extra

    def lmeval_accuracy(m: Measure, i: int) -> float:
        found = sorted((work / "lmeval" / f"run{i}").rglob("results_*.json"))
        if not found:
            raise PeerFailed("lm-eval wrote no results_*.json")
        results = json.loads(found[-1].read_text())["results"]["gsm8k_gradetrail"]
        return float(results["acc,none"])

    tools.append(Tool("lmeval", lmeval_command, lmeval_accuracy))

    # promptfoo: a config written per server (its URL), the rows as tests
    promptfoo_bin = peers / "promptfoo" / "node_modules" / ".bin" / "promptfoo"

    def promptfoo_command(srv: ServerHandle, warm: bool, i: int) -> tuple[list[str], dict]:
        config = work / "promptfoo" / "promptfooconfig.json"
        if not config.exists():
            write_promptfoo_config(config, srv)
        out = work / "promptfoo" / f"out{i}.json"
        cmd = [str(promptfoo_bin), "eval", "-c", str(config), "--output", str(out)]
        cmd += ["--max-concurrency", str(CONCURRENCY), "--no-progress-bar", "--no-table"]
        if not warm:
            cmd.append("--no-cache")
        extra = {
            "PROMPTFOO_CONFIG_DIR": str(work / "promptfoo" / "home"),
            "PROMPTFOO_CACHE_PATH": str(work / "promptfoo" / "cache"),
            "PROMPTFOO_CACHE_TYPE": "disk",
            "PROMPTFOO_DISABLE_TELEMETRY": "1",
            "PROMPTFOO_DISABLE_UPDATE": "1",
            "OPENAI_API_KEY": "test",
        }
        return cmd, extra

    def promptfoo_accuracy(m: Measure, i: int) -> float:
        out = json.loads((work / "promptfoo" / f"out{i}.json").read_text())
        stats = out["results"]["stats"]
        total = stats["successes"] + stats["failures"] + stats.get("errors", 0)
        return stats["successes"] / total if total else 0.0

    tools.append(Tool("promptfoo", promptfoo_command, promptfoo_accuracy, frozenset({0, 100})))

    setup_cmd = f"{sys.executable} {Path(__file__).relative_to(ROOT)} --setup"
    for tool, binary in (
        ("inspect", inspect_bin),
        ("lmeval", lmeval_bin),
        ("promptfoo", promptfoo_bin),
    ):
        if not binary.exists():
            t = next(t for t in tools if t.name == tool)
            t.missing = f"not installed ({binary} missing): run `{setup_cmd}`"
    return [t for t in tools if t.name in args.tools]


def write_promptfoo_config(path: Path, srv: ServerHandle) -> None:
    """promptfoo's config: the prompt, the server as an openai:chat provider, each GSM8K
    row a test with its target, the numeric-match assertion."""
    path.parent.mkdir(parents=True, exist_ok=True)
    rows = [json.loads(line) for line in DATA.read_text().splitlines() if line.strip()]
    tests = [
        {"vars": {"question": r["question"], "target": r["answer"].split("####")[-1].strip()}}
        for r in rows
    ]
    config = {
        "description": "GSM8K, the work of examples/gsm8k.yaml (bench/bench_peers.py)",
        "prompts": [PROMPT],
        "providers": [
            {
                "id": f"openai:chat:{MODEL}",
                "config": {"apiBaseUrl": srv.openai_base_url, "apiKey": "test"},
            }
        ],
        "defaultTest": {
            "assert": [{"type": "javascript", "value": f"file://{PEERS / 'promptfoo_numeric.js'}"}]
        },
        "tests": tests,
    }
    path.write_text(json.dumps(config))


def run_once(
    tool: Tool, srv: ServerHandle, warm: bool, i: int, env: dict, tree: Path
) -> tuple[Measure, float, int]:
    """One run of ``tool``: its Measure, its accuracy and the requests the server saw."""
    srv.reset(config=False)
    cmd, extra = tool.command(srv, warm, i)
    if tool.name == "gradetrail":
        measure = timed(cmd, {**env, "PYTHONPATH": str(tree), **extra}, ROOT)
    else:
        measure = timed_peer(cmd, {**env, **extra}, ROOT, tool.ok)
    requests = srv.stats()["total"]
    try:
        accuracy = tool.accuracy(measure, i)
    except (OSError, KeyError, ValueError, TypeError, IndexError) as exc:
        raise PeerFailed(f"no accuracy from {tool.name}: {exc!r}") from None
    if accuracy == 0:
        raise PeerFailed(f"{tool.name} scored 0: misconfigured ({measure.summary})")
    return measure, accuracy, requests


def scenario(
    name: str, tools: list[Tool], srv: ServerHandle, repeat: int, env: dict, tree: Path
) -> list[dict]:
    """Time ``name`` for every tool, interleaved; print a line per tool; return them."""
    latency = 0.1 if name == "a64" else 0.0
    warm = name == "warm"
    srv.configure(latency=latency)
    ideal = math.ceil(N / CONCURRENCY) * latency if latency else None
    titles = {
        "a64": f"a64: 100 ms, {CONCURRENCY} in flight, no cache",
        "c64": f"c64: 0 ms, {CONCURRENCY} in flight, no cache",
        "warm": "warm: every response cached",
    }
    print(f"\n{titles[name]}  ({load()})", flush=True)
    live = [t for t in tools if not (t.missing or t.failed)]
    if warm:  # fill each tool's own cache, untimed
        for tool in live:
            try:
                run_once(tool, srv, True, 900, env, tree)
            except PeerFailed as exc:
                tool.failed = f"warm fill: {exc}"
    for r in range(repeat):
        for tool in live:
            if tool.failed:
                continue
            try:
                measure, accuracy, requests = run_once(tool, srv, warm, 1000 * r + 1, env, tree)
            except PeerFailed as exc:
                tool.failed = f"{name}: {exc}"
                continue
            tool.runs.setdefault(name, []).append(measure)
            tool.accs.setdefault(name, []).append(accuracy)
            tool.requests.setdefault(name, []).append(requests)
    out = []
    base = next((t for t in tools if t.name == "gradetrail" and t.runs.get(name)), None)
    base_wall = statistics.median(m.wall for m in base.runs[name]) if base else None
    base_cpu = statistics.median(m.cpu for m in base.runs[name]) if base else None
    for tool in tools:
        if tool.missing or (tool.failed and not tool.runs.get(name)):
            print(f"{tool.name:12s} cannot: {tool.missing or tool.failed}", flush=True)
            out.append({"scenario": name, "tool": tool.name, "error": tool.missing or tool.failed})
            continue
        runs = tool.runs[name]
        wall = statistics.median(m.wall for m in runs)
        cpu = statistics.median(m.cpu for m in runs)
        extra = f"  acc {statistics.median(tool.accs[name]):.4f}"
        extra += f"  requests {max(tool.requests[name])}"
        if base_wall and base_cpu and tool is not base:
            extra += f"  vs gradetrail: wall {wall / base_wall:.2f}x, CPU {cpu / base_cpu:.2f}x"
        row = report(tool.name, runs, ideal, extra)
        row.update(
            scenario=name,
            tool=tool.name,
            accuracy=statistics.median(tool.accs[name]),
            requests=max(tool.requests[name]),
            cpu_ms_per_sample=1000 * cpu / N,
        )
        if tool.failed:
            print(f"{'':12s} (then failed: {tool.failed})", flush=True)
        out.append(row)
    return out


def versions(args: argparse.Namespace, env: dict) -> str:
    """The tools' versions, as installed."""
    peers: Path = args.peers_dir
    got = []
    for name, python, dist in (
        ("inspect-ai", peers / "inspect" / "bin" / "python", "inspect_ai"),
        ("lm-eval", peers / "lmeval" / "bin" / "python", "lm_eval"),
        ("torch", peers / "lmeval" / "bin" / "python", "torch"),
        ("openai", peers / "inspect" / "bin" / "python", "openai"),
    ):
        if python.exists():
            code = f"import importlib.metadata as m; print(m.version({dist.replace('_', '-')!r}))"
            proc = subprocess.run([str(python), "-c", code], capture_output=True, text=True)
            got.append(f"{name} {proc.stdout.strip() or '?'}")
    package = peers / "promptfoo" / "node_modules" / "promptfoo" / "package.json"
    if package.exists():
        got.append(f"promptfoo {json.loads(package.read_text())['version']}")
    node = shutil.which("node")
    if node:
        proc = subprocess.run([node, "--version"], capture_output=True, text=True)
        got.append(f"node {proc.stdout.strip()}")
    return ", ".join(got)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setup", action="store_true", help="install the peers, then exit")
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--only", nargs="+", choices=SCENARIOS, default=list(SCENARIOS))
    ap.add_argument("--tools", nargs="+", choices=TOOLS, default=list(TOOLS))
    ap.add_argument("--tree", type=Path, default=ROOT, help="the gradetrail source tree to run")
    ap.add_argument("--peers-dir", type=Path, default=default_peers_dir())
    ap.add_argument("--work", type=Path, help="keep the work directory here (default: a temp)")
    args = ap.parse_args()
    if args.setup:
        setup(args.peers_dir)
        return
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    work = args.work or Path(tempfile.mkdtemp(prefix="gt-bench-peers-"))
    work.mkdir(parents=True, exist_ok=True)
    env["GRADETRAIL_CACHE"] = str(work / "gt-cache.sqlite")
    tree = args.tree.resolve()
    print(
        f"{os.cpu_count()} CPUs, python {sys.version.split()[0]}, {load()}; bytecode cache on "
        f"(PYTHONDONTWRITEBYTECODE unset); medians of {args.repeat}; gradetrail from {tree}",
        flush=True,
    )
    print(f"peers: {versions(args, env)}", flush=True)
    tools = make_tools(args, env, work)
    results: list[dict] = []
    try:
        with running_server(latency=0.0) as srv:
            for tool in tools:  # the first, untimed run of each
                if tool.missing:
                    continue
                try:
                    run_once(tool, srv, False, 0, env, tree)
                except PeerFailed as exc:
                    tool.failed = f"first run: {exc}"
            for name in SCENARIOS:
                if name in args.only:
                    results += scenario(name, tools, srv, args.repeat, env, tree)
    finally:
        if args.work is None:
            shutil.rmtree(work, ignore_errors=True)
    print(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
