"""Parametrization of claims: the two tiers, the seeds a claim takes at each (and the most it adds
while open), and variants of a claim (an id suffix each).

    @pytest.mark.parametrize("tier", tiers(cpu=[pytest.mark.slow]))
    @pytest.mark.parametrize("variant,tier", variant_tiers(("", "-nonpad"), slow=("-masked",)))
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest

SEEDS = {"cpu": 3, "paper": 5}  # a claim's seeds at each tier, unless it names its own
# The most seeds a claim still open at its first look adds at each tier, at the looks fixed in
# advance (normsys.claims.verdict: 5 -> 8 -> 13 -> 21 on the paper tier); --claims-max-seeds
# sets another. 0: the tier decides at its first look (the CPU tier: CI trains every claim once).
MAX_SEEDS = {"cpu": 0, "paper": 21}


def seeds(tier: str, own: int | None = None) -> int:
    """How many seeds a claim decides on at ``tier``: its own count when it names one (the
    ``seeds=`` of its marker), else the tier's (``SEEDS``)."""
    return own if own is not None else SEEDS[tier]


class Variant(str):
    """A parameter value that names a variant of a claim: its text is the claim id's suffix."""


def tiers(cpu: Sequence = (), paper: Sequence = ()) -> list:
    """The two tiers as parametrize values; ``paper`` is marked gpu. Extra marks per tier."""
    return [pytest.param("cpu", marks=list(cpu), id="cpu"),
            pytest.param("paper", marks=[pytest.mark.gpu, *paper], id="paper")]


def variant_tiers(variants: Sequence[str], slow: Sequence[str] = ()) -> list:
    """Parameters for ``"variant,tier"``: every variant (a ``Variant``) at both tiers; ``slow``
    variants are marked slow on the CPU tier."""
    params = []
    for v in map(Variant, variants):
        cpu = [pytest.mark.slow] if v in slow else []
        params += [pytest.param(v, "cpu", marks=cpu, id=f"cpu{v}"),
                   pytest.param(v, "paper", marks=[pytest.mark.gpu], id=f"paper{v}")]
    return params
