"""Dehghani et al. 2023 and Wortsman et al. 2024 ("Small-scale proxies for large-scale Transformer
training instabilities", ICLR): at a high learning rate the largest attention logit grows during
training without qk-layernorm and stays bounded with it, and qk-layernorm makes the final loss
less sensitive to the learning rate.

The Pre-LN char GPT (the char_gpt preset: block 64, 4 blocks, 4 heads, batch 32 on Tiny
Shakespeare) trained by AdamW with betas (0.9, 0.95) and no weight decay, with and without a
LayerNorm on each head's queries and keys (model.qk_norm); 125 steps at the CPU tier (the
preset's width 64, batch 16, block 32 there), the preset's width 128 and 1,000 steps at the paper
tier. Both claims are norm-generic: scorecard columns with each kind as the qk-norm.

Against a logit softcap (Gemma 2's c tanh(s / c) on each logit, c = 50; Rybakov et al. 2024): the
same sweep of the same GPTs with a linear warm-up over the first 5% of their steps, as Wortsman et
al.'s runs have (train.warmup), in four arms: plain, qk-layernorm, softcap, and both. Does the
softcap lower the learning-rate sensitivity; does the qk-norm still lower it under the softcap
(norm-generic: a scorecard column); does the qk-norm lower it more than the softcap (Gemma 3 took
the qk-norm in the softcap's place); and does the warm-up itself lower it (Wortsman et al.)?
"""

from __future__ import annotations

import math

import torch

from normsys.claims.declaration import Arm, Declaration, Experiment, Statistic
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import SEQUENCES, fresh_lm_batch, inputs_to
from normsys.training.record import INIT_LOSS, VAL_LOSS, trained_model
from normsys.training.tiers import DEFAULT

SOURCE = "Wortsman et al. 2024 (small-scale proxies, qk-layernorm)"
HIGH_LR = 1e-2
SWEEP = (1e-3, 1e-2, 1e-1)  # the learning rates of the sensitivity sweep
# the GPTs' steps: the original experiment's; the CPU tier's, half the preset's 250, for cost
# alone (at 250 the sweeps with their controls were a fifth of the tier's)
STEPS, CPU_STEPS = 1000, 125
SOFTCAP = 50.0  # Gemma 2's cap on the attention logits
WARMUP = 0.05  # the warm-up's share of a run's steps (Wortsman et al.: 5% of them)


def gpt(qk_norm: str, **settings) -> Arm:
    """The char GPT with ``qk_norm`` ("none": without), AdamW (0.9, 0.95), no decay."""
    return Arm("char_gpt", {"model.qk_norm": qk_norm, "train.beta2": 0.95,
                            "train.weight_decay": 0.0, "train.steps": STEPS, **settings},
               at={DEFAULT: {"train.steps": CPU_STEPS}})


def max_attention_logit(records, variant: str = "") -> float:
    """``largest_logit`` of the run's trained model."""
    return largest_logit(trained_model(records[0], learning_rule=False), records[0].run_config)


