"""Edges the known values leave open, each found by mutation testing (README, "What the
tests pin down"): reductions over the last dimension seen on 3-D input, defaults that must be the norms'
own eps, boundaries, float64 where float32 rounds a measured value away, the t distribution away
from the 95% point, and the fields a decision carries into the report and the ledger."""

from __future__ import annotations

import math
from dataclasses import fields

import pytest
import torch
import torch.nn.functional as F

from normsys.claims.ledger import RECORDED, Entry
from normsys.claims.verdict import (
    INCONCLUSIVE,
    LEVEL,
    REFUTED,
    SUPPORTED,
    Rule,
    Verdict,
    decide,
    t_cdf_two_sided,
    t_quantile,
)
from normsys.declarations.shared.protocol import ln_decomposition_summary, ln_vjp_errors
from normsys.training import diagnostics as dg
from normsys.training import norms
from normsys.training.config import preset
from tests.test_verdict import all_of, on, paired, summary, within

# ----------------------------------------------------------------------------- the t distribution


@pytest.mark.parametrize("t", [0.3, 1.0, 2.5, 7.0])
def test_t_cdf_has_its_closed_forms_for_one_to_four_degrees_of_freedom(t):
    """P(|T| < t): df 1: 2/pi atan(t); df 2: t / sqrt(t^2 + 2); df 3: 2/pi (th + sin th cos th),
    th = atan(t / sqrt 3); df 4: sin th (1 + cos^2 th / 2), th = atan(t / 2)."""
    th3, th4 = math.atan(t / math.sqrt(3)), math.atan(t / 2)
    closed = {1: 2 / math.pi * math.atan(t), 2: t / math.sqrt(t * t + 2),
              3: 2 / math.pi * (th3 + math.sin(th3) * math.cos(th3)),
              4: math.sin(th4) * (1 + math.cos(th4) ** 2 / 2)}
    for df, p in closed.items():
        assert t_cdf_two_sided(t, df) == pytest.approx(p, rel=1e-12)
        assert t_cdf_two_sided(-t, df) == t_cdf_two_sided(t, df)


@pytest.mark.parametrize("df,t95,t99", [(5, 2.5706, 4.0321), (6, 2.4469, 3.7074),
                                        (7, 2.3646, 3.4995), (10, 2.2281, 3.1693),
                                        (11, 2.2010, 3.1058), (30, 2.0423, 2.7500)])
def test_t_cdf_and_quantile_match_the_table_where_the_series_runs_long(df, t95, t99):
    assert t_cdf_two_sided(t95, df) == pytest.approx(0.95, abs=2e-5)
    assert t_cdf_two_sided(t99, df) == pytest.approx(0.99, abs=2e-5)
    t_quantile.cache_clear()  # computed here, not read from an earlier test's cache
    assert t_quantile(df, 0.95) == pytest.approx(t95, abs=1e-4)
    assert t_quantile(df, 0.99) == pytest.approx(t99, abs=1e-4)

# ----------------------------------------------------------------------------- decisions


def test_paired_differences_refuse_unpaired_seeds():
    with pytest.raises(ValueError, match="one value per seed on both sides, got 3 and 2"):
        paired([1.0, 2.0, 3.0], [1.0, 2.0], ">", 0.0)


def test_decide_paired_uses_the_confidence_it_is_given():
    a, b = [1.0, 1.3, 0.8], [0.0, 0.0, 0.0]  # mean 1.03, sd 0.25: t* 4.30 crosses 0, t* 0.82 not
    assert paired(a, b, ">", 0.5).verdict == INCONCLUSIVE
    assert paired(a, b, ">", 0.5, confidence=0.5).verdict == SUPPORTED


