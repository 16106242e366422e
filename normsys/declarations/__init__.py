"""The claims, declared: one module per source (a paper or notebook), each holding its claims'
``Declaration``s and norm-generic ``Statistic``s, with the arms they train and the readings they
decide on. Everything that speaks of the claims reads them here: the claim tests under
``claims/`` (which add evidence, figures and negative controls), the catalog page
(normsys.catalog) and the scorecard (normsys.scorecard), from a checkout or an installed package
alike.

    from normsys import declarations
    declarations.claims()       # every claim, module by module, in the order they are declared
    declarations.statistics()   # the norm-generic ones: the scorecard's columns
    declarations.roles()        # each claim id's role: what its CPU verdict is worth
    declarations.aa_cases()     # the A/A family: each claim whose arms can be made alike
"""

from __future__ import annotations

import functools
import importlib
import pkgutil
from collections.abc import Iterable
from types import ModuleType

from normsys.claims.declaration import Declaration, Statistic, declaration_of

Declared = Declaration | Statistic


@functools.cache
def declared() -> tuple[tuple[str, Declared], ...]:
    """Every claim as (module name, its Declaration or Statistic): the modules of this package by
    name (not its ``shared`` readings), each module's claims in the order it declares them
    (found_in)."""
    return found_in(importlib.import_module(f"{__name__}.{info.name}")
                    for info in sorted(pkgutil.iter_modules(__path__), key=lambda m: m.name)
                    if not info.ispkg)  # shared: what the sources share, no claim


def found_in(modules: Iterable[ModuleType]) -> tuple[tuple[str, Declared], ...]:
    """The module-level Declarations and Statistics of ``modules``, as (the module's last name,
    the claim), in order. Each claim is named in one module: one id found twice (a second
    declaration, or another module importing it) is an error."""
    found: dict[str, tuple[str, Declared]] = {}
    for module in modules:
        name = module.__name__.rpartition(".")[2]
        for value in vars(module).values():
            if not isinstance(value, Declaration | Statistic):
                continue
            cid = declaration_of(value).id
            if cid in found:
                raise ValueError(f"claim {cid} is named in {found[cid][0]} and again in {name}: "
                                 f"declare each claim once, in the module of its source (another "
                                 f"module imports its readings and arms, not the claim)")
            found[cid] = (name, value)
    return tuple(found.values())


def claims() -> tuple[Declaration, ...]:
    """Every claim's declaration (a Statistic's: the claim it makes of its own norm kind)."""
    return tuple(declaration_of(d) for _, d in declared())


def tiers_run() -> dict[str, tuple[str, ...]]:
    """Every claim id (each variant's too) -> the tiers it runs at: every tier for the claim
    itself, the tiers that run variants (Tier.variants) for a variant."""
    from normsys.training.tiers import TIERS

    return {f"{d.id}{v}": tuple(t.name for t in TIERS.values() if t.variants or not v)
            for d in claims() for v in d.variants}


def questions() -> dict[str, str]:
    """Every claim id (each variant's too) -> its base claim's: the question a variant asks
    again under another protocol."""
    return {f"{d.id}{v}": d.id for d in claims() for v in d.variants}


def roles() -> dict[str, str]:
    """Every claim id (each variant's too) -> its role (normsys.claims.declaration.ROLES): what
    its verdict at the CPU tier is worth."""
    return {f"{d.id}{v}": d.role for d in claims() for v in d.variants}


def statistics() -> tuple[Statistic, ...]:
    """Every norm-generic claim, in the order they are declared: the scorecard's columns."""
    return tuple(d for _, d in declared() if isinstance(d, Statistic))


def aa_cases() -> tuple[tuple[Declaration, str], ...]:
    """The A/A family: (claim, variant) for every claim that declares how its arms are made
    alike (Declaration.alike), at each variant its controls run at (the first tier's)."""
    from normsys.claims.params import variants_at

    return tuple((d, v) for d in claims() if d.alike for v in variants_at(d))


def aa_family() -> int:
    """How many comparisons the A/A cases decide together, fixed before any is seen: one per
    case, one per part where its reading gives parts (Experiment.alike_value)."""
    return sum(len(v) if isinstance(v := d.experiment.alike_value, dict) else 1
               for d, _ in aa_cases())
