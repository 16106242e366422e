"""The A/A family: every claim that declares how its arms are made alike (its declaration's
``alike``) read with them alike but for their seeds, the first arm on seeds past the claim's and
the others on the claim's own. Nothing is left between the arms but their seeds, so their values
must not lie apart from what alike arms give (0 for a difference, 1 for a ratio) on either side.

The cases are decided together: their comparisons, counted from the declarations before any is
seen (normsys.declarations.aa_family), share the protocol's 2.5% a side (Bonferroni), so that a
full pass of the family errs on either side at most that often by chance; a case whose arms lie
apart is read once more on fresh seeds and fails only if they lie apart again. One rule on every
machine kind. An arm given an edge its claim does not name (trained longer, read at another
point, on other rows), or a reading that cannot tell two runs apart, fails here.
"""

from __future__ import annotations

import pytest

from normsys import declarations
from normsys.claims.params import Variant
from normsys.claims.testing import alike_on_disjoint_seeds

FAMILY = declarations.aa_family()


@pytest.mark.parametrize("declared, variant", [
    pytest.param(d, Variant(v), id=f"{d.id}{v}", marks=[pytest.mark.control(f"{d.id}{v}")]
                 + ([pytest.mark.slow] if v in d.slow else []))
    for d, v in declarations.aa_cases()])
def test_control_arms_alike_but_for_their_seeds_do_not_lie_apart(runs, declared, variant):
    alike_on_disjoint_seeds(declared, declared.experiment.overridden(declared.alike), runs,
                            FAMILY, variant)
