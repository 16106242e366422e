"""Transformer-components notebook: the claims' evidence (gradient profiles, loss curves) and
negative controls. The claims, their stacks and readings are declared in
normsys.declarations.transformer_components.
"""

from __future__ import annotations

import pytest

from normsys.claims.params import tiers_of
from normsys.claims.testing import trained_and_untrained, unread_seeds
from normsys.claims.verdict import REFUTED, SUPPORTED
from normsys.declarations.shared import figures
from normsys.declarations.shared.experiments import weight_grad_profile
from normsys.declarations.transformer_components import (
    FFN_CONFIGS,
    LOWEST_LOSS,
    RESIDUAL_PRESERVES,
    ffn_stack,
)
from normsys.training.record import FINAL_LOSS


@pytest.mark.parametrize("tier", tiers_of(RESIDUAL_PRESERVES))
@RESIDUAL_PRESERVES.mark
def test_residual_preserves_gradients(claim, runs, tier):
    claim.check(runs)
    records = RESIDUAL_PRESERVES.records(runs, claim.seeds, tier)
    profile = {arm: [weight_grad_profile(rs[0]) for rs in seeds] for arm, seeds in records.items()}
    claim.record(profile_residual=profile["residual"], profile_plain=profile["plain"])
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {"with residuals": profile["residual"], "without residuals": profile["plain"]}))


@pytest.mark.parametrize("tier", tiers_of(LOWEST_LOSS))
@LOWEST_LOSS.mark
def test_residual_layernorm_lowest_loss(claim, runs, tier):
    claim.check(runs)
    recs = {name: [rs[0] for rs in seeds]
            for name, seeds in LOWEST_LOSS.records(runs, claim.seeds, tier).items()}
    final = {name: [r.metrics[FINAL_LOSS] for r in rs] for name, rs in recs.items()}
    claim.record(final_loss=final)
    claim.figure("curves", lambda fig: figures.curves(
        fig, {n: [r.curves for r in rs] for n, rs in recs.items()}, ("loss", "grad_norm"),
        "FFN stack: loss and total gradient norm per step"))


# ----------------------------------------------------------------------------- negative controls


@pytest.mark.control(RESIDUAL_PRESERVES.id)
def test_control_gradient_rule_is_refuted_where_neither_arm_has_residuals(runs):
    """The claim's own arms, reading and rule with the residual connections taken out of both, on
    seeds the claim does not read: nothing is left between the arms, so the rule must come out
    refuted. An arm given an edge the residuals do not earn (another depth, init or batch, a
    profile read elsewhere) would show here. Its A/A case, the arms on other seeds, is
    claims/test_aa_family.py's."""
    neither = RESIDUAL_PRESERVES.experiment.overridden(RESIDUAL_PRESERVES.alike)
    ratios = neither.values(runs, unread_seeds(RESIDUAL_PRESERVES))
    assert RESIDUAL_PRESERVES.verdict(ratios).verdict == REFUTED


@pytest.mark.control(LOWEST_LOSS.id)
def test_control_lowest_loss_rule_is_refuted_where_every_stack_is_residual_with_layernorm(runs):
    """The claim's own four stacks, reading and all-of rule with residuals and LayerNorm in every
    one, on seeds the claim does not read: no stack can end lower than another, so the rule
    must come out refuted. A stack given an edge its configuration does not earn (trained
    longer, on other batches) would show here. Its A/A case, the stacks on other seeds, is
    claims/test_aa_family.py's."""
    same = LOWEST_LOSS.experiment.overridden(LOWEST_LOSS.alike)
    margins = same.values(runs, unread_seeds(LOWEST_LOSS))
    assert LOWEST_LOSS.verdict(margins).verdict == REFUTED


@pytest.mark.control(LOWEST_LOSS.id)
@pytest.mark.positive(LOWEST_LOSS.id)
def test_control_lowest_loss_rule_flips_between_a_trained_and_an_untrained_reference(run):
    """The all-of rule on final losses of FFN stacks, where the reference is trained and every
    other configuration left at its initialization (learning rate 0), and the other way round."""
    trained, untrained = ([r.metrics[FINAL_LOSS] for r in side] for side in
                          trained_and_untrained(run, ffn_stack(True, "layernorm")(0)[0]))
    lowest = {name: (trained if name == "residual+LN" else untrained) for name in FFN_CONFIGS}
    highest = {name: (untrained if name == "residual+LN" else trained) for name in FFN_CONFIGS}
    assert LOWEST_LOSS.verdict(lowest).verdict == SUPPORTED
    assert LOWEST_LOSS.verdict(highest).verdict == REFUTED
