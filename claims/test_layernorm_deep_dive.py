"""LayerNorm deep-dive notebook: what LayerNorm does in MLPs, CNNs and LSTMs (MNIST unless said).

MLP: 3 hidden layers of 256 (Linear -> norm -> ReLU), Adam 1e-3, batch 64, 1 epoch; its last hidden
layer is probed on 1,000 fixed training images. CNN: 3 x conv3x3 -> norm -> ReLU -> maxpool, batch
128, 1 epoch; LayerNorm there normalizes each sample's whole (C, H, W) map (Ba et al. 2016).
Char LSTM: 1 layer, hidden 256, 1,000 steps on Tiny Shakespeare (BatchNorm: statistics per time
step). Transformer block: one pre-norm block as a character LM on Tiny Shakespeare (d=64, 4 heads,
context 64, batch 32, Adam 1e-3, 500 steps). Tanh MLP: as in the residual claim. Models with
BatchNorm are evaluated in eval mode (running statistics).
"""

from __future__ import annotations

import numpy as np
import pytest
import torch

from normsys.claims import figures
from normsys.claims.experiments import (
    INIT_SCALES,
    accuracy_spread,
    decorrelates,
    init_scale_spread,
    mlp,
    prevents_vanishing,
    robust_to_init,
    tanh_mlp,
    unit_correlation,
    weight_grad_profile,
)
from normsys.claims.params import tiers
from normsys.claims.stats import REFUTED, SUPPORTED, Rule
from normsys.claims.testing import (
    CONTROL_SEEDS,
    SMALL_CLASSIFIER,
    small_classifier_accuracies,
    trained_and_untrained,
)
from normsys.scorecard import Statistic, one_by_one
from normsys.training import diagnostics as dg
from normsys.training.config import preset
from normsys.training.measure import at_init
from normsys.training.record import TEST_ACC, VAL_LOSS, probe_of, trained_model

SOURCE = "LayerNorm deep-dive notebook"


def cnn(norm: str, seed: int, tier: str = "cpu"):
    """The CNN (cnn preset: 3 x conv3x3 (32, 64, 64) -> norm -> ReLU -> maxpool, batch 128)."""
    return preset("cnn", tier, **{"model.norm": norm, "train.seed": seed})


def lstm(norm: str, seed: int, tier: str = "cpu"):
    """The char LSTM (lstm preset: 1 layer, hidden 256, 1,000 steps); norm layernorm is the
    layer-normalized LSTM of Ba et al. 2016, none the plain LSTM (same cell code)."""
    return preset("lstm", tier, **{"model.norm": norm, "train.seed": seed})


def tblock_lm(norm: str, seed: int, tier: str = "cpu"):
    """One pre-norm Transformer block as a character LM: d=64, 4 heads, context 64, batch 32,
    Adam 1e-3, 500 steps; ``norm`` in both of the block's norm places and the final norm."""
    return preset("char_gpt", tier, **{"model.norm": norm, "model.layers": 1, "model.d": 64,
                                       "model.heads": 4, "model.seq_len": 64,
                                       "train.batch_size": 32, "train.optimizer": "adam",
                                       "train.lr": 1e-3, "train.steps": 500, "train.seed": seed})


def metric_by_norm(runs, claim, make_config, norms, metric: str) -> dict[str, list[float]]:
    """{norm: [metric of each seed's run]} for configs made by make_config(norm, seed). Every
    norm's runs are asked for at once, so that a worker trains first the ones no other holds."""
    records = iter(runs([make_config(n, s) for n in norms for s in claim.seeds]))
    return {n: [next(records).metrics[metric] for _ in claim.seeds] for n in norms}


# The norm-generic claims, declared once: their tests below decide through these, and each is a
# column of the scorecard (normsys.scorecard) for any norm kind.
GRAD_RATIO_VS_NONE = Statistic(
    "grad_ratio_vs_none", "ld-layernorm-prevents-vanishing-gradients", prevents_vanishing,
    lambda n, s, t: [tanh_mlp(s, t, n)], lambda rs: dg.log10_ratio(weight_grad_profile(rs[0])),
    versus="none", pairing="own - versus", own_seeds=5, words="gradient flow vs no norm")
DECORRELATION = Statistic(
    "decorrelation", "ld-layernorm-decorrelates", decorrelates,
    lambda n, s, t: [mlp(n, s, tier=t)], lambda rs: unit_correlation(rs[0]),
    versus="none", pairing="versus - own", words="decorrelation vs no norm")