def test_decision_to_dict_names_its_fields():
    d = on([1.0, 2.0, 3.0], ">", 0.0, LEVEL)
    made = {k: v for k, v in d.to_dict().items() if v != Verdict(verdict="").to_dict()[k]
            and not (isinstance(v, float) and math.isnan(v))}
    assert set(made) == {"verdict", "rule", "values", "mean", "std", "n", "low", "high",
                         "reason", "margin"}  # a decision's fields, no claim's
    assert set(d.to_dict()) == {f.name for f in fields(Verdict)}  # nothing of an entry or a row
    assert d.to_dict()["verdict"] == d.verdict and d.to_dict()["rule"] == "> 0"
    assert set(Entry(verdict="").entry) == set(RECORDED) - {"parts"}  # an all-of rule's
    assert set(Entry(verdict="", parts={"a": [1.0]}).entry) == set(RECORDED)
    assert not {"id", "statement", "ledger", "evidence"} & {f.name for f in fields(Entry)}


def test_decide_all_says_which_comparison_holds_how_and_keeps_each():
    values = {"6 blocks": [2.0, 2.1, 2.2], "12 blocks": [3.0, 3.1, 3.2]}
    parts = {name: on(v, ">", 1.0, family=2) for name, v in values.items()}
    d = all_of(values, ">", 1.0)
    assert d.rule == "all of 2 (Holm): > 1"
    assert d.reason == ("deciding: 6 blocks. 6 blocks: supported (mean 2.1, 95% CI [1.852, "
                        "2.348], n=3); 12 blocks: supported (mean 3.1, 95% CI [2.852, 3.348], n=3)")
    assert d.comparisons == {name: p.to_dict() for name, p in parts.items()}
    assert d.parts == values  # every comparison's per-seed values, for the record
    assert d.margin == min(p.margin for p in parts.values())

# ----------------------------------------------------------------------------- diagnostics


def test_normalized_effective_rank_divides_by_the_feature_size_of_3d_input():
    h = torch.randn(2, 5, 4, dtype=torch.float64)
    assert dg.normalized_effective_rank(h) == pytest.approx(dg.effective_rank(h) / 4)


def test_collapse_ratios_of_one_layer_and_of_none():
    assert dg.collapse_ratios([2.5]) == [1.0]
    with pytest.raises(ValueError, match="at least one effective rank"):
        dg.collapse_ratios([])


def test_steps_to_accuracy_with_exactly_one_window_of_batches():
    assert dg.steps_to_accuracy([1.0] * 50) == 50.0
    assert math.isnan(dg.steps_to_accuracy([1.0] * 49))


def test_rank_collapse_residual_is_float64_per_sequence_and_scale_free():
    # float32 rows 1 and 1 + 2^-23: their mean 1 + 2^-24 is not a float32, so float32 arithmetic
    # measures a residual sqrt(2) too large; in float64 it is 2^-24 (the Dong claim reads 1e-8s)
    eps = 2.0**-23
    h = torch.tensor([[1.0], [1.0 + eps]], dtype=torch.float32)
    assert dg.rank_collapse_residual(h) == pytest.approx(eps / 2, rel=1e-6)
    a, b = torch.randn(4, 3, dtype=torch.float64), torch.ones(4, 3, dtype=torch.float64)
    b[0] += 1.0
    both = torch.stack([a, 100 * b])  # a batch of two: the mean of their two residuals
    expected = (dg.rank_collapse_residual(a) + dg.rank_collapse_residual(b)) / 2
    assert dg.rank_collapse_residual(both) == pytest.approx(expected, rel=1e-12)
    assert dg.rank_collapse_residual(1e-3 * a) == pytest.approx(dg.rank_collapse_residual(a))
    with pytest.raises(ValueError, match=r"needs \(T, d\) or \(B, T, d\), got \(2, 2, 2, 2\)"):
        dg.rank_collapse_residual(torch.ones(2, 2, 2, 2))


def test_row_cosine_is_over_the_last_dimension_of_3d_input():
    a, b = torch.randn(2, 3, 5, dtype=torch.float64), torch.randn(2, 3, 5, dtype=torch.float64)
    expected = F.cosine_similarity(a, b, dim=-1).mean()
    assert dg.row_cosine(a, b) == pytest.approx(float(expected), rel=1e-12)


