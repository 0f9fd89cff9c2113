"""The Ray executor on a real two-node cluster (``ray start --head`` and ``ray start
--address``; the second node cannot see the driver's files), and its refusals.

One cluster serves the whole module; every run joins it with ``--address`` (the pytest
process is the driver of the in-process runs). Tests that need no cluster do not start
one.
"""

from __future__ import annotations

import json
import math
import os
import signal
import socket
import subprocess
import sys
import time
from importlib.metadata import version
from pathlib import Path
from typing import Any

import pytest
import yaml
from http_support import gsm8k_spec
from protocol_server import fresh_protocol_server_fixture, protocol_server_fixture
from ray_support import RunningCluster, grep_tree, ray_env, two_node_cluster
from run_support import count_lines, drain_logged, only_run_dir, wait_until

import gradetrail
from gradetrail.cache.store import ResponseCache
from gradetrail.executors.budget import worst_case_usd
from gradetrail.executors.ray import RayExecutor, RayOptions
from gradetrail.executors.ray_pool import RayPool
from gradetrail.executors.retry import RetryPolicy
from gradetrail.providers import make_provider
from gradetrail.rundir.spending import SpendingLog
from gradetrail.testing import FakeClock

SECRET = "sk-ray-SECRET-7f3a9c1e5b"
server = protocol_server_fixture(scope="module", name="server", api_key=SECRET, models=["*"])
srv = fresh_protocol_server_fixture("server", name="srv")
#: row fields that may differ between two runs of the same spec (timing)
TIMING = {"latency_s"}
#: manifest fields that must be identical between executors
SAME = (
    "identity_hash",
    "spec_hash",
    "dataset_hash",
    "file_hashes",
    "status",
    "counts",
    "served_models",
    "input_tokens",
    "output_tokens",
    "cached_input_tokens",
    "cost_usd",
    "cache_hits",
    "score",
    "judge",
    "top_errors",
    "n_samples",
    "epochs",
)


@pytest.fixture(scope="module")
def driver_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Where this module's specs, datasets, caches and results live: hidden from the
    cluster's second node."""
    return tmp_path_factory.mktemp("driver")


@pytest.fixture(scope="module")
def cluster(driver_dir: Path) -> Any:
    """The module's two-node cluster."""
    with two_node_cluster(driver_dir) as running:
        yield running


@pytest.fixture
def keyed(monkeypatch: pytest.MonkeyPatch) -> str:
    """The server's API key, in a variable only the driver's environment has."""
    monkeypatch.setenv("GT_RAY_KEY", SECRET)
    return "GT_RAY_KEY"


def _rows(run_dir: Path) -> list[dict[str, Any]]:
    return [
        {k: v for k, v in r.items() if k not in TIMING} for r in gradetrail.read_results(run_dir)
    ]


def _run(spec: gradetrail.EvalSpec, where: Path, executor: Any = None, **kw: Any) -> Any:
    return gradetrail.run_eval(
        spec,
        results_root=where / "results",
        cache_path=where / "cache.sqlite",
        executor=executor,
        **kw,
    )


def test_ray_gives_the_same_answer_as_local_from_both_nodes_and_writes_no_key(
    cluster: RunningCluster, srv, driver_dir: Path, keyed: str
) -> None:
    """GSM8K through the protocol server: local and Ray (2 workers, one on each node)
    give the same rows in the same order, scores, identity and counts; both nodes served
    requests; the API key reached the workers (the server requires it) but no file of
    either node's Ray session holds it. The cost is the same float (before, summed in the
    order rows landed, it differed in its last digits)."""
    local_dir, ray_dir = driver_dir / "same-local", driver_dir / "same-ray"
    run = {"concurrency": 32}
    price = {"input_per_mtok": 0.15, "output_per_mtok": 0.6}
    common = {"limit": None, "run": run, "api_key_env": keyed, "api_key_required": True}
    common["price"] = price
    local = _run(gsm8k_spec(local_dir, srv, "openai_compatible", **common), local_dir)
    local_requests = srv.stats()["total"]
    spec = gsm8k_spec(ray_dir, srv, "openai_compatible", **common)
    ray = _run(spec, ray_dir, RayOptions(address=cluster.address, workers=2))

    assert local_requests == 1319 and srv.stats()["total"] == 2 * 1319
    assert srv.stats()["max_in_flight"] <= 32
    assert _rows(ray.run_dir) == _rows(local.run_dir)
    assert [r["sample_id"] for r in _rows(ray.run_dir)][:3] == ["1", "2", "3"]
    assert gradetrail.read_samples(ray.run_dir) == gradetrail.read_samples(local.run_dir)
    for name in SAME:
        assert getattr(ray.manifest, name) == getattr(local.manifest, name), name
    assert ray.manifest.counts == {"scored": 1319}
    assert ray.manifest.cost_usd == math.fsum(r["cost_usd"] for r in _rows(local.run_dir))
    assert ray.manifest.score.mean == pytest.approx(0.5625, abs=1e-4)  # the authors' labels
    ex = ray.manifest.executor
    assert ex["kind"] == "ray" and ex["workers"] == 2 and ex["nodes"] == 2, ex
    assert ex["in_flight_per_worker"] == 16
    assert all(w["served"] > 0 for w in ex["per_worker"])
    assert sum(w["served"] for w in ex["per_worker"]) == 1319
    assert local.manifest.executor == {"kind": "local", "concurrency": 32}
    for temp_dir in cluster.temp_dirs:
        assert grep_tree(temp_dir, SECRET.encode()) == []


