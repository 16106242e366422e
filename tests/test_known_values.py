"""Every statistic a claim's rule reads, pinned by a value computed by hand.

Properties (identity -> d, rank one -> 1, scale invariance) leave a definition free: erank from
p = s^2 / sum(s^2) passes all of them. A value worked out on paper does not; each constant below
shows its arithmetic.
"""

from __future__ import annotations

import math

import pytest
import torch
from torch import nn

from normsys.declarations.shared.protocol import direction_stability, fa_protocol_report, ln_vjp_errors
from normsys.training import diagnostics as dg
from normsys.training.config import preset
from normsys.training.measure import probe, spectrum
from normsys.training.norms import LayerNorm
from normsys.training.tasks import Classify, LanguageModel
from normsys.training.train import run_context, train

F64 = torch.float64


def diag(*s: float, rows: int | None = None) -> torch.Tensor:
    """A (rows, d) matrix whose singular values are ``s`` (padded with zero rows)."""
    m = torch.zeros(rows or len(s), len(s), dtype=F64)
    m[range(len(s)), range(len(s))] = torch.tensor(s, dtype=F64)
    return m


# ----------------------------------------------------------------------------- ranks


def test_effective_rank_of_hand_computed_spectra():
    # s = (2, 1): p = (2/3, 1/3), H = (2/3) ln(3/2) + (1/3) ln 3 = 0.636514, exp(H) = 1.889882
    assert dg.effective_rank(s=torch.tensor([2.0, 1.0])) == pytest.approx(1.889882, abs=1e-6)
    assert dg.effective_rank(diag(2, 1, rows=5)) == pytest.approx(1.889882, abs=1e-6)
    # s = (3, 2, 1): p = (1/2, 1/3, 1/6), H = (1/2) ln 2 + (1/3) ln 3 + (1/6) ln 6 = 1.011404
    assert dg.effective_rank(diag(3, 2, 1)) == pytest.approx(2.749459, abs=1e-6)
    # zero singular values carry no mass: s = (1, 1, 0, 0) has erank 2
    assert dg.effective_rank(s=torch.tensor([1.0, 1.0, 0.0, 0.0])) == pytest.approx(2.0)


def test_spectrum_of_a_known_matrix():
    """What a run's probe stores for a hidden state: singular values, erank, rho = erank / d,
    stable rank ||A||_F^2 / ||A||_2^2 and the mean row norm."""
    h = diag(2, 1, rows=4).float().reshape(2, 2, 2)  # (B, T, d): rows (2, 0), (0, 1), 0, 0
    out = spectrum(h)
    assert out["singular_values"] == pytest.approx([2.0, 1.0])
    assert out["erank"] == pytest.approx(1.889882, abs=1e-6)
    assert out["rho"] == pytest.approx(1.889882 / 2, abs=1e-6)
    assert out["stable_rank"] == pytest.approx((4 + 1) / 4)
    assert out["mean_norm"] == pytest.approx((2 + 1 + 0 + 0) / 4)


def test_collapse_ratio_and_rho_of_hand_computed_layers():
    """kappa_6 = erank(block 6) / erank(block 1): from s = (1, 1, 1, 1) (erank 4) to s = (2, 1, 0,
    0) (erank 1.889882) is 0.472471; rho at block 6 with d = 4 is 0.472471 too."""
    first, last = dg.effective_rank(torch.eye(4)), dg.effective_rank(diag(2, 1, 0, 0))
    assert dg.collapse_ratios([first, last]) == pytest.approx([1.0, 0.472471], abs=1e-6)
    assert dg.normalized_effective_rank(diag(2, 1, 0, 0)) == pytest.approx(0.472471, abs=1e-6)


