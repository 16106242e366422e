"""Hypothesis properties of the norm maths (float64 wherever exactness is claimed)."""

from __future__ import annotations

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from normsys.claims.testing import seeded_randn
from normsys.training import norms
from normsys.training.norms import NORMS, build_norm

seeds = st.integers(0, 2**31 - 1)
dims = st.integers(4, 48)
rows = st.integers(1, 8)
scales = st.floats(1e-2, 1e2)
EXACT = {"atol": 1e-12, "rtol": 1e-10}


def away_from_one(x: float) -> float:
    """Map a draw from [0.1, 0.5] to itself or its reciprocal: a factor clearly != 1."""
    return x if x < 0.3 else 1 / x


# ------------------------------------------------------------------ layernorm / rmsnorm / l2 algebra


LN_IMPLS = pytest.mark.parametrize("ln", [norms.layer_norm, norms.layer_norm_reference],
                                   ids=["fused", "reference"])
RMS_IMPLS = [norms.rms_norm, norms.rms_norm_reference]


@LN_IMPLS
@given(seed=seeds, n=rows, d=dims, c=scales, eps=st.floats(1e-6, 1.0))
def test_layernorm_rows_have_mean_zero_and_variance_var_over_var_plus_eps(ln, seed, n, d, c, eps):
    x = seeded_randn((n, d), seed, scale=c)
    var = x.var(-1, unbiased=False, keepdim=True)
    y = ln(x, eps=eps)
    assert_close(y.mean(-1), torch.zeros(n, dtype=x.dtype), atol=1e-12, rtol=0)
    assert_close(y.var(-1, unbiased=False, keepdim=True), var / (var + eps), **EXACT)


@pytest.mark.parametrize("fn", [norms.layer_norm, norms.layer_norm_reference, *RMS_IMPLS],
                         ids=["layernorm", "layernorm-ref", "rmsnorm", "rmsnorm-ref"])
@given(seed=seeds, n=rows, d=dims, c=scales, eps=st.floats(1e-8, 1e-1))
def test_eps_algebra_norm_of_scaled_input(fn, seed, n, d, c, eps):
    x = seeded_randn((n, d), seed)
    assert_close(fn(c * x, eps=eps), fn(x, eps=eps / c**2), **EXACT)


@pytest.mark.parametrize("kind", ["l2", "scaled_l2", "l2_affine"])
@given(seed=seeds, n=rows, d=dims, c=scales)
def test_l2_kinds_invariant_to_positive_rescaling(kind, seed, n, d, c):
    norm = build_norm(kind, d).double()
    x = seeded_randn((n, d), seed)
    assert_close(norm(c * x), norm(x), **EXACT)


@LN_IMPLS
@given(seed=seeds, n=rows, d=dims, shift_scale=st.floats(-1e2, 1e2))
def test_layernorm_invariant_to_per_row_shift(ln, seed, n, d, shift_scale):
    x = seeded_randn((n, d), seed)
    shift = seeded_randn((n, 1), seed + 1, scale=shift_scale)
    assert_close(ln(x + shift, eps=1e-5), ln(x, eps=1e-5),
                 atol=1e-9, rtol=1e-9)


@given(seeds, rows, dims)
def test_scaled_l2_equals_rmsnorm_without_gain_at_eps_zero(seed, n, d):
    x = seeded_randn((n, d), seed)
    assert_close(build_norm("scaled_l2", d)(x), norms.rms_norm(x, eps=0.0), **EXACT)


# ------------------------------------------------------------------ Ba, Kiros & Hinton 2016, Table 1
# Linear (no bias) followed by the norm at eps = 0 (1e-30 for BN: below float64 rounding of var);
# a = x W^T, W of shape (d, d_in).


