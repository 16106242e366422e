"""Parameters that may carry a leading seed dimension: the ops every model applies them with.

Several seeds of one configuration train as one model (normsys.training.batched): each parameter is the
seeds' copies stacked, (S, *shape), and the batch is the seeds' batches folded into one,
(S*B, ...), seed-major (rows 0..B-1 belong to seed 0). Everything without parameters (attention,
residual additions, reshapes, activations) sees an ordinary batch of S*B rows and runs unchanged;
the few ops below apply a parameter to it. Given one seed's parameter they call exactly what an
unstacked model calls (F.linear, F.embedding, ...), so a single run's numbers do not depend on
this module; given a stacked one they apply each seed's copy to that seed's rows with batched
matmuls. The same module code thus runs one run or S seeds, on any device.
"""

from __future__ import annotations

import copy

import torch
import torch.nn.functional as F
from torch import Tensor, nn


def seeds_of(p: Tensor, dims: int) -> int:
    """How many seeds ``p`` stacks: its leading size when it has one dimension more than one
    seed's parameter (``dims``), else 0 (not stacked)."""
    return p.shape[0] if p.dim() > dims else 0


def by_seed(x: Tensor, seeds: int) -> Tensor:
    """The seed-folded batch (S*B, ..., d) as (S, rows of one seed, d)."""
    return x.reshape(seeds, -1, x.shape[-1])


def linear(x: Tensor, weight: Tensor, bias: Tensor | None = None) -> Tensor:
    """x W^T + b over the last dim; W (out, in), or (S, out, in) with b (S, out) for S seeds."""
    s = seeds_of(weight, 2)
    if not s:
        return F.linear(x, weight, bias)
    rows = by_seed(x, s)  # (S, N, in)
    if bias is None:
        y = torch.bmm(rows, weight.transpose(1, 2))
    else:
        y = torch.baddbmm(bias.unsqueeze(1), rows, weight.transpose(1, 2))  # (S, N, out)
    return y.reshape(*x.shape[:-1], weight.shape[-2])


def embedding(ids: Tensor, weight: Tensor) -> Tensor:
    """Rows of the table ``weight`` (V, d), or of each seed's table (S, V, d) for its rows of ids."""
    s = seeds_of(weight, 2)
    if not s:
        return F.embedding(ids, weight)
    vocab = weight.shape[1]
    offsets = torch.arange(s, device=ids.device) * vocab  # seed k's table starts at row k*V
    flat = ids.reshape(s, -1) + offsets[:, None]
    return F.embedding(flat, weight.reshape(s * vocab, -1)).reshape(*ids.shape, weight.shape[-1])


def add_rows(h: Tensor, table: Tensor) -> Tensor:
    """h (N, T, d) plus the first T rows of a position table (T_max, d) or (S, T_max, d)."""
    t = h.shape[1]
    s = seeds_of(table, 2)
    if not s:
        return h + F.embedding(torch.arange(t, device=h.device), table)
    return (h.reshape(s, -1, t, h.shape[-1]) + table[:, None, :t]).reshape(h.shape)


def affine(y: Tensor, weight: Tensor | None, bias: Tensor | None) -> Tensor:
    """y * weight + bias over the last dim; weight and bias (d,), or (S, d) for S seeds."""
    ref = weight if weight is not None else bias
    s = seeds_of(ref, 1) if ref is not None else 0
    if not s:
        if weight is not None:
            y = y * weight
        if bias is not None:
            y = y + bias
        return y
    z = by_seed(y, s)
    if weight is not None:
        z = z * weight[:, None]
    if bias is not None:
        z = z + bias[:, None]
    return z.reshape(y.shape)


def scale(x: Tensor, a: Tensor | float) -> Tensor:
    """a * x for a scalar a, or a (S,) of seeds' scalars applied to each seed's rows."""
    s = seeds_of(a, 0) if isinstance(a, Tensor) else 0
    if not s:
        return a * x
    return (a[:, None, None] * by_seed(x, s)).reshape(x.shape)


def per_row(p: Tensor, rows: int, dims: int) -> Tensor:
    """A parameter with a leading 1 (one seed's: ``dims`` dims, e.g. a class token (1, 1, d)) for
    a batch of ``rows`` rows: as it is (broadcasting expands it), or, stacked (S, 1, ...), each
    seed's copy repeated for its rows: (rows, ...)."""
    s = seeds_of(p, dims)
    if not s:
        return p
    return p.expand(s, rows // s, *p.shape[2:]).reshape(rows, *p.shape[2:])


class Linear(nn.Linear):
    """nn.Linear (same parameters, same initialization) applied through ``linear``."""

    def forward(self, x: Tensor) -> Tensor:
        return linear(x, self.weight, self.bias)


class Embedding(nn.Embedding):
    """nn.Embedding (same initialization) applied through ``embedding``."""

    def forward(self, ids: Tensor) -> Tensor:
        return embedding(ids, self.weight)


def stack_modules(models: list[nn.Module]) -> nn.Module:
    """One module of the same structure whose parameters and buffers are the models' stacked in
    order, (S, *shape): the seeds' models as one (its forward takes their batches folded)."""
    out = copy.deepcopy(models[0])
    with torch.no_grad():
        for name, p in models[0].named_parameters():
            owner, attr = _owner(out, name)
            copies = torch.stack([m.get_parameter(name).detach() for m in models])
            setattr(owner, attr, nn.Parameter(copies, requires_grad=p.requires_grad))
        for name, _ in models[0].named_buffers():
            owner, attr = _owner(out, name)
            setattr(owner, attr, torch.stack([m.get_buffer(name) for m in models]))
    return out


def unstack_into(stack: nn.Module, models: list[nn.Module]) -> None:
    """Load seed k's slice of every stacked parameter and buffer into ``models[k]``."""
    with torch.no_grad():
        state = stack.state_dict()
        for k, model in enumerate(models):
            model.load_state_dict({name: value[k] for name, value in state.items()})


def _owner(module: nn.Module, name: str) -> tuple[nn.Module, str]:
    path, _, attr = name.rpartition(".")
    return (module.get_submodule(path) if path else module), attr
