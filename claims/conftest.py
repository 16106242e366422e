"""The order claims start in, and the default variant. The fixtures that fetch runs (run, runs,
task_of) are the claims plugin's (normsys.claims.plugin)."""

from __future__ import annotations

import pytest

from normsys.claims import runtimes
from normsys.claims.items import claim_id, claim_marker, claim_tier


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Claims start longest first (the training of the runs each reads, as the tier's recorded
    run times say: normsys.claims.runtimes): under pytest-xdist the workers split the long groups of
    runs between them early, and the short claims, whose runs are mostly trained by then, fill
    in at the end, instead of one long group training alone on one worker while the other
    idles."""
    def seconds(item: pytest.Item) -> float:
        marker = claim_marker(item)
        return runtimes.seconds(claim_id(item, marker), claim_tier(item)) if marker else 0

    items.sort(key=seconds, reverse=True)  # stable: the rest keep their order


@pytest.fixture
def variant():
    """The claim variant ("" for the claim itself); a claim parametrized over variants
    (normsys.claims.params.variant_tiers) overrides it with its parameter."""
    return ""
