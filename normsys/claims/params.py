"""Parametrization of claims: the two tiers (the seeds a claim takes at each are its plan of
looks, normsys.claims.verdict), and variants of a claim (an id suffix each). A declared claim's
variants, and which of them are slow, are its declaration's (Declaration.variants, .slow):

    @pytest.mark.parametrize("tier", tiers_of(BN_WINS_CNN))
    @pytest.mark.parametrize("variant,tier", variant_tiers_of(NONE_COLLAPSES))
    @pytest.mark.parametrize("declared,variant,tier", declared_params(DECLARED))  # with marks
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import pytest

from normsys.claims.declaration import declaration_of


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


def tiers_of(declared) -> list:
    """``tiers`` of a declared claim without variants, its CPU tier marked slow where the
    declaration says so."""
    if declared.variants != ("",):
        raise ValueError(f"claim {declared.id} has variants {declared.variants[1:]}: parametrize "
                         f"\"variant,tier\" with variant_tiers_of")
    return tiers(cpu=[pytest.mark.slow] if "" in declared.slow else [])


def variant_tiers_of(declared) -> list:
    """``variant_tiers`` of a declared claim: its variants, the slow ones as it declares."""
    return variant_tiers(declared.variants, declared.slow)


def declared_params(claims: Iterable) -> list:
    """Parameters for ``"declared,variant,tier"``: each claim (a Declaration, or a Statistic for
    the claim it declares) at its variants and both tiers, marked as its own test would be: its
    claim marker, gpu at the paper tier, slow where it says so."""
    params = []
    for claim in claims:
        declared = declaration_of(claim)
        params += [pytest.param(declared, *p.values, marks=[claim.mark, *p.marks],
                                id=f"{declared.id}-{p.id}") for p in variant_tiers_of(declared)]
    return params