INIT_ROBUSTNESS = Statistic(
    "init_robustness", "ld-layernorm-robust-to-init-scale", robust_to_init,
    lambda n, s, t: [mlp(n, s, tier=t, init_scale=k) for k in INIT_SCALES], init_scale_spread,
    versus="none", pairing="versus - own", words="init-scale robustness vs no norm")


@pytest.fixture
def mlp_runs(runs, claim, tier):
    return lambda norm: runs([mlp(norm, s, tier=tier) for s in claim.seeds])


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
        ax.set_title(f"{norm}: mean |corr| {probe_of(record.probes, 'layers.2')['unit_corr']:.3f}")
    fig.colorbar(im, ax=axes, shrink=0.8)
    fig.suptitle("Hidden-unit correlations, last hidden layer (seed 0, first 64 live units)")


DECORRELATES = DECORRELATION.rule(DECORRELATION.claim_norm)


@pytest.mark.parametrize("tier", tiers())
@DECORRELATION.marker(source=SOURCE, statement=f"LayerNorm decorrelates hidden units (corr: mean "
                                               f"|off-diagonal correlation| of the last hidden "
                                               f"layer): {DECORRELATES}, paired.")
def test_layernorm_decorrelates(claim, runs, mlp_runs, tier):
    claim.figure("correlations", lambda fig: draw_correlations(
        fig, {"none": mlp_runs("none")[0], "layernorm": mlp_runs("layernorm")[0]}))
    DECORRELATION.check(claim, runs, tier)


SPEEDS_CONVERGENCE = Rule("steps(layernorm) / steps(none)", "<", 0.8)


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-layernorm-speeds-convergence", source=SOURCE,
                   statement=f"LayerNorm speeds up convergence (steps: to 90% accuracy on a "
                             f"running window of 50 training batches): {SPEEDS_CONVERGENCE}.")
def test_layernorm_speeds_convergence(claim, mlp_runs, tier):
    none, ln = mlp_runs("none"), mlp_runs("layernorm")
    steps = {n: [dg.steps_to_accuracy(r.curves["batch_acc"]) for r in rs]
             for n, rs in (("none", none), ("layernorm", ln))}
    claim.record(steps_to_90=steps)
    ratio = [a / b for a, b in zip(steps["layernorm"], steps["none"], strict=True)]
    claim.check(ratio, SPEEDS_CONVERGENCE)


SMALL_BATCH = Rule("test_acc(layernorm) - test_acc(batchnorm)", ">", 0.02)


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-layernorm-small-batch", source=SOURCE,
                   statement=f"With batch size 4, LayerNorm beats BatchNorm (eval mode, running "
                             f"statistics) after 2,000 steps: {SMALL_BATCH}, paired.")
def test_layernorm_small_batch(claim, runs, tier):
    acc = metric_by_norm(runs, claim, lambda n, s: mlp(n, s, 4, 2000, tier),
                         ("layernorm", "batchnorm"), TEST_ACC)
    claim.check_paired(acc["layernorm"], acc["batchnorm"], SMALL_BATCH)


BN_WINS_CNN = Rule("test_acc(batchnorm) - test_acc(layernorm)", ">", 0.0)


@pytest.mark.slow  # six 1-epoch CNN runs, ~5 min on 2 cores
@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-batchnorm-wins-cnn-large-batch", source=SOURCE,
                   statement=f"In a CNN with batch 128, BatchNorm beats LayerNorm after 1 epoch: "
                             f"{BN_WINS_CNN}, paired.")
def test_batchnorm_wins_cnn_large_batch(claim, runs, tier):
    acc = metric_by_norm(runs, claim, lambda n, s: cnn(n, s, tier),
                         ("batchnorm", "layernorm"), TEST_ACC)
    claim.check_paired(acc["batchnorm"], acc["layernorm"], BN_WINS_CNN)


HELPS_LSTM = Rule("val_loss(plain) - val_loss(LN-LSTM)", ">", 0.0)


@pytest.mark.slow  # six 1,000-step LSTM runs, ~2 min each on one core
@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-layernorm-helps-lstm", source=SOURCE,
                   statement=f"Layer normalization helps an LSTM after 1,000 steps: {HELPS_LSTM}, "
                             f"paired.")
def test_layernorm_helps_lstm(claim, runs, tier):
    val = metric_by_norm(runs, claim, lambda n, s: lstm(n, s, tier),
                         ("none", "layernorm"), VAL_LOSS)
    claim.check_paired(val["none"], val["layernorm"], HELPS_LSTM)


