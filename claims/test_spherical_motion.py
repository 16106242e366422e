"""The angular update's equilibrium (Wan et al. 2021): negative control. The claim, its MLP and
its reading are declared in normsys.declarations.spherical_motion and decided in
test_declared.py."""

from __future__ import annotations

import pytest

from normsys.claims.testing import unread_seeds
from normsys.claims.verdict import REFUTED
from normsys.declarations.spherical_motion import SETTLES


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
