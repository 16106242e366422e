"""Daneshmand, Kohler, Bach, Hofmann and Lucchi, NeurIPS 2020, "Batch normalization provably avoids
rank collapse for randomly initialised deep networks": without normalization, the representations
of a batch in a deep random network collapse toward rank one with depth; BatchNorm keeps their
rank of order the width (bounded below), whatever the depth. Daneshmand, Joudaki and Bach,
NeurIPS 2021, "Batch normalization orthogonalizes representations in deep random networks": in a
deep linear network with BatchNorm, the orthogonality gap of a batch's representations decays
with depth down to a floor that shrinks with the width.

The deep MLP of Yang et al.'s claims (normsys.declarations.mean_field: 32 hidden layers of width
256, Linear -> norm -> ReLU, PyTorch's default init, no skips) at initialization, in training
mode (BatchNorm normalizes with the batch's own statistics, as in the paper), on the run's probe
batch (the first 64 MNIST training rows): the effective rank of the last hidden layer's output.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic
from normsys.claims.verdict import Rule
from normsys.declarations.mean_field import DEEP_MLP
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig
from normsys.training.models import capture, prepare_model
from normsys.training.record import RunRecord
from normsys.training.tasks import make_task

SOURCE = "Daneshmand et al. 2020 (BatchNorm provably avoids rank collapse)"


def last_hidden(cfg: RunConfig, linear: bool = False) -> torch.Tensor:
    """The last hidden layer's output (after its norm and activation) on the run's probe batch,
    the MLP of ``cfg`` at its initialization in training mode; ``linear``: each activation taken
    out (Linear -> norm, the deep linear network of Daneshmand et al. 2021's theory)."""
    x, _ = make_task(cfg).probe_batch(cfg)
    with torch.random.fork_rng(devices=[]):  # prepare_model seeds the global generator
        model = prepare_model(cfg).train()
    if linear:
        for layer in model.layers:
            layer[2] = nn.Identity()
    last = f"layers.{cfg.model.layers - 1}"
    with torch.no_grad(), capture(model, [last]) as hidden:
        model(x)
    return hidden[last]


def last_layer_rank(records: list[RunRecord], variant: str = "") -> float:
    """log2 of the effective rank of the last hidden layer's output (after its norm and ReLU) on
    the run's probe batch, the MLP at its initialization in training mode."""
    return math.log2(dg.effective_rank(last_hidden(records[0].run_config)))


# Norm-generic: a scorecard column, each kind N in BatchNorm's place against the same MLP without
# a norm (every kind runs the MLP; its runs are the gradient-explosion columns' own).
KEEPS_RANK = Statistic(
    "rank_at_init", "daneshmand-batchnorm-keeps-rank-at-init", Rule("log2 erank", ">", 1.0),
    DEEP_MLP, last_layer_rank, versus="none", pairing="own - versus", claim_norm="batchnorm",
    words="rank kept at init vs no norm", source=SOURCE,
    statement="At initialization, the last hidden layer of a {model.layers}-layer ReLU MLP with "
              "BatchNorm and no skips keeps more than twice the effective rank of the same MLP "
              "without normalization on one batch of {train.probe_batch} rows, paired by seed: "
              "{rule}.",
    alike={"model.norm": "batchnorm"}, role="test")


SOURCE_2021 = "Daneshmand et al. 2021 (BatchNorm orthogonalizes representations)"
WIDTHS = (128, 256, 512)


def orthogonality_gap(h: torch.Tensor) -> float:
    """|| G / tr(G) - I / n ||_F of the Gram matrix G = H H^T of a batch's n representations (the
    rows of ``h``): 0 where they are orthogonal and of one length, sqrt(1 - 1/n) where they all lie
    on one line. Random Gaussian rows of width d read about 1 / sqrt(d)."""
    h = h.detach().double().flatten(1)
    gram = h @ h.T
    n = gram.shape[0]
    return float((gram / gram.trace() - torch.eye(n, dtype=gram.dtype) / n).norm())


def gap_over_width(records: list[RunRecord], variant: str = "") -> float:
    """log2(gap at the widest / gap at the narrowest) of one seed's MLPs, each at its width
    (WIDTHS), their ReLUs taken out: the orthogonality gap of the last hidden layer's output on
    the probe batch, at initialization in training mode."""
    gaps = [orthogonality_gap(last_hidden(r.run_config, linear=True)) for r in records]
    return math.log2(gaps[-1] / gaps[0])


ORTHOGONALIZES = Declaration(
    "daneshmand-batchnorm-gap-shrinks-with-width", Rule("log2 gap(512) / gap(128)", "<", -0.5),
    source=SOURCE_2021,
    statement="At initialization, the last hidden layer of a {model.layers}-layer linear MLP "
              "with BatchNorm (the MLP of daneshmand-batchnorm-keeps-rank-at-init with its ReLUs "
              "taken out) holds one batch of {train.probe_batch} rows nearer to orthogonal the "
              "wider it is: the orthogonality gap || G / tr(G) - I / n ||_F of their Gram matrix "
              "shrinks by more than a factor sqrt(2) from width 128 to 512 (the theory's floor, "
              "1 / sqrt(width), halves), each seed's three widths: {rule}.",
    experiment=Experiment({"batchnorm": Arm(
        DEEP_MLP.preset, {**DEEP_MLP.settings, "model.norm": "batchnorm"},
        each=tuple({"model.d": d} for d in WIDTHS))}, gap_over_width),
    role="test")
