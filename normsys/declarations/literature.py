"""Published results a reviewer would check next.

- Xiong et al. 2020: at initialization, post-LN Transformers have gradients that grow toward the
  output; pre-LN ones are flat. Seed encoder with LayerNorm, 6 and 12 blocks, first batch of 64
  AG News sequences; ratio = ||grad of the last block's FFN weights|| / ||the first block's||.
- Dong et al. 2021: pure self-attention (no skips, no MLPs) loses rank doubly exponentially with
  depth; skip connections prevent it. d=64, 32 tokens, single-head, random init, 8 inputs.
- Wu, Ajorlou, Wang, Jegelka and Jadbabaie 2024: in pure attention, rank collapse is exponential;
  a causal or local mask slows it, and LayerNorm admits equilibria of any rank. Dong's stacks,
  with LayerNorm after each attention layer, causal, or local, against the stacks without.
- Zhang & Sennrich 2019 (RMSNorm) and Zhu et al. 2025 (DyT) match LayerNorm: pre-norm char GPT,
  500 steps on Tiny Shakespeare, relative difference of validation loss within +-2%. DyT's
  mechanism (Zhu et al.): a trained LayerNorm's input-output map is tanh-shaped in the deeper
  layers, tokens of extreme scale squashed, read on the same LayerNorm GPTs.
"""

from __future__ import annotations

import math
from dataclasses import replace

import torch
from torch import Tensor, nn

from normsys.claims.declaration import (
    Arm,
    Declaration,
    Experiment,
    Statistic,
    metric,
    relative_difference,
)
from normsys.claims.verdict import Rule
from normsys.declarations.shared.dyt_alphas import dyt_kind
from normsys.declarations.shared.experiments import (
    CHAR_GPT,
    SEQUENCES,
    fresh_lm_batch,
    inputs_to,
)
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig, preset
from normsys.training.record import VAL_LOSS, trained_model
from normsys.training.tiers import DEFAULT

DEPTHS = (6, 12)


# The seed encoder (encoder preset) at initialization: gradients on the first batch of 64 AG News
# sequences, no training.
AT_INIT = {"train.epochs": 0, "train.probe": ()}


def xiong(placement: str, layers: int, seed: int, tier: str = DEFAULT,
          norm: str = "layernorm") -> RunConfig:
    """The encoder at init with ``layers`` blocks and ``placement`` norms of kind ``norm``."""
    return preset("encoder", tier, **{**AT_INIT, "model.norm": norm, "model.placement": placement,
                                      "model.layers": layers, "train.seed": seed})


def ffn_grad_norms(grads: dict[str, float], layers: int) -> list[float]:
    """||grad of block b's FFN weights|| (both Linears) for b = 0 ... layers - 1."""
    return dg.layer_grad_norms(grads, [[f"blocks.{b}.mlp.{i}.weight" for i in (0, 2)]
                                       for b in range(layers)])


def ffn_grad_ratio(grads: dict[str, float], layers: int) -> float:
    """||grad of the last block's FFN weights|| / ||the first block's|| at init."""
    norms = ffn_grad_norms(grads, layers)
    return norms[-1] / norms[0]


PRELN_FLAT = Rule("|log2(last / first)|", "<", 1.0)


def xiong_encoders(placement: str) -> Arm:
    """An arm of one run per depth: the encoder with ``placement`` norms, at init."""
    return Arm("encoder", {**AT_INIT, "model.placement": placement},
               each=tuple({"model.layers": depth} for depth in DEPTHS))


def blocks(record) -> int:
    """The blocks of the encoder a record's run was made of (its config's model.layers)."""
    return RunConfig.from_dict(record.config).model.layers


def depth_ratios(records, variant: str = "") -> dict[str, float]:
    """Per depth, the last / first FFN gradient ratio of one seed's runs."""
    return {f"{blocks(r)} blocks": ffn_grad_ratio(r.init_grad_norms, blocks(r)) for r in records}


def log2_depth_ratios(records, variant: str = "") -> dict[str, float]:
    """Per depth, |log2| of the last / first FFN gradient ratio of one seed's runs."""
    return {depth: abs(math.log2(ratio)) for depth, ratio in depth_ratios(records).items()}


