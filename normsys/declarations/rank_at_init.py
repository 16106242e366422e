"""Daneshmand, Kohler, Bach, Hofmann and Lucchi, NeurIPS 2020, "Batch normalization provably avoids
rank collapse for randomly initialised deep networks": without normalization, the representations
of a batch in a deep random network collapse toward rank one with depth; BatchNorm keeps their
rank of order the width (bounded below), whatever the depth.

The deep MLP of Yang et al.'s claims (normsys.declarations.mean_field: 32 hidden layers of width
256, Linear -> norm -> ReLU, PyTorch's default init, no skips) at initialization, in training
mode (BatchNorm normalizes with the batch's own statistics, as in the paper), on the run's probe
batch (the first 64 MNIST training rows): the effective rank of the last hidden layer's output.
"""

from __future__ import annotations

import math

import torch

from normsys.claims.declaration import Declaration, Experiment
from normsys.claims.verdict import Rule
from normsys.declarations.mean_field import DEEP_MLP
from normsys.training import diagnostics as dg
from normsys.training.models import capture, prepare_model
from normsys.training.record import RunRecord
from normsys.training.tasks import make_task

SOURCE = "Daneshmand et al. 2020 (BatchNorm provably avoids rank collapse)"


def last_layer_rank(records: list[RunRecord], variant: str = "") -> float:
    """log2 of the effective rank of the last hidden layer's output (after its norm and ReLU) on
    the run's probe batch, the MLP at its initialization in training mode."""
    cfg = records[0].run_config
    x, _ = make_task(cfg).probe_batch(cfg)
    with torch.random.fork_rng(devices=[]):  # prepare_model seeds the global generator
        model = prepare_model(cfg).train()
    last = f"layers.{cfg.model.layers - 1}"
    with torch.no_grad(), capture(model, [last]) as hidden:
        model(x)
    return math.log2(dg.effective_rank(hidden[last]))


KEEPS_RANK = Declaration(
    "daneshmand-batchnorm-keeps-rank-at-init", Rule("log2 erank", ">", 1.0), source=SOURCE,
    statement="At initialization, the last hidden layer of a {model.layers}-layer ReLU MLP with "
              "BatchNorm and no skips keeps more than twice the effective rank of the same MLP "
              "without normalization on one batch of {train.probe_batch} rows, paired by seed: "
              "{rule}.",
    experiment=Experiment({"batchnorm": DEEP_MLP.changed({"model.norm": "batchnorm"}),
                           "none": DEEP_MLP.changed({"model.norm": "none"})}, last_layer_rank),
    alike={"model.norm": "batchnorm"}, role="test")
