"""What each reader of a run record reads: which layer, which rows, which metric, which parameters
(the shared experiments, normsys.declarations.shared.experiments; the readers and rules of one
source, in its module of normsys.declarations; normsys.training.record). Each record below gives
every layer and every row set a value of its own, so that reading another one changes the answer;
and each experiment's config holds the settings its claims were fixed with."""

from __future__ import annotations

import importlib
import math

import pytest
import torch

from normsys.claims.declaration import relative_difference
from normsys.declarations.shared import experiments as ex
from normsys.training.config import preset
from normsys.training.record import TEST_ACC, RunRecord, probe_of


# each source's declarations module, asked for where a test needs it (under mutation testing each
# mutant's process imports them anew)
def dm():
    return importlib.import_module("normsys.declarations.dual_mechanism")


def char_gpt(seed: int, tier: str = "cpu", **settings):
    """One seed's char GPT with ``settings`` changed."""
    (cfg,) = ex.CHAR_GPT.changed(settings)(seed, tier)
    return cfg


def lit():
    return importlib.import_module("normsys.declarations.literature")


def dong():
    """The claim file that computes Dong's stacks (its claims train nothing: their values are
    its test's)."""
    return importlib.import_module("claims.test_literature")


def dd():
    return importlib.import_module("normsys.declarations.layernorm_deep_dive")


def layer(erank: float, rho: float, nonpad_erank: float, nonpad_rho: float, **extra) -> dict:
    return {"erank": erank, "rho": rho, "nonpad": {"erank": nonpad_erank, "rho": nonpad_rho},
            **extra}


# blocks 1 ... 6 of the encoder (blocks.0 ... blocks.5), each with its own numbers
PROBES = {"blocks.0": layer(8.0, 0.9, 6.0, 0.8),
          "blocks.1": layer(99.0, 0.01, 99.0, 0.01),  # not probed by the claims: never read
          "blocks.2": layer(7.0, 0.4, 5.0, 0.7),
          "blocks.5": layer(2.0, 0.6, 4.5, 0.3)}


def record(probes=None, grads=None, metrics=None, config=None) -> RunRecord:
    return RunRecord(config=(config or preset("encoder")).to_dict(), fingerprint="f", version="0",
                     metrics=metrics or {}, curves={}, probes=probes or {},
                     init_grad_norms=grads or {}, diverged=False, steps=0, wall_time=0.0,
                     env={}, data_source="")


def test_kappa_is_block_six_over_block_one_on_all_or_nonpad_rows():
    assert dm().kappa(PROBES) == pytest.approx(2.0 / 8.0)
    assert dm().kappa(PROBES, rows="nonpad") == pytest.approx(4.5 / 6.0)
    assert math.isnan(dm().kappa({}))  # a diverged run has no probes


def test_min_rho_is_over_blocks_one_three_six():
    assert dm().DM_PROBES == ("blocks.0", "blocks.2", "blocks.5")
    assert dm().min_rho(PROBES) == pytest.approx(0.4)  # block 3's, not block 2's 0.01
    assert dm().min_rho(PROBES, rows="nonpad") == pytest.approx(0.3)
    assert math.isnan(dm().min_rho({}, rows="nonpad"))


def test_probe_of_reads_the_layer_and_its_rows_and_names_what_was_probed():
    assert probe_of(PROBES, "blocks.2") is PROBES["blocks.2"]
    assert probe_of(PROBES, "blocks.2", "nonpad") == {"erank": 5.0, "rho": 0.7}
    with pytest.raises(KeyError, match=r"no probe of 'blocks.3'; probed: \['blocks.0'"):
        probe_of(PROBES, "blocks.3")
    with pytest.raises(KeyError, match=r"probed: none \(diverged\?\)"):
        probe_of({}, "blocks.0")


def test_ffn_gradient_norms_combine_both_linears_of_each_block():
    grads = {f"blocks.{b}.mlp.{i}.{p}": float(10 * b + i + (p == "bias") * 100)
             for b in range(3) for i in (0, 2) for p in ("weight", "bias")}
    grads["blocks.0.attn.qkv.weight"] = 1e6  # not the FFN
    # block b: sqrt((10b)^2 + (10b + 2)^2) of the two weights, biases left out
    norms = lit().ffn_grad_norms(grads, 3)
    assert norms == pytest.approx([2.0, math.sqrt(100 + 144), math.sqrt(400 + 484)])
    assert lit().ffn_grad_ratio(grads, 3) == pytest.approx(math.sqrt(884) / 2.0)
    assert lit().ffn_grad_ratio(grads, 2) == pytest.approx(math.sqrt(244) / 2.0)