# The norm-generic claims, declared once: their tests decide through these, and each is a
# column of the scorecard (normsys.scorecard) for any norm kind.
PRELN_FLATNESS = Statistic(
    "preln_flat", "xiong-preln-gradients-flat", PRELN_FLAT,
    xiong_encoders("pre"), log2_depth_ratios,
    excludes=SEQUENCES, words="flat pre-norm gradients", source="Xiong et al. 2020",
    statement="At init, pre-LN encoders (6 and 12 blocks) have flat FFN gradients (ratio = last / "
              "first block's): {rule} at both depths.", role="test", own_test=True)
VAL_LOSS_VS_LN = Statistic(
    "val_loss_vs_ln", "rmsnorm-matches-layernorm", Rule("val", "within", (-0.02, 0.02)),
    CHAR_GPT.changed({"train.steps": 500}), metric(VAL_LOSS),
    versus="layernorm", pairing="(own - versus) / versus", versus_arm="LN",
    claim_norm="rmsnorm",
    excludes=SEQUENCES, words="LM loss as LayerNorm's", source="Zhang & Sennrich 2019",
    statement="RMSNorm matches LayerNorm on a pre-norm char GPT: {rule}.", role="test", own_test=True)


POSTLN_GROWS = Declaration(
    "xiong-postln-gradients-grow-toward-output", Rule("last / first FFN grad norm", ">", 2.0),
    source="Xiong et al. 2020",
    statement="At init, post-LN encoders (6 and 12 blocks) have larger FFN gradients in the last "
              "block than in the first: {rule} at both depths.",
    experiment=Experiment({"post-LN": xiong_encoders("post")}, depth_ratios), role="test", own_test=True)


PURE_COLLAPSES = Declaration(
    "dong-pure-attention-rank-collapse", Rule("res(depth 6) / res(depth 0)", "<", 1e-3),
    source="Dong et al. 2021",
    statement="A stack of random self-attention layers without skips or MLPs collapses to rank 1 "
              "(res: relative residual of the best rank-1 fit): {rule}.", role="test", own_test=True)


SKIPS_PREVENT = Declaration(
    "dong-skips-prevent-rank-collapse", Rule("res(depth 6) / res(depth 0)", ">", 0.1),
    source="Dong et al. 2021",
    statement="With skip connections the same stack keeps its rank: {rule}.", role="test", own_test=True)


WU = "Wu et al. 2024 (attention masks and LayerNorm in rank collapse)"
LN_KEEPS_RANK = Declaration(
    "wu-layernorm-keeps-attention-rank", Rule("log10 res ratio(LN) - log10 res ratio(none)", ">", 1.0),
    source=WU,
    statement="In Dong's stack of random self-attention layers without skips or MLPs, LayerNorm "
              "after each layer keeps more than ten times the residual of the stack without it "
              "at depth 6 (res ratio: res(depth 6) / res(depth 0), float32, a ratio below "
              "float32's resolution read as that resolution), paired by seed: {rule}.",
    role="test", own_test=True)


MASK_SLOWS_COLLAPSE = Declaration(
    "wu-causal-mask-slows-attention-rank-collapse",
    Rule("log10 res ratio(causal) - log10 res ratio(full)", ">", 1.0), source=WU,
    statement="In the same stack, a causal mask keeps more than ten times the residual of full "
              "attention at depth 6 (the same res ratio), paired by seed: {rule}.",
    role="test", own_test=True)


WINDOW = 2  # the local mask's reach: each position attends to those at most 2 away

LOCAL_SLOWS_COLLAPSE = Declaration(
    "wu-local-mask-slows-attention-rank-collapse",
    Rule("log10 res ratio(local) - log10 res ratio(full)", ">", 1.0), source=WU,
    statement=f"In the same stack, a local mask (each position attending to those at most "
              f"{WINDOW} away) keeps more than ten times the residual of full attention at depth "
              f"6 (the same res ratio), paired by seed: {{rule}}.",
    role="test", own_test=True)


