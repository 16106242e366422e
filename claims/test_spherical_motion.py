"""The angular update's equilibrium (Wan et al. 2021) and the product e w that alone sets it (van
Laarhoven 2017, Li & Arora 2019): negative controls. The claims, their MLPs and readings are
declared in normsys.declarations.spherical_motion and decided in test_declared.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from normsys.claims.testing import CONTROL_SEEDS, left_untrained, unread_seeds
from normsys.claims.verdict import REFUTED
from normsys.declarations.spherical_motion import (
    LR,
    PRODUCT_SETS_ACCURACY,
    PRODUCT_SETS_TURN,
    SETTLES,
)


@pytest.mark.control(SETTLES.id)
def test_control_equilibrium_is_refuted_without_weight_decay(runs):
    """The claim's own MLP, reading and rule without weight decay, on seeds the claim does not
    read: nothing then pulls the weights' norm back, it grows, and the angular update falls far
    below the prediction at the claim's decay, so the equivalence must come out refuted. A
    reading that averages over the wrong steps or weights, or a log that records the update's
    size instead of its angle, would show here."""
    free = SETTLES.experiment.overridden({"train.weight_decay": 0.0})
    values = free.values(runs, unread_seeds(SETTLES))
    assert SETTLES.verdict(values).verdict == REFUTED, SETTLES.verdict(values).reason


@pytest.mark.control(PRODUCT_SETS_TURN.id)
def test_control_turn_rule_is_refuted_where_the_products_differ(runs):
    """The claim's own MLPs, reading and rule with the second arm's scale-invariant weights at
    the first's learning rate 0.5 and its own decay 1e-2, on the claim's seeds: its product is
    now ten times the others' (the first and third arms are the claim's own runs), its
    equilibrium turn (sqrt(2 e w / (1 + a))) about three times theirs, so the rule must come out
    refuted. A reading of one run three times, or of the runs' product instead of their weights,
    would show here."""
    exp = PRODUCT_SETS_TURN.experiment
    second = list(exp.arms)[1]  # the claim's 0.05 and 1e-2
    exp = replace(exp, arms={**exp.arms, second: exp.arms[second].changed(
        {"train.invariant_lr": LR, "train.invariant_decay": 1e-2})})
    values = exp.values(runs, CONTROL_SEEDS)
    assert PRODUCT_SETS_TURN.verdict(values).verdict == REFUTED, values


@pytest.mark.control(PRODUCT_SETS_ACCURACY.id)
def test_control_accuracy_rule_is_refuted_with_one_run_untrained(runs):
    """The claim's own MLPs, reading and rule with the first run left at its initialization
    (learning rate 0), on the claim's seeds: its accuracy is chance's, so the three cannot lie
    within 1% and the rule must come out refuted. Accuracies read from one run three times would
    show here."""
    exp = left_untrained(PRODUCT_SETS_ACCURACY, next(iter(PRODUCT_SETS_ACCURACY.experiment.arms)))
    values = exp.values(runs, CONTROL_SEEDS)
    assert PRODUCT_SETS_ACCURACY.verdict(values).verdict == REFUTED, values