BEATS_BN_LSTM = Rule("val_loss(BN-LSTM) - val_loss(LN-LSTM)", ">", 0.0)


@pytest.mark.slow  # three more 1,000-step LSTM runs (and the LayerNorm three of the claim above)
@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-layernorm-beats-batchnorm-lstm", source=SOURCE,
                   statement=f"In an LSTM, LayerNorm beats BatchNorm (statistics per time step) "
                             f"after 1,000 steps: {BEATS_BN_LSTM}, paired.")
def test_layernorm_beats_batchnorm_lstm(claim, runs, tier):
    val = metric_by_norm(runs, claim, lambda n, s: lstm(n, s, tier),
                         ("batchnorm", "layernorm"), VAL_LOSS)
    claim.check_paired(val["batchnorm"], val["layernorm"], BEATS_BN_LSTM)


BEATS_BN_TRANSFORMER = Rule("val_loss(BN) - val_loss(LN)", ">", 0.0)


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-layernorm-beats-batchnorm-transformer", source=SOURCE,
                   statement=f"In a pre-norm Transformer block (a character LM), LayerNorm beats "
                             f"BatchNorm in both norm places after 500 steps: "
                             f"{BEATS_BN_TRANSFORMER}, paired.")
def test_layernorm_beats_batchnorm_transformer(claim, runs, tier):
    val = metric_by_norm(runs, claim, lambda n, s: tblock_lm(n, s, tier),
                         ("batchnorm", "layernorm"), VAL_LOSS)
    claim.check_paired(val["batchnorm"], val["layernorm"], BEATS_BN_TRANSFORMER)


IMPROVES_ACCURACY = Rule("test_acc(layernorm) - test_acc(none)", ">", 0.0)


@pytest.mark.parametrize("tier", tiers())
@pytest.mark.claim("ld-layernorm-improves-final-accuracy", source=SOURCE,
                   statement=f"LayerNorm improves the MLP's final accuracy after 1 epoch: "
                             f"{IMPROVES_ACCURACY}, paired.")
def test_layernorm_improves_final_accuracy(claim, mlp_runs, tier):
    ln, none = mlp_runs("layernorm"), mlp_runs("none")
    claim.check_paired([r.metrics[TEST_ACC] for r in ln], [r.metrics[TEST_ACC] for r in none],
                       IMPROVES_ACCURACY)


ROBUST_TO_INIT = INIT_ROBUSTNESS.rule(INIT_ROBUSTNESS.claim_norm)


@pytest.mark.parametrize("tier", tiers())
@INIT_ROBUSTNESS.marker(source=SOURCE, statement=f"LayerNorm makes the MLP robust to its weight "
                                                 f"initialization (spread: max - min test "
                                                 f"accuracy with the hidden weights scaled by "
                                                 f"0.5, 1, 2 at init): {ROBUST_TO_INIT}, paired.")
def test_layernorm_robust_to_init_scale(claim, runs, tier):
    by_seed = {n: INIT_ROBUSTNESS.records(runs, n, claim.seeds, tier) for n in ("none", "layernorm")}
    claim.record(test_acc={n: {str(k): [rs[i].metrics[TEST_ACC] for rs in seeds]
                               for i, k in enumerate(INIT_SCALES)} for n, seeds in by_seed.items()},
                 spread={n: [init_scale_spread(rs) for rs in seeds]
                         for n, seeds in by_seed.items()})
    INIT_ROBUSTNESS.check(claim, runs, tier)


PREVENTS_VANISHING = GRAD_RATIO_VS_NONE.rule(GRAD_RATIO_VS_NONE.claim_norm)


@pytest.mark.parametrize("tier", tiers())
@GRAD_RATIO_VS_NONE.marker(source=SOURCE, statement=f"LayerNorm after each layer of a 10-layer "
                                                    f"tanh MLP (no residuals) prevents vanishing "
                                                    f"gradients at init (ratio = ||grad W_1|| / "
                                                    f"||grad W_10||): {PREVENTS_VANISHING}, "
                                                    f"paired.")
def test_layernorm_prevents_vanishing_gradients(claim, run, tier):
    ln, plain = ([weight_grad_profile(rs[0]) for rs in GRAD_RATIO_VS_NONE.records(
        one_by_one(run), n, claim.seeds, tier)] for n in ("layernorm", "none"))
    claim.record(profile_layernorm=ln, profile_plain=plain)
    claim.figure("grad-profile", lambda fig: figures.profiles(
        fig, {"LayerNorm after each layer": ln, "no normalization": plain}))
    GRAD_RATIO_VS_NONE.check(claim, one_by_one(run), tier)


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
    return probe_of(init.probes, "layers.2")["unit_corr"]


