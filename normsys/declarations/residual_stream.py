"""The Pre-LN residual stream, in three papers: Jiang et al. 2023 ("Pre-RMSNorm and Pre-CRMSNorm
Transformers", NeurIPS): a stream kept at zero mean makes LayerNorm and RMSNorm the same function;
Kim et al. 2025 ("Peri-LN"): the stream's variance grows with depth under Pre-LN and stays flat
with a norm on each sublayer's output too; Sun et al. 2025 ("The Curse of Depth in Large Language
Models"): the deep blocks of a Pre-LN model barely change their input, and scaling each norm's
output by 1/sqrt(depth) undoes it.

Every reading is of the trained char GPT (the char_gpt preset: block 64, 4 heads, AdamW 1e-3,
batch 32, 250 steps on Tiny Shakespeare) on a validation batch it never trained on. The deeper
models are 8 blocks: of width 64 trained 250 steps at the CPU tier, of the preset's width 128
trained 1,000 steps at the paper tier.
"""

from __future__ import annotations

import math

import torch
from torch import nn

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic
from normsys.claims.experiments import CHAR_GPT, SEQUENCES
from normsys.claims.verdict import Rule
from normsys.declarations.ln_jacobian import fresh_lm_batch
from normsys.training.config import RunConfig
from normsys.training.models import build_model, capture, prepare_model
from normsys.training.norms import build_norm
from normsys.training.record import trained_model
from normsys.training.tiers import DEFAULT

JIANG = "Jiang et al. 2023 (Pre-RMSNorm Transformers)"
KIM = "Kim et al. 2025 (Peri-LN)"
SUN = "Sun et al. 2025 (curse of depth)"

# ----------------------------------------------------------------------------- Pre-LN = Pre-RMSNorm


def rms_twin(model: nn.Module, cfg: RunConfig) -> nn.Module:
    """The Pre-RMSNorm char GPT computing what the Pre-LN ``model`` computes on a zero-mean
    stream (Jiang et al.'s construction): the same weights, each LayerNorm an RMSNorm of its gain
    and eps, its bias folded into the bias of the Linear it feeds (W (z + b) + c = W z + (W b +
    c)). In ``model``'s dtype."""
    twin = build_model(cfg.override(**{"model.norm": "rmsnorm"}).model)
    state = {k: v.clone() for k, v in model.state_dict().items()}
    feeds = {"ln_1": "attn.qkv", "ln_2": "mlp.0"}  # each block's norms, and the Linear each feeds
    for i, block in enumerate(model.blocks):
        for norm, linear in feeds.items():
            bias = state.pop(f"blocks.{i}.{norm}.bias")
            w = f"blocks.{i}.{linear}"
            state[f"{w}.bias"] = state[f"{w}.bias"] + state[f"{w}.weight"] @ bias
            setattr(twin.blocks[i], norm, build_norm("rmsnorm", cfg.model.d,
                                                     eps=getattr(block, norm).eps))
    bias = state.pop("ln_f.bias")
    state["lm_head.bias"] = state["lm_head.bias"] + state["lm_head.weight"] @ bias
    twin.ln_f = build_norm("rmsnorm", cfg.model.d, eps=model.ln_f.eps)
    twin.to(next(model.parameters()).dtype).load_state_dict(state)
    return twin.eval()


def relative_gap(model: nn.Module, cfg: RunConfig) -> float:
    """log10(max |logits_LN - logits_RMS| / max |logits_LN|) of ``model`` and its ``rms_twin``
    in float64 on a validation batch; a gap below one float64 ulp reads as one ulp."""
    ln = model.double().eval()
    ids, _ = fresh_lm_batch(cfg)
    with torch.no_grad():
        a, b = ln(ids), rms_twin(ln, cfg)(ids)
    gap = ((a - b).abs().max() / a.abs().max()).item()
    return math.log10(max(gap, torch.finfo(torch.float64).eps))


def ln_rms_gaps(records, variant: str = "") -> dict[str, float]:
    """The LN-RMS gap (``relative_gap``) of the run's model at initialization and trained."""
    cfg = records[0].run_config
    return {"at init": relative_gap(prepare_model(cfg), cfg),
            "trained": relative_gap(trained_model(records[0], learning_rule=False), cfg)}


# The char GPT with its stream re-centred (model.recenter), 50 steps.
RECENTRED_GPT = CHAR_GPT.changed({"model.recenter": True, "train.steps": 50})

