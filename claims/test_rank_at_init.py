"""BatchNorm against rank collapse at initialization (Daneshmand et al. 2020) and its
orthogonalizing of a batch with width (Daneshmand et al. 2021): the claims' negative controls.
The claims, their MLPs and readings are declared in normsys.declarations.rank_at_init and decided
in test_declared.py; the rank claim's A/A case is claims/test_aa_family.py's.
"""

from __future__ import annotations

import pytest

from normsys.claims.testing import unread_seeds
from normsys.claims.verdict import REFUTED
from normsys.declarations.rank_at_init import KEEPS_RANK, ORTHOGONALIZES

KEEPS = KEEPS_RANK.declaration


@pytest.mark.control(KEEPS.id)
def test_control_rank_rule_is_refuted_on_shallow_mlps(runs):
    """The claim's own MLPs, reading and rule at depth 2, on seeds the claim does not read: two
    layers leave no depth for the rank to collapse over, so both arms keep most of it and the rule
    must come out refuted. A reading of another layer than the last, or of the model in eval
    mode (where BatchNorm at initialization is the identity), would show here or in the claim."""
    shallow = KEEPS.experiment.overridden({"model.layers": 2})
    values = shallow.values(runs, unread_seeds(KEEPS))
    assert KEEPS.verdict(values).verdict == REFUTED


@pytest.mark.control(ORTHOGONALIZES.id)
def test_control_width_rule_is_refuted_on_shallow_linear_mlps(runs):
    """The claim's own linear MLPs, reading and rule at depth 2, on seeds the claim does not read:
    two layers leave no depth for BatchNorm to orthogonalize the batch over, and what is left of
    the input's correlations shrinks far less with width (log2 ratio about -0.27), so the rule
    must come out refuted. A reading of a random matrix's gap (which halves from 128 to 512
    whatever the model), or of the widths in another order, would show here."""
    shallow = ORTHOGONALIZES.experiment.overridden({"model.layers": 2})
    values = shallow.values(runs, unread_seeds(ORTHOGONALIZES))
    assert ORTHOGONALIZES.verdict(values).verdict == REFUTED
