"""Measurement protocols that run a model: the FA evaluation protocol's diagnostics and the
LN-Jacobian analysis's captures. (normsys.training.diagnostics holds the pure functions they end in.)

FA protocol, for FA-protocol models (embed, blocks, out_ln, out_head).

Definitions (the FA evaluation protocol): for h_0 ... h_L of ``forward(x, return_hidden=True)``,
taking token 0 of 3-D hidden states,
- residual norm at l: median over the batch of ||h_l||_2;
- BP gradient norm at l: median over the batch of ||dL/dh_l||_2, dL/dh_l by backprop through the
  explicit residual path (whatever rule trained the model);
- direction stability at l: over >= 2 disjoint batches, the batch-mean of dL/dh_l normalized to unit
  length; the mean pairwise cosine of these directions (default layer: the middle, L // 2).
Reference values from the protocol's authors: healthy BP-trained nets 0.05-0.18, DFA-trained pre-LN
residual MLPs 0.5-0.99.
"""

from __future__ import annotations

import itertools

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys.training import diagnostics as dg
from normsys.training.data import mnist
from normsys.training.feedback import check_fa_protocol
from normsys.training.norms import LayerNorm, layer_norm_vjp

BP_RANGE, DFA_RANGE = (0.05, 0.18), (0.5, 0.99)


def _token0(h: Tensor) -> Tensor:
    return h[:, 0] if h.dim() == 3 else h


def hidden_and_grads(model: nn.Module, x: Tensor, y: Tensor) -> tuple[list[Tensor], list[Tensor]]:
    """h_0 ... h_L and dL/dh_l (backprop through the residual path), token 0 for 3-D states."""
    check_fa_protocol(model)
    model.eval()
    with torch.enable_grad():
        logits, hidden = model(x, return_hidden=True)
        loss = F.cross_entropy(logits, y)
        grads = torch.autograd.grad(loss, hidden)
    return [_token0(h).detach() for h in hidden], [_token0(g).detach() for g in grads]


def direction_stability(mean_grads: list[Tensor]) -> float:
    """Mean pairwise cosine of per-batch mean gradients (each normalized to unit length)."""
    if len(mean_grads) < 2:
        raise ValueError(f"direction stability needs >= 2 disjoint batches, got {len(mean_grads)}")
    units = [g.flatten().double() / g.double().norm().clamp_min(1e-300) for g in mean_grads]
    return float(torch.stack([a @ b for a, b in itertools.combinations(units, 2)]).mean())


def fa_protocol_report(model: nn.Module, batches: list[tuple[Tensor, Tensor]],
                       layer: int | None = None) -> dict:
    """Residual norms, BP gradient norms (first batch), direction stability at ``layer``, and
    where that stability lies against the source's reference ranges (``reading``: the claims
    decide by their own rules, normsys.claims.verdict)."""
    hidden, grads = hidden_and_grads(model, *batches[0])
    layer = len(hidden) // 2 if layer is None else layer
    if not 0 <= layer < len(hidden):
        raise ValueError(f"layer {layer} out of range: the model has h_0 ... h_{len(hidden) - 1}")
    means = [hidden_and_grads(model, x, y)[1][layer].mean(0) for x, y in batches]
    stability = direction_stability(means)
    if stability >= DFA_RANGE[0]:
        reading = f"stable gradient directions (DFA-like: reference {DFA_RANGE[0]}-{DFA_RANGE[1]})"
    elif stability <= BP_RANGE[1]:
        reading = (f"batch-specific gradient directions (healthy BP-like: reference "
                   f"{BP_RANGE[0]}-{BP_RANGE[1]})")
    else:
        reading = "intermediate stability (between the BP and DFA reference ranges)"
    return {
        "residual_norms": [float(h.norm(dim=-1).median()) for h in hidden],
        "bp_grad_norms": [float(g.norm(dim=-1).median()) for g in grads],
        "layer": layer, "n_batches": len(batches), "stability": stability, "reading": reading,
    }


def disjoint_batches(x: Tensor, y: Tensor, n: int = 8, size: int = 128) -> list[tuple[Tensor, Tensor]]:
    """The first ``n`` disjoint batches of ``size`` rows of a held-out set."""
    if n * size > len(y):
        raise ValueError(f"{n} disjoint batches of {size} need {n * size} rows, have {len(y)}")
    return [(x[i * size : (i + 1) * size], y[i * size : (i + 1) * size]) for i in range(n)]


def mnist_report(model: nn.Module, n_batches: int = 8, size: int = 128) -> dict:
    """The FA protocol's report of ``model`` on the first disjoint MNIST test batches."""
    split = mnist()
    return fa_protocol_report(model, disjoint_batches(split.x_test, split.y_test, n_batches, size))


# ----------------------------------------------------------------------------- LN Jacobian


def layernorm_gradients(model: nn.Module, x: Tensor, y: Tensor) -> list[dict]:
    """At every LayerNorm: its input, module and the dL/dout that the model's own backward pass
    (BP, or FA for an FA model) delivers, on the next-token batch (x, y)."""
    lns = [(name, m) for name, m in model.named_modules() if isinstance(m, LayerNorm)]
    captured: dict[str, dict] = {}

    def hook(name):
        def fn(module, inputs, output):
            captured[name] = {"x": inputs[0].detach(), "module": module}
            output.register_hook(lambda g: captured[name].__setitem__("grad_out", g.detach()))
        return fn

    handles = [m.register_forward_hook(hook(name)) for name, m in lns]
    try:
        model.train()
        model.zero_grad(set_to_none=True)
        logits = model(x)
        F.cross_entropy(logits.reshape(-1, logits.shape[-1]), y.reshape(-1)).backward()
    finally:
        for h in handles:
            h.remove()
    return [{"name": n, **captured[n]} for n, _ in lns]


def ln_vjp_errors(captures: list[dict], radial: bool = True) -> list[float]:
    """||analytic - autograd|| / ||autograd|| of each LayerNorm's input gradient (fp32);
    ``radial=False``: of the formula without its radial term."""
    errors = []
    for c in captures:
        m, x, g = c["module"], c["x"], c["grad_out"]
        x_ = x.clone().requires_grad_(True)
        (auto,) = torch.autograd.grad(m(x_), x_, g)
        analytic = layer_norm_vjp(x, g, m.weight.detach(), m.eps, radial=radial)
        errors.append(float((analytic - auto).norm() / auto.norm()))
    return errors


def ln_decomposition_summary(captures: list[dict], through_gain: bool = True) -> dict[str, float]:
    """Means over LayerNorms of the center-and-scale and identity cosines, r_mean, r_radial.

    ``through_gain``: g_z = gain * dL/dout, the true gradient at z (the analysis's definition).
    False reads dL/dout as g_z, ignoring the gain, as the analysis's seed script does; the two
    agree only where the gain is uniform."""
    decs = [dg.ln_jacobian_decomposition(c["x"], c["grad_out"],
                                         c["module"].weight if through_gain else None,
                                         c["module"].eps)
            for c in captures]
    return {k: sum(getattr(d, k) for d in decs) / len(decs)
            for k in ("cos_center_scale", "cos_identity", "r_mean", "r_radial")}
