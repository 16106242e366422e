"""Benchmark support: every benchmark JSON carries the device name, its peak memory bandwidth and
bf16 FLOP/s (datasheet), a measured copy bandwidth and the torch / CUDA versions, so that
``pytest-benchmark compare`` can put runs from different machines side by side."""

from __future__ import annotations

import bench
import pytest
import torch


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info["normsys"] = bench.machine_info()


@pytest.fixture
def dev() -> torch.device:
    return bench.device()