def tanh_bend(x: Tensor, eps: float = 1e-5) -> float:
    """log10 of the squared error of the best line through the points (x, LN(x)), every token and
    channel of ``x`` (..., d) normalized over its row without gain or bias, over that of the best
    g tanh(a x) + b: > 0 where the map bends as a tanh does. a on a grid of 81 over four decades
    of x's own scale, g and b by least squares for each; as a shrinks the tanh becomes a line, so
    the bend is >= 0 up to the grid."""
    x = x.detach().double().flatten(0, -2)
    y = ((x - x.mean(-1, keepdim=True)) / (x.var(-1, unbiased=False, keepdim=True) + eps).sqrt())
    x, y = x.flatten(), y.flatten()

    def squared_error(feature: Tensor) -> float:
        a = torch.stack([feature, torch.ones_like(feature)], 1)
        fit = a @ torch.linalg.lstsq(a, y[:, None]).solution
        return float((fit[:, 0] - y).pow(2).sum())

    slopes = torch.logspace(-2, 2, 81, dtype=torch.float64) / x.std()
    return math.log10(squared_error(x) / min(squared_error(torch.tanh(a * x)) for a in slopes))


def deeper_bends(model: nn.Module, cfg: RunConfig) -> dict[str, float]:
    """``tanh_bend`` of each LayerNorm of the deeper half of the char GPT ``model``'s blocks, on
    its inputs from a validation batch the model never trained on."""
    names = [f"blocks.{b}.{ln}" for b in range(cfg.model.layers // 2, cfg.model.layers)
             for ln in ("ln_1", "ln_2")]
    with inputs_to(model, names) as inputs, torch.no_grad():
        model(fresh_lm_batch(cfg)[0])
    return {n: tanh_bend(inputs[n]) for n in names}


def least_bend(records, variant: str = "") -> float:
    """The least ``tanh_bend`` over the deeper LayerNorms of one seed's trained char GPT."""
    return min(deeper_bends(trained_model(records[0], learning_rule=False),
                            records[0].run_config).values())


TANH_SHAPED = Declaration(
    "zhu-layernorm-is-tanh-shaped", Rule("log10 SSE line / SSE tanh", ">", 0.3),
    source="Zhu et al. 2025",
    statement="In the trained pre-norm char GPT of rmsnorm-matches-layernorm's LayerNorm arm, "
              "each LayerNorm of the deeper half maps its input to its output (before gain and "
              "bias; every token and channel of a validation batch) along a tanh: g tanh(a x) + b "
              "at least halves the squared error of the best line at each of them ({rule}, the "
              "least of them).",
    experiment=Experiment({"LN": VAL_LOSS_VS_LN.declaration.experiment.arms["LN"]}, least_bend),
    role="regression")  # the source's S-shapes are in far larger, longer-trained models


DYT_MATCHES = replace(VAL_LOSS_VS_LN.declare(
    "dyt", "dyt-matches-layernorm", source="Zhu et al. 2025",
    statement="Dynamic tanh matches LayerNorm on a pre-norm char GPT: {rule}.",
    role="regression"),  # the source's Transformers are far larger and longer trained
    slow=("",), own_test=True)  # three DyT char GPTs


DYT_ALPHAS = (0.1, 0.5, 1.0, 2.0)


def gaps_to_ln(ln: float, *dyts: float) -> dict[str, float]:
    """Per initial alpha, DyT's validation loss relative to LayerNorm's of the same seed."""
    return {f"alpha {a:g}": relative_difference(d, ln) for a, d in zip(DYT_ALPHAS, dyts, strict=True)}


GAP_IS_DYTS = Declaration(
    "zhu-dyt-gap-is-not-its-alpha", Rule("(val(DyT) - val(LN)) / val(LN)", ">", 0.02),
    source="Zhu et al. 2025",
    statement="dyt-matches-layernorm's gap is DyT's, not its initial alpha's: on the same pre-norm "
              "char GPT, DyT started at each alpha of (0.1, 0.5, 1, 2) ends more than 2% above "
              "LayerNorm's validation loss, paired by seed: {rule} at every alpha.",
    experiment=Experiment(
        {"LN": VAL_LOSS_VS_LN.declaration.experiment.arms["LN"],
         **{f"alpha {a:g}": VAL_LOSS_VS_LN.arm.changed({"model.norm": dyt_kind(a)})
            for a in DYT_ALPHAS}},
        metric(VAL_LOSS), combine=gaps_to_ln),
    slow=("",),
    role="regression")  # as dyt-matches-layernorm's: the source's Transformers are far larger
