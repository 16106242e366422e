"""The order claims start in, and the default variant. The fixtures that fetch runs (run, runs,
task_of) are the claims plugin's (normsys.plugin)."""

from __future__ import annotations

import pytest

from normsys.plugin import claim_id, claim_marker

# Claims whose runs few other claims need, with the minutes of those runs on one CPU core (the
# CPU tier). They start first, longest first: under pytest-xdist the workers split these long
# groups of runs between them early, and the short claims fill in at the end, instead of one
# long group training alone on one worker while the other idles.
SOLO_MINUTES = {
    "ld-layernorm-helps-lstm": 18, "ld-layernorm-beats-batchnorm-lstm": 18,  # nine LSTM runs
    "fa-stability-separates-long": 16, "fa-bp-direction-unstable-long": 16,  # nine 10-epoch
    "fa-dfa-direction-stable-long": 16,                                      # protocol nets
    "dm-none-collapses-with-depth-masked": 10, "dm-l2-prevents-collapse-masked": 10,
    "dm-layernorm-prevents-collapse-masked": 10,                             # nine encoders
    "rmsnorm-matches-layernorm": 9.6,   # six 500-step char GPTs, ~96 s each
    "ld-batchnorm-wins-cnn-large-batch": 7,  # six 1-epoch CNNs
    "lj-center-scale-costs-more-with-softmax": 5,  # six 250-step FA char GPTs
    "dyt-matches-layernorm": 5,  # three 500-step DyT char GPTs
    "lj-analytic-matches-autograd": 2.5,  # three 250-step char GPTs, ~50 s each
}


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    def solo_minutes(item: pytest.Item) -> float:
        marker = claim_marker(item)
        return SOLO_MINUTES.get(claim_id(item, marker), 0) if marker else 0

    items.sort(key=solo_minutes, reverse=True)  # stable: the rest keep their order


@pytest.fixture
def variant():
    """The claim variant ("" for the claim itself); a claim parametrized over variants
    (normsys.params.variant_tiers) overrides it with its parameter."""
    return ""
