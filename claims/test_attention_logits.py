"""qk-layernorm and the attention logits (Wortsman et al. 2024), and qk-layernorm against a logit
softcap: controls. The claims, their models and readings are declared in
normsys.declarations.attention_logits and decided in test_declared.py; each sensitivity claim
against the softcap is also one of the A/A family's (test_aa_family.py)."""

from __future__ import annotations

from dataclasses import replace

import pytest
import torch

from normsys.claims.declaration import Experiment
from normsys.claims.testing import CONTROL_SEEDS, on_seed_sets, unread_seeds
from normsys.claims.verdict import REFUTED, SUPPORTED
from normsys.declarations.attention_logits import (
    QK_BEATS_SOFTCAP,
    QK_LOGIT_BOUND,
    QK_LR_SENSITIVITY,
    QK_LR_SENSITIVITY_CAPPED,
    SOFTCAP_LOWERS_SENSITIVITY,
    WARMUP_LOWERS_SENSITIVITY,
    largest_logit,
    warmed,
)
from normsys.training.record import trained_model

BOUNDS_LOGITS, LOWERS_SENSITIVITY = QK_LOGIT_BOUND.declaration, QK_LR_SENSITIVITY.declaration


@pytest.mark.control(BOUNDS_LOGITS.id)
@pytest.mark.slow
def test_control_logit_rule_is_refuted_at_a_low_learning_rate(runs):
    """The claim's own GPTs, reading and rule at learning rate 1e-4, on seeds the claim does not
    read: at that rate neither model's logits grow in the claim's steps, so the rule must come out
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


AGAINST_SOFTCAP = (SOFTCAP_LOWERS_SENSITIVITY, QK_LR_SENSITIVITY_CAPPED.declaration,
                   QK_BEATS_SOFTCAP, WARMUP_LOWERS_SENSITIVITY)


@pytest.mark.parametrize("declared", [
    pytest.param(d, id=d.id, marks=[pytest.mark.control(d.id), pytest.mark.slow])
    for d in AGAINST_SOFTCAP])
def test_control_sensitivity_rules_are_not_supported_between_softcapped_sweeps(runs, declared):
    """Each sensitivity claim's reading and rule with both arms the softcapped GPT's sweep
    (warmed up, no qk-norm: the claim's ``alike``), its first arm on seeds past the claim's and
    its second on the claim's own: nothing lies between the arms but their seeds, so the rule must
    not come out supported on its own. (The A/A family reads these cases too, at its joint level,
    which three seeds make too wide to see an edge the size of these claims' effects.) An arm
    given an edge the claim does not name, a plain GPT against a softcapped one, fails here."""
    case = declared.experiment.overridden(declared.alike)
    values = on_seed_sets(case, runs, unread_seeds(declared), CONTROL_SEEDS)
    decision = declared.verdict(values)
    assert decision.verdict != SUPPORTED, decision.reason


@pytest.mark.positive(LOWERS_SENSITIVITY.id, *(d.id for d in AGAINST_SOFTCAP))
@pytest.mark.slow
def test_positive_sensitivity_rules_hold_where_the_qk_norm_is_the_second_arm(runs):
    """Each sensitivity claim's reading and rule with its second arm's sweep replaced by the
    qk-layernorm GPT's (warmed up; the claims' own runs, seeds 0-2): qk-layernorm lowers the
    sensitivity of the same GPT without it (Wortsman et al., whose runs are warmed up), so each
    rule must come out supported; for the claim without a warm-up, both its arms warmed up. A
    reading that cannot tell a sweep that diverges from one that does not, or that pairs the
    arms the wrong way round, would leave one otherwise."""
    for declared in (LOWERS_SENSITIVITY, *AGAINST_SOFTCAP):
        first, second = declared.experiment.arms
        reference = declared.experiment.arms[first]
        if declared is not WARMUP_LOWERS_SENSITIVITY:  # the claims' plain GPT, warmed up
            reference = warmed("none")
        case = Experiment({first: reference, second: warmed("layernorm")},
                          declared.experiment.reads, reads_diverged=True)
        decision = declared.verdict(case.values(runs, CONTROL_SEEDS))
        assert decision.verdict == SUPPORTED, f"{declared.id}: {decision.reason}"
