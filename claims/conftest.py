"""Shared fixtures of the claims: cached runs, with missing data turned into a skip (or a failure
under NORMSYS_REQUIRE_DATA=1, as in CI)."""

from __future__ import annotations

import os

import pytest

from normsys.config import RunConfig
from normsys.data import DataMissingError
from normsys.experiments import get_run
from normsys.record import RunRecord


@pytest.fixture
def run():
    """run(config) -> RunRecord, shared across claims through the in-process memo and disk cache."""

    def fetch(cfg: RunConfig) -> RunRecord:
        try:
            return get_run(cfg)
        except DataMissingError as err:
            if os.environ.get("NORMSYS_REQUIRE_DATA") == "1":
                raise
            pytest.skip(f"data missing: {err}")

    return fetch
