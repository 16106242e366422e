"""The experiments that more than one claim file runs, each defined once: the run of one seed
and, where both read it alike, what is read of it. What only one claim reads, and every claim's
rule, sits in that claim's file.

- the deep tanh MLP of the Transformer-components notebook (also the deep dive's vanishing-gradient
  setting) and its per-layer gradient profile;
- the char GPT of the LayerNorm-Jacobian analysis (also the RMSNorm and DyT comparisons), the
  validation batch its readings take, and the inputs its submodules take on it.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch
from torch import Tensor, nn

from normsys.claims.declaration import Arm
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig
from normsys.training.data import tiny_shakespeare
from normsys.training.norms import NORMS
from normsys.training.record import RunRecord
from normsys.training.tasks import lm_batch

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


def fresh_lm_batch(cfg, seed: int = 12_345):
    """A validation batch the model never trained on."""
    _, val, _ = tiny_shakespeare()
    return lm_batch(val, cfg.model.seq_len, cfg.train.batch_size,
                    torch.Generator().manual_seed(seed))


@contextmanager
def inputs_to(model: nn.Module, names: Sequence[str]) -> Iterator[dict[str, Tensor]]:
    """The input each submodule of ``model`` named in ``names`` takes during forward passes
    inside the block (normsys.training.models.capture holds their outputs); the hooks removed on
    exit, also when the block raises."""
    seen: dict[str, Tensor] = {}
    hooks = [model.get_submodule(n).register_forward_pre_hook(
        lambda _m, args, n=n: seen.__setitem__(n, args[0])) for n in names]
    try:
        yield seen
    finally:
        for hook in hooks:
            hook.remove()


# The kinds whose statistics run across the batch (NormKind.per_row False: BatchNorm), over the
# batch and time in a sequence model: in the encoder they take in the padding positions, in the
# causal char GPT the tokens a position must not see; they are measured where the deep dive
# measures them, in the MLPs.
SEQUENCES = frozenset(name for name, kind in NORMS.items() if not kind.per_row)
