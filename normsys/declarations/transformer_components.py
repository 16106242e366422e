"""Transformer-components notebook: residual connections and LayerNorm in deep stacks.

Deep tanh MLP: d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to random targets, PyTorch default
init, gradients at initialization; 5 seeds (cheap). Statistic per seed:
log10(||grad W_1|| / ||grad W_10||) with residuals minus the same without.
FFN stack: 4 x [pre-LN] Linear(128, 512)-GELU-Linear(512, 128) [+ residual], 100 steps of Adam 1e-3
on fresh random data; final loss = mean of the last 10 steps.
"""

from __future__ import annotations

from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import TANH_MLP, log10_grad_ratio
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
                           "plain": TANH_MLP}, reads=log10_grad_ratio),
    alike={"model.residual": False},
    role="test", own_test=True)


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
                          reads=metric(FINAL_LOSS), combine=loss_margins),
    alike={"model.residual": True, "model.norm": "layernorm"}, role="test", own_test=True)