def test_weight_gradient_profile_reads_each_layers_weight():
    grads = {f"layers.{i}.{p}": float(i + 1 + (p == "bias") * 50)
             for i in range(12) for p in ("weight", "bias")}
    tanh = preset("tanh_mlp")  # its layers (10) are what the profile reads
    assert ex.weight_grad_profile(record(grads=grads, config=tanh)) == \
        [float(i + 1) for i in range(10)]
    three = tanh.override(**{"model.layers": 3})
    assert ex.weight_grad_profile(record(grads=grads, config=three)) == [1.0, 2.0, 3.0]
    # a seed's one run: log10(||grad W_1|| / ||grad W_10||) = log10(1 / 10)
    assert ex.log10_grad_ratio([record(grads=grads, config=tanh)]) == pytest.approx(-1.0)


def test_unit_correlation_is_the_last_hidden_layers_and_init_spread_the_test_accuracies():
    probes = {f"layers.{i}": {"unit_corr": 0.1 * (i + 1)} for i in range(3)}
    assert dd().unit_correlation(record(probes)) == pytest.approx(0.3)
    runs = [record(metrics={TEST_ACC: a, "train_acc": 1.0}) for a in (0.91, 0.85, 0.88)]
    assert dd().init_scale_spread(runs) == pytest.approx(0.06)
    assert dd().accuracy_spread([0.5]) == 0.0
    assert relative_difference(3.0, 2.0) == pytest.approx(0.5)


def test_each_experiment_holds_its_claims_settings():
    (enc,) = dm().ENCODER.changed({"model.norm": "l2"})(4, "cpu", "-masked")
    assert (enc.model.family, enc.model.norm, enc.train.seed, enc.model.pad_mask) == \
        ("encoder", "l2", 4, True)
    assert enc.model.layers == 6 and enc.model.placement == "post" and enc.data.name == "ag_news"
    assert dm().ENCODER(0, "paper", "-nonpad")[0].model.d == 128  # the paper preset
    x = lit().xiong("pre", 3, 2, norm="rmsnorm")
    assert (x.model.placement, x.model.layers, x.train.seed, x.model.norm) == ("pre", 3, 2,
                                                                               "rmsnorm")
    assert x.train.epochs == 0 and x.train.probe == ()  # at initialization, nothing probed
    m = dd().mlp("l2", 3, **{"train.batch_size": 8, "train.steps": 5, "model.init_scale": 2.0})
    assert (m.model.norm, m.train.seed, m.train.batch_size, m.train.steps) == ("l2", 3, 8, 5)
    assert m.model.init_scale == 2.0 and m.train.probe == ("layers.2",)
    assert m.train.probe_batch == 1000 and m.model.family == "mlp"
    assert dd().mlp("none", 0).train.batch_size == 64 and dd().mlp("none", 0).train.steps == 0
    (t,) = ex.TANH_MLP.changed({"model.norm": "layernorm", "model.residual": True})(5, "cpu")
    assert (t.train.seed, t.model.norm, t.model.residual, t.model.layers) == (5, "layernorm",
                                                                              True, 10)
    assert ex.TANH_MLP.norm == "none" and not ex.TANH_MLP(0, "cpu")[0].model.residual
    g = char_gpt(1, **{"model.norm": "dyt", "model.attention": "sigmoid",
                       "train.method": "fa", "train.steps": 7})
    assert (g.train.seed, g.model.norm, g.model.attention, g.train.method, g.train.steps) == \
        (1, "dyt", "sigmoid", "fa", 7)
    assert char_gpt(0).train.steps == 250 and char_gpt(0).model.attention == "softmax"
    assert dd().INIT_SCALES == (0.5, 1.0, 2.0)


