"""Normalization layers: functional forms, modules, a registry and analytic input gradients.

Every norm kind of README's list is one entry of ``NORMS``; ``build_norm(kind, dim)`` builds its
module. All norms act on the last dimension (size ``d``) except ``batchnorm``, which normalizes each
feature over every leading dimension (batch and time) and keeps running statistics.

The analytic vector-Jacobian products (``*_vjp``) are the formulas that the LayerNorm-Jacobian
analysis reasons about; the property tests check them against autograd in float64.
"""

from __future__ import annotations

import functools
import hashlib
import inspect
import math
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys.training import stacked
from normsys.training.provenance import code_text

L2_FLOOR = 1e-9  # the seeds' manual L2: x / max(||x||, 1e-9)


# ----------------------------------------------------------------------------- fused kernels

FUSE_DEVICES = {"cuda"}  # device types on which the eager compositions run as compiled kernels
_fusion = {"enabled": True}


def fused(fn: Callable[..., Tensor]) -> Callable[..., Tensor]:
    """Run ``fn`` through torch.compile when its input lives on a device in ``FUSE_DEVICES``.

    For the norms that torch has no kernel for (l2 family, dyt): eager torch makes 3-5 passes over
    memory per call (norm, divide, scale, affine; more backward), a compiled kernel one read and one
    write. Eager inside an enclosing torch.compile (which fuses it with its neighbours anyway), on
    other devices, and within ``fusion(False)`` (train.compile=off).
    """
    compiled = functools.cache(lambda: torch.compile(fn))  # dynamo loads on first use only

    @functools.wraps(fn)
    def run(x: Tensor, *args, **kwargs) -> Tensor:
        if (_fusion["enabled"] and x.device.type in FUSE_DEVICES
                and not torch.compiler.is_compiling()):
            return compiled()(x, *args, **kwargs)
        return fn(x, *args, **kwargs)

    run.eager = fn
    return run


@contextmanager
def fusion(enabled: bool) -> Iterator[None]:
    """Turn the compiled norm kernels on or off for the duration (train.compile=off: off)."""
    before = _fusion["enabled"]
    _fusion["enabled"] = enabled
    try:
        yield
    finally:
        _fusion["enabled"] = before


# ----------------------------------------------------------------------------- functional forms


def layer_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
               eps: float = 1e-5) -> Tensor:
    """(x - mean) / sqrt(var + eps) * weight + bias over the last dim, biased variance.

    Runs torch's fused kernel; ``layer_norm_reference`` is the same formula written out (the
    property tests pin the two together, eps = 0 included). Seed-stacked gain and bias (S, d)
    apply to each seed's rows (normsys.training.stacked).
    """
    if weight is not None and stacked.seeds_of(weight, 1):
        return stacked.affine(F.layer_norm(x, x.shape[-1:], None, None, eps), weight, bias)
    return F.layer_norm(x, x.shape[-1:], weight, bias, eps)


