"""LayerNorm deep-dive notebook: what LayerNorm does in MLPs, CNNs and LSTMs (MNIST unless said).

MLP: 3 hidden layers of 256 (Linear -> norm -> ReLU), Adam 1e-3, batch 64, 1 epoch; its last hidden
layer is probed on 1,000 fixed training images. CNN: 3 x conv3x3 -> norm -> ReLU -> maxpool, batch
128, 1 epoch (at the CPU tier 16 channels and the first 10,000 training images); LayerNorm there
normalizes each sample's whole (C, H, W) map (Ba et al. 2016).
Char LSTM: 1 layer, hidden 256, 1,000 steps on Tiny Shakespeare (BatchNorm: statistics per time
step); at the CPU tier hidden 128, 150 steps. Transformer block: one pre-norm block as a
character LM on Tiny Shakespeare (d=64, 4 heads, context 64, batch 32, Adam 1e-3, 500 steps).
Tanh MLP: as in the residual claim. Models with BatchNorm are evaluated in eval mode (running
statistics).
"""

from __future__ import annotations

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic, by_norm, metric
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import TANH_MLP, log10_grad_ratio
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig
from normsys.training.record import TEST_ACC, VAL_LOSS, RunRecord, probe_of
from normsys.training.tiers import DEFAULT

SOURCE = "LayerNorm deep-dive notebook"


INIT_SCALES = (0.5, 1.0, 2.0)  # the hidden weights' scale at init, robustness to which is measured
MLP_PROBE = "layers.2"  # the MLP's last hidden layer: what its runs probe and its readers read


# The MLP (mlp preset: 784 -> 3 x 256 Linear-norm-ReLU -> 10, Adam 1e-3, batch 64, 1 epoch), its
# last hidden layer probed on 1,000 fixed training images.
MLP = Arm("mlp", {"train.probe": (MLP_PROBE,), "train.probe_batch": 1000})


def mlp(norm: str, seed: int, tier: str = DEFAULT, **settings) -> RunConfig:
    """One seed's MLP with ``norm``, and ``settings`` changed."""
    (cfg,) = MLP.changed({"model.norm": norm, **settings})(seed, tier)
    return cfg


def unit_correlation(record: RunRecord) -> float:
    """Mean |off-diagonal correlation| of the MLP's last hidden layer's units."""
    return probe_of(record.probes, MLP_PROBE)["unit_corr"]


def accuracy_spread(accuracies: list[float]) -> float:
    """max - min test accuracy over the initial weight scales."""
    return max(accuracies) - min(accuracies)


def init_scale_spread(records: list[RunRecord], variant: str = "") -> float:
    """accuracy_spread of one seed's runs at the INIT_SCALES."""
    return accuracy_spread([r.metrics[TEST_ACC] for r in records])


# The CNN (cnn preset: 3 x conv3x3 (32, 64, 64) -> norm -> ReLU -> maxpool, batch 128; at the CPU
# tier (16, 32, 32) on 10,000 images).
CNN = Arm("cnn")
# The char LSTM (lstm preset: 1 layer, hidden 256, 1,000 steps; at the CPU tier hidden 128, 150
# steps); norm layernorm is the layer-normalized LSTM of Ba et al. 2016, none the plain LSTM (same
# cell code).
LSTM = Arm("lstm")
# One pre-norm Transformer block as a character LM: d=64, 4 heads, context 64, batch 32, Adam 1e-3,
# 500 steps; its norm in both of the block's norm places and the final norm.
TBLOCK_LM = Arm("char_gpt", {"model.layers": 1, "model.d": 64, "model.heads": 4,
                             "model.seq_len": 64, "train.batch_size": 32,
                             "train.optimizer": "adam", "train.lr": 1e-3, "train.steps": 500})


def steps_ratio(layernorm: float, none: float) -> float:
    """LayerNorm's steps to 90% over the plain MLP's."""
    return layernorm / none


def correlation(records, variant: str = "") -> float:
    """Mean |off-diagonal correlation| of the last hidden layer's units (1,000 images)."""
    return unit_correlation(records[0])


def steps_to_90(records, variant: str = "") -> float:
    """Steps to 90% accuracy on a running window of 50 training batches."""
    return dg.steps_to_accuracy(records[0].curves["batch_acc"])


# The norm-generic claims, declared once: their tests decide through these, and each is a
# column of the scorecard (normsys.scorecard) for any norm kind.
GRAD_RATIO_VS_NONE = Statistic(
    "grad_ratio_vs_none", "ld-layernorm-prevents-vanishing-gradients", Rule("log10 ratio", ">", 1.0),
    TANH_MLP, log10_grad_ratio,
    versus="none", pairing="own - versus", versus_arm="plain", own_seeds=5,
    words="gradient flow vs no norm",
    source=SOURCE,
    statement="LayerNorm after each layer of a {model.layers}-layer tanh MLP (no residuals) "
              "prevents vanishing gradients at init (ratio = ||grad W_1|| / ||grad W_10||): "
              "{rule}, paired.", alike={"model.norm": "none"},
              role="test", own_test=True)