def test_ln_jacobian_decomposition_is_float64_with_layernorms_eps_by_default():
    x = 1e-3 * torch.randn(3, 8)  # small variance: eps matters
    g = torch.randn(3, 8)
    d = dg.ln_jacobian_decomposition(x, g)
    for field in ("true_grad", "center_scale", "identity", "mean_component", "radial_component",
                  "sigma"):
        assert getattr(d, field).dtype == torch.float64, field
    assert torch.equal(d.identity, g.double())
    explicit = dg.ln_jacobian_decomposition(x, g, eps=1e-5)
    assert torch.equal(d.true_grad, explicit.true_grad)
    assert not torch.allclose(dg.ln_jacobian_decomposition(x, g, eps=1.0).true_grad, d.true_grad)

# ----------------------------------------------------------------------------- analytic VJPs


def vjp_by_autograd(f, x, g):
    x = x.clone().requires_grad_(True)
    (grad,) = torch.autograd.grad(f(x), x, g)
    return grad


def test_rms_and_l2_vjps_reduce_over_the_last_dim_with_and_without_a_gain():
    x, g = torch.randn(2, 3, 6, dtype=torch.float64), torch.randn(2, 3, 6, dtype=torch.float64)
    w = torch.rand(6, dtype=torch.float64) + 0.5
    for weight in (None, w):
        assert torch.allclose(norms.rms_norm_vjp(x, g, weight),
                              vjp_by_autograd(lambda t, w_=weight: norms.rms_norm(t, w_), x, g))
        assert torch.allclose(norms.l2_norm_vjp(x, g, weight),
                              vjp_by_autograd(lambda t, w_=weight: norms.l2_norm.eager(t, w_), x, g))


def test_rms_defaults_are_rms_norms_eps():
    x, g = 1e-4 * torch.randn(3, 6, dtype=torch.float64), torch.randn(3, 6, dtype=torch.float64)
    assert torch.equal(norms.rms_norm_reference(x), norms.rms_norm_reference(x, eps=1e-6))
    assert torch.allclose(norms.rms_norm_vjp(x, g), vjp_by_autograd(norms.rms_norm, x, g))


def test_l2_vjp_at_the_floor_is_autograds():
    """A row whose norm is exactly the 1e-9 floor is on the normalizing side (autograd's
    clamp_min passes the gradient at equality)."""
    x = torch.zeros(1, 3, dtype=torch.float64)
    x[0, 0] = norms.L2_FLOOR
    g = torch.tensor([[1.0, 2.0, 3.0]], dtype=torch.float64)
    assert torch.allclose(norms.l2_norm_vjp(x, g), vjp_by_autograd(norms.l2_norm.eager, x, g))


def test_protocol_reads_the_layernorms_own_gain_and_eps():
    """ln_vjp_errors through a LayerNorm with a trained-like gain (not 1), and the decomposition
    summary with the module's eps (not the default)."""
    torch.manual_seed(0)
    m = norms.LayerNorm(8, eps=0.1)
    with torch.no_grad():
        m.weight.copy_(torch.rand(8) + 0.5)
    captures = [{"module": m, "x": 0.1 * torch.randn(4, 8), "grad_out": torch.randn(4, 8)}]
    assert max(ln_vjp_errors(captures)) < 1e-5
    summary = ln_decomposition_summary(captures)
    direct = dg.ln_jacobian_decomposition(captures[0]["x"], captures[0]["grad_out"], m.weight,
                                          eps=0.1)
    assert summary["cos_center_scale"] == pytest.approx(direct.cos_center_scale, rel=1e-12)
    assert summary["r_radial"] == pytest.approx(direct.r_radial, rel=1e-12)

# ----------------------------------------------------------------------------- protocol captures