def test_probe_measures_the_named_layers_on_the_fixed_batch(no_cache):
    """probe() of a tanh MLP whose first layer is the identity and whose input is diag(2, 1, ...):
    the probed hidden state is tanh of it, with known singular values."""
    cfg = preset("tanh_mlp", **{"model.d": 4, "model.layers": 2, "train.probe": ("layers.0",)})
    model = nn.Sequential()
    model.layers = nn.ModuleList([nn.Linear(4, 4, bias=False), nn.Linear(4, 4, bias=False)])
    with torch.no_grad():
        model.layers[0].weight.copy_(torch.eye(4))
    model.forward = lambda x: model.layers[1](model.layers[0](x))
    x = diag(2, 1, 0, 0).float()
    out = probe(model, cfg, x)
    assert out["layers.0"]["singular_values"] == pytest.approx([2.0, 1.0, 0.0, 0.0], abs=1e-6)
    assert out["layers.0"]["erank"] == pytest.approx(1.889882, abs=1e-6)


# ----------------------------------------------------------------------------- FA protocol


def test_direction_stability_of_hand_computed_directions():
    # cos((1,0),(1,1)) = cos((1,1),(0,1)) = 1/sqrt(2), cos((1,0),(0,1)) = 0: mean 0.471405
    three = [torch.tensor([1.0, 0.0]), torch.tensor([3.0, 3.0]), torch.tensor([0.0, 0.5])]
    assert direction_stability(three) == pytest.approx(math.sqrt(2) / 3, abs=1e-12)
    opposite = [torch.tensor([1.0, 2.0]), torch.tensor([-2.0, -4.0])]
    assert direction_stability(opposite) == pytest.approx(-1.0)


class TwoClassProbe(nn.Module):
    """An FA-protocol model with no blocks: h_0 = x I, logits = h_0 (identity head). A row (c, c)
    gives equal logits, softmax (1/2, 1/2), so dL/dh_0 = ((1/2, 1/2) - onehot(y)) / B."""

    tokens = False

    def __init__(self):
        super().__init__()
        self.embed, self.blocks = nn.Linear(2, 2, bias=False), nn.ModuleList()
        self.out_ln, self.out_head = nn.Identity(), nn.Identity()
        with torch.no_grad():
            self.embed.weight.copy_(torch.eye(2))

    def forward(self, x, return_hidden=False):
        h = self.embed(x)
        return (h, [h]) if return_hidden else h


def test_fa_protocol_report_of_a_hand_computed_model():
    c = torch.tensor([1.0, 2.0, 3.0, 4.0, 10.0])
    x = torch.stack([c, c], 1).requires_grad_(False)  # rows (c, c): norms c * sqrt(2)
    zeros, ones = torch.zeros(5, dtype=torch.long), torch.ones(5, dtype=torch.long)
    report = fa_protocol_report(TwoClassProbe(), [(x, zeros), (x, zeros), (x, ones)], layer=0)
    # median, not mean, over the batch: 3 sqrt(2) (the mean would be 4 sqrt(2))
    assert report["residual_norms"] == pytest.approx([3 * math.sqrt(2)])
    # every row's gradient is (-1/2, 1/2) / 5: norm sqrt(1/2) / 5
    assert report["bp_grad_norms"] == pytest.approx([math.sqrt(0.5) / 5])
    # batch means (-1, 1), (-1, 1), (1, -1) up to scale: cosines 1, -1, -1, mean -1/3
    assert report["stability"] == pytest.approx(-1 / 3)


# ----------------------------------------------------------------------------- units and tokens


def test_hidden_unit_correlation_of_hand_computed_units():
    # u, v centred and orthogonal, w = u + v: corr(u, v) = 0, corr(u, w) = corr(v, w) = 1/sqrt(2)
    u = torch.tensor([1.0, -1.0, 1.0, -1.0])
    v = torch.tensor([1.0, 1.0, -1.0, -1.0])
    h = torch.stack([u, v, u + v], 1)
    assert dg.hidden_unit_correlation(h) == pytest.approx(2 / math.sqrt(2) / 3, abs=1e-12)