PRELN_IS_PRERMS = Declaration(
    "jiang-preln-equals-prermsnorm", Rule("log10 LN-RMS gap", "<", -9.0), source=JIANG,
    statement="A Pre-LN char GPT whose residual stream is re-centred (the embedding and every "
              "sublayer's output) computes the same function with RMSNorm in LayerNorm's place, "
              "in float64, at initialization and after {train.steps} steps (gap = max |logits_LN "
              "- logits_RMS| / max |logits_LN|): {rule} at both.",
    experiment=Experiment({"recentred": RECENTRED_GPT}, ln_rms_gaps))


# ----------------------------------------------------------------------------- 8-block char GPT

def deep_gpt(**settings) -> Arm:
    """The char_gpt preset 8 blocks deep with ``settings``: width 128 and 1,000 steps, at the CPU
    tier width 64 and the preset's 250 steps."""
    return Arm("char_gpt", {"model.layers": 8, "train.steps": 1000, **settings},
               at={DEFAULT: {"model.d": 64, "train.steps": 250}})


def stream(records) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    """Each block's input and output on a validation batch, of one run's trained model."""
    model = trained_model(records[0], learning_rule=False)
    names = [f"blocks.{i}" for i in range(len(model.blocks))]
    inputs = {}
    hooks = [model.get_submodule(n).register_forward_pre_hook(
        lambda _m, args, n=n: inputs.__setitem__(n, args[0])) for n in names]
    try:
        with capture(model, names) as outputs, torch.no_grad():
            model(fresh_lm_batch(records[0].run_config)[0])
    finally:
        for h in hooks:
            h.remove()
    return [inputs[n] for n in names], [outputs[n] for n in names]


def variance_growth(records, variant: str = "") -> float:
    """log10(var(last block's output) / var(first block's output)).

    Each token's variance over the hidden dimension, averaged over the batch's tokens."""
    _, outputs = stream(records)
    first, last = (h.var(-1).mean().item() for h in (outputs[0], outputs[-1]))
    return math.log10(last / first)


def deep_block_cosine(records, variant: str = "") -> float:
    """The mean cosine of a block's input and output over the last quarter of the blocks.

    Each token's cosine over the hidden dimension, averaged over the batch's tokens."""
    inputs, outputs = stream(records)
    last = range(len(inputs) - max(1, len(inputs) // 4), len(inputs))
    return sum(torch.cosine_similarity(inputs[i], outputs[i], dim=-1).mean().item()
               for i in last) / len(last)


PRE_LN = deep_gpt()

# Both norm-generic: the scorecard puts each kind N in the 8-block GPT's norms and pairs its
# Pre-LN model with the same model of N under Peri-LN, or with N's outputs depth-scaled.
# Kinds that read the batch are left out (SEQUENCES: in a causal model they read later positions).
PERI_FLATTENS = Statistic(
    "periln_flat_stream", "kim-preln-hidden-state-grows-periln-flat",
    Rule("log10 var growth", ">", 0.5), PRE_LN, variance_growth, claim_arm="pre",
    paired={"model.placement": "peri"}, paired_arm="peri", words="stream variance flatter "
    "under Peri-LN", excludes=SEQUENCES, source=KIM,
    statement="After training, the residual stream's variance grows with depth under Pre-LN and "
              "stays flatter under Peri-LN (a norm on each sublayer's input and output) in a "
              "char GPT of {model.layers} blocks (growth = var(last block) / var(first block)), "
              "paired by seed: {rule}.",
    slow=("",))  # six 8-block char GPTs

SCALING_UNDOES_IDENTITY = Statistic(
    "depth_scaled_blocks", "sun-preln-deep-blocks-near-identity", Rule("cos", ">", 0.0),
    PRE_LN, deep_block_cosine, claim_arm="pre", paired={"model.depth_scaled": True},
    paired_arm="scaled", words="deep blocks less identity-like, depth-scaled",
    excludes=SEQUENCES, source=SUN,
    statement="In a trained Pre-LN char GPT of {model.layers} blocks the deep blocks barely change "
              "their input, and scaling each norm's output by 1/sqrt(depth) undoes it (cos: the "
              "mean cosine of a block's input and output over the last quarter of the blocks), "
              "paired by seed: {rule}.",
    slow=("",))
