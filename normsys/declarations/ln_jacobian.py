"""LayerNorm-Jacobian analysis on a char GPT (block 64, 4 layers, 4 heads, d=128, pre-LN) trained
250 steps on Tiny Shakespeare with batch 32 (at the CPU tier d=64, batch 16, block 32).

At every LayerNorm, on a fresh validation batch, we capture the input x, the gain and the dL/dout
that the model's own backward pass delivers, and compare the analytic input gradient
(g_z - mean(g_z) - z mean(g_z z)) / sigma with autograd's, and with its surrogates.
"""

from __future__ import annotations

from normsys.claims.declaration import Arm, Declaration, Experiment
from normsys.claims.verdict import Rule
from normsys.declarations.shared.experiments import CHAR_GPT, fresh_lm_batch
from normsys.declarations.shared.protocol import (
    layernorm_gradients,
    ln_decomposition_summary,
    ln_vjp_errors,
)
from normsys.training.record import trained_model

SOURCE = "LayerNorm-Jacobian analysis (char GPT, Tiny Shakespeare)"


def captures_of(record):
    """At every LayerNorm of the trained model, on a fresh batch: what its backward receives."""
    model = trained_model(record)  # FA nets keep their own backward: the analysis is of it
    return layernorm_gradients(model, *fresh_lm_batch(record.run_config))


def gpt(attention: str, method: str) -> Arm:
    """The char GPT (250 steps) with ``attention``, trained by ``method``."""
    return CHAR_GPT.changed({"model.attention": attention, "train.method": method})


def max_vjp_error(records, variant: str = "") -> float:
    """The largest relative error of the analytic input gradient over the model's LayerNorms."""
    return max(ln_vjp_errors(captures_of(records[0])))


def cos_center_scale(records, variant: str = "") -> float:
    """Mean over LayerNorms of the cosine of the center-and-scale surrogate with the true
    gradient (g_z = gain * dL/dout)."""
    return ln_decomposition_summary(captures_of(records[0]))["cos_center_scale"]


ANALYTIC_MATCHES = Declaration(
    "lj-analytic-matches-autograd", Rule("max_LN rel. error", "<", 1e-4),
    source=SOURCE,
    statement="The analytic LayerNorm input gradient equals autograd's at every LayerNorm of a "
              "trained model (fp32): {rule}.",
    experiment=Experiment({"bp": gpt("softmax", "bp")}, max_vjp_error), role="identity", own_test=True)


COSTS_MORE_WITH_SOFTMAX = Declaration(
    "lj-center-scale-costs-more-with-softmax", Rule("cos_cs", ">", 0.0),
    source=SOURCE,
    statement="Under feedback alignment, the center-and-scale surrogate is closer to the true "
              "LayerNorm gradient with sigmoid than with softmax attention: {rule}, paired by seed.",
    experiment=Experiment({att: gpt(att, "fa") for att in ("sigmoid", "softmax")},
                          cos_center_scale),
    slow=("",),
    alike={"model.attention": "softmax"},
    role="regression",  # six 250-step FA char GPTs (~290 s of compute, ~2.5 min on 2 cores)
    own_test=True)