def test_the_config_makers_the_negative_controls_call_without_a_tier_make_cpu_tier_runs():
    """The controls train the claims' own configs at the CPU tier, shrunk where they say so."""
    fa = importlib.import_module("normsys.declarations.fa_protocol")
    assert fa.fa_mlp("dfa", 3) == preset("resmlp", "cpu", **{
        "train.method": "dfa", "train.seed": 3, "train.frozen_blocks": False, "train.epochs": 2})
    long = fa.fa_mlp("fa", 1, "paper", frozen=True, epochs=10)
    assert (long.train.frozen_blocks, long.train.epochs, long.train.snapshots) == (True, 10, (1, 2, 5))
    assert long.train.device == "auto" and fa.fa_mlp("bp", 0, epochs=10).train.device == "cpu"
    assert dd().CNN(2, "cpu") == [preset("cnn", **{"train.seed": 2})]
    assert dd().LSTM(1, "cpu") == [preset("lstm", **{"train.seed": 1})]
    (lm,) = dd().TBLOCK_LM.changed({"model.norm": "rmsnorm"})(4, "cpu")
    assert (lm.model.family, lm.model.norm, lm.train.seed, lm.train.device, lm.train.steps) == \
        ("char_gpt", "rmsnorm", 4, "cpu", 500)
    tc = importlib.import_module("normsys.declarations.transformer_components")
    assert tc.ffn_stack(False, "none")(5, "cpu") == [preset("ffn_stack", **{
        "model.residual": False, "model.norm": "none", "train.seed": 5})]
    assert tc.ffn_stack(True, "layernorm")(0, "paper") == [
        preset("ffn_stack", "paper", **{"model.residual": True, "model.norm": "layernorm"})]
    assert dm().ENCODER(1, "cpu", "-masked") == [preset("encoder", **{"model.pad_mask": True,
                                                                      "train.seed": 1})]


def test_each_norm_generic_rule_reads_as_its_claims_were_fixed():
    assert str(dm().KAPPA_6.rule_of("l2")) == "kappa_6(l2) >= 0.8"
    rules = {dm().KAPPA_6: ("kappa_6(x)", ">=", 0.8),
             dm().MIN_RHO: ("min_l rho_l(x)", ">=", 0.5),
             dm().TEST_ACC_VS_LN: ("test_acc(layernorm) - test_acc(x)", "within", (-0.02, 0.02)),
             dd().DECORRELATION: ("corr(none) - corr(x)", ">", 0.0),
             dd().INIT_ROBUSTNESS: ("spread(none) - spread(x)", ">", 0.02),
             dd().GRAD_RATIO_VS_NONE: ("log10 ratio(x) - log10 ratio(plain)", ">", 1.0),
             lit().VAL_LOSS_VS_LN: ("(val(x) - val(LN)) / val(LN)", "within", (-0.02, 0.02)),
             lit().PRELN_FLATNESS: ("|log2(last / first)|", "<", 1.0)}
    for stat, (statistic, op, threshold) in rules.items():
        rule = stat.rule_of("x")
        assert (rule.statistic, rule.side, rule.threshold) == (statistic, op, threshold)


# ----------------------------------------------------------------------------- what a probe reads


def test_a_probe_measures_every_token_row_and_the_encoders_nonpad_rows_apart():
    """The encoder's probe of a block: its output over every (sequence, token) row, and without
    the rows whose token is [PAD] (id 0); unit correlation and token cosine of the same output."""
    import torch

    from normsys.training import diagnostics as dg
    from normsys.training.measure import probe
    from normsys.training.models import capture, prepare_model

    cfg = preset("encoder", **{"model.vocab": 30, "model.seq_len": 6, "model.d": 8,
                               "model.layers": 2, "train.probe": ("blocks.1",)})
    model = prepare_model(cfg)
    ids = torch.tensor([[5, 6, 7, 0, 0, 0], [8, 9, 0, 0, 0, 0], [3, 4, 5, 6, 7, 8]])
    with capture(model, ["blocks.1"]) as seen, torch.no_grad():
        model(ids)
    h = seen["blocks.1"]  # (3, 6, 8)
    got = probe(model, cfg, ids)["blocks.1"]
    rows = h.reshape(-1, 8)
    kept = torch.cat([h[0, :3], h[1, :2], h[2]])  # 11 rows that are not padding
    assert got["erank"] == pytest.approx(dg.effective_rank(rows), rel=1e-6)
    assert got["nonpad"]["erank"] == pytest.approx(dg.effective_rank(kept), rel=1e-6)
    assert got["nonpad"]["erank"] != pytest.approx(got["erank"], rel=1e-3)
    assert got["nonpad"]["mean_norm"] == pytest.approx(float(kept.norm(dim=-1).mean()), rel=1e-6)
    assert got["unit_corr"] == pytest.approx(dg.hidden_unit_correlation(h), rel=1e-6)
    assert got["token_cosine"] == pytest.approx(dg.token_cosine(h), rel=1e-6)
    assert got["rho"] == pytest.approx(got["erank"] / 8)