def test_layernorm_gradients_capture_each_layernorms_input_and_output_gradient():
    """What a capture holds is checked against the gain's and bias's own gradients, which the
    same backward pass fills: dL/dgain = sum over rows of dL/dout * z, dL/dbias = sum dL/dout."""
    from normsys.declarations.shared.protocol import layernorm_gradients
    from normsys.training.models import build_model

    torch.manual_seed(0)
    cfg = preset("char_gpt", **{"model.d": 32, "model.layers": 2})
    model = build_model(cfg.model)
    x = torch.randint(0, cfg.model.vocab, (4, cfg.model.seq_len))
    y = torch.randint(0, cfg.model.vocab, (4, cfg.model.seq_len))
    captures = layernorm_gradients(model, x, y)
    names = [n for n, m in model.named_modules() if isinstance(m, norms.LayerNorm)]
    assert [c["name"] for c in captures] == names and len(names) == 5
    for c in captures:
        m, g = c["module"], c["grad_out"]
        z = norms.layer_norm(c["x"], eps=m.eps)
        assert torch.allclose(m.weight.grad, (g * z).sum((0, 1)), atol=1e-6)
        assert torch.allclose(m.bias.grad, g.sum((0, 1)), atol=1e-6)


def test_mnist_report_reads_eight_disjoint_test_batches_of_128(data_env):
    from normsys.declarations.shared.protocol import disjoint_batches, fa_protocol_report, mnist_report
    from normsys.training.data import mnist
    from normsys.training.models import build_model

    torch.manual_seed(0)
    model = build_model(preset("resmlp", **{"model.d": 32}).model)
    report = mnist_report(model)
    split = mnist()
    assert report == fa_protocol_report(model, disjoint_batches(split.x_test, split.y_test, 8, 128))
    assert report["n_batches"] == 8
    assert report != fa_protocol_report(model, disjoint_batches(split.x_test, split.y_test, 8, 64))


def test_arms_are_paired_and_parts_decided_at_the_confidence_given():
    rule = Rule("a - b", ">", 0.5)
    a, b = [1.0, 1.3, 0.8], [0.0, 0.0, 0.0]
    assert decide(rule, {"a": a, "b": b}) == on([1.0, 1.3, 0.8], ">", 0.5, LEVEL)
    assert decide(rule, {"a": a, "b": b}, 0.5).verdict == SUPPORTED  # its confidence is used
    parts = {"x": [1.0, 1.1, 1.2], "y": [0.6, 0.7, 2.0]}
    assert all_of(parts, ">", 0.5).comparisons == {
        k: on(v, ">", 0.5, family=2).to_dict() for k, v in parts.items()}
    assert all_of(parts, ">", 0.5, 0.5).comparisons == {
        k: on(v, ">", 0.5, 0.5, family=2).to_dict() for k, v in parts.items()}


# ----------------------------------------------------------------------------- the FA protocol


def protocol_model(family: str):
    from normsys.training.models import build_model

    torch.manual_seed(0)
    return build_model(preset(family, **{"model.d": 32, "model.layers": 2}).model)


def mnist_batches(n: int, size: int):
    from normsys.declarations.shared.protocol import disjoint_batches
    from normsys.training.data import mnist

    split = mnist()
    return disjoint_batches(split.x_test, split.y_test, n, size)


def test_protocol_reads_token_models_at_their_class_token(data_env):
    from normsys.declarations.shared.protocol import hidden_and_grads

    model = protocol_model("vit")
    x, y = mnist_batches(1, 16)[0]
    hidden, grads = hidden_and_grads(model, x, y)
    _, full = model.eval()(x, return_hidden=True)
    assert len(hidden) == len(full) and all(h.dim() == 2 and g.dim() == 2
                                            for h, g in zip(hidden, grads, strict=True))
    for h, f in zip(hidden, full, strict=True):
        assert torch.equal(h, f[:, 0].detach())


def test_fa_protocol_report_at_a_given_layer_and_out_of_range(data_env):
    from normsys.declarations.shared.protocol import fa_protocol_report

    model, batches = protocol_model("resmlp"), mnist_batches(3, 32)
    assert fa_protocol_report(model, batches)["layer"] == 1  # h_0 ... h_2: the middle one
    assert fa_protocol_report(model, batches, layer=0)["layer"] == 0
    with pytest.raises(ValueError, match=r"^layer 3 out of range: the model has h_0 \.\.\. h_2$"):
        fa_protocol_report(model, batches, layer=3)


