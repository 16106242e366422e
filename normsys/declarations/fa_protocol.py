"""FA evaluation protocol: gradient-direction stability separates DFA from backprop.

Pre-LN residual MLP on MNIST (784 -> 256, 4 blocks LN -> Linear(256, 512) -> GELU ->
Linear(512, 256); at the CPU tier width 128 on the first 20,000 training images), Adam 1e-3,
batch 128, 2 epochs, trained with bp, fa and dfa, plus the
frozen-blocks baselines (blocks fixed at init; embed, out_ln and head trained by backprop, or by
DFA's own signals). Stability at the middle hidden state h_2 over 8 disjoint test batches of 128:
the mean pairwise cosine of the batch-mean backprop gradients dL/dh_2, taken by autograd through
each net's true weights whatever rule trained it (reference: BP 0.05-0.18, DFA 0.5-0.99).

Stability depends on how far training got (a net still carrying a population-gradient direction
is more stable), so the stability claims also run ``-long`` at the paper tier: the same rules
after 10 epochs.
"""

from __future__ import annotations

from normsys.claims.declaration import Arm, Declaration, Experiment, metric
from normsys.claims.verdict import Rule
from normsys.declarations.shared.protocol import mnist_report
from normsys.training.config import preset
from normsys.training.record import TEST_ACC, trained_model
from normsys.training.tiers import DEFAULT

SOURCE = "FA evaluation protocol (pre-LN residual MLP, MNIST)"
VARIANTS = ("", "-long")


EPOCHS = {"": 2, "-long": 10}
FIGURE_EPOCHS = (1, 2, 5, 10)


def snapshots(epochs: int) -> tuple[int, ...]:
    """The epochs after which a run keeps its weights: 1, 2 and 5 for a 10-epoch run (for the
    figure), none for the others."""
    return tuple(e for e in FIGURE_EPOCHS if e < epochs) if epochs == EPOCHS["-long"] else ()


# The protocol's residual MLP (the resmlp preset: 784 -> 256, 4 blocks LN-256x512-GELU-512x256,
# Adam 1e-3, batch 128), trained for each variant's epochs.
FA_NET = Arm("resmlp", variants={v: {"train.epochs": epochs, "train.snapshots": snapshots(epochs)}
                                 for v, epochs in EPOCHS.items()})


def fa_mlp(method: str, seed: int, tier: str = DEFAULT, frozen: bool = False, epochs: int = 2):
    """The protocol's net trained by ``method`` for ``epochs``; ``frozen``: its blocks fixed at
    init."""
    return preset("resmlp", tier, **{"train.method": method, "train.frozen_blocks": frozen,
                                     "train.seed": seed, "train.epochs": epochs,
                                     "train.snapshots": snapshots(epochs)})


def fa_protocol(record, epoch: int | None = None) -> dict:
    """The protocol's report of a trained net (or of its weights after ``epoch``) on 8 disjoint
    MNIST test batches of 128. It measures the backprop gradient of whatever net it is given, so
    the weights are loaded into a plain model: an FA-trained net is measured through W^T, not
    its feedback matrices."""
    return mnist_report(trained_model(record, learning_rule=False, epoch=epoch))


def trained_by(method: str, frozen: bool = False) -> Arm:
    """An experiment's arm: the protocol net trained by ``method`` for the variant's epochs
    (``frozen``: the frozen-blocks baseline whose other layers ``method`` trained)."""
    return FA_NET.changed({"train.method": method, "train.frozen_blocks": frozen})


def stability_of(records, variant: str = "") -> float:
    """Direction stability at h_2 (fa_protocol): autograd through the trained net's weights."""
    return fa_protocol(records[0])["stability"]


BP_UNSTABLE = Declaration(
    "fa-bp-direction-unstable", Rule("stability", "<=", 0.2),
    source=SOURCE,
    statement="In a BP-trained net, batch-mean gradient directions at the middle layer are batch-"
              "specific: {rule}.",
    experiment=Experiment({"bp": trained_by("bp")}, stability_of), variants=VARIANTS,
    role="regression", own_test=True)


DFA_STABLE = Declaration(
    "fa-dfa-direction-stable", Rule("stability", ">=", 0.5),
    source=SOURCE,
    statement="In a DFA-trained net, gradient directions are stable across batches: {rule}.",
    experiment=Experiment({"dfa": trained_by("dfa")}, stability_of), variants=VARIANTS,
    role="regression", own_test=True)


SEPARATES = Declaration(
    "fa-stability-separates", Rule("stability", ">", 0.3),
    source=SOURCE,
    statement="Stability separates DFA from BP: {rule}, paired by seed (FA reported too).",
    experiment=Experiment({"dfa": trained_by("dfa"), "bp": trained_by("bp")}, stability_of,
                          evidence={"fa": trained_by("fa")}),
    variants=VARIANTS, alike={"train.method": "bp"},
    role="regression", own_test=True)


DFA_BEATS_FROZEN = Declaration(
    "fa-dfa-beats-frozen-baseline", Rule("test_acc", ">", 0.02),
    source=SOURCE,
    statement="DFA trains the blocks usefully: {rule} (blocks frozen at init, the rest trained by "
              "backprop), paired by seed.",
    experiment=Experiment({"dfa": trained_by("dfa"), "frozen": trained_by("bp", frozen=True)},
                          metric(TEST_ACC)), alike={"train.method": "bp", "train.frozen_blocks": True},
                          role="regression")


DFA_BEATS_FROZEN_DFA = Declaration(
    "fa-dfa-beats-frozen-dfa-baseline", Rule("test_acc", ">", 0.02),
    source=SOURCE,
    statement="DFA trains the blocks usefully, against a baseline whose embedding also learns from "
              "DFA's signals: {rule}, paired.",
    experiment=Experiment({"dfa": trained_by("dfa"), "frozen, dfa": trained_by("dfa", frozen=True)},
                          metric(TEST_ACC)), alike={"train.frozen_blocks": True},
                          role="regression")


BP_BEATS_FROZEN = Declaration(
    "fa-bp-beats-frozen-baseline", Rule("test_acc", ">", 0.02),
    source=SOURCE,
    statement="BP trains the blocks usefully: {rule}, paired by seed.",
    experiment=Experiment({"bp": trained_by("bp"), "frozen": trained_by("bp", frozen=True)},
                          metric(TEST_ACC)), alike={"train.frozen_blocks": True},
                          role="regression")