def _transform(name: str, x, w, factor, vec_x, vec_w):
    x, w = x.clone(), w.clone()
    if name == "weight_matrix_rescale":
        w = factor * w
    elif name == "weight_matrix_recenter":  # the same vector added to every unit's incoming weights
        w = w + vec_w
    elif name == "weight_vector_rescale":  # one unit's incoming weights
        w[0] = factor * w[0]
    elif name == "dataset_rescale":
        x = factor * x
    elif name == "dataset_recenter":
        x = x + vec_x
    elif name == "single_case_rescale":
        x[0] = factor * x[0]
    return x, w


# Table 1: LN and BN columns (True: invariant).
BA_TABLE = {
    "weight_matrix_rescale": {"layernorm": True, "batchnorm": True},
    "weight_matrix_recenter": {"layernorm": True, "batchnorm": False},
    "weight_vector_rescale": {"layernorm": False, "batchnorm": True},
    "dataset_rescale": {"layernorm": True, "batchnorm": True},
    "dataset_recenter": {"layernorm": False, "batchnorm": True},
    "single_case_rescale": {"layernorm": True, "batchnorm": False},
}


def _linear_norm(kind: str, x, w):
    a = x @ w.T  # (N, d)
    if kind == "layernorm":
        return norms.layer_norm(a, eps=0.0)
    return norms.batch_norm(a, None, None, training=True, eps=1e-30)  # F.batch_norm needs eps > 0


@pytest.mark.parametrize("kind", ["layernorm", "batchnorm"])
@pytest.mark.parametrize("transform", list(BA_TABLE))
@given(seed=seeds, n=st.integers(4, 16), d_in=st.integers(3, 16), d=st.integers(4, 24),
       f=st.floats(0.1, 0.5))
def test_ba_table_1_invariances(kind, transform, seed, n, d_in, d, f):
    x = seeded_randn((n, d_in), seed)
    w = seeded_randn((d, d_in), seed + 1)
    vec_x, vec_w = seeded_randn((d_in,), seed + 2), seeded_randn((d_in,), seed + 3)
    x2, w2 = _transform(transform, x, w, away_from_one(f), vec_x, vec_w)
    before, after = _linear_norm(kind, x, w), _linear_norm(kind, x2, w2)
    if BA_TABLE[transform][kind]:
        assert_close(after, before, atol=1e-8, rtol=1e-8)
    else:  # must fail: the output moves by far more than rounding
        assert (after - before).abs().max() > 1e-3


@given(seeds, st.integers(4, 16), dims)
def test_batchnorm_couples_samples_layernorm_does_not(seed, n, d):
    x = seeded_randn((n, d), seed)
    other = x.clone()
    other[1:] = seeded_randn((n - 1, d), seed + 1, scale=3.0) + 1.0
    ln = norms.layer_norm
    assert_close(ln(other)[0], ln(x)[0], atol=0, rtol=0)
    bn = build_norm("batchnorm", d).double().train()
    assert (bn(other)[0] - bn(x)[0]).abs().max() > 1e-3


@given(seeds, rows, dims)
def test_layernorm_same_in_train_eval_and_at_batch_one(seed, n, d):
    ln = build_norm("layernorm", d).double()
    with torch.no_grad():
        ln.weight.copy_(seeded_randn((d,), seed + 1))
    x = seeded_randn((n, d), seed)
    y_train = ln.train()(x)
    assert_close(ln.eval()(x), y_train, atol=0, rtol=0)
    per_row = torch.cat([ln(x[i : i + 1]) for i in range(n)])
    assert_close(per_row, y_train, atol=1e-15, rtol=0)


# ------------------------------------------------------------------ analytic input gradients


def _autograd_vjp(fn, x, grad_out):
    x = x.clone().requires_grad_(True)
    (g,) = torch.autograd.grad(fn(x), x, grad_out)
    return g


def _relative_error(a, b) -> float:
    return float((a - b).norm() / b.norm())


