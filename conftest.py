"""Root conftest: markers shared by tests/ and claims/.

- ``gpu``: needs CUDA; skipped with a clear reason when none is present.
- ``slow``: longer than a few seconds on CPU.
- ``claim``: an executable claim (see claims/).
"""

from __future__ import annotations

import pytest

pytest_plugins = ["normsys.plugin"]  # the claims plugin: claim fixture, verdict table, report

MARKERS = (
    "gpu: needs a CUDA GPU (paper tier and GPU benchmarks); skipped without one",
    "slow: takes more than a few seconds on CPU",
    "claim(id, statement, source, seeds=None): an executable claim about normalization",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    import torch

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu marker: no CUDA device on this machine "
                                   "(run on a GPU host with -m gpu)")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)
