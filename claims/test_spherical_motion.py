"""The angular update's equilibrium (Wan et al. 2021) and the product e w that alone sets it (van
Laarhoven 2017, Li & Arora 2019): negative controls. The claims, their MLPs and readings are
declared in normsys.declarations.spherical_motion and decided in test_declared.py."""

from __future__ import annotations

from dataclasses import replace

import pytest

from normsys.claims.testing import CONTROL_SEEDS, left_untrained
from normsys.claims.verdict import REFUTED
from normsys.declarations.spherical_motion import (
    LR,
    PRODUCT_SETS_ACCURACY,
    PRODUCT_SETS_TURN,
    SETTLES,
    at_pair,
)

# The claim's MLP with its scale-invariant weights at the claim's learning rate and ten times its
# decay (e w = 5e-3): both its controls read these runs.
TEN_TIMES = replace(SETTLES.experiment, arms={"sgd": at_pair(LR, 1e-2)})


@pytest.mark.control(SETTLES.id)
def test_control_equilibrium_is_refuted_where_the_decay_is_ten_times_the_claims(runs):
    """The claim's own MLP, reading and rule with its scale-invariant weights' decay 1e-2, ten
    times the claim's, on the claim's seeds (the runs the turn rule's control trains): they
    settle at a turn sqrt(10) = 3.2 times the prediction at the claim's e and w, so the
    equivalence must come out refuted. A reading that averages over the wrong steps or weights,
    or a log that records the update's size instead of its angle, would show here."""
    values = TEN_TIMES.values(runs, CONTROL_SEEDS)
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
    exp = replace(exp, arms={**exp.arms, second: TEN_TIMES.arms["sgd"]})
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
