"""The experiments that more than one claim file runs, each defined once: the run of one seed
and, where both read it alike, what is read of it. What only one claim reads, and every claim's
rule, sits in that claim's file.

- the deep tanh MLP of the Transformer-components notebook (also the deep dive's vanishing-gradient
  setting) and its per-layer gradient profile;
- the char GPT of the LayerNorm-Jacobian analysis (also the RMSNorm and DyT comparisons).
"""

from __future__ import annotations

from normsys.claims.declaration import Arm
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig
from normsys.training.norms import NORMS
from normsys.training.record import RunRecord

# ----------------------------------------------------------------------------- deep tanh MLP


# The deep tanh MLP (tanh_mlp preset: d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to random
# targets), measured at initialization; no norm, no residuals unless an arm changes them.
TANH_MLP = Arm("tanh_mlp")


def weight_grad_profile(record: RunRecord, weight: str = "layers.{}.weight") -> list[float]:
    """||dL/dW_l|| for l = 1 ... L at initialization, L its config's layers, W_l the parameter
    ``weight`` names for layer l (the tanh MLP's; the deep-dive MLP's is ``layers.{}.0.weight``)."""
    layers = RunConfig.from_dict(record.config).model.layers
    return dg.layer_grad_norms(record.init_grad_norms,
                               [[weight.format(i)] for i in range(layers)])


def log10_grad_ratio(records: list[RunRecord], variant: str = "") -> float:
    """log10(||grad W_1|| / ||grad W_10||) of one seed's tanh MLP at initialization."""
    return dg.log10_ratio(weight_grad_profile(records[0]))


# ----------------------------------------------------------------------------- char GPT


# The LayerNorm-Jacobian analysis's char GPT (char_gpt preset: block 64, 4 layers, 4 heads, d=128,
# pre-norm LayerNorm, softmax attention, AdamW 1e-3, batch 32, 250 steps of backprop; at the CPU
# tier d=64, batch 16, block 32) on Tiny Shakespeare.
CHAR_GPT = Arm("char_gpt")


# The kinds whose statistics run across the batch (NormKind.per_row False: BatchNorm), over the
# batch and time in a sequence model: in the encoder they take in the padding positions, in the
# causal char GPT the tokens a position must not see; they are measured where the deep dive
# measures them, in the MLPs.
SEQUENCES = frozenset(name for name, kind in NORMS.items() if not kind.per_row)