def test_a_probe_of_a_row_model_has_neither_token_cosine_nor_nonpad_rows():
    import torch

    from normsys.training.measure import probe
    from normsys.training.models import prepare_model

    cfg = preset("mlp", **{"model.d": 8, "train.probe": ("layers.0", "layers.2")})
    got = probe(prepare_model(cfg), cfg, torch.randn(16, 784))
    assert set(got) == {"layers.0", "layers.2"}
    assert set(got["layers.2"]) == {"singular_values", "erank", "rho", "stable_rank",
                                    "mean_norm", "unit_corr"}
    assert got["layers.0"]["erank"] != got["layers.2"]["erank"]
    assert probe(prepare_model(cfg), cfg.override(**{"train.probe": ()}),
                 torch.randn(4, 784)) == {}


def test_each_experiment_takes_its_tier_and_its_defaults():
    """The paper tier's settings reach every experiment (its device is the GPU's), and the
    defaults are the claims' own: LayerNorm for Xiong et al., weights at scale 1 for the MLP."""
    for paper in (dm().ENCODER(0, "paper", "")[0], lit().xiong("pre", 2, 0, "paper"),
                  dd().mlp("l2", 0, "paper"), ex.TANH_MLP(0, "paper")[0],
                  char_gpt(0, "paper")):
        assert paper.train.device == "auto", paper.model.family
    assert lit().xiong("post", 6, 0).model.norm == "layernorm"
    assert lit().xiong("post", 6, 0).train.device == "cpu"
    assert dd().mlp("none", 0).model.init_scale == 1.0 and char_gpt(0).model.norm == "layernorm"
    assert char_gpt(0).train.method == "bp"


def test_at_init_measures_the_edited_model_on_the_probe_batch():
    """measure.at_init, as the negative controls use it: the model of the config at init, edited
    first, its gradients and probes on the task's fixed probe batch."""
    import torch

    from normsys.training.measure import at_init
    from normsys.training.tasks import make_task

    cfg = preset("tanh_mlp", **{"model.d": 8, "model.layers": 3, "data.batch_shape": (16, 8),
                                "train.probe": ("layers.1",)})
    task = make_task(cfg)
    plain = at_init(cfg, task)
    x0, _ = task.probe_batch(cfg)
    assert torch.equal(plain.x, x0) and set(plain.probes) == {"layers.1"}
    assert set(plain.grads) == {f"layers.{i}.{p}" for i in range(3) for p in ("weight", "bias")}

    def silence_second_layer(model):
        model.layers[1].weight.zero_()

    edited = at_init(cfg, task, silence_second_layer)
    assert edited.grads["layers.0.weight"] == 0.0 < plain.grads["layers.0.weight"]
    assert edited.probes["layers.1"]["erank"] != plain.probes["layers.1"]["erank"]
    assert at_init(cfg.override(**{"train.probe": ()}), task).probes == {}


# ----------------------------------------------------------------------------- a claim file's readers


def test_the_rank_readers_take_the_rows_their_variant_names():
    """kappa_6 and min_rho of one seed's run: every row, or without the padding (-nonpad); the
    -masked variant trains otherwise and reads every row."""
    runs = [record(PROBES)]
    assert dm().kappa_6(runs) == dm().kappa_6(runs, "-masked") == pytest.approx(2.0 / 8.0)
    assert dm().kappa_6(runs, "-nonpad") == pytest.approx(4.5 / 6.0)
    assert dm().min_rho_of(runs) == pytest.approx(0.4)
    assert dm().min_rho_of(runs, "-nonpad") == pytest.approx(0.3)
    assert [dm().rows_of(v) for v in ("", "-nonpad", "-masked")] == ["all", "nonpad", "all"]


def test_the_gap_is_train_minus_test_accuracy_of_the_seeds_run():
    from normsys.training.record import TRAIN_ACC

    assert dm().gap_of([record(metrics={TRAIN_ACC: 0.97, TEST_ACC: 0.85})]) == pytest.approx(0.12)