def rms_norm(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """x / sqrt(mean(x^2) + eps) * weight over the last dim (torch's fused kernel; see
    ``rms_norm_reference``); a seed-stacked gain (S, d) as in ``layer_norm``."""
    if weight is not None and stacked.seeds_of(weight, 1):
        return stacked.affine(F.rms_norm(x, x.shape[-1:], None, eps), weight, None)
    return F.rms_norm(x, x.shape[-1:], weight, eps)


def layer_norm_reference(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
                         eps: float = 1e-5) -> Tensor:
    """The LayerNorm formula written out: (x - mean) / sqrt(var + eps) * weight + bias."""
    mean = x.mean(-1, keepdim=True)
    var = (x - mean).pow(2).mean(-1, keepdim=True)
    y = (x - mean) * torch.rsqrt(var + eps)
    return stacked.affine(y, weight, bias)


def rms_norm_reference(x: Tensor, weight: Tensor | None = None, eps: float = 1e-6) -> Tensor:
    """The RMSNorm formula written out: x / sqrt(mean(x^2) + eps) * weight."""
    y = x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
    return stacked.affine(y, weight, None)


@fused
def l2_norm(x: Tensor, weight: Tensor | None = None, bias: Tensor | None = None,
            scale: float = 1.0) -> Tensor:
    """scale * x / max(||x||_2, 1e-9) over the last dim, then an optional per-feature affine."""
    y = scale * x / x.norm(dim=-1, keepdim=True).clamp_min(L2_FLOOR)
    return stacked.affine(y, weight, bias)


@fused
def dyt(x: Tensor, alpha: Tensor | float, weight: Tensor | None = None,
        bias: Tensor | None = None) -> Tensor:
    """Dynamic tanh (Zhu et al. 2025): weight * tanh(alpha * x) + bias, alpha a scalar."""
    return stacked.affine(torch.tanh(stacked.scale(x, alpha)), weight, bias)


def batch_norm(x: Tensor, running_mean: Tensor | None, running_var: Tensor | None,
               weight: Tensor | None = None, bias: Tensor | None = None, training: bool = True,
               momentum: float = 0.1, eps: float = 1e-5) -> Tensor:
    """Per-feature normalization over every leading dim of a (..., d) tensor (batch and time).
    With the parameters and running statistics of S seeds, (S, d), on a seed-folded batch, each
    seed's rows are normalized by their own statistics, which update that seed's running ones:
    the seeds become S*d features of one batch norm over the rows of one seed."""
    ref = weight if weight is not None else running_mean
    s = stacked.seeds_of(ref, 1) if ref is not None else 0
    if not s:
        flat = x.reshape(-1, x.shape[-1])  # (N, d)
        y = F.batch_norm(flat, running_mean, running_var, weight, bias, training, momentum, eps)
        return y.reshape(x.shape)
    d = x.shape[-1]
    wide = stacked.by_seed(x, s).transpose(0, 1).reshape(-1, s * d)  # (N, S*d), seed-major
    flat = [None if t is None else t.view(s * d)  # views: the update lands in the (S, d) buffers
            for t in (running_mean, running_var, weight, bias)]
    y = F.batch_norm(wide, *flat[:2], *flat[2:], training, momentum, eps)
    return y.reshape(-1, s, d).transpose(0, 1).reshape(x.shape)



# ----------------------------------------------------------------------------- modules


class LayerNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-5, affine: bool = True):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return layer_norm(x, self.weight, self.bias, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class RMSNorm(nn.Module):
    def __init__(self, dim: int, eps: float = 1e-6, affine: bool = True):
        super().__init__()
        self.dim, self.eps = dim, eps
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return rms_norm(x, self.weight, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}"


class L2Norm(nn.Module):
    """Unit-norm rows (``scale=1``), optionally rescaled and followed by a per-feature affine."""

    def __init__(self, dim: int, scale: float = 1.0, affine: bool = False):
        super().__init__()
        self.dim, self.scale = dim, scale
        self.weight = nn.Parameter(torch.ones(dim)) if affine else None
        self.bias = nn.Parameter(torch.zeros(dim)) if affine else None

    def forward(self, x: Tensor) -> Tensor:
        return l2_norm(x, self.weight, self.bias, self.scale)

    def extra_repr(self) -> str:
        return f"{self.dim}, scale={self.scale:.4g}, affine={self.weight is not None}"


class BatchNorm(nn.Module):
    """BatchNorm over the feature (last) dim of (..., d) inputs, statistics over all other dims."""

    def __init__(self, dim: int, eps: float = 1e-5, momentum: float = 0.1):
        super().__init__()
        self.dim, self.eps, self.momentum = dim, eps, momentum
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))
        self.register_buffer("running_mean", torch.zeros(dim))
        self.register_buffer("running_var", torch.ones(dim))

    def forward(self, x: Tensor) -> Tensor:
        if self.training and x.reshape(-1, self.dim).shape[0] < 2:
            raise ValueError(f"batchnorm in train mode needs >= 2 rows per feature, got shape "
                             f"{tuple(x.shape)}; use eval mode or another norm kind for batch 1")
        return batch_norm(x, self.running_mean, self.running_var, self.weight, self.bias,
                          self.training, self.momentum, self.eps)

    def extra_repr(self) -> str:
        return f"{self.dim}, eps={self.eps}, momentum={self.momentum}"


class DyT(nn.Module):
    def __init__(self, dim: int, alpha0: float = 0.5):
        super().__init__()
        self.dim = dim
        self.alpha = nn.Parameter(torch.tensor(float(alpha0)))
        self.weight = nn.Parameter(torch.ones(dim))
        self.bias = nn.Parameter(torch.zeros(dim))

    def forward(self, x: Tensor) -> Tensor:
        return dyt(x, self.alpha, self.weight, self.bias)

    def extra_repr(self) -> str:
        return f"{self.dim}"


class Identity(nn.Module):
    def __init__(self, dim: int):
        super().__init__()
        self.dim = dim

    def forward(self, x: Tensor) -> Tensor:
        return x


# ----------------------------------------------------------------------------- registry


