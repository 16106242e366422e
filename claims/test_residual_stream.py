"""The Pre-LN residual stream (Jiang et al. 2023, Kim et al. 2025, Sun et al. 2025): negative
controls. The claims, their models and readings are declared in
normsys.declarations.residual_stream and decided in test_declared.py."""

from __future__ import annotations

import pytest

from normsys.claims.testing import alike_on_disjoint_seeds, unread_seeds
from normsys.claims.verdict import REFUTED
from normsys.declarations import residual_stream

PRELN_IS_PRERMS = residual_stream.CENTRED_LN_FUNCTION.declaration
PERI_FLATTENS = residual_stream.PERI_FLATTENS.declaration
SCALING_UNDOES_IDENTITY = residual_stream.SCALING_UNDOES_IDENTITY.declaration


@pytest.mark.control(PRELN_IS_PRERMS.id)
def test_control_equivalence_is_refuted_without_the_recentring(runs):
    """The claim's own char GPT, construction, reading and rule with the stream left as the model
    makes it (no re-centring), on seeds the claim does not read: LayerNorm subtracts a mean that
    RMSNorm keeps, so the gap must be far above the rule's and the claim refuted. A gap read
    between a model and itself, or a twin that re-centres on its own, would show here."""
    plain = PRELN_IS_PRERMS.experiment.overridden({"model.recenter": False})
    values = plain.values(runs, unread_seeds(PRELN_IS_PRERMS))
    assert PRELN_IS_PRERMS.verdict(values).verdict == REFUTED


# Each claim's A/A case, and what it must come out as besides not supported: refuted, where the
# threshold lies far above the seeds' spread (0.5 in log10 variance); at a threshold of 0 an A/A
# case lies on it, so not supported is all it can be held to.
DEEP_GPT_CASES = ((PERI_FLATTENS, {"model.placement": "peri"}, REFUTED),
                  (SCALING_UNDOES_IDENTITY, {"model.depth_scaled": True}, None))


@pytest.mark.parametrize("declared, alike, expected", [
    pytest.param(d, alike, expected, id=d.id, marks=[pytest.mark.control(d.id), pytest.mark.slow])
    for d, alike, expected in DEEP_GPT_CASES])
def test_control_deep_gpt_rules_are_not_supported_where_both_arms_are_alike(runs, declared, alike,
                                                                            expected):
    """The A/A case of the claim's own experiment (alike_on_disjoint_seeds): both arms take the
    second arm's model, the first on seeds the claim does not read, so what is left between them
    is the seeds' spread: it must not come out supported. A reading that favours the first arm
    (read at another depth, or from another run), or an arm trained otherwise than its model
    says, would show here."""
    decision = alike_on_disjoint_seeds(declared, declared.experiment.overridden(alike), runs)
    assert expected is None or decision.verdict == expected, decision.reason
