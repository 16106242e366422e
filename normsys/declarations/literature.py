"""Published results a reviewer would check next.

- Xiong et al. 2020: at initialization, post-LN Transformers have gradients that grow toward the
  output; pre-LN ones are flat. Seed encoder with LayerNorm, 6 and 12 blocks, first batch of 64
  AG News sequences; ratio = ||grad of the last block's FFN weights|| / ||the first block's||.
- Dong et al. 2021: pure self-attention (no skips, no MLPs) loses rank doubly exponentially with
  depth; skip connections prevent it. d=64, 32 tokens, single-head, random init, 8 inputs.
- Wu, Ajorlou, Wang, Jegelka and Jadbabaie 2024: in pure attention, rank collapse is exponential;
  a causal mask slows it, and LayerNorm admits equilibria of any rank. Dong's stacks, with
  LayerNorm after each attention layer, or causal, against the stacks without.
- Zhang & Sennrich 2019 (RMSNorm) and Zhu et al. 2025 (DyT) match LayerNorm: pre-norm char GPT,
  500 steps on Tiny Shakespeare, relative difference of validation loss within +-2%.
"""

from __future__ import annotations

import math
from dataclasses import replace

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic, metric
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import CHAR_GPT, SEQUENCES
from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig, preset
from normsys.training.record import VAL_LOSS
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


DYT_MATCHES = replace(VAL_LOSS_VS_LN.declare(
    "dyt", "dyt-matches-layernorm", source="Zhu et al. 2025",
    statement="Dynamic tanh matches LayerNorm on a pre-norm char GPT: {rule}.",
    role="regression"),  # the source's Transformers are far larger and longer trained
    slow=("",), own_test=True)  # three DyT char GPTs
