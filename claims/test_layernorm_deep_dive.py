"""LayerNorm deep-dive notebook: the claims' evidence (gradient profiles, correlation heatmaps,
steps and accuracies) and negative controls. The claims, their models and readings are declared
in normsys.declarations.layernorm_deep_dive; the claims decided by their rule alone are decided
in test_declared.py.
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normsys import declarations
from normsys.claims.declaration import declaration_of
from normsys.claims.params import tiers_of
from normsys.claims.testing import (
    CONTROL_SEEDS,
    SMALL_CLASSIFIER,
    left_untrained,
    small_classifier_accuracies,
    trained_and_untrained,
    unread_seeds,
)
from normsys.claims.verdict import REFUTED, SUPPORTED
from normsys.declarations.layernorm_deep_dive import (
    BEATS_BN_LSTM,
    BEATS_BN_TRANSFORMER,
    BN_WINS_CNN,
    DECORRELATION,
    GRAD_RATIO_VS_NONE,
    HELPS_LSTM,
    IMPROVES_ACCURACY,
    INIT_ROBUSTNESS,
    INIT_SCALES,
    LSTM,
    MLP_PROBE,
    SMALL_BATCH,
    SPEEDS_CONVERGENCE,
    accuracy_spread,
    init_scale_spread,
    mlp,
    unit_correlation,
)
from normsys.declarations.shared import figures
from normsys.declarations.shared.experiments import weight_grad_profile
from normsys.training import diagnostics as dg
from normsys.training.measure import at_init
from normsys.training.record import TEST_ACC, VAL_LOSS, probe_of, trained_model


@pytest.fixture
def mlp_runs(runs, claim, tier):
    return lambda norm: runs([mlp(norm, s, tier) for s in claim.seeds])


def draw_correlations(fig, records: dict) -> None:
    """Correlation heatmaps of the first 64 units of the last hidden layer, per norm."""
    from normsys.training.data import mnist

    x = mnist().x_train[:1000]
    axes = fig.subplots(1, len(records))
    fig.set_size_inches(5 * len(records), 4.2)
    for ax, (norm, record) in zip(axes, records.items(), strict=True):
        model = trained_model(record)
        with torch.no_grad():
            h = x
            for layer in model.layers:
                h = layer(h)
        h = h[:, h.std(0) > 0][:, :64]
        im = ax.imshow(np.corrcoef(h.T.numpy()), vmin=-1, vmax=1, cmap="RdBu_r")
        ax.set_title(f"{norm}: mean |corr| {unit_correlation(record):.3f}")
    fig.colorbar(im, ax=axes, shrink=0.8)
    fig.suptitle("Hidden-unit correlations, last hidden layer (seed 0, first 64 live units)")


@pytest.mark.parametrize("tier", tiers_of(GRAD_RATIO_VS_NONE.declaration))
@GRAD_RATIO_VS_NONE.mark
def test_layernorm_prevents_vanishing_gradients(claim, runs, tier):
    claim.check(runs)
    ln, plain = ([weight_grad_profile(rs[0]) for rs in seeds] for seeds in GRAD_RATIO_VS_NONE
                 .declaration.records(runs, claim.seeds, tier).values())
    claim.record(profile_layernorm=ln, profile_plain=plain)
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {"LayerNorm after each layer": ln, "no normalization": plain}))


@pytest.mark.parametrize("tier", tiers_of(DECORRELATION.declaration))
@DECORRELATION.mark
def test_layernorm_decorrelates(claim, runs, mlp_runs, tier):
    claim.check(runs)
    claim.figure("correlations", lambda fig: draw_correlations(
        fig, {"none": mlp_runs("none")[0], "layernorm": mlp_runs("layernorm")[0]}))


@pytest.mark.parametrize("tier", tiers_of(SPEEDS_CONVERGENCE))
@SPEEDS_CONVERGENCE.mark
def test_layernorm_speeds_convergence(claim, runs, tier):
    claim.check(runs)
    claim.record(steps_to_90=SPEEDS_CONVERGENCE.experiment.values(runs, claim.seeds, tier))


@pytest.mark.parametrize("tier", tiers_of(INIT_ROBUSTNESS.declaration))
@INIT_ROBUSTNESS.mark
def test_layernorm_robust_to_init_scale(claim, runs, tier):
    claim.check(runs)
    by_seed = INIT_ROBUSTNESS.declaration.records(runs, claim.seeds, tier)
    claim.record(test_acc={n: {str(k): [rs[i].metrics[TEST_ACC] for rs in seeds]
                               for i, k in enumerate(INIT_SCALES)} for n, seeds in by_seed.items()},
                 spread={n: [init_scale_spread(rs) for rs in seeds]
                         for n, seeds in by_seed.items()})


# ----------------------------------------------------------------------------- negative controls


def correlation_at_init(task_of, seed: int, shared: bool) -> float:
    """The claim's correlation measurement (train.probe) of the MLP without a norm at init;
    ``shared``: a common component added to every unit of the last hidden layer."""
    cfg = mlp("none", seed)

    def add_shared_component(model):
        w = model.layers[2][0].weight  # (d, d)
        v = torch.randn(1, w.shape[1], generator=torch.Generator().manual_seed(seed))
        w.add_(5 * torch.ones(w.shape[0], 1) @ v / w.shape[1] ** 0.5)

    init = at_init(cfg, task_of(cfg), add_shared_component if shared else None)
    return probe_of(init.probes, MLP_PROBE)["unit_corr"]


@pytest.mark.control(DECORRELATION.claim)
@pytest.mark.positive(DECORRELATION.claim)
def test_control_correlation_rule_flips_with_a_shared_component(task_of):
    shared = [correlation_at_init(task_of, s, True) for s in CONTROL_SEEDS]
    plain = [correlation_at_init(task_of, s, False) for s in CONTROL_SEEDS]
    claimed = DECORRELATION.declaration
    assert claimed.verdict({"none": shared, "layernorm": plain}).verdict == SUPPORTED


@pytest.mark.control(SPEEDS_CONVERGENCE.id)
@pytest.mark.positive(SPEEDS_CONVERGENCE.id)
def test_control_convergence_rule_flips_between_a_fast_and_a_slow_learning_rate(run, data_env):
    """Steps to 90% running accuracy (the claim's measurement) of the MLP at learning rates 1e-3
    and 2e-4, both ways round (5 seeds: the slower run's step count varies)."""
    def steps(lr: float) -> list[float]:
        return [dg.steps_to_accuracy(run(mlp("none", s).override(**{
            **SMALL_CLASSIFIER, "data.n_train": 20_000, "train.lr": lr})).curves["batch_acc"])
            for s in range(5)]

    fast, slow = steps(1e-3), steps(2e-4)
    assert SPEEDS_CONVERGENCE.verdict({"layernorm": fast, "none": slow}).verdict == SUPPORTED
    assert SPEEDS_CONVERGENCE.verdict({"layernorm": slow, "none": fast}).verdict == REFUTED


@pytest.mark.control(SMALL_BATCH.id, BN_WINS_CNN.id, IMPROVES_ACCURACY.id, INIT_ROBUSTNESS.claim)
@pytest.mark.positive(SMALL_BATCH.id, IMPROVES_ACCURACY.id, INIT_ROBUSTNESS.claim)  # the MLP's
def test_control_accuracy_rules_flip_between_a_trained_and_an_untrained_model(data_env, run):
    """Test-accuracy differences of the small classifier trained and left at init; for the
    robustness rule, spreads over three runs of which one did not train, against three trained
    seeds."""
    trained, untrained = small_classifier_accuracies(run)
    for declared in (SMALL_BATCH, BN_WINS_CNN, IMPROVES_ACCURACY):
        first, second = declared.experiment.arms
        assert declared.verdict({first: trained, second: untrained}).verdict == SUPPORTED
    n = len(trained)
    fragile = [accuracy_spread([trained[i], untrained[i], trained[i]]) for i in range(n)]
    robust = [accuracy_spread([trained[i], trained[(i + 1) % n], trained[(i + 2) % n]])
              for i in range(n)]
    claimed = INIT_ROBUSTNESS.declaration
    assert claimed.verdict({"none": fragile, "layernorm": robust}).verdict == SUPPORTED


@pytest.mark.control(HELPS_LSTM.id, BEATS_BN_LSTM.id, BEATS_BN_TRANSFORMER.id)
@pytest.mark.positive(HELPS_LSTM.id, BEATS_BN_LSTM.id)  # the LSTM's
def test_control_validation_loss_rules_flip_between_a_trained_and_an_untrained_lm(data_env, run):
    """Validation loss (the claims' measurement) of a small LSTM trained 60 steps and of the same
    LSTM at its initialization. (Swapped, the paired differences change sign and the rule is
    refuted by arithmetic alone: no assertion of that could fail on its own.)"""
    (cfg,) = LSTM.changed({"model.norm": "layernorm", "model.d": 32, "train.steps": 60,
                           "train.batch_size": 8, "train.eval_batches": 2})(0)
    trained, untrained = ([r.metrics[VAL_LOSS] for r in side]
                          for side in trained_and_untrained(run, cfg))
    for declared in (HELPS_LSTM, BEATS_BN_LSTM, BEATS_BN_TRANSFORMER):
        first, second = declared.experiment.arms
        assert declared.verdict({first: untrained, second: trained}).verdict == SUPPORTED


@pytest.mark.positive(BEATS_BN_TRANSFORMER.id)
def test_positive_transformer_rule_holds_where_the_batchnorm_block_is_left_untrained(runs):
    """The claim's own blocks, reading and rule on its own seeds, with the BatchNorm block left at
    its initialization (learning rate 0 for one step): the trained LayerNorm block's validation
    loss lies far below, so the rule must come out supported. A reading that cannot tell the two
    blocks' losses apart, or pairs them the wrong way round, would leave it otherwise."""
    values = left_untrained(BEATS_BN_TRANSFORMER, "BN").values(runs, CONTROL_SEEDS)
    decision = BEATS_BN_TRANSFORMER.verdict(values)
    assert decision.verdict == SUPPORTED, decision.reason


# the claims whose arms differ in the norm alone (one norm in both when alike: Declaration.alike)
SAME_NORM = [declaration_of(c) for module, c in declarations.declared()
             if module == "layernorm_deep_dive" and declaration_of(c).alike]


@pytest.mark.parametrize("declared", [
    pytest.param(d, id=d.id, marks=[pytest.mark.control(d.id)]
                 + ([pytest.mark.slow] if "" in d.slow else [])) for d in SAME_NORM])
def test_control_norm_rules_are_refuted_where_both_arms_take_the_same_norm(runs, declared):
    """The claim's own arms, reading and rule with one norm in both arms, on seeds the claim does
    not read: nothing is left between the arms, so a rule that one norm beats the other must come
    out refuted. An arm given an edge the norm does not earn (trained longer, on more rows, read
    at another point, another depth) would show here, as no record can; its A/A case, the arms
    on other seeds, is claims/test_aa_family.py's."""
    same = declared.experiment.overridden(declared.alike)
    values = same.values(runs, unread_seeds(declared))
    assert declared.verdict(values).verdict == REFUTED
