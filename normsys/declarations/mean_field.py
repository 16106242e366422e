"""Yang, Pennington, Rao, Sohl-Dickstein and Schoenholz, ICLR 2019, "A Mean Field Theory of Batch
Normalization": at initialization, a deep fully connected network with BatchNorm and no skip
connections has gradients that grow exponentially toward the input (the squared gradient norm by
pi / (pi - 1) a layer for ReLU, so the norm by sqrt(pi / (pi - 1)) = 1.211), whatever the
weights' scale; LayerNorm in its place does not.

MLP of 32 hidden layers of width 256 (Linear -> norm -> ReLU, PyTorch's default init, no skips),
gradients at initialization on the first batch of 64 MNIST training rows (cross-entropy to the
labels, BatchNorm with that batch's statistics); ratio = ||dL/dW_1|| / ||dL/dW_32||, W_l the l-th
hidden layer's weight. The paper tier takes the same network: the measurement is one batch at
initialization, seconds on a CPU.
"""

from __future__ import annotations

import math

import numpy as np

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import weight_grad_profile
from normsys.training import diagnostics as dg
from normsys.training.record import RunRecord

SOURCE = "Yang et al. 2019 (mean field theory of BatchNorm)"
DEPTH = 32

# The deep MLP at initialization: the mlp preset (width 256, ReLU, batch 64 on MNIST) 32 hidden
# layers deep, trained for no epochs (its gradients on the first batch are what a run records).
DEEP_MLP = Arm("mlp", {"model.layers": DEPTH, "model.act": "relu", "train.epochs": 0})


def hidden_grad_profile(record: RunRecord) -> list[float]:
    """||dL/dW_l|| of the MLP's hidden layers (each Linear -> norm -> ReLU) at initialization."""
    return weight_grad_profile(record, "layers.{}.0.weight")


def input_over_output(records: list[RunRecord], variant: str = "") -> float:
    """log10(||dL/dW_1|| / ||dL/dW_L||): > 0 where gradients grow toward the input; NaN where
    either gradient underflowed to 0 in float32 (no ratio to read: DyT's first layer at depth
    32, say)."""
    profile = hidden_grad_profile(records[0])
    if not (profile[0] > 0 and profile[-1] > 0):
        return math.nan
    return dg.log10_ratio(profile)


# Both norm-generic: each is a scorecard column, a user's norm in BatchNorm's place.
EXPLODES = Statistic(
    "grad_explosion", "yang-batchnorm-gradients-explode-with-depth", Rule("log10 ratio", ">", 2.0),
    DEEP_MLP, input_over_output, claim_norm="batchnorm", words="gradient explosion at depth 32",
    source=SOURCE,
    statement="At initialization, a {model.layers}-layer ReLU MLP with BatchNorm and no skips has "
              "gradients that grow toward the input (ratio = ||dL/dW_1|| / ||dL/dW_32||): {rule}.",
              role="test")
EXPLOSION_VS_LN = Statistic(
    "grad_explosion_vs_ln", "yang-explosion-is-batchnorms", Rule("log10 ratio", ">", 1.0),
    DEEP_MLP, input_over_output, versus="layernorm", pairing="own - versus",
    claim_norm="batchnorm", words="gradient explosion vs LayerNorm", source=SOURCE,
    statement="The explosion is BatchNorm's: the same MLP with LayerNorm in its place, paired by "
              "seed: {rule}.", alike={"model.norm": "layernorm"},
              role="test", own_test=True)


# Mean-field theory's per-layer growth of the gradient norm, ReLU with BatchNorm (infinite
# width), and the band the fitted growth must lie in: within 5% of it either side, fixed before
# any growth was fitted.
THEORY_GROWTH = math.sqrt(math.pi / (math.pi - 1))
GROWTH_BAND = (round(0.95 * THEORY_GROWTH, 3), round(1.05 * THEORY_GROWTH, 3))


def growth_rate(records: list[RunRecord], variant: str = "") -> float:
    """The per-layer growth of ||dL/dW_l|| toward the input, fitted over the hidden layers but
    the first and the last (whose neighbours, the input and the head, are not hidden layers):
    exp(-slope) of the least-squares line through log ||dL/dW_l|| against l. NaN where a
    gradient underflowed to 0."""
    profile = hidden_grad_profile(records[0])[1:-1]
    if not all(g > 0 for g in profile):
        return math.nan
    slope = np.polyfit(np.arange(len(profile)), np.log(profile), 1)[0]
    return math.exp(-slope)


GROWTH_RATE = Declaration(
    "yang-gradient-growth-matches-theory", Rule("growth", "within", GROWTH_BAND), source=SOURCE,
    statement="At initialization, the gradients of a {model.layers}-layer ReLU MLP with BatchNorm "
              "and no skips grow toward the input at mean-field theory's rate, sqrt(pi / (pi - 1)) "
              "= 1.211 a layer (fitted over the hidden layers but the first and the last): "
              "{rule}, within 5% of it.",
    experiment=Experiment({"batchnorm": DEEP_MLP.changed({"model.norm": "batchnorm"})},
                          growth_rate),
    role="test")