def test_xiongs_readers_take_each_runs_depth_from_its_config():
    """One seed's runs at 6 and 12 blocks: each run's last / first FFN gradient ratio, keyed by
    the depth its config says, and |log2| of it."""
    def run(blocks: int, last: float):
        grads = {f"blocks.{b}.mlp.{i}.weight": (last if b == blocks - 1 else 1.0) / math.sqrt(2)
                 for b in range(blocks) for i in (0, 2)}
        return record(grads=grads, config=lit().xiong("pre", blocks, 0))

    runs = [run(6, 4.0), run(12, 0.5)]
    assert [lit().blocks(r) for r in runs] == [6, 12]
    assert lit().depth_ratios(runs) == pytest.approx({"6 blocks": 4.0, "12 blocks": 0.5})
    assert lit().log2_depth_ratios(runs) == pytest.approx({"6 blocks": 2.0, "12 blocks": 1.0})


def test_dongs_reader_is_the_residual_at_depth_over_the_input():
    residuals = [2.0, 1.0, 0.5, 0.25, 0.1, 0.05, 0.01, 7.0]
    assert dong().depth_ratio(residuals) == pytest.approx(0.005)
    assert dong().depth_ratio(residuals, depth=3) == pytest.approx(0.125)


def test_the_deep_dives_readers_and_the_ffn_stacks_margins():
    probes = {f"layers.{i}": {"unit_corr": 0.1 * (i + 1)} for i in range(3)}
    assert dd().correlation([record(probes)]) == pytest.approx(0.3)
    run = record(config=preset("mlp"))
    run.curves = {"batch_acc": [0.0] * 40 + [1.0] * 200}
    # the window of batches 36 ... 85 is the first with at most 5 misses of 50: 90% at step 85
    assert dd().steps_to_90([run]) == 85
    assert dd().steps_ratio(30.0, 60.0) == 0.5
    tc = importlib.import_module("normsys.declarations.transformer_components")
    assert tc.loss_margins(1.0, 1.5, 2.0, 0.75) == {
        "loss(residual only) - loss(residual+LN)": 0.5, "loss(LN only) - loss(residual+LN)": 1.0,
        "loss(neither) - loss(residual+LN)": -0.25}


def test_xiongs_encoders_train_the_norm_they_are_given():
    """The pre-LN flatness column of the scorecard asks it of any kind: each depth's run is of
    that kind, at the placement and tier given."""
    runs = lit().xiong_encoders("pre").changed({"model.norm": "rmsnorm"})(3, "cpu")
    assert [(c.model.norm, c.model.placement, c.model.layers, c.train.seed) for c in runs] == \
        [("rmsnorm", "pre", depth, 3) for depth in lit().DEPTHS]




def lj():
    return importlib.import_module("normsys.declarations.ln_jacobian")


def test_the_jacobian_claims_read_each_layernorm_of_the_trained_net_through_its_own_backward(
        data_env, monkeypatch):
    """On a fresh validation batch (never trained on), every LayerNorm of the trained model as its
    learning rule runs it backward: an FA net's dL/dout comes through its feedback matrices,
    not through W^T."""
    from normsys.declarations.shared.protocol import (
        layernorm_gradients,
        ln_decomposition_summary,
        ln_vjp_errors,
    )
    from normsys.orchestration.runs import Runs
    from normsys.training.data import tiny_shakespeare
    from normsys.training.record import trained_model
    from normsys.training.tasks import lm_batch

    monkeypatch.setenv("NORMSYS_CACHE", "off")
    small = {"model.d": 32, "model.layers": 1, "model.seq_len": 32, "train.batch_size": 8}
    fa, bp = (Runs().run(char_gpt(0, **{"train.method": m, "train.steps": 3, **small}))
              for m in ("fa", "bp"))
    x, y = ex.fresh_lm_batch(fa.run_config)
    _, val, _ = tiny_shakespeare()
    x_again, _ = lm_batch(val, 32, 8, torch.Generator().manual_seed(12_345))
    assert torch.equal(x, x_again) and x.shape == (8, 32)
    assert not torch.equal(x, ex.fresh_lm_batch(fa.run_config, seed=1)[0])
    captures = lj().captures_of(fa)
    own = layernorm_gradients(trained_model(fa), x, y)
    plain = layernorm_gradients(trained_model(fa, learning_rule=False), x, y)
    assert len(captures) == 3  # two in the block, the final one
    for c, o in zip(captures, own, strict=True):
        assert torch.equal(c["x"], o["x"]) and torch.equal(c["grad_out"], o["grad_out"])
    assert not all(torch.equal(c["grad_out"], p["grad_out"]) for c, p in zip(captures, plain,
                                                                              strict=True))
    assert lj().max_vjp_error([bp]) == max(ln_vjp_errors(lj().captures_of(bp)))
    assert lj().cos_center_scale([fa]) == ln_decomposition_summary(captures)["cos_center_scale"]
    assert lj().cos_center_scale([fa]) != ln_decomposition_summary(captures, False)[
        "cos_center_scale"]