def test_rank_collapse_residual_and_token_cosine_of_hand_computed_tokens():
    # X = I_2: token mean (1/2, 1/2), residual rows (1/2, -1/2), (-1/2, 1/2): ||.||_F = 1 / sqrt(2)
    assert dg.rank_collapse_residual(torch.eye(2)) == pytest.approx(1 / math.sqrt(2))
    # tokens (1, 0) and (1, 1): cosine 1/sqrt(2); (B, T, d) averages over the batch
    both = torch.tensor([[[1.0, 0.0], [1.0, 1.0]], [[1.0, 0.0], [0.0, 1.0]]])
    assert dg.token_cosine(both[:1]) == pytest.approx(1 / math.sqrt(2))
    assert dg.token_cosine(both) == pytest.approx((1 / math.sqrt(2) + 0) / 2)


# ----------------------------------------------------------------------------- gradient profiles


def test_gradient_profile_statistics_of_hand_computed_norms():
    grads = {"a": 3.0, "b": 4.0, "c": 12.0}
    assert dg.layer_grad_norms(grads, [["a", "b"], ["c"]]) == pytest.approx([5.0, 12.0])
    assert dg.log10_ratio([100.0, 7.0, 1.0]) == pytest.approx(2.0)
    assert dg.log10_ratio([1.0, 1000.0]) == pytest.approx(-3.0)


def test_gradients_at_init_are_per_parameter_norms_on_the_probe_batch(no_cache):
    """The record's init_grad_norms equal ||dL/dW|| computed by hand on the run's probe batch."""
    from normsys.training.models import prepare_model
    from normsys.training.tasks import make_task

    cfg = preset("tanh_mlp", **{"model.d": 8, "model.layers": 3, "data.batch_shape": (32, 8)})
    record = train(cfg)
    model = prepare_model(cfg)
    x, y = make_task(cfg).probe_batch(cfg)
    torch.nn.functional.mse_loss(model(x), y).backward()
    for name, p in model.named_parameters():
        assert record.init_grad_norms[name] == pytest.approx(float(p.grad.norm()), rel=1e-6)


def test_steps_to_accuracy_of_a_hand_computed_curve():
    # 10 misses then hits: the first window of 50 with >= 45 hits is steps 6-55, reached at 55
    assert dg.steps_to_accuracy([0.0] * 10 + [1.0] * 100) == 55
    assert dg.steps_to_accuracy([0.0] * 10 + [1.0] * 100, target=1.0) == 60
    assert math.isnan(dg.steps_to_accuracy([0.5] * 100))


def test_final_loss_is_the_mean_of_the_last_ten_steps(no_cache):
    record = train(preset("ffn_stack", **{"train.steps": 12, "model.d": 16,
                                          "data.batch_shape": (4, 5, 16)}))
    losses = record.curves["loss"]
    assert len(losses) == 12
    assert record.metrics["final_loss"] == pytest.approx(sum(losses[-10:]) / 10, rel=1e-12)


# ----------------------------------------------------------------------------- held-out metrics


class Constant(nn.Module):
    def __init__(self, logits):
        super().__init__()
        self.logits = torch.tensor(logits)

    def forward(self, x):  # features (N, f) -> (N, V); token ids (B, T) -> (B, T, V)
        rows = x.shape[:-1] if x.is_floating_point() else x.shape
        return self.logits.expand(*rows, len(self.logits))


def test_classification_metrics_of_a_constant_predictor():
    """Probabilities (1/2, 1/4, 1/4) for every row on test labels 0, 0, 1, 2 (repeated past the
    evaluation chunk): accuracy 1/2, loss (2 ln 2 + 2 ln 4) / 4 = 1.039721."""
    y = torch.tensor([0, 0, 1, 2]).repeat(300)  # 1,200 rows: three chunks
    x = torch.zeros(len(y), 3)
    task = Classify(x, y, x, y)
    cfg = preset("mlp")
    model = Constant([math.log(0.5), math.log(0.25), math.log(0.25)])
    out = task.evaluate(model, cfg, run_context(cfg, torch.device("cpu"), 0))
    assert out["test_acc"] == 0.5 and out["train_acc"] == 0.5
    assert out["test_loss"] == pytest.approx((2 * math.log(2) + 2 * math.log(4)) / 4, rel=1e-6)


