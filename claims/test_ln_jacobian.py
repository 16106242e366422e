"""LayerNorm-Jacobian analysis on a char GPT (block 64, 4 layers, 4 heads, d=128, pre-LN) trained
250 steps on Tiny Shakespeare with batch 32.

At every LayerNorm, on a fresh validation batch, we capture the input x, the gain and the dL/dout
that the model's own backward pass delivers, and compare the analytic input gradient
(g_z - mean(g_z) - z mean(g_z z)) / sigma with autograd's, and with its surrogates.
"""

from __future__ import annotations

import pytest

from normsys.experiments import (
    char_gpt_config,
    fresh_lm_batch,
    layernorm_gradients,
    ln_decomposition_summary,
    ln_vjp_errors,
)
from normsys.plugin import tiers
from normsys.stats import Rule
from normsys.train import trained_model

SOURCE = "LayerNorm-Jacobian analysis (char GPT, Tiny Shakespeare)"


def captures_of(run, cfg):
    record = run(cfg)
    model = trained_model(record)  # FA nets keep their own backward: the analysis is of it
    return layernorm_gradients(model, *fresh_lm_batch(cfg))


ANALYTIC_MATCHES = Rule("max_LN rel. error", "<", 1e-4)


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("lj-analytic-matches-autograd", source=SOURCE,
                   statement=f"The analytic LayerNorm input gradient equals autograd's at every "
                             f"LayerNorm of a trained model (fp32): {ANALYTIC_MATCHES}.")
def test_analytic_matches_autograd(claim, run, tier):
    per_seed = [ln_vjp_errors(captures_of(run, char_gpt_config(s, tier=tier)))
                for s in claim.seeds]
    claim.record(errors_per_layernorm=per_seed, layernorms=len(per_seed[0]))
    claim.check([max(e) for e in per_seed], ANALYTIC_MATCHES)


COSTS_MORE_WITH_SOFTMAX = Rule("cos_cs(sigmoid) - cos_cs(softmax)", ">", 0.0)


# six 250-step FA char GPTs (~290 s of compute, ~2.5 min on 2 cores)
@pytest.mark.parametrize("tier", tiers(cpu=[pytest.mark.slow]))
@pytest.mark.claim("lj-center-scale-costs-more-with-softmax", source=SOURCE,
                   statement=f"Under feedback alignment, the center-and-scale surrogate is closer "
                             f"to the true LayerNorm gradient with sigmoid than with softmax "
                             f"attention: {COSTS_MORE_WITH_SOFTMAX}, paired by seed.")
def test_center_scale_costs_more_with_softmax(claim, run, tier):
    summaries = {att: [ln_decomposition_summary(captures_of(
        run, char_gpt_config(s, attention=att, method="fa", tier=tier))) for s in claim.seeds]
        for att in ("sigmoid", "softmax")}
    claim.record(**{f"{key}_{att}": [round(s[key], 5) for s in summaries[att]]
                    for att in summaries for key in summaries[att][0]})
    claim.check_paired([s["cos_center_scale"] for s in summaries["sigmoid"]],
                       [s["cos_center_scale"] for s in summaries["softmax"]],
                       COSTS_MORE_WITH_SOFTMAX)
