"""Parametrization of claims: the two tiers (the seeds a claim takes at each are its plan of
looks, normsys.claims.verdict), and variants of a claim (an id suffix each).

    @pytest.mark.parametrize("tier", tiers(cpu=[pytest.mark.slow]))
    @pytest.mark.parametrize("variant,tier", variant_tiers(("", "-nonpad"), slow=("-masked",)))
"""

from __future__ import annotations

from collections.abc import Sequence

import pytest


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