def test_language_model_loss_of_a_uniform_predictor():
    """Equal logits over 65 characters: every next-character loss is ln 65 = 4.174387."""
    ids = torch.arange(1000) % 65
    task = LanguageModel(ids, ids)
    cfg = preset("char_gpt", **{"train.eval_batches": 2, "train.batch_size": 4})
    model = Constant([0.0] * 65)
    out = task.evaluate(model, cfg, run_context(cfg, torch.device("cpu"), 0))
    assert out["val_loss"] == pytest.approx(math.log(65), rel=1e-6)


# ----------------------------------------------------------------------------- LayerNorm Jacobian


def test_ln_decomposition_of_a_hand_computed_row():
    """x = (1, 2, 3, 6), dL/dout = (1, 0, 0, 0), no gain, eps = 0: mean 3, deviations
    (-2, -1, 0, 3), var 7/2, z = dev / sigma. mean(g) = 1/4; mean(g z) = -2 / (4 sigma), radial
    = z mean(g z) = -dev / 7 = (2, 1, 0, -3) / 7. center = g - 1/4 = (3, -1, -1, -1) / 4;
    sigma * true = center - radial = (13, -11, -7, 5) / 28, |.|^2 = 13/28; |center|^2 = 3/4;
    center . true = 13/28. cos_cs = sqrt(13/21), cos_identity = sqrt(13/28), r_mean = 1/4,
    r_radial = 14/49."""
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=F64)
    g = torch.tensor([[1.0, 0.0, 0.0, 0.0]], dtype=F64)
    dec = dg.ln_jacobian_decomposition(x, g, eps=0.0)
    sigma = math.sqrt(3.5)
    torch.testing.assert_close(dec.true_grad, torch.tensor([[13, -11, -7, 5]], dtype=F64) / 28 / sigma)
    torch.testing.assert_close(dec.radial_component, torch.tensor([[2, 1, 0, -3]], dtype=F64) / 7)
    assert dec.cos_center_scale == pytest.approx(math.sqrt(13 / 21), abs=1e-12)
    assert dec.cos_identity == pytest.approx(math.sqrt(13 / 28), abs=1e-12)
    assert dec.r_mean == pytest.approx(0.25, abs=1e-12)
    assert dec.r_radial == pytest.approx(14 / 49, abs=1e-12)


def test_ln_decomposition_reads_the_gradient_through_the_gain():
    """g_z = gain * dL/dout. x = (1, 2, 3, 6) (deviations (-2, -1, 0, 3)), dL/dout = (1, -1, 1, 0),
    gain (1, 2, 1, 1): g_z = (1, -2, 1, 0) sums to 0 and is orthogonal to the deviations, so the
    radial term vanishes and cos_cs = 1. Read without the gain (g_z = dL/dout = (1, -1, 1, 0)):
    mean 1/4, g . dev = -1, radial = -dev / 14; center = (3, -5, 3, -1) / 4, sigma * true =
    (17, -37, 21, -1) / 28; cos_cs = (300/112) / sqrt(11/4 * 2100/784) = 75 / sqrt(5775)."""
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=F64)
    g = torch.tensor([[1.0, -1.0, 1.0, 0.0]], dtype=F64)
    with_gain = dg.ln_jacobian_decomposition(x, g, torch.tensor([1.0, 2, 1, 1], dtype=F64), eps=0.0)
    assert with_gain.cos_center_scale == pytest.approx(1.0, abs=1e-12)
    assert with_gain.r_radial == pytest.approx(0.0, abs=1e-12)
    gain_free = dg.ln_jacobian_decomposition(x, g, eps=0.0)
    assert gain_free.cos_center_scale == pytest.approx(75 / math.sqrt(5775), abs=1e-12)
    assert gain_free.r_radial == pytest.approx((14 / 196) / 3, abs=1e-12)  # |dev/14|^2 / |g|^2


