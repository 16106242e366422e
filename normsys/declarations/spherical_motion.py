"""Wan, Zhu, Zhang and Sun, NeurIPS 2021, "Spherical Motion Dynamics": the weights before a
BatchNorm are scale-invariant, and under SGD with momentum a, weight decay w and learning rate e
their angular update per step settles at sqrt(2 e w / (1 + a)), whatever the data.

The deep-dive MLP (3 hidden layers of width 256, at the CPU tier 128: the equilibrium does not
depend on the width; Linear -> BatchNorm -> ReLU, batch 64 on MNIST)
trained by SGD at e = 0.5, w = 1e-3, a = 0.9, each hidden Linear's weight turning by the angle
the run logs per step (train.angular). 1 / (e w) = 2,000 steps is the equilibrium's time scale:
the CPU tier trains 6,000 steps (its last 20%, where the update is read, from 2.4 time scales
on), the paper tier 30,000.
"""

from __future__ import annotations

import math

from normsys.claims.declaration import Arm, Declaration, Experiment
from normsys.claims.verdict import Rule
from normsys.training.tiers import DEFAULT

SOURCE = "Wan et al. 2021 (spherical motion dynamics)"
LR, DECAY, MOMENTUM = 0.5, 1e-3, 0.9
EQUILIBRIUM = math.sqrt(2 * LR * DECAY / (1 + MOMENTUM))  # the angular update it predicts
LAYERS = 3
SCALE_INVARIANT = tuple(f"layers.{i}.0.weight" for i in range(LAYERS))  # each before a BatchNorm
LAST = 0.2  # the share of the steps, at the end, the measured update is averaged over

SGD_BN_MLP = Arm("mlp", {"model.norm": "batchnorm", "model.layers": LAYERS, "model.act": "relu",
                         "train.optimizer": "sgd", "train.lr": LR, "train.momentum": MOMENTUM,
                         "train.weight_decay": DECAY, "train.steps": 30_000,
                         "train.angular": SCALE_INVARIANT},
                 at={DEFAULT: {"train.steps": 6_000, "model.d": 128}})


def angular_update_ratio(records, variant: str = "") -> float:
    """The mean angular update of the scale-invariant weights over the last 20% of the steps,
    over the prediction at the claim's e, w and a (EQUILIBRIUM)."""
    curves = records[0].curves
    means = []
    for name in SCALE_INVARIANT:
        turns = curves[f"angular_update.{name}"]
        tail = turns[int(len(turns) * (1 - LAST)):]
        means.append(sum(tail) / len(tail))
    return sum(means) / len(means) / EQUILIBRIUM


SETTLES = Declaration(
    "wan-angular-update-equilibrium", Rule("measured / predicted", "within", (0.8, 1.25)),
    source=SOURCE,
    statement="Under SGD (learning rate {train.lr}, momentum {train.momentum}, weight decay "
              "{train.weight_decay}), the weights before each BatchNorm of an MLP turn per step "
              "by sqrt(2 e w / (1 + a)) once settled (measured: the mean angular update over the "
              "last 20% of the steps): {rule}.",
    experiment=Experiment({"sgd": SGD_BN_MLP}, angular_update_ratio), role="test")
