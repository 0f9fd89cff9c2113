"""A sweep whose cells run on a real two-node Ray cluster (``--executor ray``): the same
table as the sweep run locally, every cell's calls made by Ray workers on both nodes."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml
from paths import GSM8K_DATA, ROOT
from protocol_server import running_server
from ray_support import ray_env, two_node_cluster

from gradetrail.analysis.sweep import sweep_table
from gradetrail.engine.sweep import run_sweep
from gradetrail.spec.sweep import load_sweep

SAMPLES = 40


def _sweep_file(directory: Path, base_url: str) -> Path:
    directory.mkdir(parents=True)
    spec = {
        "name": "gsm8k-ray",
        "dataset": {"path": str(GSM8K_DATA / "test.jsonl"), "limit": SAMPLES},
        "prompt": "Solve it; end with a line 'A: <answer>'.\n\nQ: {{ question }}",
        "target": "{{ answer.split('####')[-1] | trim }}",
        "model": {
            "provider": "openai_compatible",
            "name": "175b_verification",
            "base_url": base_url,
            "api_key_required": False,
        },
        "scorer": {"type": "numeric", "marker": "A:"},
        "run": {"concurrency": 8},
    }
    (directory / "spec.yaml").write_text(yaml.safe_dump(spec, sort_keys=False))
    sweep = {
        "name": "on-ray",
        "spec": "spec.yaml",
        "axes": {"model.name": ["175b_verification", "6b_verification"]},
    }
    (directory / "sweep.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    return directory / "sweep.yaml"


def test_sweep_on_a_ray_cluster_equals_the_local_sweep(
    tmp_path_factory: pytest.TempPathFactory,
) -> None:
    """gradetrail sweep --executor ray --address HEAD: both cells' calls on Ray (2 workers,
    2 nodes), each request made once; the table's figures equal a local sweep's."""
    driver = tmp_path_factory.mktemp("sweep-ray")
    with running_server(latency=0.0) as srv, two_node_cluster(driver) as cluster:
        sweep = _sweep_file(driver / "eval", srv.openai_base_url)
        local = run_sweep(
            load_sweep(sweep), results_root=driver / "local", cache_path=driver / "l.db"
        )
        assert srv.stats()["total"] == 2 * SAMPLES
        cmd = [sys.executable, "-m", "gradetrail", "sweep", str(sweep), "--json"]
        cmd += ["--executor", "ray", "--address", cluster.address, "--workers", "2"]
        cmd += ["--results-root", str(driver / "ray"), "--cache", str(driver / "r.db")]
        env = {**os.environ, **ray_env(), "PYTHONPATH": str(ROOT)}
        done = subprocess.run(cmd, cwd=driver, env=env, capture_output=True, text=True)
        assert srv.stats()["total"] == 4 * SAMPLES and srv.stats()["repeated"] == SAMPLES * 2
    assert done.returncode in (0, 1), done.stderr
    on_ray = json.loads(done.stdout)
    mine = sweep_table(local.directory).to_dict()
    for ray_cell, local_cell in zip(on_ray["cells"], mine["cells"], strict=True):
        for key in ("name", "n", "mean", "ci_low", "ci_high", "verdict", "passed"):
            assert ray_cell[key] == local_cell[key], key
        if local_cell["gate"]:
            for key in ("lo", "hi", "p_value"):
                assert ray_cell["gate"][key] == local_cell["gate"][key], key
        manifest = json.loads((Path(ray_cell["run_dir"]) / "manifest.json").read_text())
        ex = manifest["executor"]
        assert ex["kind"] == "ray" and ex["workers"] == 2 and ex["nodes"] == 2, ex
        assert sum(w["served"] for w in ex["per_worker"]) == SAMPLES
