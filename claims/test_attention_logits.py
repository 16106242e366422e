"""qk-layernorm and the attention logits (Wortsman et al. 2024): negative controls. The claims,
their models and readings are declared in normsys.declarations.attention_logits and decided in
test_declared.py."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from normsys.claims.testing import unread_seeds
from normsys.claims.verdict import REFUTED, SUPPORTED
from normsys.declarations.attention_logits import QK_LOGIT_BOUND, QK_LR_SENSITIVITY, largest_logit
from normsys.training.record import trained_model

BOUNDS_LOGITS, LOWERS_SENSITIVITY = QK_LOGIT_BOUND.declaration, QK_LR_SENSITIVITY.declaration


@pytest.mark.control(BOUNDS_LOGITS.id)
@pytest.mark.slow
def test_control_logit_rule_is_refuted_at_a_low_learning_rate(runs):
    """The claim's own GPTs, reading and rule at learning rate 1e-4, on seeds the claim does not
    read: at that rate neither model's logits grow in 250 steps, so the rule must come out
    refuted. A reading that grows with the run's length alone, or that reads the logits before
    the qk-norm, would show here."""
    slow = BOUNDS_LOGITS.experiment.overridden({"train.lr": 1e-4})
    values = slow.values(runs, unread_seeds(BOUNDS_LOGITS))
    assert BOUNDS_LOGITS.verdict(values).verdict == REFUTED, BOUNDS_LOGITS.verdict(values).reason


SCALE = 10.0  # the query, key and value weights times this: the logits without qk-norm times 100


@pytest.mark.control(BOUNDS_LOGITS.id)
@pytest.mark.positive(BOUNDS_LOGITS.id)
@pytest.mark.slow
def test_control_logit_rule_flips_where_the_queries_and_keys_are_scaled_up(runs):
    """The control's low-rate GPTs (on seeds the claim does not read) with every block's query,
    key and value weights multiplied by 10 after training: each logit of the GPT without qk-norm
    grows a hundredfold, 2 in log10, while qk-layernorm takes the scale out of its own, so the
    rule must now come out supported where it came out refuted. A reading taken before the
    qk-norm, or one that does not read the model, would leave it refuted."""
    def scaled(records, variant=""):
        model = trained_model(records[0], learning_rule=False)
        with torch.no_grad():
            for block in model.blocks:
                block.attn.qkv.weight.mul_(SCALE)
        return largest_logit(model, records[0].run_config)

    slow = BOUNDS_LOGITS.experiment.overridden({"train.lr": 1e-4})
    values = replace(slow, reads=scaled).values(runs, unread_seeds(BOUNDS_LOGITS))
    decision = BOUNDS_LOGITS.verdict(values)
    assert decision.verdict == SUPPORTED, decision.reason
