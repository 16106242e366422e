"""The Pre-LN residual stream (Jiang et al. 2023, Kim et al. 2025, Sun et al. 2025): negative
and positive controls. The claims, their models and readings are declared in
normsys.declarations.residual_stream and decided in test_declared.py."""

from __future__ import annotations

import pytest
import torch

from normsys.claims.testing import CONTROL_SEEDS, on_seed_sets, unread_seeds
from normsys.claims.verdict import REFUTED, SUPPORTED
from normsys.declarations import residual_stream
from normsys.declarations.residual_stream import change, deep_cosine, growth, trained_apart
from normsys.training.tiers import DEFAULT

PRELN_IS_PRERMS = residual_stream.CENTRED_LN_FUNCTION.declaration
STAYS_EQUIVALENT = residual_stream.STAYS_EQUIVALENT
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


@pytest.mark.control(STAYS_EQUIVALENT.id)
def test_control_training_equivalence_is_refuted_without_the_recentring(runs):
    """The claim's own twins, training and rule with the stream left as the model makes it (no
    re-centring), on seeds the claim does not read: the twins differ from their initialization
    on (LayerNorm subtracts a mean RMSNorm keeps), so the claim must come out refuted. A gap read
    between a model and itself, or twins trained on different batches, would show here."""
    plain = STAYS_EQUIVALENT.experiment.overridden({"model.recenter": False})
    values = plain.values(runs, unread_seeds(STAYS_EQUIVALENT))
    assert STAYS_EQUIVALENT.verdict(values).verdict == REFUTED


@pytest.mark.positive(STAYS_EQUIVALENT.id)
def test_positive_training_equivalence_is_supported_with_the_biases_held_at_zero(runs):
    """The claim's own twins, training and rule on the claim's seeds, every LayerNorm's bias held
    at its zero: nothing is folded, the twins' gradients are the same, and the claim must come
    out supported. Training that could not keep equivalent models together (a twin given a second
    gain, another order of batches, a reading of a model against another's initialization)
    fails here."""
    (arm, records), = STAYS_EQUIVALENT.records(runs, CONTROL_SEEDS, DEFAULT).items()
    values = {arm: [trained_apart(rs, biases=False) for rs in records]}
    decision = STAYS_EQUIVALENT.verdict(values)
    assert decision.verdict == SUPPORTED, decision.reason


@pytest.mark.control(PERI_FLATTENS.id)
@pytest.mark.slow
def test_control_growth_rule_is_refuted_where_both_arms_are_peri_ln(runs):
    """The claim's own experiment with Peri-LN in both arms, the first on seeds the claim does not
    read and the second on its own (its A/A case's values, claims/test_aa_family.py): what is
    left between them is the seeds' spread, far below the rule's 0.5 in log10 variance growth,
    so the claim must come out refuted. A reading that favours the first arm (read at another
    depth, or from another run) would show here. (Sun's rule, at 0, is one that seed spread
    straddles: its A/A case is all it is held to.)"""
    same = PERI_FLATTENS.experiment.overridden(PERI_FLATTENS.alike)
    values = on_seed_sets(same, runs, unread_seeds(PERI_FLATTENS), CONTROL_SEEDS)
    decision = PERI_FLATTENS.verdict(values)
    assert decision.verdict == REFUTED, decision.reason


# ----------------------------------------------------------------------------- positive controls
# The papers' effects appear in long training of 0.1-7B-parameter models, so at the CPU tier the
# two claims guard their numbers (role regression). What their reading and rule do where the
# effect is present: the claim's own runs (CONTROL_SEEDS), its reading and rule, the Pre-LN arm's
# trained model made to show the effect before it is read, the other arm as it is.

STREAM_GROWS = 2 ** 0.5  # each block's sublayer outputs scaled by this once more than the last's


def grown(model: torch.nn.Module) -> None:
    """The stream made to grow with depth: block b's sublayer outputs (attention's and the MLP's
    output projections) scaled by STREAM_GROWS ** b, the stream's variance about doubled a block,
    as Kim et al. find a Pre-LN model's grows at scale."""
    with torch.no_grad():
        for b, block in enumerate(model.blocks):
            for out in (block.attn.proj, block.mlp[2]):
                out.weight.mul_(STREAM_GROWS ** b)
                out.bias.mul_(STREAM_GROWS ** b)


def deep_identities(model: torch.nn.Module) -> None:
    """The deep blocks made identities: the last quarter's sublayer outputs zeroed, the curse of
    depth Sun et al. find in deep Pre-LN models taken to its end."""
    blocks = list(model.blocks)
    with torch.no_grad():
        for block in blocks[len(blocks) - max(1, len(blocks) // 4):]:
            for out in (block.attn.proj, block.mlp[2]):
                out.weight.zero_()
                out.bias.zero_()


POSITIVE_CASES = ((PERI_FLATTENS, growth, grown), (SCALING_UNDOES_IDENTITY, deep_cosine,
                                                    deep_identities))


@pytest.mark.parametrize("declared, measure, made", [
    pytest.param(d, measure, made, id=d.id, marks=[pytest.mark.positive(d.id), pytest.mark.slow])
    for d, measure, made in POSITIVE_CASES])
def test_positive_deep_gpt_rules_are_supported_where_the_preln_model_shows_the_effect(
        runs, declared, measure, made):
    """A reading or rule that could not come out supported at this tier (one the untrained
    models decide, or blind to the stream) fails here: with the effect put into the trained
    Pre-LN models, the claim must come out supported."""
    (first, records), (second, others) = declared.records(runs, CONTROL_SEEDS, DEFAULT).items()
    values = {first: [change(measure, rs, made) for rs in records],
              second: [change(measure, rs) for rs in others]}
    decision = declared.verdict(values)
    assert decision.verdict == SUPPORTED, decision.reason
