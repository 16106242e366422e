"""Every declared claim (normsys.declarations) whose test is its decision alone: its experiment's
runs trained, read and decided by its rule, nothing recorded beside. A claim with evidence,
figures or values of its own is declared with ``own_test=True`` and has its test in its source's
claim file, marked with its declaration (``@CLAIM.mark``); every other claim is decided here, at
each of its variants and both tiers."""

from __future__ import annotations

import pytest

from normsys import declarations
from normsys.claims.declaration import declaration_of
from normsys.claims.params import declared_params


def decided_here() -> list:
    """The declared claims without a test of their own (Declaration.own_test); one that declares
    no experiment has nothing this test could train and is an error."""
    here = [c for _, c in declarations.declared() if not declaration_of(c).own_test]
    if bare := [declaration_of(c).id for c in here if declaration_of(c).experiment is None]:
        raise ValueError(f"claims {bare} declare no experiment, so only a test of their own can "
                         f"compute their values: declare own_test=True and mark that test with "
                         f"the claim's declaration")
    return here


@pytest.mark.parametrize("declared,variant,tier", declared_params(decided_here()))
def test_declared(claim, runs, declared, variant, tier):
    claim.check(runs)