def test_a_judged_run_of_three_epochs_writes_the_local_bytes_on_ray(
    cluster: RunningCluster, srv, driver_dir: Path, keyed: str
) -> None:
    """30 GSM8K samples x 3 epochs, each judged (priced), every call in flight at once
    with random latencies: the three epochs of a sample answer alike, so they make one
    judge request, and epoch 1's row pays it on Ray as locally (rows equal but for
    latency, same manifest totals). Before: the epoch whose response landed first paid,
    and 46 of the 90 rows differed between the two executors."""
    srv.configure(latency="uniform:0,0.3", script=[{"contains": "Grade this", "reply": "GRADE: C"}])
    rows, manifests = {}, {}
    for kind, executor in (("local", None), ("ray", RayOptions(cluster.address, workers=2))):
        root = driver_dir / f"epochs-{kind}"
        spec = gsm8k_spec(
            root, srv, "openai_compatible", limit=30, api_key_env=keyed,
            price={"input_per_mtok": 1.0, "output_per_mtok": 2.0},
            run={"concurrency": 96, "epochs": 3},
        )  # fmt: skip
        raw = yaml.safe_load(Path(spec.source).read_text())
        (root / "judge.j2").write_text("Grade this answer to {{ prompt }}: {{ response }}\n")
        judge = {
            **raw["model"],
            "name": "judge",
            "price": {"input_per_mtok": 3.0, "output_per_mtok": 5.0},
        }
        raw["scorer"] = {"type": "judge", "file": "judge.j2", "model": judge}
        Path(spec.source).write_text(yaml.safe_dump(raw, sort_keys=False))
        result = _run(gradetrail.load_spec(spec.source), root, executor)
        rows[kind], manifests[kind] = _rows(result.run_dir), result.manifest
    assert manifests["local"].counts == {"scored": 90}
    assert manifests["ray"].executor["nodes"] == 2
    paid = [
        "".join(str(int(not r["scorer"]["verdicts"][0]["cached"])) for r in rows[kind])
        for kind in rows
    ]
    assert paid == ["100" * 30, "100" * 30]
    assert rows["ray"] == rows["local"]
    for name in SAME:
        assert getattr(manifests["ray"], name) == getattr(manifests["local"], name), name
    assert manifests["ray"].judge.calls == 30


APP = {
    "__init__.py": "",
    "helpers.py": "def answer_for(prompt):\n    return prompt.rsplit('=', 1)[1].strip()\n",
    "solve.py": """\
import os

from gradetrail import Response
from rayapp.helpers import answer_for

SPEC = {spec!r}


async def solve(request):
    import ray

    node = ray.get_runtime_context().get_node_id()
    sight = "sees" if os.path.exists(SPEC) else "blind"
    return Response(text="A: " + answer_for(request.prompt), served_model=f"{{node}}:{{sight}}")
""",
}


JUDGE = """\
import os

import ray

SPEC = {spec!r}


def grade(request):
    node = ray.get_runtime_context().get_node_id()
    return "GRADE: C\\n" + node + ":" + ("sees" if os.path.exists(SPEC) else "blind")
"""


