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
from normsys.claims.declaration import Declaration
from normsys.claims.experiments import tanh_mlp, weight_grad_profile
from normsys.claims.params import tiers
from normsys.claims.stats import REFUTED, SUPPORTED, Rule, paired_differences
from normsys.claims.testing import CONTROL_SEEDS, trained_and_untrained
from normsys.training import diagnostics as dg
from normsys.training.config import preset
from normsys.training.record import FINAL_LOSS

SOURCE = "Transformer-components notebook (deep tanh MLP, gradients at init)"


def ffn_stack(residual: bool, norm: str, seed: int, tier: str = "cpu"):
    """The FFN stack (ffn_stack preset: 4 x [pre-LN] Linear(128, 512)-GELU-Linear(512, 128)
    [+ residual], 100 steps of Adam 1e-3 on fresh random data, seq 32, batch 16, MSE)."""
    return preset("ffn_stack", tier, **{"model.residual": residual, "model.norm": norm,
                                        "train.seed": seed})


RESIDUAL_PRESERVES = Declaration(
    "tc-residual-preserves-gradients", Rule("log10 ratio(residual) - log10 ratio(plain)", ">", 1.0),
    source=SOURCE, seeds=5,
    statement="Residual connections preserve gradients (ratio = ||grad W_1|| / ||grad W_10||): "
              "{rule}, paired by seed.")


@pytest.mark.parametrize("tier", tiers())
@RESIDUAL_PRESERVES.mark
def test_residual_preserves_gradients(claim, run, tier):
    with_res = [weight_grad_profile(run(tanh_mlp(s, tier, residual=True))) for s in claim.seeds]
    without = [weight_grad_profile(run(tanh_mlp(s, tier))) for s in claim.seeds]
    claim.record(profile_residual=with_res, profile_plain=without)
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {"with residuals": with_res, "without residuals": without}))
    claim.check_paired([dg.log10_ratio(p) for p in with_res], [dg.log10_ratio(p) for p in without])


FFN_CONFIGS = {"residual+LN": (True, "layernorm"), "residual only": (True, "none"),
               "LN only": (False, "layernorm"), "neither": (False, "none")}
LOWEST_LOSS = Declaration(
    "tc-residual-layernorm-lowest-loss", Rule("loss(other) - loss(residual+LN)", ">", 0.0),
    source=SOURCE,
    statement="In the FFN stack, residual+LN ends with lower loss than each of residual only, LN only"
              " and neither: {rule} for all three, paired by seed.")


def loss_margins(final: dict[str, list[float]]) -> dict[str, list[float]]:
    """Per other configuration, its per-seed final loss minus residual+LN's."""
    return {f"loss({other}) - loss(residual+LN)": paired_differences(final[other],
                                                                     final["residual+LN"])
            for other in list(FFN_CONFIGS)[1:]}


@pytest.mark.parametrize("tier", tiers())
@LOWEST_LOSS.mark
def test_residual_layernorm_lowest_loss(claim, runs, tier):
    recs = {name: runs([ffn_stack(res, norm, s, tier) for s in claim.seeds])
            for name, (res, norm) in FFN_CONFIGS.items()}
    final = {name: [r.metrics[FINAL_LOSS] for r in rs] for name, rs in recs.items()}
    claim.record(final_loss=final)
    claim.figure("curves", lambda fig: figures.curves(
        fig, {n: [r.curves for r in rs] for n, rs in recs.items()}, ("loss", "grad_norm"),
        "FFN stack: loss and total gradient norm per step"))
    claim.check_all(loss_margins(final))


# ----------------------------------------------------------------------------- negative controls


@pytest.mark.control(RESIDUAL_PRESERVES.id)
def test_control_gradient_rule_flips_when_the_sides_swap(run):
    """The rule on the same per-layer gradient profiles (train.gradients_at_init) with the effect
    reversed: plain minus residual."""
    with_res = [weight_grad_profile(run(tanh_mlp(s, residual=True))) for s in CONTROL_SEEDS]
    without = [weight_grad_profile(run(tanh_mlp(s))) for s in CONTROL_SEEDS]
    ratios = [[dg.log10_ratio(p) for p in side] for side in (with_res, without)]
    assert RESIDUAL_PRESERVES.rule.decide_paired(*ratios).verdict == SUPPORTED
    assert RESIDUAL_PRESERVES.rule.decide_paired(*reversed(ratios)).verdict == REFUTED


@pytest.mark.control(LOWEST_LOSS.id)
def test_control_lowest_loss_rule_flips_between_a_trained_and_an_untrained_reference(run):
    """The all-of rule on final losses of FFN stacks, where the reference is trained and every
    other configuration left at its initialization (learning rate 0), and the other way round."""
    trained, untrained = ([r.metrics[FINAL_LOSS] for r in side] for side in
                          trained_and_untrained(run, ffn_stack(True, "layernorm", 0)))
    lowest = {name: (trained if name == "residual+LN" else untrained) for name in FFN_CONFIGS}
    highest = {name: (untrained if name == "residual+LN" else trained) for name in FFN_CONFIGS}
    assert LOWEST_LOSS.rule.decide_all(loss_margins(lowest)).verdict == SUPPORTED
    assert LOWEST_LOSS.rule.decide_all(loss_margins(highest)).verdict == REFUTED