def test_disjoint_batches_default_to_eight_of_128_and_need_the_rows():
    from normsys.declarations.shared.protocol import disjoint_batches

    x, y = torch.randn(1024, 3), torch.arange(1024)
    batches = disjoint_batches(x, y)
    assert [len(b[1]) for b in batches] == [128] * 8
    assert torch.equal(torch.cat([b[1] for b in batches]), y)  # disjoint and in order
    with pytest.raises(ValueError, match=r"^8 disjoint batches of 128 need 1024 rows, have 1023$"):
        disjoint_batches(x[:1023], y[:1023])


def test_mnist_report_passes_its_batch_size_on(data_env):
    from normsys.declarations.shared.protocol import fa_protocol_report, mnist_report

    model = protocol_model("resmlp")
    assert mnist_report(model, 2, 64) == fa_protocol_report(model, mnist_batches(2, 64))


def test_layernorm_gradients_start_from_cleared_gradients():
    from normsys.declarations.shared.protocol import layernorm_gradients
    from normsys.training.models import build_model

    torch.manual_seed(0)
    cfg = preset("char_gpt", **{"model.d": 32, "model.layers": 1})
    model = build_model(cfg.model)
    x = torch.randint(0, cfg.model.vocab, (2, cfg.model.seq_len))
    layernorm_gradients(model, x, x)
    once = {n: p.grad.clone() for n, p in model.named_parameters()}
    layernorm_gradients(model, x, x)
    assert all(torch.equal(p.grad, once[n]) for n, p in model.named_parameters())

# ----------------------------------------------------------------------------- decisions (band)


def test_equivalence_band_edges_margin_and_diverged_seeds():
    low, high = -0.02, 0.02
    assert within([0.02] * 3, low, high).verdict == REFUTED
    assert within([-0.02] * 3, low, high).verdict == REFUTED
    d = within([0.0, 0.001, -0.001], low, high)
    assert d.verdict == SUPPORTED and d.rule == "within (-0.02, 0.02)"
    assert d.margin == pytest.approx(min(d.low - low, high - d.high))
    assert d.reason == f"mean 0, 96.5% CI [{d.low:.4g}, {d.high:.4g}], n=3; " \
                      f"claim: within (-0.02, 0.02)"
    nan = within([0.0, math.nan, 0.01], low, high)
    assert (nan.verdict, nan.rule, nan.reason) == (
        INCONCLUSIVE, "within (-0.02, 0.02)", "1 of 3 seeds gave NaN (diverged)")
    assert nan.n == 3 and nan.n_nan == 1
    with pytest.raises(ValueError, match="low < high"):
        within([0.0, 0.1], 0.02, 0.02)

# ----------------------------------------------------------------------------- norms' defaults


def test_functional_defaults_are_the_norms_own_eps():
    x, g = 1e-3 * torch.randn(2, 3, 6, dtype=torch.float64), torch.randn(2, 3, 6, dtype=torch.float64)
    assert torch.equal(norms.layer_norm_reference(x), norms.layer_norm_reference(x, eps=1e-5))
    assert torch.equal(norms.layer_norm_vjp(x, g), norms.layer_norm_vjp(x, g, eps=1e-5))
    parts, explicit = norms.layer_norm_vjp_parts(x, g), norms.layer_norm_vjp_parts(x, g, eps=1e-5)
    assert all(torch.equal(a, b) for a, b in zip(parts, explicit, strict=True))
    # and over the last dim of 3-D input, as autograd has it
    assert torch.allclose(norms.layer_norm_vjp(x, g), vjp_by_autograd(norms.layer_norm, x, g))


def test_stacked_rms_norm_keeps_its_eps():
    x = 1e-4 * torch.randn(2 * 3, 5, dtype=torch.float64)  # two seeds' rows, stacked
    w = torch.rand(2, 5, dtype=torch.float64) + 0.5
    out = norms.rms_norm(x, w, eps=1e-6)
    for s in range(2):
        rows = x.reshape(2, 3, 5)[s]
        assert torch.allclose(out.reshape(2, 3, 5)[s], norms.rms_norm_reference(rows, w[s], 1e-6))


