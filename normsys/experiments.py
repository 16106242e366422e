"""The original experiments as configs per tier, and the statistics that claims compute from runs.

Claims and their negative controls import these, so a statistic is defined once. Tier ``cpu`` is
the CI-sized setting fixed with each claim's rule; tier ``paper`` is SPEC.md's paper setting on a GPU.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from normsys import diagnostics as dg
from normsys.config import RunConfig, preset
from normsys.norms import LayerNorm, layer_norm_vjp
from normsys.record import RunRecord

DM_PROBES = ("blocks.0", "blocks.2", "blocks.5")  # blocks 1, 3, 6 (1-indexed block outputs)


# ----------------------------------------------------------------------------- configs


def encoder_config(norm: str, seed: int, tier: str = "cpu", **changes) -> RunConfig:
    """Dual-Mechanism Exp. 4: CPU tier (AG News 6,000/1,600, d=64, 64 tokens, 4 epochs) or paper."""
    base = "encoder" if tier == "cpu" else "encoder-paper"
    return preset(base, **{"model.norm": norm, "train.seed": seed, **changes})


def tanh_mlp_config(residual: bool, seed: int, norm: str = "none", tier: str = "cpu") -> RunConfig:
    """Deep tanh MLP (d=64, 10 layers, batch 32, MSE to random targets), gradients at init."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("tanh_mlp", **{"model.residual": residual, "model.norm": norm,
                                 "train.seed": seed, "train.device": device})


def char_gpt_config(seed: int, attention: str = "softmax", method: str = "bp", tier: str = "cpu",
                    steps: int = 250, norm: str = "layernorm") -> RunConfig:
    """Char GPT of the LN-Jacobian analysis on Tiny Shakespeare, batch 32."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("char_gpt", **{"model.attention": attention, "train.method": method,
                                 "train.seed": seed, "train.steps": steps, "model.norm": norm,
                                 "train.device": device})


def fa_mlp_config(method: str, seed: int, tier: str = "cpu", frozen: bool = False,
                  epochs: int = 2) -> RunConfig:
    """FA protocol: pre-LN residual MLP on MNIST (784 -> 256, 4 blocks LN-256x512-GELU-512x256),
    Adam 1e-3, batch 128, 2 epochs; ``frozen``: the frozen-blocks baseline (blocks fixed at init;
    embed, out_ln and head trained by ``method``)."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("resmlp", **{"train.method": method, "train.frozen_blocks": frozen,
                               "train.seed": seed, "train.epochs": epochs,
                               "train.device": device})


# ----------------------------------------------------------------------------- dual mechanism


def erank(probes: dict, layer: str, rows: str = "all") -> float:
    """Effective rank at a probed layer; ``rows="nonpad"`` leaves the padding positions out."""
    probe = probes[layer]
    return probe["erank"] if rows == "all" else probe[rows]["erank"]


def kappa(probes: dict, layer: str = "blocks.5", first: str = "blocks.0",
          rows: str = "all") -> float:
    """kappa_l = erank(block l) / erank(block 1) of a run's probes (train.probe); NaN for a run
    without probes (diverged)."""
    if not probes:
        return math.nan
    return dg.collapse_ratios([erank(probes, first, rows), erank(probes, layer, rows)])[1]


def min_rho(probes: dict, layers=DM_PROBES, rows: str = "all") -> float:
    """min over probed blocks of erank / d; NaN for a run without probes (diverged)."""
    if not probes:
        return math.nan
    return min((probes[name] if rows == "all" else probes[name][rows])["rho"] for name in layers)


def generalization_gap(record: RunRecord) -> float:
    return record.metrics["train_acc"] - record.metrics["test_acc"]


# ----------------------------------------------------------------------------- notebooks, deep dive


