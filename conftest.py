"""Root conftest: keeps the GPU marker honest on machines without CUDA, and the data fixture the
tests share. The claims plugin (markers, options, fixtures, the claims' order) is normsys's,
registered with pytest by its ``pytest11`` entry point when normsys is installed
(normsys.claims.plugin).

- ``gpu``: needs CUDA; skipped with a clear reason when none is present.
- ``slow``: longer than a few seconds on CPU.
"""

from __future__ import annotations

import pytest

MARKERS = (
    "gpu: needs a CUDA GPU (paper tier and GPU benchmarks); skipped without one",
    "slow: takes more than a few seconds on CPU",
)


def pytest_configure(config: pytest.Config) -> None:
    for line in MARKERS:
        config.addinivalue_line("markers", line)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """GPU claims also run where their runs train on a Ray cluster with GPUs (--claims-ray): here
    they only read the records."""
    import torch

    from normsys.claims.items import claim_marker
    from normsys.claims.session import cluster_has_gpus

    if torch.cuda.is_available():
        return
    skip = pytest.mark.skip(reason="gpu marker: no CUDA device on this machine "
                                   "(run on a GPU host with -m gpu)")
    remote = cluster_has_gpus(config)
    for item in items:
        if "gpu" in item.keywords and not (remote and claim_marker(item) is not None):
            item.add_marker(skip)


@pytest.fixture
def data_env(request):
    """The data folder (shipped with normsys, or $NORMSYS_DATA), its MNIST checked; missing data
    fails the test with what to do, or skips it with --claims-skip-missing-data."""
    from normsys.claims.session import data_errors
    from normsys.training.data import MNIST_FILES, data_file, data_root

    with data_errors(request.config.getoption("claims_skip_missing_data", False)):
        for name in MNIST_FILES.values():
            data_file(name, "MNIST")
    return data_root()
