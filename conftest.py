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
    "control(*claim_ids): a negative control of these claims: their own measurement and rule "
    "on a case where the effect is absent or reversed, coming out the other way",
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


@pytest.fixture
def data_env(monkeypatch):
    """Skip (or fail under NORMSYS_REQUIRE_DATA=1) when the offline data sets are absent."""
    from normsys.data import DataMissingError, data_root

    try:
        root = data_root()
        if not (root / "mnist").is_dir():
            raise DataMissingError(f"NORMSYS_DATA={root} has no mnist/ folder")
    except DataMissingError as err:
        import os

        if os.environ.get("NORMSYS_REQUIRE_DATA") == "1":
            pytest.fail(str(err))
        pytest.skip(str(err))
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    return root