def ffn_stack_config(residual: bool, norm: str, seed: int, tier: str = "cpu") -> RunConfig:
    """FFN stack: 4 x [pre-LN] Linear(128, 512)-GELU-Linear(512, 128) [+ residual], 100 steps of
    Adam 1e-3 on fresh random data (seq 32, batch 16), MSE."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("ffn_stack", **{"model.residual": residual, "model.norm": norm,
                                  "train.seed": seed, "train.device": device})


def mlp_config(norm: str, seed: int, batch_size: int = 64, steps: int = 0,
               tier: str = "cpu", init_scale: float = 1.0) -> RunConfig:
    """Deep-dive MLP on MNIST: 3 hidden layers of 256 (Linear -> norm -> ReLU), Adam 1e-3, 1 epoch
    (or ``steps``); the last hidden layer is probed on 1,000 fixed training images;
    ``init_scale`` multiplies the hidden layers' initial weights."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("mlp", **{"model.norm": norm, "train.seed": seed, "train.batch_size": batch_size,
                            "train.steps": steps, "train.probe": ("layers.2",),
                            "train.probe_batch": 1000, "train.device": device,
                            "model.init_scale": init_scale})


def cnn_config(norm: str, seed: int, tier: str = "cpu") -> RunConfig:
    """Deep-dive CNN: 3 x conv3x3 (32, 64, 64 channels) -> norm -> ReLU -> maxpool, batch 128,
    1 epoch of MNIST."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("cnn", **{"model.norm": norm, "train.seed": seed, "train.device": device})


def lstm_config(norm: str, seed: int, tier: str = "cpu") -> RunConfig:
    """Char-level LSTM (1 layer, hidden 256) on Tiny Shakespeare, 1,000 steps; norm layernorm is
    the layer-normalized LSTM of Ba et al. 2016, none the plain LSTM (same cell code)."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("lstm", **{"model.norm": norm, "train.seed": seed, "train.device": device})


def tblock_lm_config(norm: str, seed: int, tier: str = "cpu") -> RunConfig:
    """One pre-norm Transformer block as a character LM on Tiny Shakespeare: d=64, 4 heads,
    context 64, batch 32, Adam 1e-3, 500 steps; ``norm`` in both of the block's norm places and
    in the final norm before the head."""
    device = "auto" if tier == "paper" else "cpu"
    return preset("char_gpt", **{"model.norm": norm, "model.layers": 1, "model.d": 64,
                                 "model.heads": 4, "model.seq_len": 64, "train.batch_size": 32,
                                 "train.optimizer": "adam", "train.lr": 1e-3, "train.steps": 500,
                                 "train.seed": seed, "train.device": device})


def steps_to_accuracy(batch_acc: list[float], target: float = 0.9, window: int = 50) -> float:
    """First step at which the mean accuracy of the last ``window`` training batches reaches
    ``target`` (NaN if never)."""
    acc = torch.tensor(batch_acc, dtype=torch.float64)
    if len(acc) < window:
        return math.nan
    running = acc.unfold(0, window, 1).mean(1)  # running[i] covers steps i+1 ... i+window
    hit = torch.nonzero(running >= target).flatten()
    return float(hit[0] + window) if len(hit) else math.nan


def relative_difference(a: float, b: float) -> float:
    """(a - b) / b."""
    return (a - b) / b


# ----------------------------------------------------------------------------- literature


def xiong_config(placement: str, layers: int, seed: int, tier: str = "cpu") -> RunConfig:
    """The seed encoder with LayerNorm at initialization (no training): gradients on the first
    batch of 64 AG News sequences."""
    return encoder_config("layernorm", seed, tier, **{"model.placement": placement,
                                                      "model.layers": layers, "train.epochs": 0,
                                                      "train.probe": ()})


def ffn_grad_norms(grads: dict[str, float], layers: int) -> list[float]:
    """||grad of block b's FFN weights|| (both Linears) for b = 0 ... layers - 1, from a run's
    init_grad_norms."""
    return [math.sqrt(sum(grads[f"blocks.{b}.mlp.{i}.weight"] ** 2 for i in (0, 2)))
            for b in range(layers)]


def ffn_grad_ratio(grads: dict[str, float], layers: int) -> float:
    """||grad of the last block's FFN weights|| / ||the first block's|| at init."""
    norms = ffn_grad_norms(grads, layers)
    return norms[-1] / norms[0]


def attention_stack_residuals(seed: int, depth: int = 6, skips: bool = False, d: int = 64,
                              tokens: int = 32, batch: int = 8, heads: int = 1) -> list[float]:
    """Dong et al. 2021: randomly initialized self-attention layers without MLPs; the relative
    rank-collapse residual ||X - 1 x^T|| / ||X|| at depths 0 ... depth (skips: X + SA(X))."""
    from normsys.models import Attention

    torch.manual_seed(seed)
    layers = [Attention(d, heads) for _ in range(depth)]
    x = torch.randn(batch, tokens, d, generator=torch.Generator().manual_seed(seed + 1))
    residuals = [dg.rank_collapse_residual(x)]
    with torch.no_grad():
        for layer in layers:
            x = x + layer(x) if skips else layer(x)
            residuals.append(dg.rank_collapse_residual(x))
    return residuals