@dataclass(frozen=True)
class NormKind:
    """One registry entry: how to build the module and what it is."""

    build: Callable[..., nn.Module]  # build(dim, **options) -> module
    description: str
    per_row: bool = True  # normalizes each row alone (False: statistics across the batch)
    source: str = ""  # a registered kind's source digest (the run cache keys its runs on it)


NORMS: dict[str, NormKind] = {
    "layernorm": NormKind(LayerNorm, "(x - mean)/sqrt(var + eps) * g + b"),
    "rmsnorm": NormKind(RMSNorm, "x / sqrt(mean(x^2) + eps) * g"),
    "l2": NormKind(L2Norm, "x / max(||x||, 1e-9), no parameters"),
    "batchnorm": NormKind(BatchNorm, "per feature over batch (and time), running stats",
                          per_row=False),
    "dyt": NormKind(DyT, "g * tanh(a x) + b, scalar a (a0 = 0.5)"),
    "none": NormKind(Identity, "identity"),
    "l2_affine": NormKind(lambda dim, **kw: L2Norm(dim, affine=True, **kw),
                          "l2 followed by a per-feature gain and bias"),
    "scaled_l2": NormKind(lambda dim, **kw: L2Norm(dim, scale=math.sqrt(dim), **kw),
                          "sqrt(d) * x / max(||x||, 1e-9): rmsnorm without gain, up to eps"),
}


BUILTIN = frozenset(NORMS)


def register(name: str, factory: Callable[[int], nn.Module], description: str = "") -> str:
    """Add a norm kind: ``factory(d)`` returns a module mapping (..., d) to the same shape.

    The kind then works wherever a built-in one does (configs, models, the run cache, the
    scorecard). It is checked first (``check_norm``); every failure is a ValueError naming the
    factory and what was wrong. Registering the same name again replaces the entry (an edited
    class in the same session); a built-in name is refused. Returns ``name``.
    """
    if not isinstance(name, str) or not name.replace("_", "").replace("-", "").isalnum():
        raise ValueError(f"norm name {name!r}: use letters, digits, '_' or '-'")
    if name in BUILTIN:
        raise ValueError(f"norm name {name!r} is a built-in kind ({', '.join(sorted(BUILTIN))}); "
                         f"register it under another name")
    check_norm(factory)
    doc = inspect.cleandoc(factory.__doc__ or "").split("\n")[0]  # its own, not a base class's
    NORMS[name] = NormKind(factory, description or doc or qualified(factory),
                           source=source_digest(factory))
    return name


def qualified(factory: Callable) -> str:
    """``module:qualname`` of a class or function, for messages."""
    return f"{getattr(factory, '__module__', '?')}:{getattr(factory, '__qualname__', factory)!s}"


def check_norm(factory: Callable[[int], nn.Module], dim: int = 64) -> None:
    """Build ``factory(dim)`` and run it forward and backward on a random (4, 8, dim) input:
    it must be an nn.Module, keep the shape, and give finite outputs and gradients. Raises a
    ValueError naming the factory and the first problem. Global random state is left as it was."""
    where = qualified(factory)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(0)
        try:
            module = factory(dim)
        except Exception as err:  # noqa: BLE001 - any failure of user code is reported as such
            raise ValueError(f"{where}: building it for d={dim} failed: "
                             f"{type(err).__name__}: {err}") from None
        if not isinstance(module, nn.Module):
            raise ValueError(f"{where}({dim}) returned a {type(module).__name__}, not a "
                             f"torch.nn.Module")
        x = torch.randn(4, 8, dim, requires_grad=True)
        try:
            y = module(x)
        except Exception as err:  # noqa: BLE001
            raise ValueError(f"{where}: its forward pass on a (4, 8, {dim}) input failed: "
                             f"{type(err).__name__}: {err}") from None
        if not isinstance(y, Tensor) or y.shape != x.shape:
            got = tuple(y.shape) if isinstance(y, Tensor) else type(y).__name__
            raise ValueError(f"{where}: maps a (4, 8, {dim}) input to {got}; a norm must keep "
                             f"the shape (..., d)")
        if not torch.isfinite(y).all():
            raise ValueError(f"{where}: gives non-finite outputs (NaN or inf) on random input")
        if y.requires_grad:
            (y * torch.randn_like(y)).sum().backward()
        if x.grad is None:
            raise ValueError(f"{where}: its output does not depend on its input (no gradient)")
        grads = [("its input", x.grad)] + [(n, p.grad) for n, p in module.named_parameters()]
        if bad := [n for n, g in grads if g is not None and not torch.isfinite(g).all()]:
            raise ValueError(f"{where}: gives non-finite gradients (NaN or inf) for "
                             f"{', '.join(bad)} on random input")