def largest_logit(model, cfg) -> float:
    """log10 of the largest |q.k| / sqrt(d_head) over the blocks, heads and the (causal) pairs of
    positions a validation batch attends over: the queries and keys as the model's attention
    forms them, after its qk-norm where it has one."""
    names = [f"blocks.{i}.attn" for i in range(len(model.blocks))]
    with inputs_to(model, names) as seen, torch.no_grad():
        model(fresh_lm_batch(cfg)[0])
    top = 0.0
    with torch.no_grad():
        for name, block in zip(names, model.blocks, strict=True):
            attn, x = block.attn, seen[name]
            b, t, c = x.shape
            q, k, _ = (z.view(b, t, attn.heads, c // attn.heads).transpose(1, 2)
                       for z in attn.qkv(x).split(c, dim=-1))
            if attn.q_norm is not None:
                q, k = attn.q_norm(q), attn.k_norm(k)
            logits = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
            causal = torch.ones(t, t, dtype=torch.bool).tril()
            top = max(top, logits.abs().masked_fill(~causal, 0).max().item())
    return math.log10(top)


# Each is norm-generic: the scorecard puts each kind N on the queries and keys (model.qk_norm) of
# the claim's models, paired by seed with the same models without a qk-norm; kinds that read the
# batch are left out (SEQUENCES: on a causal model's keys they read later positions).

QK_LOGIT_BOUND = Statistic(
    "qk_logit_bound", "wortsman-qknorm-bounds-attention-logits", Rule("log10 maxlogit", ">", 0.5),
    gpt("layernorm", **{"train.lr": HIGH_LR}), max_attention_logit, versus="none",
    pairing="versus - own", versus_arm="plain", claim_arm="qk-norm", setting="model.qk_norm",
    words="attention logits bounded by the qk-norm", excludes=SEQUENCES, source=SOURCE,
    statement="At learning rate {train.lr}, the largest attention logit of a Pre-LN char GPT "
              "grows without qk-layernorm and stays bounded with it (maxlogit: the largest |q.k| "
              "/ sqrt(d_head) over blocks and heads on a validation batch after training), paired "
              "by seed: {rule}.",
    slow=("",), role="test")  # six char GPTs


def lr_sensitivity(records, variant: str = "") -> float:
    """Learning-rate sensitivity (Wortsman et al.) of one seed's sweep.

    The mean over learning rates of min(loss(lr), loss at init) - the best loss of the sweep.
    The loss is the validation loss; a diverged run counts as the loss at init (its training loss
    at step 0, the same model at every rate)."""
    init = records[0].metrics[INIT_LOSS]
    losses = [min(init, r.metrics[VAL_LOSS]) if not r.diverged and
              math.isfinite(r.metrics[VAL_LOSS]) else init for r in records]
    return sum(losses) / len(losses) - min(losses)


QK_LR_SENSITIVITY = Statistic(
    "qk_lr_sensitivity", "wortsman-qknorm-lowers-lr-sensitivity", Rule("sensitivity", ">", 0.0),
    Arm("char_gpt", gpt("layernorm").settings, tuple({"train.lr": lr} for lr in SWEEP),
        at=gpt("layernorm").at),
    lr_sensitivity, versus="none", pairing="versus - own", versus_arm="plain", claim_arm="qk-norm",
    setting="model.qk_norm", reads_diverged=True, words="learning-rate sensitivity lowered by the "
    "qk-norm", excludes=SEQUENCES, source=SOURCE,
    statement="qk-layernorm makes a Pre-LN char GPT's final loss less sensitive to the learning "
              "rate (sensitivity over learning rates 1e-3, 1e-2 and 1e-1: the mean of min(loss, "
              "loss at init) minus the best loss of the sweep), paired by seed: {rule}.",
    slow=("",), alike={"model.qk_norm": "layernorm"},
    role="test")  # eighteen char GPTs, six of them QK_LOGIT_BOUND's


# qk-norm against a logit softcap: the sweep above with a warm-up, in four arms (none of them
# reads the batch's other rows, so every built-in kind but SEQUENCES' can be the qk-norm)

SOFTCAP_SOURCE = "Gemma Team 2024 (Gemma 2's logit softcap); Rybakov et al. 2024"


def warmed(qk_norm: str, softcap: float = 0.0) -> Arm:
    """The sensitivity sweep of the GPT with ``qk_norm``, its logits capped at ``softcap`` (0:
    not), and a linear warm-up over the first WARMUP of its steps at every tier."""
    return Arm("char_gpt", {**gpt(qk_norm).settings, "model.softcap": softcap,
                            "train.warmup": int(WARMUP * STEPS)},
               tuple({"train.lr": lr} for lr in SWEEP),
               at={DEFAULT: {"train.steps": CPU_STEPS, "train.warmup": int(WARMUP * CPU_STEPS)}})


SENSITIVITY = "sensitivity"  # each claim's rule: on the per-seed difference of two sweeps' values
RATES = [f"1e{round(math.log10(lr))}" for lr in SWEEP]  # as written: 1e-3
WARMED_SWEEP = (f"the sensitivity over learning rates {', '.join(RATES[:-1])} and {RATES[-1]}, "
                f"each run with a linear warm-up over {WARMUP:.0%} of its steps")
CAPPED = {"model.qk_norm": "none", "model.softcap": SOFTCAP}  # both arms the softcap's alone


def lowers_sensitivity(cid: str, source: str, statement: str, arms: dict[str, Arm],
                       alike: dict) -> Declaration:
    """A claim that the second arm's sweep is less sensitive to the learning rate than the
    first's, paired by seed: sensitivity(first) - sensitivity(second) > 0."""
    return Declaration(
        cid, Rule(SENSITIVITY, ">", 0.0), source, statement,
        experiment=Experiment(arms, lr_sensitivity, reads_diverged=True), slow=("",),
        role="test", alike=alike)


SOFTCAP_LOWERS_SENSITIVITY = lowers_sensitivity(
    "softcap-lowers-lr-sensitivity", SOFTCAP_SOURCE,
    f"A tanh softcap of {SOFTCAP:g} on the attention logits makes a Pre-LN char GPT's final loss "
    f"less sensitive to the learning rate ({WARMED_SWEEP}), paired by seed: {{rule}}.",
    {"plain": warmed("none"), "softcap": warmed("none", SOFTCAP)}, alike=CAPPED)

QK_LR_SENSITIVITY_CAPPED = Statistic(
    "qk_lr_sensitivity_capped", "qknorm-lowers-lr-sensitivity-under-softcap",
    Rule(SENSITIVITY, ">", 0.0), warmed("layernorm", SOFTCAP), lr_sensitivity, versus="none",
    pairing="versus - own", versus_arm="softcap", claim_arm="qk-norm + softcap",
    setting="model.qk_norm", reads_diverged=True,
    words="learning-rate sensitivity lowered by the qk-norm under a softcap", excludes=SEQUENCES,
    source=SOFTCAP_SOURCE,
    statement=f"Under a tanh softcap of {SOFTCAP:g} on its attention logits, qk-layernorm still "
              f"makes a Pre-LN char GPT's final loss less sensitive to the learning rate "
              f"({WARMED_SWEEP}), paired by seed: {{rule}}.",
    slow=("",), alike={"model.qk_norm": "none"}, role="test")

QK_BEATS_SOFTCAP = lowers_sensitivity(
    "qknorm-lowers-lr-sensitivity-more-than-softcap", "Gemma Team 2025 (Gemma 3 took qk-norm in "
    "the softcap's place)",
    f"qk-layernorm makes a Pre-LN char GPT's final loss less sensitive to the learning rate than "
    f"a tanh softcap of {SOFTCAP:g} on its attention logits does ({WARMED_SWEEP}), paired by "
    "seed: {rule}.",
    {"softcap": warmed("none", SOFTCAP), "qk-norm": warmed("layernorm")}, alike=CAPPED)

WARMUP_LOWERS_SENSITIVITY = lowers_sensitivity(
    "wortsman-warmup-lowers-lr-sensitivity", SOURCE,
    f"A linear warm-up over the first {WARMUP:.0%} of the steps makes a Pre-LN char GPT's final "
    f"loss less sensitive to the learning rate ({WARMED_SWEEP.partition(', each')[0]}), paired by "
    "seed: {rule}.",
    {"no warm-up": QK_LR_SENSITIVITY.arm.changed({"model.qk_norm": "none"}),
     "warm-up": warmed("none")},
    alike={**CAPPED, "train.warmup": int(WARMUP * CPU_STEPS)})  # one warm-up in both, at any tier