# ----------------------------------------------------------------------------- gradients at init


def weight_grad_profile(record: RunRecord, layers: int = 10) -> list[float]:
    """||dL/dW_l|| for l = 1 ... L of the tanh MLP at initialization."""
    return [record.init_grad_norms[f"layers.{i}.weight"] for i in range(layers)]


def log_grad_ratio(profile: list[float]) -> float:
    """log10(||grad W_1|| / ||grad W_L||)."""
    return math.log10(profile[0] / profile[-1])


# ----------------------------------------------------------------------------- LN Jacobian


def layernorm_gradients(model: nn.Module, x: Tensor, y: Tensor) -> list[dict]:
    """At every LayerNorm: its input, gain, eps and the dL/dout that the model's own backward pass
    (BP, or FA for an FA-trained model) delivers, on batch (x, y)."""
    lns = [(name, m) for name, m in model.named_modules() if isinstance(m, LayerNorm)]
    captured: dict[str, dict] = {}

    def hook(name):
        def fn(module, inputs, output):
            captured[name] = {"x": inputs[0].detach(), "module": module}
            output.register_hook(lambda g: captured[name].__setitem__("grad_out", g.detach()))
        return fn

    handles = [m.register_forward_hook(hook(name)) for name, m in lns]
    try:
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(x)
        loss = nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1))
        loss.backward()
    finally:
        for h in handles:
            h.remove()
    return [{"name": n, **captured[n]} for n, _ in lns]


def ln_vjp_errors(captures: list[dict], drop_radial: bool = False) -> list[float]:
    """||analytic - autograd|| / ||autograd|| of each LayerNorm's input gradient (fp32).

    ``drop_radial`` uses the formula without its radial term (the negative control).
    """
    errors = []
    for c in captures:
        m, x, g = c["module"], c["x"], c["grad_out"]
        x_ = x.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(m(x_), x_, g)
        analytic = layer_norm_vjp(x, g, m.weight.detach(), m.eps, radial=not drop_radial)
        errors.append(float((analytic - auto).norm() / auto.norm()))
    return errors


def ln_decomposition_summary(captures: list[dict]) -> dict[str, float]:
    """Means over LayerNorms of the center-and-scale and identity cosines, r_mean, r_radial."""
    decs = [dg.ln_jacobian_decomposition(c["x"], c["grad_out"], c["module"].weight, c["module"].eps)
            for c in captures]
    mean = lambda key: sum(getattr(d, key) for d in decs) / len(decs)  # noqa: E731
    return {k: mean(k) for k in ("cos_center_scale", "cos_identity", "r_mean", "r_radial")}


def fresh_lm_batch(cfg: RunConfig, seed: int = 12_345) -> tuple[Tensor, Tensor]:
    """A validation batch the model never trained on."""
    from normsys.data import tiny_shakespeare
    from normsys.train import lm_batch

    _, val, _ = tiny_shakespeare()
    return lm_batch(val, cfg.model.seq_len, cfg.train.batch_size,
                    torch.Generator().manual_seed(seed))


# ----------------------------------------------------------------------------- FA protocol


def fa_protocol(record: RunRecord, n_batches: int = 8, size: int = 128) -> dict:
    """The protocol report of a trained FA-protocol model on disjoint MNIST test batches. The
    protocol measures the backprop gradient of whatever net it is given, so the weights are loaded
    into a plain model: an FA-trained net is measured through W^T, not its feedback matrices."""
    from normsys.train import trained_model

    return protocol_report(trained_model(record, learning_rule=False), n_batches, size)


def protocol_report(model: nn.Module, n_batches: int = 8, size: int = 128) -> dict:
    """The FA protocol's report of ``model`` on the first disjoint MNIST test batches."""
    from normsys.data import mnist
    from normsys.protocol import disjoint_batches, fa_protocol_report

    split = mnist()
    return fa_protocol_report(model, disjoint_batches(split.x_test, split.y_test, n_batches, size))
