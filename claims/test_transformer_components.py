"""Transformer-components notebook: residual connections and LayerNorm in deep stacks.

Deep tanh MLP: d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to random targets, PyTorch default
init, gradients at initialization; 5 seeds (cheap). Statistic per seed:
log10(||grad W_1|| / ||grad W_10||) with residuals minus the same without.
FFN stack: 4 x [pre-LN] Linear(128, 512)-GELU-Linear(512, 128) [+ residual], 100 steps of Adam 1e-3
on fresh random data; final loss = mean of the last 10 steps.
"""

from __future__ import annotations

import pytest

from normsys.claims import figures
from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.experiments import TANH_MLP, log10_grad_ratio, weight_grad_profile
from normsys.claims.params import tiers
from normsys.claims.testing import alike_on_disjoint_seeds, trained_and_untrained, unread_seeds
from normsys.claims.verdict import REFUTED, SUPPORTED, Rule
from normsys.training.record import FINAL_LOSS

SOURCE = "Transformer-components notebook (deep tanh MLP, gradients at init)"


def ffn_stack(residual: bool, norm: str) -> Arm:
    """The FFN stack (ffn_stack preset: 4 x [pre-LN] Linear(128, 512)-GELU-Linear(512, 128)
    [+ residual], 100 steps of Adam 1e-3 on fresh random data, seq 32, batch 16, MSE)."""
    return Arm("ffn_stack", {"model.residual": residual, "model.norm": norm})


RESIDUAL_PRESERVES = Declaration(
    "tc-residual-preserves-gradients", Rule("log10 ratio", ">", 1.0),
    source=SOURCE, seeds=5,
    statement="Residual connections preserve gradients (ratio = ||grad W_1|| / ||grad W_10||): "
              "{rule}, paired by seed.",
    experiment=Experiment({"residual": TANH_MLP.changed({"model.residual": True}),
                           "plain": TANH_MLP}, reads=log10_grad_ratio))


@pytest.mark.parametrize("tier", tiers())
@RESIDUAL_PRESERVES.mark
def test_residual_preserves_gradients(claim, runs, tier):
    records = RESIDUAL_PRESERVES.records(runs, claim.seeds, tier)
    profile = {arm: [weight_grad_profile(rs[0]) for rs in seeds] for arm, seeds in records.items()}
    claim.record(profile_residual=profile["residual"], profile_plain=profile["plain"])
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {"with residuals": profile["residual"], "without residuals": profile["plain"]}))
    claim.check(runs)


FFN_CONFIGS = {"residual+LN": (True, "layernorm"), "residual only": (True, "none"),
               "LN only": (False, "layernorm"), "neither": (False, "none")}


def loss_margins(reference: float, *others: float) -> dict[str, float]:
    """One seed's final loss of each other configuration minus residual+LN's."""
    return {f"loss({name}) - loss(residual+LN)": other - reference
            for name, other in zip(list(FFN_CONFIGS)[1:], others, strict=True)}


LOWEST_LOSS = Declaration(
    "tc-residual-layernorm-lowest-loss", Rule("loss(other) - loss(residual+LN)", ">", 0.0),
    source=SOURCE,
    statement="In the FFN stack, residual+LN ends with lower loss than each of residual only, LN only"
              " and neither: {rule} for all three, paired by seed.",
    experiment=Experiment({name: ffn_stack(res, norm) for name, (res, norm) in FFN_CONFIGS.items()},
                          reads=metric(FINAL_LOSS), combine=loss_margins))


@pytest.mark.parametrize("tier", tiers())
@LOWEST_LOSS.mark
def test_residual_layernorm_lowest_loss(claim, runs, tier):
    recs = {name: [rs[0] for rs in seeds]
            for name, seeds in LOWEST_LOSS.records(runs, claim.seeds, tier).items()}
    final = {name: [r.metrics[FINAL_LOSS] for r in rs] for name, rs in recs.items()}
    claim.record(final_loss=final)
    claim.figure("curves", lambda fig: figures.curves(
        fig, {n: [r.curves for r in rs] for n, rs in recs.items()}, ("loss", "grad_norm"),
        "FFN stack: loss and total gradient norm per step"))
    claim.check(runs)


# ----------------------------------------------------------------------------- negative controls


@pytest.mark.control(RESIDUAL_PRESERVES.id)
def test_control_gradient_rule_is_refuted_where_neither_arm_has_residuals(runs):
    """The claim's own arms, reading and rule with the residual connections taken out of both, on
    seeds the claim does not read: nothing is left between the arms, so the rule must come out
    refuted. An arm given an edge the residuals do not earn (another depth, init or batch, a
    profile read elsewhere) would show here. Then the A/A case, the first arm on those seeds and
    the second on the claim's own (alike_on_disjoint_seeds): values with their seed spread,
    which must not come out supported."""
    neither = RESIDUAL_PRESERVES.experiment.overridden({"model.residual": False})
    ratios = neither.values(runs, unread_seeds(RESIDUAL_PRESERVES), "cpu")
    assert RESIDUAL_PRESERVES.verdict(ratios).verdict == REFUTED
    alike_on_disjoint_seeds(RESIDUAL_PRESERVES, neither, runs)


@pytest.mark.control(LOWEST_LOSS.id)
def test_control_lowest_loss_rule_is_refuted_where_every_stack_is_residual_with_layernorm(runs):
    """The claim's own four stacks, reading and all-of rule with residuals and LayerNorm in every
    one, on seeds the claim does not read: no stack can end lower than another, so the rule
    must come out refuted. A stack given an edge its configuration does not earn (trained
    longer, on other batches) would show here. Then the A/A case, the reference stack on those
    seeds and the others on the claim's own (alike_on_disjoint_seeds): values with their seed
    spread, which must not come out supported."""
    same = LOWEST_LOSS.experiment.overridden({"model.residual": True, "model.norm": "layernorm"})
    margins = same.values(runs, unread_seeds(LOWEST_LOSS), "cpu")
    assert LOWEST_LOSS.verdict(margins).verdict == REFUTED
    alike_on_disjoint_seeds(LOWEST_LOSS, same, runs)


@pytest.mark.control(LOWEST_LOSS.id)
def test_control_lowest_loss_rule_flips_between_a_trained_and_an_untrained_reference(run):
    """The all-of rule on final losses of FFN stacks, where the reference is trained and every
    other configuration left at its initialization (learning rate 0), and the other way round."""
    trained, untrained = ([r.metrics[FINAL_LOSS] for r in side] for side in
                          trained_and_untrained(run, ffn_stack(True, "layernorm")(0, "cpu")[0]))
    lowest = {name: (trained if name == "residual+LN" else untrained) for name in FFN_CONFIGS}
    highest = {name: (untrained if name == "residual+LN" else trained) for name in FFN_CONFIGS}
    assert LOWEST_LOSS.verdict(lowest).verdict == SUPPORTED
    assert LOWEST_LOSS.verdict(highest).verdict == REFUTED