@pytest.mark.control("ld-layernorm-decorrelates")
def test_control_correlation_rule_flips_with_a_shared_component(task_of):
    shared = [correlation_at_init(task_of, s, True) for s in CONTROL_SEEDS]
    plain = [correlation_at_init(task_of, s, False) for s in CONTROL_SEEDS]
    assert DECORRELATES.decide_paired(shared, plain).verdict == SUPPORTED
    assert DECORRELATES.decide_paired(plain, shared).verdict == REFUTED


@pytest.mark.control("ld-layernorm-speeds-convergence")
def test_control_convergence_rule_flips_between_a_fast_and_a_slow_learning_rate(run, data_env):
    """Steps to 90% running accuracy (the claim's measurement) of the MLP at learning rates 1e-3
    and 2e-4, both ways round (5 seeds: the slower run's step count varies)."""
    def steps(lr: float) -> list[float]:
        return [dg.steps_to_accuracy(run(mlp("none", s).override(**{
            **SMALL_CLASSIFIER, "data.n_train": 20_000, "train.lr": lr})).curves["batch_acc"])
            for s in range(5)]

    fast, slow = steps(1e-3), steps(2e-4)
    assert SPEEDS_CONVERGENCE.decide([f / s for f, s in zip(fast, slow, strict=True)]).verdict \
        == SUPPORTED
    assert SPEEDS_CONVERGENCE.decide([s / f for f, s in zip(fast, slow, strict=True)]).verdict \
        == REFUTED


@pytest.mark.control("ld-layernorm-small-batch", "ld-batchnorm-wins-cnn-large-batch",
                     "ld-layernorm-improves-final-accuracy", "ld-layernorm-robust-to-init-scale")
def test_control_accuracy_rules_flip_between_a_trained_and_an_untrained_model(data_env, run):
    """Test-accuracy differences of the small classifier trained and left at init; for the
    robustness rule, spreads over three runs of which one did not train, against three trained
    seeds."""
    trained, untrained = small_classifier_accuracies(run)
    for rule in (SMALL_BATCH, BN_WINS_CNN, IMPROVES_ACCURACY):
        assert rule.decide_paired(trained, untrained).verdict == SUPPORTED
        assert rule.decide_paired(untrained, trained).verdict == REFUTED
    n = len(trained)
    fragile = [accuracy_spread([trained[i], untrained[i], trained[i]]) for i in range(n)]
    robust = [accuracy_spread([trained[i], trained[(i + 1) % n], trained[(i + 2) % n]])
              for i in range(n)]
    assert ROBUST_TO_INIT.decide_paired(fragile, robust).verdict == SUPPORTED
    assert ROBUST_TO_INIT.decide_paired(robust, fragile).verdict == REFUTED


@pytest.mark.control("ld-layernorm-helps-lstm", "ld-layernorm-beats-batchnorm-lstm",
                     "ld-layernorm-beats-batchnorm-transformer")
def test_control_validation_loss_rules_flip_between_a_trained_and_an_untrained_lm(data_env, run):
    """Validation loss (the claims' measurement) of a small LSTM trained 60 steps and of the same
    LSTM at its initialization, both ways round."""
    cfg = lstm("layernorm", 0).override(**{"model.d": 32, "train.steps": 60,
                                                  "train.batch_size": 8, "train.eval_batches": 2})
    trained, untrained = ([r.metrics[VAL_LOSS] for r in side]
                          for side in trained_and_untrained(run, cfg))
    for rule in (HELPS_LSTM, BEATS_BN_LSTM, BEATS_BN_TRANSFORMER):
        assert rule.decide_paired(untrained, trained).verdict == SUPPORTED
        assert rule.decide_paired(trained, untrained).verdict == REFUTED


@pytest.mark.control("ld-layernorm-prevents-vanishing-gradients")
def test_control_vanishing_gradient_rule_flips_when_the_sides_swap(run):
    ln = [weight_grad_profile(run(tanh_mlp(s, norm="layernorm"))) for s in CONTROL_SEEDS]
    plain = [weight_grad_profile(run(tanh_mlp(s, norm="none"))) for s in CONTROL_SEEDS]
    ratios = [[dg.log10_ratio(p) for p in side] for side in (ln, plain)]
    assert PREVENTS_VANISHING.decide_paired(*ratios).verdict == SUPPORTED
    assert PREVENTS_VANISHING.decide_paired(*reversed(ratios)).verdict == REFUTED
