"""Root conftest: the data fixture the checkout's tests and claims share. The claims plugin
(markers ``claim``, ``control``, ``gpu``, ``slow``..., options, fixtures, the claims' order and the
GPU skip) is normsys's, registered with pytest by its ``pytest11`` entry point when normsys is
installed (normsys.claims.plugin).
"""

from __future__ import annotations

import pytest


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