def _app_eval(root: Path, samples: int) -> Path:
    """A ``python``-provider eval (package ``rayapp`` beside the spec) judged by another
    ``python`` provider (package ``rayjudge``): the workers learn of the judge's code
    only after they started with the app's."""
    root.mkdir(parents=True)
    spec_path = root / "spec.yaml"
    (root / "rayapp").mkdir()
    for name, text in APP.items():
        (root / "rayapp" / name).write_text(text.format(spec=str(spec_path)))
    (root / "rayjudge").mkdir()
    (root / "rayjudge" / "__init__.py").write_text("")
    (root / "rayjudge" / "grade.py").write_text(JUDGE.format(spec=str(spec_path)))
    rows = [{"id": f"q{i}", "q": f"{i}+{i}", "a": 2 * i} for i in range(samples)]
    (root / "data.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "judge.j2").write_text("Grade this answer to {{ prompt }}: {{ response }}\n")
    spec = {
        "name": "ray-app",
        "dataset": {"path": "data.jsonl"},
        "prompt": "What is {{ q }}? = {{ a }}",
        "model": {"provider": "python", "name": "app", "function": "rayapp.solve:solve"},
        "scorer": {
            "type": "judge",
            "file": "judge.j2",
            "model": {"provider": "python", "name": "grader", "function": "rayjudge.grade:grade"},
        },
        "run": {"concurrency": 8, "max_retries": 2},
    }
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return spec_path


def test_python_provider_module_and_judge_run_on_a_node_that_cannot_see_them(
    cluster: RunningCluster, driver_dir: Path
) -> None:
    """The ``python`` provider's package is shipped to the workers (runtime_env
    py_modules): the node that cannot see the spec, dataset or package still answers;
    the judge's calls go through the same Ray workers, its own package shipped too
    although the workers had started before the judge was bound."""
    root = driver_dir / "app"
    spec = gradetrail.load_spec(_app_eval(root, 40))
    result = _run(spec, root, RayOptions(address=cluster.address, workers=2))

    assert result.manifest.counts == {"scored": 40}
    sights = {name.split(":")[1] for name in result.manifest.served_models}
    nodes = {name.split(":")[0] for name in result.manifest.served_models}
    assert sights == {"sees", "blind"} and len(nodes) == 2
    assert result.manifest.judge.calls == 40
    replies = [r["scorer"]["verdicts"][0]["reply"] for r in _rows(result.run_dir)]
    assert {reply.rsplit(":", 1)[1] for reply in replies} == {"sees", "blind"}
    served = [w["served"] for w in result.manifest.executor["per_worker"]]
    assert sum(served) == 80  # 40 model calls and 40 judge calls


SIDEAPP = """\
import ray
from sidehelpers import answer_for

from gradetrail import Response


def answer(request):
    node = ray.get_runtime_context().get_node_id()
    return Response(text="A: " + answer_for(request.prompt), served_model=node)
"""


def test_a_module_beside_the_spec_ships_the_modules_it_imports_from_there(
    cluster: RunningCluster, driver_dir: Path
) -> None:
    """``model.function: sideapp:answer``, a single-file module beside the spec that
    imports ``sidehelpers`` (another file beside it, not a package), as runs locally: on
    the node that cannot see the driver's files too, every row is scored. Before: only
    sideapp.py was shipped, and the run stopped with 'the Ray workers could not start:
    ModuleNotFoundError: No module named 'sidehelpers'', exit 1."""
    root = driver_dir / "beside"
    root.mkdir()
    (root / "sideapp.py").write_text(SIDEAPP)
    (root / "sidehelpers.py").write_text(
        "def answer_for(prompt):\n    return str(2 * int(prompt))\n"
    )
    (root / "data.jsonl").write_text("".join(f'{{"id": "q{i}", "q": {i}}}\n' for i in range(20)))
    spec_path = root / "spec.yaml"
    spec = {
        "name": "beside",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "target": "{{ q * 2 }}",
        "model": {"provider": "python", "name": "app", "function": "sideapp:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"concurrency": 8},
    }
    spec_path.write_text(yaml.safe_dump(spec, sort_keys=False))
    result = _run(gradetrail.load_spec(spec_path), root, RayOptions(cluster.address, workers=2))
    assert result.manifest.counts == {"scored": 20}
    assert result.manifest.score.mean == 1.0
    assert len(result.manifest.served_models) == 2  # both nodes answered


FARAPP = """\
import sys
from pathlib import Path

sys.path.append(str(Path(__file__).parent / "lib"))  # beside the driver's copy only
import farlib  # noqa: E402


def answer(request):
    return farlib.ANSWER
"""


def test_code_the_workers_cannot_import_is_one_line_exit_2(
    cluster: RunningCluster, driver_dir: Path, cli
) -> None:
    """A python provider whose module imports code from a directory it adds to sys.path
    itself (not shipped, not installed on the nodes): one line naming the module the
    workers cannot import and the fix, exit 2, and no run directory. Before: 'the Ray
    workers could not start: ModuleNotFoundError: ...', exit 1, as for a failure of Ray's
    own; then the line, but after a `failed` run directory was made (the workers started
    in the background once it existed)."""
    root = driver_dir / "far"
    (root / "lib").mkdir(parents=True)
    (root / "lib" / "farlib.py").write_text("ANSWER = 'A: 1'\n")
    (root / "farapp.py").write_text(FARAPP)
    (root / "data.jsonl").write_text('{"id": "q1", "q": "1"}\n')
    spec = {
        "name": "far",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "target": "1",
        "model": {"provider": "python", "name": "app", "function": "farapp:answer"},
        "scorer": {"type": "numeric", "marker": "A:"},
    }
    (root / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    out = cli(
        "run", str(root / "spec.yaml"), "--executor", "ray", "--address", cluster.address,
        "--cache", str(root / "c.db"), "--results-root", str(root / "results"),
    )  # fmt: skip
    assert out.exit_code == 2, out.stderr
    line = out.stderr.strip().splitlines()[0]
    assert line == (
        "error: the Ray workers cannot import a python provider's code "
        "(ModuleNotFoundError: No module named 'farlib'): install it on every node of the "
        "cluster, or keep it in model.function's package or beside its module (docs/ray.md)"
    )
    assert "Unhandled error" not in out.stderr  # each worker registered once, and read
    assert len(out.stderr.strip().splitlines()) == 1
    assert not (root / "results").exists()  # refused before the run directory was made


LOCKED = """\
import threading


class Model:
    def __init__(self):
        self.lock = threading.Lock()

    def __call__(self, request):
        with self.lock:
            return "A: 1"


answer = Model()


def plain(request):
    return "A: 1"
"""


def _locked_eval(root: Path, judged: bool) -> Path:
    """A ``python``-provider eval whose callable object holds a lock (it cannot be
    pickled for the workers): the model's, or (``judged``) only the judge's."""
    root.mkdir(parents=True)
    (root / "lockedapp.py").write_text(LOCKED)
    (root / "data.jsonl").write_text("".join(f'{{"id": "q{i}", "q": "{i}"}}\n' for i in range(4)))
    (root / "judge.j2").write_text("Grade {{ prompt }}: {{ response }}\n")
    locked = {"provider": "python", "name": "app", "function": "lockedapp:answer"}
    spec: dict[str, Any] = {
        "name": "locked",
        "dataset": {"path": "data.jsonl"},
        "prompt": "{{ q }}",
        "target": "1",
        "model": {**locked, "function": "lockedapp:plain"} if judged else locked,
        "scorer": {"type": "judge", "file": "judge.j2", "model": {**locked, "name": "grader"}}
        if judged
        else {"type": "numeric", "marker": "A:"},
    }
    path = root / "spec.yaml"
    path.write_text(yaml.safe_dump(spec, sort_keys=False))
    return path


@pytest.mark.parametrize("judged", [False, True], ids=["model", "judge"])
def test_a_provider_that_cannot_be_pickled_is_one_line_exit_2(
    cluster: RunningCluster, driver_dir: Path, cli, judged: bool
) -> None:
    """A ``python`` provider's callable object holding a lock: one line naming the
    field, exit 2, no call made; the model's refuses the run before its directory
    exists (before: a TypeError traceback, exit 1, a failed run directory)."""
    root = driver_dir / f"locked-{'judge' if judged else 'model'}"
    spec = _locked_eval(root, judged)
    out = cli(
        "run", str(spec), "--executor", "ray", "--address", cluster.address,
        "--cache", str(root / "c.db"), "--results-root", str(root / "results"),
    )  # fmt: skip
    assert out.exit_code == 2, out.stderr
    field = "scorer.model.function" if judged else "model.function"
    reason = "cannot be sent to the Ray workers (TypeError: cannot pickle '_thread.lock' object)"
    (line, *rest) = out.stderr.strip().splitlines()
    assert line.startswith("error: ") and f"{field} 'lockedapp:answer' {reason}" in line
    if judged:  # the judge is bound after the run directory exists; no call was made
        assert rest == [f"note: the rows that landed are in {only_run_dir(root / 'results')}"]
        cache = ResponseCache(root / "c.db")
        try:
            assert cache.stats().entries == 0
        finally:
            cache.close()
    else:
        assert rest == [] and not (root / "results").exists()


REFUSER = """\
import asyncio
import threading

from gradetrail.errors import ProviderError


class Refused(ProviderError):
    def __init__(self, who, why):
        super().__init__(f"{who} refused: {why}", status=451)


class Locked(ProviderError):
    def __init__(self, message):
        super().__init__(message, transient=False, status=409)
        self.lock = threading.Lock()


async def answer(request):
    await asyncio.sleep(0.2)  # every call in flight at once: their outcomes share a batch
    if request.prompt == "3":
        raise Refused("server", "policy")
    if request.prompt == "5":
        raise Locked("held")
    return "A: 1"
"""


def test_errors_that_do_not_unpickle_cost_no_other_answer(
    cluster: RunningCluster, driver_dir: Path
) -> None:
    """A ``python`` provider raising a ProviderError subclass with an ``__init__`` of its
    own (it did not unpickle in the driver), and one holding a lock (it did not pickle on
    the worker), among 10 calls in flight on one worker: the other 8 answers are scored,
    and the first error's row is the local run's. Before: every call the worker held
    ended as ``RaySystemError: ... missing 1 required positional argument``, 8 paid
    answers lost."""
    root = driver_dir / "refuser"
    (root / "refuser").mkdir(parents=True)
    (root / "refuser" / "__init__.py").write_text(REFUSER)
    (root / "data.jsonl").write_text("".join(f'{{"id": "q{i}", "q": "{i}"}}\n' for i in range(10)))
    spec_path = root / "spec.yaml"
    spec_path.write_text(
        yaml.safe_dump(
            {
                "name": "refuser",
                "dataset": {"path": "data.jsonl"},
                "prompt": "{{ q }}",
                "target": "1",
                "model": {"provider": "python", "name": "app", "function": "refuser:answer"},
                "scorer": {"type": "numeric", "marker": "A:"},
                "run": {"concurrency": 10, "max_retries": 0, "fail_fast": 0},
            }
        )
    )
    spec = gradetrail.load_spec(spec_path)
    local = _run(spec, root / "local")
    ray = _run(spec, root / "ray", RayOptions(address=cluster.address, workers=1))

    rows, local_rows = _rows(ray.run_dir), _rows(local.run_dir)
    assert ray.manifest.counts == local.manifest.counts == {"scored": 8, "provider_error": 2}
    assert [r["state"] for r in rows] == [r["state"] for r in local_rows]
    assert rows[3] == local_rows[3] and rows[3]["error"]["kind"] == "Refused"
    assert rows[3]["error"]["message"] == "server refused: policy"
    assert rows[3]["error"]["status"] == 451
    locked = rows[5]["error"]  # a copy of the nearest gradetrail class, fields kept
    assert (locked["kind"], locked["message"], locked["status"]) == ("ProviderError", "held", 409)
    assert local_rows[5]["error"]["kind"] == "Locked"
    assert ray.manifest.executor["per_worker"][0]["served"] == 10
    # a tie of one row each: run order (q3 before q5) ranks them, not landing order
    assert [e["message"] for e in ray.manifest.top_errors] == ["server refused: policy", "held"]
    assert [e["message"] for e in local.manifest.top_errors] == ["server refused: policy", "held"]


def test_rate_caps_are_global_across_workers(
    cluster: RunningCluster, srv, driver_dir: Path, keyed: str
) -> None:
    """requests_per_minute is one budget for all workers: 100 requests at 600/min take
    9 s of (fake) time after the first second's 10, with 2 workers as with 1; the server
    never sees more than run.concurrency in flight."""
    root = driver_dir / "caps"
    spec = gsm8k_spec(root, srv, "openai_compatible", limit=100, api_key_env=keyed)
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    clock = FakeClock()
    executor = RayExecutor(
        provider,
        RetryPolicy(max_retries=2),
        8,
        options=RayOptions(address=cluster.address, workers=2),
        requests_per_minute=600,
        sleep=clock.sleep,
        clock=clock.now,
    )
    start = clock.now()
    result = _run(spec, root, executor)
    assert result.manifest.counts == {"scored": 100}
    assert clock.now() - start == pytest.approx(9.0, abs=0.2)
    assert srv.stats()["max_in_flight"] <= 8
    assert all(w["served"] > 0 for w in result.manifest.executor["per_worker"])


def test_waiting_for_the_workers_to_start_is_not_part_of_an_attempt(
    cluster: RunningCluster, srv, driver_dir: Path, keyed: str, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Workers that take 2 s to start (a cold node setting up its runtime env, held here
    by a sleep in the start-up thread) with run.timeout_s 1 and no retries: all 8 rows
    scored, 8 requests paid, as locally. Before: the wait counted against each first
    attempt's timeout, and every row was a ProviderTimeout that never reached the server.
    The run waits for the start before its directory exists, so the first call finds the
    workers up (start_s holds the 2 s, waited_s none of them)."""
    start = RayPool._start_in_background

    def slow_start(self: RayPool) -> Any:
        time.sleep(2.0)
        return start(self)

    monkeypatch.setattr(RayPool, "_start_in_background", slow_start)
    root = driver_dir / "slow-start"
    run = {"timeout_s": 1, "max_retries": 0}
    spec = gsm8k_spec(root, srv, "openai_compatible", limit=8, api_key_env=keyed, run=run)
    result = _run(spec, root, RayOptions(address=cluster.address, workers=2))
    assert result.manifest.counts == {"scored": 8}
    assert srv.stats()["total"] == 8
    assert result.manifest.executor["start_s"] >= 2.0
    assert result.manifest.executor["waited_s"] < 1.0


def test_a_worker_killed_mid_run_costs_only_its_in_flight_requests(
    cluster: RunningCluster, srv, driver_dir: Path, keyed: str
) -> None:
    """SIGKILL of one worker's process mid-run: its in-flight requests are retried on the
    other worker, the run completes with every row scored once, and the cache holds
    each response once."""
    # requests after the 40th are held until the kill: the victim has calls in flight
    # however loaded the machine (unheld, it could have answered them all meanwhile)
    srv.configure(latency=0.05, faults=[{"kind": "hold", "after": 40}])
    root = driver_dir / "kill"
    spec = gsm8k_spec(root, srv, "openai_compatible", limit=200, api_key_env=keyed)
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    executor = RayExecutor(
        provider,
        RetryPolicy(max_retries=3, base_delay_s=0.1),
        16,
        options=RayOptions(address=cluster.address, workers=2),
    )
    killed: list[int] = []

    def on_row(row: Any, tally: Any) -> None:
        if tally.rows == 40 and not killed:  # the 40 answered: the rest are held
            victim = executor.pool.stats()[0].pid
            killed.append(victim)
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: _gone(victim), what=f"worker {victim} gone")
            srv.release()

    result = _run(spec, root, executor, on_row=on_row)
    rows = gradetrail.read_results(result.run_dir)
    assert killed
    assert result.manifest.counts == {"scored": 200}
    assert [r["sample_id"] for r in rows] == [str(i) for i in range(1, 201)]
    lost = sum(w["lost"] for w in result.manifest.executor["per_worker"])
    assert 1 <= lost <= 16
    assert max(r["attempts"] for r in rows) >= 2
    assert 200 <= srv.stats()["total"] <= 200 + lost
    cache = ResponseCache(root / "cache.sqlite")
    try:
        assert cache.stats().entries == 200
    finally:
        cache.close()


def test_attempts_a_killed_worker_held_count_at_their_worst_case_under_a_budget(
    cluster: RunningCluster, srv, driver_dir: Path, keyed: str
) -> None:
    """Under run.max_cost_usd, SIGKILL of a worker while the server holds its requests:
    the provider got each of them and may finish and bill it (as one cut off by its
    timeout), so each lost attempt counts at its worst case, in this run and in the
    record later runs read, beside what the retries paid. Before, a lost attempt's
    reservation went to its retry and was settled at the retry's cost: 8 requests the
    server held counted $0, and a run near its ceiling could pass it by their cost."""
    srv.configure(latency=0.05, faults=[{"kind": "hold", "after": 40}])
    root = driver_dir / "kill-budget"
    price = {"input_per_mtok": 2.0, "output_per_mtok": 8.0}
    spec = gsm8k_spec(
        root, srv, "openai_compatible", limit=120, api_key_env=keyed, price=price,
        params={"max_tokens": 300}, run={"max_cost_usd": 5.0},
    )  # fmt: skip
    plan = gradetrail.plan_run(spec)
    worst = {p.request.prompt: worst_case_usd(plan.provider, p.request) for p in plan.prepared}
    provider = make_provider(spec.model, spec.base_dir)
    provider.check_ready()
    executor = RayExecutor(
        provider,
        RetryPolicy(max_retries=3, base_delay_s=0.1),
        16,
        options=RayOptions(address=cluster.address, workers=2),
    )
    killed: list[int] = []

    def on_row(row: Any, tally: Any) -> None:
        if tally.rows == 40 and not killed:  # the 40 answered: the rest are held
            victim = executor.pool.stats()[0].pid
            killed.append(victim)
            os.kill(victim, signal.SIGKILL)
            wait_until(lambda: _gone(victim), what=f"worker {victim} gone")
            srv.release()

    result = _run(spec, root, executor, on_row=on_row)
    rows = gradetrail.read_results(result.run_dir)
    assert killed and result.manifest.counts == {"scored": 120}
    lost = sum(w["lost"] for w in result.manifest.executor["per_worker"])
    assert 1 <= lost <= 16
    retried = [worst[r["prompt"]] for r in rows if r["attempts"] > 1]
    assert len(retried) == lost
    budget = result.manifest.executor["budget"]
    assert budget["unsettled_usd"] == pytest.approx(math.fsum(retried))
    assert budget["spent_usd"] == pytest.approx(math.fsum(r["cost_usd"] for r in rows))
    recorded = SpendingLog(result.run_dir).read()
    assert recorded.calls_in_flight == lost


def _gone(pid: int) -> bool:
    """True once process ``pid`` has exited (a zombie counts: it runs no more code)."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except (FileNotFoundError, ProcessLookupError):
        return True


def _cli_run(spec: Path, root: Path, address: str, *extra: str) -> subprocess.Popen:
    cmd = [sys.executable, "-m", "gradetrail", "run", str(spec), "--cache", str(root / "c.db")]
    cmd += ["--results-root", str(root / "results"), "--executor", "ray", "--address", address]
    env = {**ray_env(), "GT_RAY_KEY": SECRET}
    return subprocess.Popen(
        [*cmd, *extra], cwd=root, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
    )


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGKILL], ids=["ctrl-c", "kill-9"])
def test_interrupt_and_kill_then_resume_as_locally(
    cluster: RunningCluster, srv, driver_dir: Path, sig: signal.Signals
) -> None:
    """Ctrl-C drains (the requests in flight land, exit 130, status interrupted); after
    Ctrl-C or kill -9 of the driver, the same command finishes the run from the cache and
    pays for no cached response again."""
    # 8 requests answered, then the next 8 (the concurrency) held: the signal comes mid-run
    # with every request the driver made already at the server, however loaded the machine
    srv.configure(latency=0.05, faults=[{"kind": "hold", "after": 8}])
    root = driver_dir / f"resume-{sig.name}"
    spec = gsm8k_spec(
        root, srv, "openai_compatible", limit=40, api_key_env="GT_RAY_KEY", run={"concurrency": 8}
    )
    spec_path = Path(spec.source)
    proc = _cli_run(spec_path, root, cluster.address, "--workers", "2")

    def rows() -> int:
        dirs = list((root / "results").glob("*/results.jsonl"))
        return count_lines(dirs[0]) if dirs else 0

    try:
        wait_until(lambda: rows() >= 4, 120, "4 rows", proc)
        srv.wait_held(8, timeout=120)
        proc.send_signal(sig)
        if sig == signal.SIGINT:  # the drain lets the held requests land
            wait_until(lambda: drain_logged(only_run_dir(root / "results")), 60, "drain", proc)
            srv.release()
        out, err = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    srv.settled_stats(16)  # a killed driver's held requests leave with their workers
    srv.configure(faults=[])
    run_dir = only_run_dir(root / "results")
    cache = ResponseCache(root / "c.db")
    try:
        cached = cache.stats().entries
    finally:
        cache.close()
    paid = srv.stats()["total"]
    if sig == signal.SIGINT:
        assert proc.returncode == 130, err
        assert json.loads((run_dir / "manifest.json").read_text())["status"] == "interrupted"
        assert paid == cached == count_lines(run_dir / "results.jsonl") == 16  # in flight landed
    else:
        assert proc.returncode == -signal.SIGKILL
        assert paid == 16 and cached <= paid <= cached + 8  # the held 8 died unanswered

    again = _cli_run(spec_path, root, cluster.address, "--workers", "2")
    out, err = again.communicate(timeout=120)
    assert again.returncode == 0, err
    manifest = json.loads((run_dir / "manifest.json").read_text())
    assert manifest["status"] == "complete" and manifest["counts"] == {"scored": 40}
    assert manifest["cache_hits"] == cached
    assert srv.stats()["total"] - paid == 40 - cached  # nothing cached was asked again
    assert "in flight per worker" in out


# -- refusals and the cached path: no cluster needed ----------------------------------------


def _closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.2", 0))
        return s.getsockname()[1]


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--workers", "0"], "--workers 0: use a whole number of at least 1"),
        (["--workers", "-2"], "--workers -2: use a whole number of at least 1"),
        (["--workers", "17"], "--workers 17 is more than run.concurrency (16)"),
        (["--address", "head-node"], "--address 'head-node': use auto or HOST:PORT"),
        (["--address", "10.0.0.1:99999"], "use auto or HOST:PORT"),
    ],
)
def test_bad_ray_options_are_refused_in_one_line(
    cli, gsm8k_copy: Path, args: list[str], message: str
) -> None:
    """Bad --workers and --address values: one line naming the fix, exit 2, no run."""
    out = cli("run", str(gsm8k_copy), "--executor", "ray", *args)
    assert out.exit_code == 2 and message in out.stderr
    assert len(out.stderr.strip().splitlines()) == 1


