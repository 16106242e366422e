"""Experiments that more than one place runs, each defined once with what is read of it and the
rule it is judged by: the claim files, and the scorecard (normsys.scorecard), which judges any
norm kind by the same rules.

- the seed encoder of the Dual-Mechanism paper (kappa_6, min rho, test accuracy) and, at init, the
  Xiong et al. gradient profile of its FFNs;
- the deep dive's MLP (hidden-unit correlation, robustness to the initial weight scale);
- the deep tanh MLP of the Transformer-components notebook (also the deep dive's vanishing-gradient
  setting);
- the char GPT of the LayerNorm-Jacobian analysis (also the RMSNorm and DyT comparisons).
"""

from __future__ import annotations

from normsys.claims.stats import Rule
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig, preset
from normsys.training.record import TEST_ACC, RunRecord, probe_of

# ----------------------------------------------------------------------------- seed encoder

# the block outputs the encoder preset probes: blocks 1, 3, 6 (blocks.0, .2, .5)
DM_PROBES = preset("encoder").train.probe


def encoder(norm: str, seed: int, tier: str = "cpu", **changes) -> RunConfig:
    """The seed encoder's run: the encoder preset of the tier (AG News, post-norm, 6 blocks)."""
    return preset("encoder", tier, **{"model.norm": norm, "train.seed": seed, **changes})


def kappa(probes: dict, rows: str = "all") -> float:
    """kappa_6 = erank(block 6) / erank(block 1) of a run's probes (``rows="nonpad"``: without the
    padding positions); NaN for a run without probes (diverged)."""
    if not probes:
        return float("nan")
    return dg.collapse_ratios([probe_of(probes, b, rows)["erank"]
                               for b in (DM_PROBES[0], DM_PROBES[-1])])[1]


def min_rho(probes: dict, rows: str = "all") -> float:
    """min over blocks 1, 3, 6 of erank / d; NaN for a run without probes (diverged)."""
    if not probes:
        return float("nan")
    return min(probe_of(probes, b, rows)["rho"] for b in DM_PROBES)


def prevents_collapse(norm: str) -> Rule:
    return Rule(f"kappa_6({norm})", ">=", 0.8)


def stays_isotropic(norm: str) -> Rule:
    return Rule(f"min_l rho_l({norm})", ">=", 0.5)


def accuracy_matches_layernorm(norm: str) -> Rule:
    return Rule(f"test_acc(layernorm) - test_acc({norm})", "within", (-0.02, 0.02))


def xiong(placement: str, layers: int, seed: int, tier: str = "cpu",
          norm: str = "layernorm") -> RunConfig:
    """The seed encoder (encoder preset), ``layers`` blocks, at initialization: gradients on the
    first batch of 64 AG News sequences, no training."""
    return preset("encoder", tier, **{"model.norm": norm, "model.placement": placement,
                                      "model.layers": layers, "train.seed": seed,
                                      "train.epochs": 0, "train.probe": ()})


def ffn_grad_norms(grads: dict[str, float], layers: int) -> list[float]:
    """||grad of block b's FFN weights|| (both Linears) for b = 0 ... layers - 1."""
    return dg.layer_grad_norms(grads, [[f"blocks.{b}.mlp.{i}.weight" for i in (0, 2)]
                                       for b in range(layers)])


def ffn_grad_ratio(grads: dict[str, float], layers: int) -> float:
    """||grad of the last block's FFN weights|| / ||the first block's|| at init."""
    norms = ffn_grad_norms(grads, layers)
    return norms[-1] / norms[0]


PRELN_FLAT = Rule("|log2(last / first)|", "<", 1.0)

# ----------------------------------------------------------------------------- deep-dive MLP

INIT_SCALES = (0.5, 1.0, 2.0)  # the hidden weights' scale at init, robustness to which is measured