def source_digest(factory: Callable) -> str:
    """sha256 (12 hex digits) of the code of the source file defining ``factory``
    (provenance.code_text): an edit of the class, or of a helper beside it, changes the digest and
    so the cache key of the kind's runs; a comment or docstring edited does not."""
    try:
        return hashlib.sha256(code_text(Path(inspect.getsourcefile(factory)))).hexdigest()[:12]
    except (OSError, TypeError):  # a builtin, or defined where no file holds it
        raise ValueError(f"{qualified(factory)}: its source cannot be found; define the norm in "
                         f"a .py file") from None


def check_kind(kind: str) -> str:
    """Return ``kind`` if it names a registered norm, else raise a ValueError listing the valid ones."""
    if kind not in NORMS:
        raise ValueError(f"unknown norm kind {kind!r}; valid kinds: {', '.join(NORMS)}")
    return kind


def build_norm(kind: str, dim: int, **options) -> nn.Module:
    """Build the norm module registered as ``kind`` for feature size ``dim``.

    Args:
        kind: a key of ``NORMS``.
        dim: size of the normalized (last) dimension.
        **options: passed to the module (e.g. ``eps`` for layernorm/rmsnorm, ``alpha0`` for dyt).
    """
    check_kind(kind)
    if not isinstance(dim, int) or dim < 1:
        raise ValueError(f"norm dim must be a positive int, got {dim!r}")
    try:
        return NORMS[kind].build(dim, **options)
    except TypeError as err:
        raise TypeError(f"bad options {options} for norm kind {kind!r}: {err}") from None


# ----------------------------------------------------------------------------- analytic VJPs


def layer_norm_vjp_parts(x: Tensor, grad_out: Tensor, weight: Tensor | None = None,
                         eps: float = 1e-5) -> tuple[Tensor, Tensor, Tensor, Tensor]:
    """The pieces of LayerNorm's input gradient: with sigma = sqrt(var + eps),
    z = (x - mean)/sigma and g_z = weight * dL/dout, returns (g_z, its mean component mean(g_z),
    its radial component z * mean(g_z * z), sigma); dL/dx = (g_z - mean - radial) / sigma."""
    mean = x.mean(-1, keepdim=True)
    sigma = ((x - mean).pow(2).mean(-1, keepdim=True) + eps).sqrt()
    z = (x - mean) / sigma
    g_z = grad_out if weight is None else grad_out * weight
    return g_z, g_z.mean(-1, keepdim=True).expand_as(g_z), z * (g_z * z).mean(-1, keepdim=True), sigma


def layer_norm_vjp(x: Tensor, grad_out: Tensor, weight: Tensor | None = None,
                   eps: float = 1e-5, radial: bool = True) -> Tensor:
    """dL/dx of layer_norm from dL/dout, exact for any eps:
    (g_z - mean(g_z) - z * mean(g_z * z)) / sigma. ``radial=False`` drops the radial term: the
    'center and scale' surrogate of the LN-Jacobian analysis."""
    g_z, mean, rad, sigma = layer_norm_vjp_parts(x, grad_out, weight, eps)
    return (g_z - mean - rad) / sigma if radial else (g_z - mean) / sigma


def rms_norm_vjp(x: Tensor, grad_out: Tensor, weight: Tensor | None = None,
                 eps: float = 1e-6) -> Tensor:
    """dL/dx of rms_norm: with r = sqrt(mean(x^2) + eps), u = x/r, g_u = weight * dL/dout,
    dL/dx = (g_u - u * mean(g_u * u)) / r."""
    r = (x.pow(2).mean(-1, keepdim=True) + eps).sqrt()
    u = x / r
    g_u = grad_out if weight is None else grad_out * weight
    return (g_u - u * (g_u * u).mean(-1, keepdim=True)) / r


def l2_norm_vjp(x: Tensor, grad_out: Tensor, weight: Tensor | None = None,
                scale: float = 1.0) -> Tensor:
    """dL/dx of l2_norm: with n = ||x||, u = x/n, g_u = scale * weight * dL/dout,
    dL/dx = (g_u - u * <g_u, u>) / n; below the 1e-9 floor the map is linear: g_u / 1e-9."""
    n = x.norm(dim=-1, keepdim=True)
    g_u = scale * (grad_out if weight is None else grad_out * weight)
    floored = n < L2_FLOOR
    n_safe = n.clamp_min(L2_FLOOR)
    u = x / n_safe
    radial = torch.where(floored, torch.zeros_like(u), u * (g_u * u).sum(-1, keepdim=True))
    return (g_u - radial) / n_safe