def test_batch_norm_function_defaults_train_with_momentum_and_eps():
    x = 1e-3 * torch.randn(8, 4, dtype=torch.float64)
    mean, var = torch.zeros(4, dtype=torch.float64), torch.ones(4, dtype=torch.float64)
    out = norms.batch_norm(x, mean, var)
    assert torch.allclose(out, F.batch_norm(x, None, None, training=True, eps=1e-5))
    assert torch.allclose(mean, 0.1 * x.mean(0))  # running statistics moved by momentum 0.1


def test_norm_modules_keep_their_options():
    assert norms.RMSNorm(4).eps == 1e-6 and isinstance(norms.RMSNorm(4).weight, torch.nn.Parameter)
    assert norms.RMSNorm(4, affine=False).weight is None
    assert [n for n, _ in norms.BatchNorm(4).named_parameters()] == ["weight", "bias"]
    x = 1e-2 * torch.randn(6, 4)
    assert torch.allclose(norms.RMSNorm(4, eps=0.1)(x), norms.rms_norm_reference(x, None, 0.1))
    bn = norms.BatchNorm(4, eps=0.5)
    assert torch.allclose(bn(x), F.batch_norm(x, None, None, training=True, eps=0.5), atol=1e-6)
    assert norms.BatchNorm(4)(torch.randn(2, 4)).shape == (2, 4)  # two rows: enough statistics
    for kind in norms.BUILTIN:
        assert norms.build_norm(kind, 7).dim == 7, kind

# ----------------------------------------------------------------------------- summaries, decisions


def test_summary_fields_when_seeds_diverge_with_one_seed_and_with_several():
    """Every field of the three kinds of summary: a diverged seed makes the statistics NaN but
    keeps the values and counts; one seed has an infinite interval; the confidence carries."""
    nan = summary([0.1, math.nan, 0.3], confidence=0.9)
    assert nan.values[0] == 0.1 and math.isnan(nan.values[1]) and nan.values[2] == 0.3
    assert all(math.isnan(v) for v in (nan.mean, nan.std, nan.low, nan.high))
    assert (nan.n, nan.n_nan, nan.confidence) == (3, 1, 0.9)
    one = summary([0.25], confidence=0.9)
    assert (one.values, one.mean, one.n, one.low, one.high, one.n_nan, one.confidence) == (
        (0.25,), 0.25, 1, -math.inf, math.inf, 0, 0.9)
    assert math.isnan(one.std)
    many = summary([1.0, 2.0, 3.0], confidence=0.9)
    half = t_quantile(2, 0.9) * 1.0 / math.sqrt(3)
    assert (many.values, many.mean, many.std, many.n, many.n_nan, many.confidence) == (
        (1.0, 2.0, 3.0), 2.0, 1.0, 3, 0, 0.9)
    assert (many.low, many.high) == pytest.approx((2.0 - half, 2.0 + half), rel=1e-12)
    assert summary([1.0, 2.0]).confidence == 0.95


@pytest.mark.parametrize("side,verdict", [(">", REFUTED), (">=", SUPPORTED),
                                          ("<", REFUTED), ("<=", SUPPORTED)])
def test_an_interval_ending_exactly_on_the_threshold(side, verdict):
    """Zero spread puts the whole interval on the threshold: strict sides fail there, the others
    hold."""
    d = on([0.5, 0.5, 0.5], side, 0.5)
    assert d.verdict == verdict and d.margin == 0.0


