"""Shared fixtures of the claims: cached runs, with missing data turned into a skip (or a failure
under NORMSYS_REQUIRE_DATA=1, as in CI)."""

from __future__ import annotations

import os

import pytest

from normsys.config import RunConfig
from normsys.data import DataMissingError
from normsys.experiments import get_run, get_runs
from normsys.record import RunRecord


def _missing_data(err: DataMissingError):
    if os.environ.get("NORMSYS_REQUIRE_DATA") == "1":
        raise err
    pytest.skip(f"data missing: {err}")


@pytest.fixture
def run():
    """run(config) -> RunRecord, shared across claims through the in-process memo and disk cache."""

    def fetch(cfg: RunConfig) -> RunRecord:
        try:
            return get_run(cfg)
        except DataMissingError as err:
            _missing_data(err)

    return fetch


@pytest.fixture
def runs():
    """runs([configs]) -> [RunRecord]: like run, with the seeds batched together on a GPU."""

    def fetch(cfgs: list[RunConfig]) -> list[RunRecord]:
        try:
            return get_runs(cfgs)
        except DataMissingError as err:
            _missing_data(err)

    return fetch