def test_ln_decomposition_is_exact_where_the_radial_term_vanishes():
    """dL/dout orthogonal to z and to the constant row: radial and mean components are zero, the
    surrogates equal the true gradient (cosines 1, energy fractions 0). (1, -2, 1, 0) sums to 0
    and has (1, -2, 1, 0) . (-2, -1, 0, 3) = 0."""
    x = torch.tensor([[1.0, 2.0, 3.0, 6.0]], dtype=F64)
    dec = dg.ln_jacobian_decomposition(x, torch.tensor([[1.0, -2.0, 1.0, 0.0]], dtype=F64),
                                       eps=0.0)
    assert dec.cos_center_scale == pytest.approx(1.0, abs=1e-12)
    assert dec.cos_identity == pytest.approx(1.0, abs=1e-12)
    assert dec.r_mean == pytest.approx(0.0, abs=1e-12)
    assert dec.r_radial == pytest.approx(0.0, abs=1e-12)


def test_ln_vjp_errors_of_a_hand_computed_row():
    """Against autograd through a LayerNorm (eps 0): the analytic gradient's relative error is
    ~0; without its radial term it is |radial| / |sigma * true| = (sqrt(14) / 7) / sqrt(13/28)."""
    module = LayerNorm(4, eps=0.0)
    capture = {"module": module, "x": torch.tensor([[1.0, 2.0, 3.0, 6.0]]),
               "grad_out": torch.tensor([[1.0, 0.0, 0.0, 0.0]])}
    assert ln_vjp_errors([capture])[0] < 1e-6
    expected = (math.sqrt(14) / 7) / math.sqrt(13 / 28)
    assert ln_vjp_errors([capture], radial=False)[0] == pytest.approx(expected, rel=1e-5)


def test_ln_decomposition_summary_reads_the_gain_or_leaves_it_out():
    """The LN-Jacobian claim's summary over captured LayerNorms, on the row above: through the gain
    (the rule's statistic) cos_cs = 1; the seed script's gain-free reading 75 / sqrt(5775)."""
    from normsys.declarations.shared.protocol import ln_decomposition_summary

    module = LayerNorm(4, eps=0.0)
    with torch.no_grad():
        module.weight.copy_(torch.tensor([1.0, 2.0, 1.0, 1.0]))
    capture = {"module": module, "x": torch.tensor([[1.0, 2.0, 3.0, 6.0]]),
               "grad_out": torch.tensor([[1.0, -1.0, 1.0, 0.0]])}
    through = ln_decomposition_summary([capture, capture])
    free = ln_decomposition_summary([capture], through_gain=False)
    assert through["cos_center_scale"] == pytest.approx(1.0, abs=1e-6)
    assert free["cos_center_scale"] == pytest.approx(75 / math.sqrt(5775), abs=1e-6)


def test_held_out_logits_do_not_depend_on_the_evaluation_chunk():
    """Evaluation runs in chunks of EVAL_CHUNK rows for speed: on one thread (a CI worker's) each
    row's logits are bit-identical to a pass over 512 rows at once. (On two threads torch splits
    the two batch sizes differently: logits then differ by up to ~4e-7.)"""
    from normsys.training.models import prepare_model
    from normsys.training.tasks import EVAL_CHUNK

    cfg = preset("encoder", **{"model.layers": 2})
    model = prepare_model(cfg).eval()
    x = torch.randint(1, 1000, (512, cfg.model.seq_len), generator=torch.Generator().manual_seed(0))
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        with torch.no_grad():
            whole = model(x)
            chunked = torch.cat([model(x[i:i + EVAL_CHUNK]) for i in range(0, 512, EVAL_CHUNK)])
    finally:
        torch.set_num_threads(threads)
    assert EVAL_CHUNK < 512 and torch.equal(whole, chunked)


def test_mean_norm_is_over_each_rows_features():
    """(1, 3, 2) states with rows (3, 4), 0, 0: row norms 5, 0, 0, mean 5/3 (norms over the
    tokens instead would be 3 and 4, mean 3.5)."""
    h = torch.tensor([[[3.0, 4.0], [0.0, 0.0], [0.0, 0.0]]])
    assert spectrum(h)["mean_norm"] == pytest.approx(5 / 3)
