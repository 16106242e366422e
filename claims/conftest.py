"""Shared fixtures of the claims: cached runs, with missing data turned into a skip (or a failure
under NORMSYS_REQUIRE_DATA=1, as in CI); and the order claims start in."""

from __future__ import annotations

import os

import pytest

from normsys.config import RunConfig
from normsys.data import DataMissingError
from normsys.experiments import get_run, get_runs
from normsys.plugin import claim_id, claim_marker
from normsys.record import RunRecord

# Claims whose runs no other claim needs, with the minutes of those runs on one CPU core. They
# start first, longest first: under pytest-xdist one worker trains them while the others share
# the common runs, instead of the last of them training alone while the others idle.
SOLO_MINUTES = {"rmsnorm-matches-layernorm": 9.6,   # six 500-step char GPTs, ~96 s each
                "lj-analytic-matches-autograd": 2.5}  # three 250-step char GPTs, ~50 s each


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def solo_minutes(item: pytest.Item) -> float:
        marker = claim_marker(item)
        return SOLO_MINUTES.get(claim_id(item, marker), 0) if marker else 0

    items.sort(key=solo_minutes, reverse=True)  # stable: the rest keep their order


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
def task_of():
    """task_of(config) -> its data (train.make_task), for the negative controls."""
    from normsys.train import make_task

    def fetch(cfg: RunConfig):
        try:
            return make_task(cfg)
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