def test_margin_reason_and_rule_of_a_decision():
    up = on([0.9, 1.0, 1.1], ">", 0.4)
    assert up.margin == pytest.approx(up.low - 0.4)
    at_least = on([0.9, 1.0, 1.1], ">=", 0.4)
    assert at_least.margin == pytest.approx(at_least.low - 0.4)
    down = on([0.9, 1.0, 1.1], "<=", 2.0)
    assert down.margin == pytest.approx(2.0 - down.high)
    assert up.rule == "> 0.4" and up.reason == (
        f"mean 1, 95% CI [{up.low:.4g}, {up.high:.4g}], n=3; claim: greater than 0.4")
    diverged = on([0.9, math.nan, 1.1], ">", 0.4)
    assert (diverged.verdict, diverged.rule) == (INCONCLUSIVE, "> 0.4")


def test_equivalence_margin_is_the_nearer_edge_of_a_lopsided_interval():
    d = within([0.005, 0.006, 0.007], -0.02, 0.02)
    assert d.verdict == SUPPORTED
    assert d.margin == pytest.approx(0.02 - d.high)  # the upper edge is the nearer
    assert d.margin < d.low + 0.02


@pytest.mark.parametrize("stability,reading", [
    (0.5, "stable gradient directions (DFA-like: reference 0.5-0.99)"),
    (0.4999, "intermediate stability (between the BP and DFA reference ranges)"),
    (0.1801, "intermediate stability (between the BP and DFA reference ranges)"),
    (0.18, "batch-specific gradient directions (healthy BP-like: reference 0.05-0.18)"),
])
def test_fa_protocol_report_reading_at_the_range_edges(stability, reading, data_env, monkeypatch):
    """Where the report reads a stability: from 0.5 (the DFA reference range's start) stable, up
    to 0.18 (the BP range's end) batch-specific, between them intermediate."""
    from normsys.declarations.shared import protocol

    monkeypatch.setattr(protocol, "direction_stability", lambda means: stability)
    report = protocol.fa_protocol_report(protocol_model("resmlp"), mnist_batches(2, 16))
    assert (report["stability"], report["reading"]) == (stability, reading)

# ----------------------------------------------------------------------------- diagnostics' edges


def test_hidden_unit_correlation_needs_two_live_units():
    """Two live units have one correlation (here exactly 1: the second unit is twice the first);
    a single live unit, or none, has none (NaN)."""
    live = torch.tensor([[1.0, 2.0, 5.0], [2.0, 4.0, 5.0], [4.0, 8.0, 5.0]])  # third unit constant
    assert dg.hidden_unit_correlation(live) == pytest.approx(1.0, rel=1e-12)
    assert math.isnan(dg.hidden_unit_correlation(live[:, 1:]))
    assert math.isnan(dg.hidden_unit_correlation(torch.ones(4, 3)))


def test_token_cosine_needs_two_tokens_and_computes_in_float64():
    with pytest.raises(ValueError, match=r"^token_cosine needs \(T, d\) or \(B, T, d\) with "
                                         r"T >= 2, got \(3, 1, 4\)$"):
        dg.token_cosine(torch.randn(3, 1, 4))
    with pytest.raises(ValueError, match=r"got \(4,\)$"):
        dg.token_cosine(torch.randn(4))
    assert dg.token_cosine(torch.rand(3, 2, 1) + 0.1) == 1.0  # one positive feature: parallel
    x = torch.randn(2, 5, 64) + 10  # nearly parallel rows: float32 would round their cosines
    assert dg.token_cosine(x) == pytest.approx(dg.token_cosine(x.double()), rel=1e-14, abs=0)


def test_activation_matrix_is_float64_rows_of_the_last_dim_and_nan_for_non_finite():
    h = torch.randn(2, 3, 5)
    a = dg.as_matrix(h)
    assert a.shape == (6, 5) and a.dtype == torch.float64 and torch.equal(a, h.reshape(6, 5).double())
    with pytest.raises(ValueError, match=r"^activation tensor needs shape \(\.\.\., d\) with >= 2 "
                                         r"dims, got \(5,\)$"):
        dg.as_matrix(torch.randn(5))
    s = dg.singular_values(torch.tensor([[1.0, math.inf], [0.0, 1.0], [2.0, 2.0]]))
    assert s.shape == (2,) and s.dtype == torch.float64 and bool(s.isnan().all())


