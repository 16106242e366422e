"""Transformer-components notebook: residual connections preserve gradients in a deep tanh MLP.

d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to random targets, PyTorch default init,
gradients at initialization; 5 seeds (cheap). Statistic per seed:
log10(||grad W_1|| / ||grad W_10||) with residuals minus the same without.
"""

from __future__ import annotations

import numpy as np
import pytest

from normsys.experiments import log_grad_ratio, tanh_mlp_config, weight_grad_profile
from normsys.plugin import tiers

SOURCE = "Transformer-components notebook (deep tanh MLP, gradients at init)"


def draw_profiles(fig, profiles: dict[str, list[list[float]]]) -> None:
    ax = fig.subplots()
    for label, rows in profiles.items():
        arr = np.array(rows)
        layers = np.arange(1, arr.shape[1] + 1)
        ax.plot(layers, arr.mean(0), marker="o", label=label)
        ax.fill_between(layers, arr.min(0), arr.max(0), alpha=0.25)
    ax.set_yscale("log")
    ax.set_xlabel("layer")
    ax.set_ylabel("||dL/dW_l|| at init")
    ax.set_title("Per-layer weight-gradient norms (mean over seeds, band min-max)")
    ax.legend()


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("tc-residual-preserves-gradients", source=SOURCE, seeds=5,
                   statement="Residual connections preserve gradients: log10(||grad W_1|| / "
                             "||grad W_10||) with residuals minus without > 1.")
def test_residual_preserves_gradients(claim, run, tier):
    with_res = [weight_grad_profile(run(tanh_mlp_config(True, s, tier=tier))) for s in claim.seeds]
    without = [weight_grad_profile(run(tanh_mlp_config(False, s, tier=tier))) for s in claim.seeds]
    claim.record(profile_residual=with_res, profile_plain=without)
    claim.figure("grad-profile", lambda fig: draw_profiles(
        fig, {"with residuals": with_res, "without residuals": without}))
    claim.check_paired([log_grad_ratio(p) for p in with_res], [log_grad_ratio(p) for p in without],
                       ">", 1.0, statistic="log10 ratio(residual) - log10 ratio(plain)")
