"""Mean field theory of BatchNorm (Yang et al. 2019): the claims' evidence (each hidden layer's
gradient norm at initialization, BatchNorm's and LayerNorm's, drawn beside the comparison of the
two) and negative controls. The claims, the deep MLP and its reading are declared in
normsys.declarations.mean_field; BatchNorm's explosion alone and its rate against theory are
decided in test_declared.py.
"""

from __future__ import annotations

import pytest

from normsys.claims.params import tiers_of
from normsys.claims.testing import unread_seeds
from normsys.claims.verdict import REFUTED
from normsys.declarations.mean_field import EXPLODES, EXPLOSION_VS_LN, GROWTH_RATE, hidden_grad_profile
from normsys.declarations.shared import figures


@pytest.mark.parametrize("tier", tiers_of(EXPLOSION_VS_LN.declaration))
@EXPLOSION_VS_LN.mark
def test_the_explosion_is_batchnorms(claim, runs, tier):
    claim.check(runs)
    declared = EXPLOSION_VS_LN.declaration
    by_norm = {arm: [hidden_grad_profile(rs[0]) for rs in seeds]
               for arm, seeds in declared.records(runs, claim.seeds, tier).items()}
    claim.record(**{f"grad_profile_{arm}": rows for arm, rows in by_norm.items()})
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {f"{arm}, no skips": rows for arm, rows in by_norm.items()},
        title=f"Deep ReLU MLP at init, {len(by_norm['batchnorm'][0])} hidden layers"))


# ----------------------------------------------------------------------------- negative controls


@pytest.mark.control(EXPLODES.claim)
def test_control_explosion_rule_is_refuted_on_a_shallow_batchnorm_mlp(runs):
    """The claim's own MLP, reading and rule at depth 2 (BatchNorm, ReLU, default init), on seeds
    the claim does not read: two layers leave no depth to grow over, so the rule must come out
    refuted. A ratio read the wrong way round, or from other layers than the first and the
    last hidden one, would show here."""
    declared = EXPLODES.declaration
    shallow = declared.experiment.overridden({"model.layers": 2})
    values = shallow.values(runs, unread_seeds(declared))
    assert declared.verdict(values).verdict == REFUTED


@pytest.mark.control(EXPLOSION_VS_LN.claim)
def test_control_explosion_comparison_is_refuted_where_both_mlps_take_layernorm(runs):
    """The claim's own MLPs, reading and rule with LayerNorm in both arms, on seeds it does not
    read: nothing is left between the arms, so the rule must come out refuted. Its A/A case,
    the arms on other seeds, is claims/test_aa_family.py's."""
    declared = EXPLOSION_VS_LN.declaration
    same = declared.experiment.overridden(declared.alike)
    values = same.values(runs, unread_seeds(declared))
    assert declared.verdict(values).verdict == REFUTED


@pytest.mark.control(GROWTH_RATE.id)
def test_control_growth_band_is_refuted_on_a_near_linear_activation(runs):
    """The claim's own MLP, reading and band with tanh in ReLU's place, on seeds the claim does not
    read: tanh is linear near 0, and mean-field theory's growth shrinks toward 1 as the activation
    nears a line, so the fitted growth must leave ReLU's band and the rule come out refuted. A
    band wide enough to take any growth, or a reading blind to the activation, would show here."""
    declared = GROWTH_RATE
    near_linear = declared.experiment.overridden({"model.act": "tanh"})
    values = near_linear.values(runs, unread_seeds(declared))
    assert declared.verdict(values).verdict == REFUTED