def test_effective_rank_of_given_singular_values_is_computed_in_float64():
    s = torch.tensor([3.0, 1.0, 0.1, 1e-4])  # float32 values, entropy in float64
    p = s.double() / s.double().sum()
    exact = math.exp(-math.fsum(float(v) * math.log(float(v)) for v in p))
    assert dg.effective_rank(s=s) == pytest.approx(exact, rel=1e-14, abs=0)


def test_layer_norm_keeps_its_eps_one_run_and_stacked_and_its_options():
    x = 1e-3 * torch.randn(2 * 3, 5, dtype=torch.float64)  # small rows: eps shows
    assert torch.equal(norms.layer_norm(x), F.layer_norm(x, (5,), eps=1e-5))
    w, b = torch.rand(2, 5, dtype=torch.float64) + 0.5, torch.randn(2, 5, dtype=torch.float64)
    out = norms.layer_norm(x, w, b, eps=1e-2)  # two seeds' gains and biases, stacked
    for s in range(2):
        rows = x.reshape(2, 3, 5)[s]
        assert torch.allclose(out.reshape(2, 3, 5)[s], F.layer_norm(rows, (5,), w[s], b[s], 1e-2))
    assert norms.LayerNorm(4).eps == 1e-5
    plain = norms.LayerNorm(4, affine=False)
    assert plain.weight is None and plain.bias is None and not list(plain.parameters())


def test_gradients_at_init_are_the_plain_losss_by_autograd(data_env):
    """at_init measures one model (not a stack of seeds): its loss and ||dL/dW|| are those of
    the mean cross-entropy of its probe batch, by autograd here."""
    from normsys.training.measure import at_init
    from normsys.training.models import prepare_model
    from normsys.training.tasks import make_task

    cfg = preset("resmlp", **{"model.d": 16, "model.layers": 2, "data.n_train": 256,
                              "data.n_test": 128, "train.probe_batch": 32})
    task = make_task(cfg)
    init = at_init(cfg, task)
    model = prepare_model(cfg).train()
    x0, y0 = task.probe_batch(cfg)
    loss = F.cross_entropy(model(x0), y0)
    params = dict(model.named_parameters())
    grads = torch.autograd.grad(loss, list(params.values()))
    assert init.loss == pytest.approx(float(loss), rel=1e-6)
    for (name, _), g in zip(params.items(), grads, strict=True):
        assert init.grads[name] == pytest.approx(float(g.norm()), rel=1e-5), name


@pytest.mark.parametrize("call,message", [
    (lambda: Rule("s", "=", 0), "unknown side '='; valid sides: >, >=, <, <=, within"),
    (lambda: Rule("s", "within", 0),
     "side 'within' takes a (low, high) band, the others one threshold"),
    (lambda: Rule("s", ">", (0, 1)),
     "side 'within' takes a (low, high) band, the others one threshold"),
    (lambda: decide(Rule("s", ">", 0), {}), "no arm's values to decide on: give name -> "
                                             "per-seed values"),
    (lambda: summary([]), "a verdict needs at least one value (one per seed)"),
])
def test_bad_decisions_say_what_is_accepted(call, message):
    with pytest.raises(ValueError) as err:
        call()
    assert str(err.value) == message


def test_direction_stability_needs_two_batches():
    from normsys.declarations.shared.protocol import direction_stability

    with pytest.raises(ValueError) as err:
        direction_stability([torch.ones(3)])
    assert str(err.value) == "direction stability needs >= 2 disjoint batches, got 1"


def test_collapse_ratios_need_a_rank_and_l2_norms_show_their_settings():
    with pytest.raises(ValueError) as err:
        dg.collapse_ratios([])
    assert str(err.value) == "collapse_ratios needs at least one effective rank"
    assert repr(norms.L2Norm(4)) == "L2Norm(4, scale=1, affine=False)"
    assert repr(norms.build_norm("l2_affine", 4)) == "L2Norm(4, scale=1, affine=True)"
    assert repr(norms.build_norm("scaled_l2", 4)) == "L2Norm(4, scale=2, affine=False)"