def test_the_fa_protocol_measures_a_trained_nets_weights_by_backprop_after_the_epoch_asked(
        data_env, monkeypatch):
    """An FA net is measured through W^T (a plain model with its weights), not through its
    feedback matrices; ``epoch``: the weights it kept after that epoch."""
    from normsys.declarations.shared.protocol import mnist_report
    from normsys.orchestration.runs import Runs
    from normsys.training.record import trained_model

    fa_file = importlib.import_module("normsys.declarations.fa_protocol")
    monkeypatch.setenv("NORMSYS_CACHE", "off")
    cfg = fa_file.fa_mlp("fa", 0).override(**{"data.n_train": 256, "data.n_test": 128,
                                               "train.snapshots": (1,)})
    record = Runs().run(cfg)
    report = fa_file.fa_protocol(record)
    assert report == mnist_report(trained_model(record, learning_rule=False))
    assert report != mnist_report(trained_model(record))  # its feedback's gradients differ
    after_one = fa_file.fa_protocol(record, 1)
    assert after_one == mnist_report(trained_model(record, learning_rule=False, epoch=1))
    assert after_one["stability"] != report["stability"]
    assert fa_file.stability_of([record]) == report["stability"]
    evidence = importlib.import_module("claims.test_fa_protocol")  # the claim file's own helpers
    assert evidence.stabilities([(record, report), (record, after_one)]) == [
        report["stability"], after_one["stability"]]
    assert evidence.trained_accuracies([(record, report)]) == [record.metrics["test_acc"]]
    assert fa_file.trained_by("dfa", frozen=True)(3, "cpu", "-long") == [
        fa_file.fa_mlp("dfa", 3, "cpu", True, 10)]


def test_dongs_attention_stack_is_the_claims_setting_each_layer_added_to_its_input_with_skips():
    """Random self-attention layers (d=64, one head, torch's seed the claim seed) on 8 sequences
    of 32 tokens (their own generator, seed + 1); with skips each layer's output is added."""
    from normsys.training.diagnostics import rank_collapse_residual
    from normsys.training.models import Attention

    torch.manual_seed(3)
    layer = Attention(64, 1)
    x = torch.randn(8, 32, 64, generator=torch.Generator().manual_seed(4))
    with torch.no_grad():
        pure, skip = layer(x), x + layer(x)
    res = [rank_collapse_residual(h) for h in (x, pure, skip)]
    assert dong().attention_stack_residuals(3, depth=1) == res[:2]
    assert dong().attention_stack_residuals(3, depth=1, skips=True) == [res[0], res[2]]
    six = dong().attention_stack_residuals(3)
    assert six == dong().attention_stack_residuals(3, depth=6, skips=False, d=64, tokens=32,
                                                  batch=8, heads=1)
    assert len(six) == 7 and six[:2] == res[:2]


def test_the_deep_mlps_reading_is_the_first_hidden_linear_over_the_last_and_nan_for_a_zero():
    """Yang's ratio reads each hidden layer's Linear weight (not its norm's gain, not the head)
    of the config's depth, first over last; a gradient that underflowed to 0 gives no ratio."""
    mf = importlib.import_module("normsys.declarations.mean_field")
    (cfg,) = mf.DEEP_MLP.changed({"model.layers": 3})(0, "cpu")
    grads = {"layers.0.0.weight": 100.0, "layers.1.0.weight": 10.0, "layers.2.0.weight": 1.0,
             "layers.0.1.weight": 7.0, "layers.2.1.weight": 9.0, "head.weight": 1e6}
    run = record(grads=grads, config=cfg)
    assert mf.hidden_grad_profile(run) == [100.0, 10.0, 1.0]
    assert mf.input_over_output([run]) == pytest.approx(2.0)
    assert (cfg.model.family, cfg.model.act, cfg.train.epochs) == ("mlp", "relu", 0)
    assert mf.DEEP_MLP(0, "cpu")[0].model.layers == 32
    assert math.isnan(mf.input_over_output([record(grads={**grads, "layers.0.0.weight": 0.0},
                                                   config=cfg)]))
