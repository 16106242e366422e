"""Measurement functions: tensors in, floats (or small dicts of floats / tensors) out.

They do not train, load data or print. Definitions: the effective rank of Roy & Vetterli 2007,
stable rank, collapse ratio, token cosine, hidden-unit correlation, the rank-collapse residual of
Dong et al. 2021, and the LayerNorm Jacobian decomposition of the LN-Jacobian analysis.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import torch
from torch import Tensor

from normsys.training.norms import layer_norm_vjp_parts


def as_matrix(h: Tensor) -> Tensor:
    """Flatten an activation tensor (..., d) to a float64 matrix (rows, d) on the CPU."""
    if h.dim() < 2:
        raise ValueError(f"activation tensor needs shape (..., d) with >= 2 dims, got {tuple(h.shape)}")
    return h.detach().reshape(-1, h.shape[-1]).to("cpu", torch.float64)


def singular_values(h: Tensor) -> Tensor:
    """Singular values (descending, float64) of the activation matrix of ``h`` (..., d).

    Non-finite input gives a vector of NaN, so that a diverged run is measured as NaN, not a crash.
    """
    a = as_matrix(h)
    if not torch.isfinite(a).all():
        return torch.full((min(a.shape),), float("nan"), dtype=torch.float64)
    return torch.linalg.svdvals(a)


def effective_rank(h: Tensor | None = None, *, s: Tensor | None = None) -> float:
    """exp of the Shannon entropy of p_i = s_i / sum(s) (Roy & Vetterli 2007).

    Pass an activation tensor, or its singular values as ``s``. A zero matrix has erank 0.
    """
    s = singular_values(h) if s is None else s.to(torch.float64)
    if not torch.isfinite(s).all():
        return float("nan")
    total = s.sum()
    if total <= 0:
        return 0.0
    p = s[s > 0] / total
    return math.exp(float(-(p * p.log()).sum()))


def stable_rank(h: Tensor) -> float:
    """||A||_F^2 / ||A||_2^2 of the activation matrix (0 for a zero matrix)."""
    s = singular_values(h)
    if not torch.isfinite(s).all():
        return float("nan")
    if s[0] <= 0:
        return 0.0
    return float((s**2).sum() / s[0] ** 2)


def normalized_effective_rank(h: Tensor) -> float:
    """rho = erank / d, d the feature size (last dim)."""
    return effective_rank(h) / h.shape[-1]


def collapse_ratios(eranks: Sequence[float]) -> list[float]:
    """kappa_l = erank(layer l) / erank(first probed layer), for each probed layer in order."""
    if len(eranks) == 0:
        raise ValueError("collapse_ratios needs at least one effective rank")
    first = eranks[0]
    return [float("nan") if first == 0 else e / first for e in eranks]


def layer_grad_norms(grads: dict[str, float], names: Sequence[Sequence[str]]) -> list[float]:
    """Per layer, ||dL/dW|| over that layer's parameters (each a list of parameter names) from
    the per-parameter norms a run records (RunRecord.init_grad_norms)."""
    return [math.sqrt(sum(grads[n] ** 2 for n in layer)) for layer in names]


def log10_ratio(norms: Sequence[float]) -> float:
    """log10(first / last) of a per-layer profile: > 0 when gradients vanish toward the output,
    < 0 when they vanish toward the input."""
    return math.log10(norms[0] / norms[-1])


def steps_to_accuracy(batch_acc: Sequence[float], target: float = 0.9, window: int = 50) -> float:
    """First step at which the mean accuracy of the last ``window`` training batches reaches
    ``target`` (NaN if never)."""
    acc = torch.tensor(list(batch_acc), dtype=torch.float64)
    if len(acc) < window:
        return math.nan
    running = acc.unfold(0, window, 1).mean(1)  # running[i] covers steps i+1 ... i+window
    hit = torch.nonzero(running >= target).flatten()
    return float(hit[0] + window) if len(hit) else math.nan


def token_cosine(h: Tensor) -> float:
    """Mean cosine similarity over pairs of distinct tokens (rows) of (T, d) or (B, T, d) input,
    averaged over the batch. Zero rows count as cosine 0."""
    x = h.detach().to(torch.float64)
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.dim() != 3 or x.shape[1] < 2:
        raise ValueError(f"token_cosine needs (T, d) or (B, T, d) with T >= 2, got {tuple(h.shape)}")
    u = x / x.norm(dim=-1, keepdim=True).clamp_min(1e-300)
    gram = u @ u.transpose(1, 2)  # (B, T, T)
    t = x.shape[1]
    off = gram.sum((1, 2)) - gram.diagonal(dim1=1, dim2=2).sum(-1)
    return float((off / (t * (t - 1))).mean())


def hidden_unit_correlation(h: Tensor) -> float:
    """Mean |off-diagonal| Pearson correlation between hidden units (columns) of (..., d).

    Units that are constant over the rows (e.g. dead ReLUs) have no correlation and are left out.
    """
    a = as_matrix(h)
    alive = a.std(0) > 0
    a = a[:, alive]
    k = a.shape[1]
    if k < 2:
        return float("nan")
    c = torch.corrcoef(a.T)
    off = c.abs().sum() - c.diagonal().abs().sum()
    return float(off / (k * (k - 1)))


def rank_collapse_residual(h: Tensor) -> float:
    """||X - 1 x^T||_F / ||X||_F with x the token mean (the Frobenius-optimal rank-1 fit of
    Dong et al. 2021's res(X)); X is (T, d), or (B, T, d) averaged over the batch."""
    x = h.detach().to(torch.float64)
    if x.dim() == 2:
        x = x.unsqueeze(0)
    if x.dim() != 3:
        raise ValueError(f"rank_collapse_residual needs (T, d) or (B, T, d), got {tuple(h.shape)}")
    res = (x - x.mean(1, keepdim=True)).flatten(1).norm(dim=1)
    return float((res / x.flatten(1).norm(dim=1).clamp_min(1e-300)).mean())


# ----------------------------------------------------------------------------- LN Jacobian


@dataclass(frozen=True)
class LNJacobianDecomposition:
    """The LayerNorm input gradient and its surrogates at one LayerNorm (rows = tokens).

    true_grad = (g_z - mean_component - radial_component) / sigma;
    center_scale = (g_z - mean_component) / sigma drops the radial term;
    identity = dL/dout (straight-through, as if the norm were absent).
    Cosines are per row, then averaged; r_* are energy fractions summed over all rows.
    """

    true_grad: Tensor
    center_scale: Tensor
    identity: Tensor
    mean_component: Tensor
    radial_component: Tensor
    sigma: Tensor
    cos_center_scale: float
    cos_identity: float
    r_mean: float
    r_radial: float


def row_cosine(a: Tensor, b: Tensor) -> float:
    """Mean over rows (last dim = features) of cos(a_row, b_row); zero rows count as 0."""
    num = (a * b).sum(-1)
    den = (a.norm(dim=-1) * b.norm(dim=-1)).clamp_min(1e-300)
    return float((num / den).mean())


def ln_jacobian_decomposition(x: Tensor, grad_out: Tensor, weight: Tensor | None = None,
                              eps: float = 1e-5) -> LNJacobianDecomposition:
    """Decompose the LayerNorm input gradient from the input x, the gain and dL/dout (..., d)."""
    if x.shape != grad_out.shape:
        raise ValueError(f"x {tuple(x.shape)} and grad_out {tuple(grad_out.shape)} must match")
    x, gy = x.detach().to(torch.float64), grad_out.detach().to(torch.float64)
    w = None if weight is None else weight.detach().to(torch.float64)
    g_z, mean_comp, radial_comp, sigma = layer_norm_vjp_parts(x, gy, w, eps)
    true_grad = (g_z - mean_comp - radial_comp) / sigma
    center_scale = (g_z - mean_comp) / sigma
    energy = g_z.pow(2).sum().clamp_min(1e-300)
    return LNJacobianDecomposition(
        true_grad=true_grad, center_scale=center_scale, identity=gy,
        mean_component=mean_comp, radial_component=radial_comp, sigma=sigma,
        cos_center_scale=row_cosine(center_scale, true_grad),
        cos_identity=row_cosine(gy, true_grad),
        r_mean=float(mean_comp.pow(2).sum() / energy),
        r_radial=float(radial_comp.pow(2).sum() / energy),
    )