VJPS = {
    "layernorm": (lambda x, w: norms.layer_norm(x, w, eps=1e-5),
                  lambda x, go, w: norms.layer_norm_vjp(x, go, w, eps=1e-5)),
    "rmsnorm": (lambda x, w: norms.rms_norm(x, w, eps=1e-6),
                lambda x, go, w: norms.rms_norm_vjp(x, go, w, eps=1e-6)),
    "l2": (lambda x, w: norms.l2_norm(x, w), lambda x, go, w: norms.l2_norm_vjp(x, go, w)),
    "scaled_l2": (lambda x, w: norms.l2_norm(x, w, scale=3.0),
                  lambda x, go, w: norms.l2_norm_vjp(x, go, w, scale=3.0)),
}


@pytest.mark.parametrize("kind", list(VJPS))
@given(seed=seeds, n=rows, d=dims, c=scales)
def test_analytic_vjp_matches_autograd(kind, seed, n, d, c):
    forward, vjp = VJPS[kind]
    x = seeded_randn((n, d), seed, scale=c)
    w = seeded_randn((d,), seed + 1)  # random gains, either sign
    go = seeded_randn((n, d), seed + 2)
    auto = _autograd_vjp(lambda t: forward(t, w), x, go)
    assert _relative_error(vjp(x, go, w), auto) <= 1e-10


@given(seeds, rows, dims, st.floats(0.0, 1e-2))
def test_layernorm_input_gradient_sums_to_zero(seed, n, d, eps):
    x, go = seeded_randn((n, d), seed), seeded_randn((n, d), seed + 1)
    g = norms.layer_norm_vjp(x, go, seeded_randn((d,), seed + 2), eps=eps)
    assert_close(g.sum(-1), torch.zeros(n, dtype=g.dtype), atol=1e-12 * g.abs().max(), rtol=0)


@given(seeds, rows, dims)
def test_layernorm_input_gradient_orthogonal_to_z_at_eps_zero(seed, n, d):
    x, go = seeded_randn((n, d), seed), seeded_randn((n, d), seed + 1)
    z = norms.layer_norm(x, eps=0.0)
    g = norms.layer_norm_vjp(x, go, eps=0.0)
    assert_close((g * z).sum(-1), torch.zeros(n, dtype=g.dtype), atol=1e-12 * g.norm(), rtol=0)


JACOBIAN_RANK_DEFICIT = {  # at eps = 0: LN removes the mean and radial directions, RMS/l2 the radial
    "layernorm": (lambda x, w: norms.layer_norm(x, w, eps=0.0), 2),
    "rmsnorm": (lambda x, w: norms.rms_norm(x, w, eps=0.0), 1),
    "l2": (lambda x, w: norms.l2_norm(x, w), 1),
}


@pytest.mark.parametrize("kind", list(JACOBIAN_RANK_DEFICIT))
@given(seed=seeds, d=st.integers(3, 32))
def test_jacobian_rank_at_eps_zero(kind, seed, d):
    fn, deficit = JACOBIAN_RANK_DEFICIT[kind]
    x = seeded_randn((d,), seed)
    w = 0.5 + seeded_randn((d,), seed + 1).abs()  # nonzero gains keep the rank
    jac = torch.autograd.functional.jacobian(lambda t: fn(t, w), x)
    # rtol 1e-10: rounding leaves ~1e-15 * s_max in the null directions, the others are O(s_max)
    assert int(torch.linalg.matrix_rank(jac, rtol=1e-10)) == d - deficit


# ------------------------------------------------------------------ dyt limits (exact Taylor bounds)


@given(seeds, rows, dims, st.floats(1e-4, 1e-2))
def test_dyt_is_linear_a_g_x_for_small_inputs(seed, n, d, s):
    a, g = 0.5, seeded_randn((d,), seed + 1)
    x = seeded_randn((n, d), seed, scale=s)
    err = (norms.dyt(x, a, g) - a * g * x).abs()
    assert (err <= (a * x.abs()) ** 3 / 3 * g.abs() + 1e-18).all()  # |tanh u - u| <= |u|^3 / 3