def test_ray_options_need_the_ray_executor_and_whole_workers(cli, gsm8k_copy: Path) -> None:
    """--workers without --executor ray is refused, not ignored; --workers two is one
    usage line (through the real entry point), exit 2."""
    out = cli("run", str(gsm8k_copy), "--workers", "2")
    assert out.exit_code == 2 and "--address and --workers are for --executor ray" in out.stderr
    cmd = [sys.executable, "-m", "gradetrail", "run", str(gsm8k_copy), "--executor", "ray"]
    out = subprocess.run([*cmd, "--workers", "two"], capture_output=True, text=True)
    assert out.returncode == 2
    (line,) = out.stderr.strip().splitlines()
    assert line.startswith("error: Invalid value for '--workers':") and "integer" in line


BATCH_ON_RAY = (
    "--batch sends the requests from this process through the provider's batch API, so no "
    "call would run on Ray workers: drop --executor ray (or --batch)"
)


def test_a_batched_run_on_ray_is_refused_alike_in_the_cli_and_the_api(
    cli, gsm8k_copy: Path
) -> None:
    """`run --batch --executor ray` and `run_eval(batch=BatchOptions(), executor=
    RayOptions())` give the same one line, exit 2, before any run directory; before, only
    the CLI refused: the API joined a Ray cluster for a run whose calls all went through
    the batch API."""
    from gradetrail.engine.batching import BatchOptions
    from gradetrail.errors import UsageError

    results = gsm8k_copy.parent / "results"
    out = cli(
        "run", str(gsm8k_copy), "--executor", "ray", "--batch", "--results-root", str(results)
    )
    assert out.exit_code == 2 and out.stderr == f"error: {BATCH_ON_RAY}\n"
    spec = gradetrail.load_spec(gsm8k_copy)
    with pytest.raises(UsageError) as refused:
        gradetrail.run_eval(spec, results_root=results, executor=RayOptions(), batch=BatchOptions())
    assert str(refused.value) == BATCH_ON_RAY
    assert not results.exists()


