"""Experiments that more than one claim file runs, each defined once: the deep tanh MLP of the
Transformer-components notebook (also the deep dive's vanishing-gradient setting) and the char GPT
of the LayerNorm-Jacobian analysis (also the RMSNorm and DyT comparisons), with what the claims
read of them."""

from __future__ import annotations

from normsys import diagnostics as dg
from normsys.config import RunConfig, preset
from normsys.record import RunRecord


def tanh_mlp(seed: int, tier: str = "cpu", norm: str = "none",
             residual: bool = False) -> RunConfig:
    """The deep tanh MLP (tanh_mlp preset: d=64, 10 layers tanh(Linear(d, d)), batch 32, MSE to
    random targets), measured at initialization; ``norm`` after each layer, ``residual``
    x + f(x)."""
    return preset("tanh_mlp", tier, **{"model.residual": residual, "model.norm": norm,
                                       "train.seed": seed})


def weight_grad_profile(record: RunRecord, layers: int = 10) -> list[float]:
    """||dL/dW_l|| for l = 1 ... L of the tanh MLP at initialization."""
    return dg.layer_grad_norms(record.init_grad_norms,
                               [[f"layers.{i}.weight"] for i in range(layers)])


def char_gpt(seed: int, tier: str = "cpu", norm: str = "layernorm", attention: str = "softmax",
             method: str = "bp", steps: int = 250) -> RunConfig:
    """The LayerNorm-Jacobian analysis's char GPT (char_gpt preset: block 64, 4 layers, 4 heads,
    d=128, pre-norm, AdamW 1e-3, batch 32) trained ``steps`` steps on Tiny Shakespeare."""
    return preset("char_gpt", tier, **{"model.norm": norm, "model.attention": attention,
                                       "train.method": method, "train.seed": seed,
                                       "train.steps": steps})
