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
from normsys.training.tiers import DEFAULT, TIERS, Tier


class Variant(str):
    """A parameter value that names a variant of a claim: its text is the claim id's suffix."""


def marks(tier: Tier, slow: bool = False) -> list:
    """A claim item's marks at ``tier``: gpu at a tier meant for a GPU, else slow where the claim
    says so (slow marks what CI's tier trains longest)."""
    return [pytest.mark.gpu] if tier.gpu else [pytest.mark.slow] if slow else []


def tiers(slow: bool = False) -> list:
    """Every tier (normsys.training.tiers) as a parametrize value, with its ``marks``."""
    return [pytest.param(t.name, marks=marks(t, slow), id=t.name) for t in TIERS.values()]


def variant_tiers(variants: Sequence[str], slow: Sequence[str] = ()) -> list:
    """Parameters for ``"variant,tier"``: the claim itself at every tier and each other variant (a
    ``Variant``) at the tiers that run variants (``Tier.variants``), with its ``marks``
    (``slow``: the variants slow where no GPU is meant)."""
    return [pytest.param(v, t.name, marks=marks(t, v in slow), id=f"{t.name}{v}")
            for v in map(Variant, variants) for t in TIERS.values() if t.variants or not v]


def variants_at(declared, tier: str = DEFAULT) -> tuple[str, ...]:
    """The variants of a declared claim that run at ``tier`` (Tier.variants): a negative control
    that trains a variant's own experiment trains it where the variant runs."""
    return declared.variants if TIERS[tier].variants else declared.variants[:1]


def tiers_of(declared) -> list:
    """``tiers`` of a declared claim without variants, its CPU tier marked slow where the
    declaration says so."""
    if declared.variants != ("",):
        raise ValueError(f"claim {declared.id} has variants {declared.variants[1:]}: parametrize "
                         f"\"variant,tier\" with variant_tiers_of")
    return tiers(slow="" in declared.slow)


def variant_tiers_of(declared) -> list:
    """``variant_tiers`` of a declared claim: its variants, the slow ones as it declares."""
    return variant_tiers(declared.variants, declared.slow)


def declared_params(claims: Iterable) -> list:
    """Parameters for ``"declared,variant,tier"``: each claim (a Declaration, or a Statistic for
    the claim it declares) at its variants and every tier, marked as its own test would be: its
    claim marker and its ``marks``."""
    params = []
    for claim in claims:
        declared = declaration_of(claim)
        params += [pytest.param(declared, *p.values, marks=[claim.mark, *p.marks],
                                id=f"{declared.id}-{p.id}") for p in variant_tiers_of(declared)]
    return params