def mlp(norm: str, seed: int, batch_size: int = 64, steps: int = 0, tier: str = "cpu",
        init_scale: float = 1.0) -> RunConfig:
    """The MLP (mlp preset: 784 -> 3 x 256 Linear-norm-ReLU -> 10, Adam 1e-3, 1 epoch or
    ``steps``), its last hidden layer probed on 1,000 fixed training images."""
    return preset("mlp", tier, **{"model.norm": norm, "train.seed": seed,
                                  "train.batch_size": batch_size, "train.steps": steps,
                                  "train.probe": ("layers.2",), "train.probe_batch": 1000,
                                  "model.init_scale": init_scale})


def unit_correlation(record: RunRecord) -> float:
    """Mean |off-diagonal correlation| of the MLP's last hidden layer's units."""
    return probe_of(record.probes, "layers.2")["unit_corr"]


def accuracy_spread(accuracies: list[float]) -> float:
    """max - min test accuracy over the initial weight scales."""
    return max(accuracies) - min(accuracies)


def init_scale_spread(records: list[RunRecord], variant: str = "") -> float:
    """accuracy_spread of one seed's runs at the INIT_SCALES."""
    return accuracy_spread([r.metrics[TEST_ACC] for r in records])


def decorrelates(norm: str) -> Rule:
    return Rule(f"corr(none) - corr({norm})", ">", 0.0)


def robust_to_init(norm: str) -> Rule:
    return Rule(f"spread(none) - spread({norm})", ">", 0.02)

# ----------------------------------------------------------------------------- deep tanh MLP


def tanh_mlp(seed: int, tier: str = "cpu", norm: str = "none",
             residual: bool = False) -> RunConfig:
    """The deep tanh MLP (tanh_mlp preset: d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to
    random targets), measured at initialization; ``norm`` after each layer, ``residual``
    x + f(x)."""
    return preset("tanh_mlp", tier, **{"model.residual": residual, "model.norm": norm,
                                       "train.seed": seed})


def weight_grad_profile(record: RunRecord) -> list[float]:
    """||dL/dW_l|| for l = 1 ... L of the tanh MLP at initialization, L its config's layers."""
    layers = RunConfig.from_dict(record.config).model.layers
    return dg.layer_grad_norms(record.init_grad_norms,
                               [[f"layers.{i}.weight"] for i in range(layers)])


def log10_grad_ratio(records: list[RunRecord], variant: str = "") -> float:
    """log10(||grad W_1|| / ||grad W_10||) of one seed's tanh MLP at initialization."""
    return dg.log10_ratio(weight_grad_profile(records[0]))


def prevents_vanishing(norm: str) -> Rule:
    return Rule(f"log10 ratio({norm}) - log10 ratio(plain)", ">", 1.0)

# ----------------------------------------------------------------------------- char GPT


def char_gpt(seed: int, tier: str = "cpu", norm: str = "layernorm", attention: str = "softmax",
             method: str = "bp", steps: int = 250) -> RunConfig:
    """The LayerNorm-Jacobian analysis's char GPT (char_gpt preset: block 64, 4 layers, 4 heads,
    d=128, pre-norm, AdamW 1e-3, batch 32) trained ``steps`` steps on Tiny Shakespeare."""
    return preset("char_gpt", tier, **{"model.norm": norm, "model.attention": attention,
                                       "train.method": method, "train.seed": seed,
                                       "train.steps": steps})


def relative_difference(a: float, b: float) -> float:
    """(a - b) / b."""
    return (a - b) / b


def loss_matches_layernorm(norm: str) -> Rule:
    """The equivalence rule of a norm against LayerNorm: relative validation-loss gap within 2%."""
    return Rule(f"(val({norm}) - val(LN)) / val(LN)", "within", (-0.02, 0.02))


# BatchNorm's statistics run over the batch and time: in the encoder they take in the padding
# positions, in the causal char GPT the tokens a position must not see; it is measured where the
# deep dive measures it, in the MLPs.
SEQUENCES = frozenset({"batchnorm"})