DECORRELATION = Statistic(
    "decorrelation", "ld-layernorm-decorrelates", Rule("corr", ">", 0.0),
    MLP, correlation,
    versus="none", pairing="versus - own", words="decorrelation vs no norm", source=SOURCE,
    statement="LayerNorm decorrelates hidden units (corr: mean |off-diagonal correlation| of the "
              "last hidden layer): {rule}, paired.",
    alike={"model.norm": "none"},
    role="test", own_test=True)
INIT_ROBUSTNESS = Statistic(
    "init_robustness", "ld-layernorm-robust-to-init-scale", Rule("spread", ">", 0.02),
    Arm("mlp", MLP.settings, each=tuple({"model.init_scale": k} for k in INIT_SCALES)),
    init_scale_spread,
    versus="none", pairing="versus - own", words="init-scale robustness vs no norm",
    source=SOURCE,
    statement="LayerNorm makes the MLP robust to its weight initialization (spread: max - min test "
              "accuracy with the hidden weights scaled by 0.5, 1, 2 at init): {rule}, paired.",
              alike={"model.norm": "none"}, role="test", own_test=True)


SPEEDS_CONVERGENCE = Declaration(
    "ld-layernorm-speeds-convergence", Rule("steps(layernorm) / steps(none)", "<", 0.8),
    source=SOURCE,
    statement="LayerNorm speeds up convergence (steps: to 90% accuracy on a running window of 50 "
              "training batches): {rule}.",
    experiment=Experiment(by_norm(MLP, "layernorm", "none"), steps_to_90,
                          combine=steps_ratio), alike={"model.norm": "none"},
                          role="test", own_test=True)


SMALL_BATCH = Declaration(
    "ld-layernorm-small-batch", Rule("test_acc", ">", 0.02),
    source=SOURCE,
    statement="With batch size {train.batch_size}, LayerNorm beats BatchNorm (eval mode, running "
              "statistics) after {train.steps:,} steps: {rule}, paired.",
    experiment=Experiment(by_norm(MLP.changed({"train.batch_size": 4, "train.steps": 2000}),
                                  "layernorm", "batchnorm"), metric(TEST_ACC)),
    alike={"model.norm": "layernorm"}, role="test")


BN_WINS_CNN = Declaration(
    "ld-batchnorm-wins-cnn-large-batch", Rule("test_acc", ">", 0.0),
    source=SOURCE,
    statement="In a CNN with batch {train.batch_size}, BatchNorm beats LayerNorm after "
              "{train.epochs} epoch: {rule}, paired.",
    experiment=Experiment(by_norm(CNN, "batchnorm", "layernorm"), metric(TEST_ACC)),
    slow=("",), alike={"model.norm": "layernorm"},
    role="regression")  # six CNN runs


HELPS_LSTM = Declaration(
    "ld-layernorm-helps-lstm", Rule("val_loss", ">", 0.0),
    source=SOURCE,
    statement="Layer normalization helps a character LSTM (validation loss once trained): {rule}, "
              "paired.",
    experiment=Experiment({"plain": LSTM.changed({"model.norm": "none"}),
                           "LN-LSTM": LSTM.changed({"model.norm": "layernorm"})}, metric(VAL_LOSS)),
    slow=("",), alike={"model.norm": "layernorm"},
    role="test")  # six LSTM runs


BEATS_BN_LSTM = Declaration(
    "ld-layernorm-beats-batchnorm-lstm", Rule("val_loss", ">", 0.0),
    source=SOURCE,
    statement="In a character LSTM, LayerNorm beats BatchNorm (statistics per time step; "
              "validation loss once trained): {rule}, paired.",
    experiment=Experiment({"BN-LSTM": LSTM.changed({"model.norm": "batchnorm"}),
                           "LN-LSTM": LSTM.changed({"model.norm": "layernorm"})}, metric(VAL_LOSS)),
    slow=("",), alike={"model.norm": "layernorm"},
    role="test")  # three more LSTM runs (and the LayerNorm three of the claim above)


BEATS_BN_TRANSFORMER = Declaration(
    "ld-layernorm-beats-batchnorm-transformer", Rule("val_loss", ">", 0.0),
    source=SOURCE,
    statement="In a pre-norm Transformer block (a character LM), LayerNorm beats BatchNorm in both "
              "norm places after {train.steps} steps: {rule}, paired.",
    experiment=Experiment({"BN": TBLOCK_LM.changed({"model.norm": "batchnorm"}),
                           "LN": TBLOCK_LM.changed({"model.norm": "layernorm"})}, metric(VAL_LOSS)),
                           alike={"model.norm": "layernorm"}, role="test")


IMPROVES_ACCURACY = Declaration(
    "ld-layernorm-improves-final-accuracy", Rule("test_acc", ">", 0.0),
    source=SOURCE,
    statement="LayerNorm improves the MLP's final accuracy after {train.epochs} epoch: {rule}, "
              "paired.",
    experiment=Experiment(by_norm(MLP, "layernorm", "none"), metric(TEST_ACC)),
    alike={"model.norm": "none"}, role="test")