def test_unreachable_address_is_one_line_exit_2(cli, gsm8k_copy: Path, server) -> None:
    """Nothing listening, or a server that is not Ray's GCS: one line, exit 2, before the
    run directory exists (no ray.init retrying for minutes)."""
    closed = f"127.0.0.2:{_closed_port()}"
    out = cli("run", str(gsm8k_copy), "--executor", "ray", "--address", closed)
    assert out.exit_code == 2, out.stderr
    assert out.stderr.strip() == (
        f"error: cannot reach the Ray cluster at {closed} (Connection refused); check "
        "--address and that `ray start --head` runs there"
    )
    http = server.base_url.removeprefix("http://")
    out = cli("run", str(gsm8k_copy), "--executor", "ray", "--address", http)
    assert out.exit_code == 2
    assert f"{http} does not answer as a Ray cluster (GCS) does" in out.stderr
    assert not (gsm8k_copy.parent / "results").exists()


def test_a_cluster_of_another_ray_version_is_one_line_naming_both_exit_2(
    cluster: RunningCluster, driver_dir: Path, gsm8k_copy: Path
) -> None:
    """A driver whose Ray version differs from the cluster's (this process's Ray made to
    say 2.0.0): one line quoting both versions and the fix, exit 2. Before: 'Version
    mismatch: The cluster was started with:' and nothing after it (the versions are on
    Ray's next lines); then a `failed` run directory with no row was left behind (Ray
    was joined in the background once it existed): now there is none."""
    code = (
        "import sys, ray; ray.__version__ = '2.0.0'; from gradetrail.cli import main; "
        "sys.argv[0] = 'gradetrail'; main()"
    )
    results = gsm8k_copy.parent / "results"
    cmd = [sys.executable, "-c", code, "run", str(gsm8k_copy), "--executor", "ray"]
    cmd += ["--address", cluster.address, "--cache", str(gsm8k_copy.parent / "c.db")]
    cmd += ["--results-root", str(results)]
    out = subprocess.run(cmd, capture_output=True, text=True, env=ray_env(), timeout=120)
    assert out.returncode == 2, out.stderr
    line = out.stderr.strip().splitlines()[0]
    python = ".".join(map(str, sys.version_info[:3]))
    assert line == (
        f"error: cannot connect to the Ray cluster at {cluster.address}: Version mismatch: "
        f"The cluster was started with: Ray: {version('ray')} Python: {python} This process "
        f"on node 127.0.0.2 was started with: Ray: 2.0.0 Python: {python}; run gradetrail "
        "with the cluster's Ray and Python versions (the same patch release), or start the "
        "cluster with this machine's"
    )
    assert len(out.stderr.strip().splitlines()) == 1 and out.stdout == ""
    assert not results.exists()