@given(seeds, rows, dims, st.floats(1e2, 1e4))
def test_dyt_is_sign_times_g_for_large_inputs(seed, n, d, s):
    a, g = 0.5, seeded_randn((d,), seed + 1)
    x = seeded_randn((n, d), seed, scale=s)
    x = torch.where(x.abs() < 1e-3 * s, torch.full_like(x, s), x)  # keep |a x| large
    err = (norms.dyt(x, a, g) - torch.sign(x) * g).abs()
    assert (err <= 2 * torch.exp(-2 * a * x.abs()) * g.abs() + 1e-15).all()  # 1 - tanh u <= 2e^-2u


# ------------------------------------------------------------------ parity with torch's own ops

PARITY_SHAPES = [(1, 1, 1023), (3, 7, 256), (2, 5, 17), (1, 4096), (13, 1, 64)]


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64], ids=str)
@pytest.mark.parametrize("shape", PARITY_SHAPES, ids=str)
@pytest.mark.parametrize("kind", ["layernorm", "rmsnorm"])
def test_parity_with_torch_forward_and_backward(kind, shape, dtype):
    from normsys.claims.testing import tolerance

    d = shape[-1]
    x = seeded_randn(shape, 0, dtype=dtype, scale=2.0) + 0.5
    w, b = seeded_randn((d,), 1, dtype=dtype), seeded_randn((d,), 2, dtype=dtype)
    go = seeded_randn(shape, 3, dtype=dtype)
    # the written-out formula against torch's own kernel (which normsys's fused path calls)
    if kind == "layernorm":
        ours = lambda t: norms.layer_norm_reference(t, w, b, eps=1e-5)  # noqa: E731
        ref = lambda t: torch.nn.functional.layer_norm(t, (d,), w, b, eps=1e-5)  # noqa: E731
    else:
        ours = lambda t: norms.rms_norm_reference(t, w, eps=1e-6)  # noqa: E731
        ref = lambda t: torch.nn.functional.rms_norm(t, (d,), w, eps=1e-6)  # noqa: E731
    assert_close(ours(x), ref(x), **tolerance(dtype))
    assert_close(_autograd_vjp(ours, x, go), _autograd_vjp(ref, x, go), **tolerance(dtype))


@pytest.mark.parametrize("shape", [(8, 5), (4, 3, 6)], ids=str)
def test_batchnorm_matches_torch_batchnorm1d(shape):
    d = shape[-1]
    ours, ref = build_norm("batchnorm", d).double(), torch.nn.BatchNorm1d(d).double()
    x = seeded_randn(shape, 0)
    assert_close(ours(x).reshape(-1, d), ref(x.reshape(-1, d)), **EXACT)
    assert_close(ours.running_var, ref.running_var, **EXACT)
    ours.eval(), ref.eval()
    assert_close(ours(x).reshape(-1, d), ref(x.reshape(-1, d)), **EXACT)


# ------------------------------------------------------------------ registry


@pytest.mark.parametrize("kind", list(NORMS))
def test_every_kind_builds_and_keeps_shape(kind):
    norm = build_norm(kind, 12)
    x = seeded_randn((3, 5, 12), 0, dtype=torch.float32)
    y = norm(x)
    assert y.shape == x.shape and torch.isfinite(y).all()
    y.sum().backward() if y.requires_grad else None


def test_unknown_kind_lists_valid_kinds():
    with pytest.raises(ValueError, match="unknown norm kind 'groupnorm'.*layernorm.*scaled_l2"):
        build_norm("groupnorm", 8)


def test_bad_options_and_dims_are_clear_errors():
    with pytest.raises(TypeError, match="bad options.*'l2'"):
        build_norm("l2", 8, eps=1e-5)
    with pytest.raises(ValueError, match="positive int"):
        build_norm("layernorm", 0)
    with pytest.raises(ValueError, match="batch 1"):
        build_norm("batchnorm", 4).train()(torch.zeros(1, 4))


