"""Transformer-components notebook: residual connections and LayerNorm in deep stacks.

Deep tanh MLP: d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to random targets, PyTorch default
init, gradients at initialization; 5 seeds (cheap). Statistic per seed:
log10(||grad W_1|| / ||grad W_10||) with residuals minus the same without.
FFN stack: 4 x [pre-LN] Linear(128, 512)-GELU-Linear(512, 128) [+ residual], 100 steps of Adam 1e-3
on fresh random data; final loss = mean of the last 10 steps.
"""

from __future__ import annotations

import pytest

from normsys import figures
from normsys.experiments import (
    ffn_stack_config,
    log_grad_ratio,
    tanh_mlp_config,
    weight_grad_profile,
)
from normsys.plugin import refuted, tiers
from normsys.stats import decide_paired

SOURCE = "Transformer-components notebook (deep tanh MLP, gradients at init)"


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("tc-residual-preserves-gradients", source=SOURCE, seeds=5,
                   statement="Residual connections preserve gradients: log10(||grad W_1|| / "
                             "||grad W_10||) with residuals minus without > 1.")
def test_residual_preserves_gradients(claim, run, tier):
    with_res = [weight_grad_profile(run(tanh_mlp_config(True, s, tier=tier))) for s in claim.seeds]
    without = [weight_grad_profile(run(tanh_mlp_config(False, s, tier=tier))) for s in claim.seeds]
    claim.record(profile_residual=with_res, profile_plain=without)
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {"with residuals": with_res, "without residuals": without}))
    claim.check_paired([log_grad_ratio(p) for p in with_res], [log_grad_ratio(p) for p in without],
                       ">", 1.0, statistic="log10 ratio(residual) - log10 ratio(plain)")


FFN_CONFIGS = {"residual+LN": (True, "layernorm"), "residual only": (True, "none"),
               "LN only": (False, "layernorm"), "neither": (False, "none")}


@pytest.mark.parametrize("tier", tiers(cpu=[refuted(
    "every comparison goes the other way: loss(residual only) - loss(residual+LN) mean -0.00877, "
    "95% CI [-0.00894, -0.00859]; LN only -0.01345 [-0.01385, -0.01306]; neither -0.01429 "
    "[-0.01478, -0.01380]; "
    "final losses ~1.0 = the variance of the random targets; rule > 0 for all three")],
    paper=[refuted(
        "one H100 80GB HBM3, 2026-11-23, seeds 0-4: every comparison goes the other way: "
        "residual only -0.00898, 95% CI [-0.00946, -0.00850]; LN only -0.01365 [-0.01401, "
        "-0.01329]; neither -0.01446 [-0.01479, -0.01412]; rule > 0 for all three")]))
@pytest.mark.claim("tc-residual-layernorm-lowest-loss", source=SOURCE,
                   statement="In the FFN stack, residual+LN ends with lower loss than each of "
                             "residual only, LN only and neither (paired; all three must hold).")
def test_residual_layernorm_lowest_loss(claim, runs, tier):
    recs = {name: runs([ffn_stack_config(res, norm, s, tier) for s in claim.seeds])
            for name, (res, norm) in FFN_CONFIGS.items()}
    final = {name: [r.metrics["final_loss"] for r in rs] for name, rs in recs.items()}
    claim.record(final_loss=final)
    claim.figure("curves", lambda fig: figures.curves(
        fig, {n: [r.curves for r in rs] for n, rs in recs.items()}, ("loss", "grad_norm"),
        "FFN stack: loss and total gradient norm per step"))
    claim.check_all({f"loss({other}) - loss(residual+LN)": decide_paired(
        final[other], final["residual+LN"], ">", 0.0) for other in list(FFN_CONFIGS)[1:]},
        statistic="loss(other) - loss(residual+LN)")
