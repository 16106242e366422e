"""BatchNorm against rank collapse at initialization (Daneshmand et al. 2020): the claim's negative
control. The claim, its MLPs and reading are declared in normsys.declarations.rank_at_init and
decided in test_declared.py; its A/A case is claims/test_aa_family.py's.
"""

from __future__ import annotations

import pytest

from normsys.claims.testing import unread_seeds
from normsys.claims.verdict import REFUTED
from normsys.declarations.rank_at_init import KEEPS_RANK


@pytest.mark.control(KEEPS_RANK.id)
def test_control_rank_rule_is_refuted_on_shallow_mlps(runs):
    """The claim's own MLPs, reading and rule at depth 2, on seeds the claim does not read: two
    layers leave no depth for the rank to collapse over, so both arms keep most of it and the rule
    must come out refuted. A reading of another layer than the last, or of the model in eval
    mode (where BatchNorm at initialization is the identity), would show here or in the claim."""
    shallow = KEEPS_RANK.experiment.overridden({"model.layers": 2})
    values = shallow.values(runs, unread_seeds(KEEPS_RANK))
    assert KEEPS_RANK.verdict(values).verdict == REFUTED