# ----------------------------------------------------------------------------- fused kernels (CUDA path)

FUSED_KINDS = ["l2", "scaled_l2", "l2_affine", "dyt"]


def test_fused_kernels_compute_the_eager_function_forward_and_backward(monkeypatch, light_compile):
    """On CUDA the l2 family and dyt run compiled; forced on here on the CPU, the compiled kernels
    must give the eager outputs and gradients (x and every parameter), also under vmap, and
    fusion(False) must keep them eager."""
    from torch._dynamo.utils import counters
    from torch.func import vmap

    monkeypatch.setattr(norms, "FUSE_DEVICES", {"cpu"})
    x = seeded_randn((2, 6, 32), 0, dtype=torch.float32) * 3
    dy = seeded_randn((2, 6, 32), 1, dtype=torch.float32)
    for kind in FUSED_KINDS:
        module = build_norm(kind, 32)
        for p in module.parameters():
            p.data.add_(0.1 * seeded_randn(p.shape, 2))
        with norms.fusion(False):
            graphs = counters["stats"]["unique_graphs"]
            eager_x = x.clone().requires_grad_()
            eager = module(eager_x)
            eager_grads = torch.autograd.grad(eager, [eager_x, *module.parameters()], dy)
            assert counters["stats"]["unique_graphs"] == graphs, "fusion(False) compiled"
        fast_x = x.clone().requires_grad_()
        fast = module(fast_x)
        fast_grads = torch.autograd.grad(fast, [fast_x, *module.parameters()], dy)
        assert counters["stats"]["unique_graphs"] > graphs, f"{kind}: no compiled kernel ran"
        assert_close(fast, eager, rtol=1e-5, atol=1e-6)
        for got, want in zip(fast_grads, eager_grads, strict=True):
            assert_close(got, want, rtol=1e-4, atol=1e-6)
    assert_close(vmap(norms.l2_norm)(x), norms.l2_norm.eager(x), rtol=1e-5, atol=1e-6)


def test_fused_kernel_compiles_a_new_shape_static_only_after_a_dynamo_reset(monkeypatch):
    """Why the norm benchmark resets dynamo before every case: a fused kernel's second input shape
    is compiled with symbolic sizes (automatic dynamic), a slower kernel than the static one that
    training compiles for its single shape; after a reset it is static again."""
    import torch._dynamo

    graphs: list[bool] = []  # per compiled graph: does it take symbolic sizes?

    def backend(gm, example_inputs):
        graphs.append(any(isinstance(i, torch.SymInt) for i in example_inputs))
        return gm.forward

    compile_ = torch.compile
    monkeypatch.setattr(torch, "compile", lambda fn, **kw: compile_(fn, backend=backend, **kw))
    monkeypatch.setattr(norms, "FUSE_DEVICES", {"cpu"})
    fn = norms.fused(norms.l2_norm.eager)  # its own compile cache, under the patched backend
    torch._dynamo.reset()
    fn(torch.randn(8, 16))
    fn(torch.randn(4, 32))
    torch._dynamo.reset()
    fn(torch.randn(2, 64))
    assert graphs == [False, True, False]


@pytest.mark.parametrize("kind", sorted(NORMS))
def test_a_row_is_normed_bit_for_bit_alike_in_any_batch_unless_the_kind_reads_the_batch(kind):
    """Batch invariance: a row put through a norm in batches of 1, 7 and 64, the other rows
    different each time, comes out bit-identical for every kind that normalizes each row alone;
    BatchNorm in training mode, whose statistics are the batch's, does not."""
    from normsys.scorecard import batch_variance

    why = batch_variance(NORMS[kind].build)
    if NORMS[kind].per_row:
        assert why == ""
    else:  # its output moves with the batch (besides refusing a batch of one)
        assert why.startswith("a row's output moves by up to") and "between batches of 7 and 64" \
            in why, why
