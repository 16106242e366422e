"""A local Ray cluster against pytest-xdist on this machine: the same claims from an empty run
cache, ``-n 2`` against ``--claims-ray local`` (cold: each claim submits its runs as it asks;
planned: the claims' indexes known, every run submitted at the start, longest first), and what
one task costs on the cluster beyond its training (submission, the worker, the record's way
back).

    pytest tests/benchmarks/test_bench_cluster.py --benchmark-enable \\
        --benchmark-json tests/benchmarks/results/cluster-<machine>.json

A measurement, not a smoke test: with benchmarks off (CI) it is skipped.
"""

from __future__ import annotations

import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import pytest

ray = pytest.importorskip("ray")

ROOT = Path(__file__).resolve().parents[2]
# four claims of the CPU tier whose runs take 2 min in all: MLPs on MNIST and FFN stacks
CLAIMS = ("(ld-layernorm-decorrelates or ld-layernorm-small-batch or ld-layernorm-robust-to-init-scale "
          "or tc-residual-layernorm-lowest-loss) and cpu")


def wall(args: list[str], cache: Path) -> float:
    start = time.perf_counter()
    done = subprocess.run([sys.executable, "-m", "pytest", "claims", "-p", "no:cacheprovider",
                           "-q", "-k", CLAIMS, "--claims-report", str(cache / "report"), *args],
                          capture_output=True, text=True, cwd=ROOT, timeout=3600,
                          env={**os.environ, "NORMSYS_CACHE": str(cache)})
    assert done.returncode == 0, done.stdout[-2000:] + done.stderr[-2000:]
    return time.perf_counter() - start


def test_claims_on_a_local_ray_cluster_against_two_xdist_workers(benchmark, tmp_path):
    if benchmark.disabled:
        pytest.skip("a measurement of minutes: run with --benchmark-enable")

    def measure() -> dict:
        xdist = wall(["-n", "2"], tmp_path / "xdist")
        cold = wall(["--claims-ray", "local"], tmp_path / "ray")
        runs = list((tmp_path / "ray" / "runs").glob("*.json"))
        for entry in runs:  # the indexes stay: the next session knows every run at its start
            entry.unlink()
        planned = wall(["--claims-ray", "local"], tmp_path / "ray")
        return {"claims": CLAIMS, "runs": len(runs), "xdist_2_wall_s": xdist,
                "ray_cold_wall_s": cold, "ray_planned_wall_s": planned,
                "ray_planned_over_xdist": planned / xdist, "cpus": os.cpu_count()}

    benchmark.extra_info.update(benchmark.pedantic(measure, rounds=1, iterations=1))


def test_what_one_task_costs_on_the_cluster_beyond_its_training(benchmark, tmp_path,
                                                                monkeypatch):
    if benchmark.disabled:
        pytest.skip("a measurement: run with --benchmark-enable")
    from normsys.orchestration.cluster import Cluster
    from normsys.orchestration.runs import Runs
    from normsys.training.config import preset

    monkeypatch.setenv("NORMSYS_CACHE", str(tmp_path))
    cfgs = [preset("mlp", **{"data.n_train": 256, "data.n_test": 64, "train.probe_batch": 64,
                             "train.seed": s}) for s in range(8)]
    cluster = Cluster("local")
    task = Runs().task_of(cfgs[0])

    def measure() -> dict:
        overheads = []
        for cfg in cfgs:  # one at a time: the round trip of each, its training taken out
            start = time.perf_counter()
            (record, _), = cluster.train([cfg], task)
            overheads.append(time.perf_counter() - start - record.wall_time)
        return {"tasks": len(cfgs), "first_task_overhead_s": overheads[0],
                "median_task_overhead_s": statistics.median(overheads[1:]),
                "training_s": record.wall_time}

    try:
        benchmark.extra_info.update(benchmark.pedantic(measure, rounds=1, iterations=1))
    finally:
        cluster.close()