def test_ray_address_from_the_environment_is_checked_as_address_is(
    cli, gsm8k_copy: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$RAY_ADDRESS (no --address) is held to --address's forms, and errors name it:
    a Ray Client address (ray://) is one line, exit 2, before the run directory exists
    (before: `ray.init` failed in the start-up thread after the directory was made, a
    failed run left behind); nothing listening names RAY_ADDRESS, not --address."""
    results = gsm8k_copy.parent / "results"
    monkeypatch.setenv("RAY_ADDRESS", "ray://127.0.0.2:10001")
    out = cli("run", str(gsm8k_copy), "--executor", "ray", "--results-root", str(results))
    assert out.exit_code == 2, out.stderr
    assert out.stderr.strip() == (
        "error: RAY_ADDRESS 'ray://127.0.0.2:10001': use auto or HOST:PORT (the head node's "
        "GCS address, as `ray start --head` prints it), or unset it to start a local Ray"
    )
    closed = f"127.0.0.2:{_closed_port()}"
    monkeypatch.setenv("RAY_ADDRESS", closed)
    out = cli("run", str(gsm8k_copy), "--executor", "ray", "--results-root", str(results))
    assert out.exit_code == 2
    assert out.stderr.strip() == (
        f"error: cannot reach the Ray cluster at {closed} (Connection refused); check "
        "RAY_ADDRESS and that `ray start --head` runs there"
    )
    assert not results.exists()


def test_missing_ray_names_the_extra_and_a_cached_run_never_imports_it(
    cli, gsm8k_copy: Path, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Without Ray: one line naming pip install 'gradetrail[ray]', exit 2. With every
    response cached, --executor ray never imports Ray (so it succeeds without it) and
    says Ray was not started. The environment a local Ray would have had is not left
    behind (before: RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER=0 stayed in os.environ, and every
    process started later, a `ray start --address` of the user's or of the next test's
    cluster, refused to join: 'Multi-node Ray clusters are not supported')."""
    for name in ("RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER", "RAY_USAGE_STATS_ENABLED"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setitem(sys.modules, "ray", None)  # `import ray` now raises ImportError
    out = cli("run", str(gsm8k_copy), "--executor", "ray")
    assert out.exit_code == 2
    assert out.stderr.strip() == "error: --executor ray needs Ray; pip install 'gradetrail[ray]'"
    assert "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER" not in os.environ
    assert "RAY_USAGE_STATS_ENABLED" not in os.environ
    assert cli("run", str(gsm8k_copy)).exit_code == 0  # fills the cache locally
    out = cli("run", str(gsm8k_copy), "--executor", "ray", "--address", "127.0.0.2:1")
    assert out.exit_code == 0, out.stderr
    assert "ray, not started (every response came from the cache)" in out.stdout
    manifest = gradetrail.read_manifest(only_run_dir(tmp_path / "results"))
    assert manifest["executor"] == {
        "kind": "ray",
        "started": False,
        "concurrency": 16,
        "address": None,
    }


def test_choosing_ray_imports_no_ray() -> None:
    """RayOptions alone imports no Ray (the CLI builds it before knowing whether anything
    misses)."""
    code = "import sys; from gradetrail.executors.ray import RayOptions; RayOptions(); "
    code += "print('ray' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert out.stdout.strip() == "False", out.stderr
