"""Every declared claim (normsys.declarations) whose test is its decision alone: its experiment's
runs trained, read and decided by its rule, nothing recorded beside. A claim with evidence,
figures or values of its own has its test in its source's claim file, marked with its
declaration (``@CLAIM.mark``); every other claim is decided here, at each of its variants and
both tiers."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

from normsys import declarations
from normsys.claims.declaration import declaration_of
from normsys.claims.params import declared_params


def own_tests() -> set[str]:
    """The ids of the claims a test of the other claim files is marked with."""
    ids = set()
    for path in sorted(Path(__file__).parent.glob("test_*.py")):
        if path.name == Path(__file__).name:
            continue
        for value in vars(importlib.import_module(f"{__package__}.{path.stem}")).values():
            ids.update(mark.args[0] for mark in getattr(value, "pytestmark", [])
                       if mark.name == "claim")
    return ids


def decided_here() -> list:
    """The declared claims without a test of their own; one that declares no experiment has
    nothing this test could train and is an error."""
    owned = own_tests()
    here = [c for _, c in declarations.declared() if declaration_of(c).id not in owned]
    if bare := [declaration_of(c).id for c in here if declaration_of(c).experiment is None]:
        raise ValueError(f"claims {bare} declare no experiment, so only a test of their own can "
                         f"compute their values: mark one with the claim's declaration")
    return here


@pytest.mark.parametrize("declared,variant,tier", declared_params(decided_here()))
def test_declared(claim, runs, declared, variant, tier):
    claim.check(runs)
