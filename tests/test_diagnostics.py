"""Diagnostics on constructed inputs whose answer is known."""

from __future__ import annotations

import math

import pytest
import torch
from hypothesis import given
from hypothesis import strategies as st
from torch.testing import assert_close

from normsys.claims.testing import seeded_randn
from normsys.training import diagnostics as dg
from normsys.training import norms

seeds = st.integers(0, 2**31 - 1)


@given(st.integers(1, 64))
def test_effective_rank_of_identity_is_d(d):
    assert math.isclose(dg.effective_rank(torch.eye(d)), d, rel_tol=1e-12)


@given(seeds, st.integers(2, 64), st.integers(2, 32))
def test_effective_rank_of_rank_one_matrix_is_one(seed, n, d):
    a = seeded_randn((n, 1), seed) @ seeded_randn((1, d), seed + 1)
    assert math.isclose(dg.effective_rank(a), 1.0, rel_tol=1e-9)


@given(seeds, st.integers(2, 64), st.integers(2, 32), st.floats(1e-3, 1e3))
def test_effective_rank_is_scale_invariant_and_bounded(seed, n, d, c):
    a = seeded_randn((n, d), seed)
    e = dg.effective_rank(a)
    assert math.isclose(dg.effective_rank(c * a), e, rel_tol=1e-9)
    assert e >= 1.0 and e <= min(n, d) + 1e-9


@given(seeds, st.integers(2, 64), st.integers(2, 32), st.integers(1, 32))
def test_stable_rank_at_most_rank(seed, n, d, k):
    k = min(k, n, d)
    a = seeded_randn((n, k), seed) @ seeded_randn((k, d), seed + 1)  # rank k
    sr = dg.stable_rank(a)
    assert sr >= 1.0 - 1e-12 and sr <= int(torch.linalg.matrix_rank(a)) + 1e-9


def test_normalized_rank_and_collapse_ratios():
    assert dg.normalized_effective_rank(torch.eye(8)) == pytest.approx(1.0)
    assert dg.collapse_ratios([10.0, 5.0, 2.5]) == [1.0, 0.5, 0.25]
    assert math.isnan(dg.collapse_ratios([0.0, 1.0])[1])


def test_diagnostics_of_nonfinite_or_zero_input_are_nan_or_zero_not_a_crash():
    bad = torch.tensor([[1.0, float("nan")], [0.0, 1.0]])
    assert math.isnan(dg.effective_rank(bad)) and math.isnan(dg.stable_rank(bad))
    assert dg.effective_rank(torch.zeros(4, 3)) == 0.0 and dg.stable_rank(torch.zeros(4, 3)) == 0.0
    with pytest.raises(ValueError, match=r"\(\.\.\., d\)"):
        dg.effective_rank(torch.ones(5))


@given(seeds, st.integers(2, 16), st.integers(2, 16))
def test_token_cosine_of_identical_rows_is_one(seed, t, d):
    row = seeded_randn((1, d), seed)
    assert dg.token_cosine(row.expand(t, d)) == pytest.approx(1.0, abs=1e-12)
    assert dg.rank_collapse_residual(row.expand(3, t, d)) == pytest.approx(0.0, abs=1e-12)


def test_token_cosine_of_orthogonal_rows_is_zero_and_residual_of_isotropic_is_large():
    assert dg.token_cosine(torch.eye(6)) == pytest.approx(0.0)
    assert dg.rank_collapse_residual(seeded_randn((64, 32), 0)) > 0.9


def test_hidden_unit_correlation_known_cases():
    x = seeded_randn((500, 1), 0)
    assert dg.hidden_unit_correlation(torch.cat([x, -2 * x, 3 * x], 1)) == pytest.approx(1.0)
    assert dg.hidden_unit_correlation(seeded_randn((20000, 4), 1)) < 0.03
    dead = torch.cat([seeded_randn((50, 3), 2), torch.zeros(50, 2)], 1)  # dead units left out
    assert math.isfinite(dg.hidden_unit_correlation(dead))


@given(seeds, st.integers(1, 6), st.integers(4, 32), st.floats(0.0, 1e-2))
def test_ln_decomposition_pieces_add_up_to_true_gradient(seed, n, d, eps):
    x, go, w = (seeded_randn(s, seed + i) for i, s in enumerate([(n, d), (n, d), (d,)]))
    dec = dg.ln_jacobian_decomposition(x, go, w, eps=eps)
    g_z = go * w
    assert_close((g_z - dec.mean_component - dec.radial_component) / dec.sigma, dec.true_grad)
    assert_close(dec.true_grad, norms.layer_norm_vjp(x, go, w, eps=eps), atol=1e-12, rtol=1e-10)
    assert_close(dec.center_scale - dec.radial_component / dec.sigma, dec.true_grad)
    assert -1 - 1e-12 <= dec.cos_center_scale <= 1 + 1e-12


@given(seeds, st.integers(1, 6), st.integers(4, 32))
def test_ln_decomposition_energy_fractions_partition_g_z_at_eps_zero(seed, n, d):
    x, go = seeded_randn((n, d), seed), seeded_randn((n, d), seed + 1)
    dec = dg.ln_jacobian_decomposition(x, go, eps=0.0)
    rest = (dec.true_grad * dec.sigma).pow(2).sum() / go.pow(2).sum()
    assert float(rest) + dec.r_mean + dec.r_radial == pytest.approx(1.0, abs=1e-12)


def test_ln_decomposition_rejects_mismatched_shapes():
    with pytest.raises(ValueError, match="must match"):
        dg.ln_jacobian_decomposition(torch.zeros(2, 4), torch.zeros(2, 5))
