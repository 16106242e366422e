"""Learning rules that replace the transposed weights of backprop with fixed random matrices.

- FA (Lillicrap et al. 2016): every Linear's backward to its input uses a fixed random matrix B of
  W's shape instead of W: dL/dx = dL/dy @ B, while dL/dW = dL/dy^T x stays exact.
- DFA (Nokland 2016): each hidden state h_l of an FA-protocol model (embed, blocks, out_ln,
  out_head) receives B_l e, e = dL/dlogits, instead of the backpropagated gradient; the stream is
  cut between blocks, and the head (out_ln, out_head) gets its true gradient.

Feedback matrices are drawn once at init from the run's seed, with nn.Linear's default scale
U(-1/sqrt(fan_in), 1/sqrt(fan_in)). Both rules train seed-stacked (normsys.training.batched): each
seed's B stacked like its weights, (S, *shape), applied to that seed's rows of the folded batch.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys.training import stacked

FEEDBACK_SEED_OFFSET = 7_919  # feedback matrices use seed + offset, apart from the weights' stream


class _FALinearFn(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias, feedback):
        ctx.save_for_backward(x, weight, bias, feedback)
        return stacked.linear(x, weight, bias)

    @staticmethod
    def backward(ctx, grad_y):
        x, weight, bias, feedback = ctx.saved_tensors
        if seeds := stacked.seeds_of(weight, 2):  # each seed's B and weight gradient, its rows
            gy, xs = stacked.by_seed(grad_y, seeds), stacked.by_seed(x, seeds)
            grad_x = torch.bmm(gy, feedback.to(gy.dtype)).reshape(x.shape)
            grad_w = torch.bmm(gy.transpose(1, 2), xs)
            grad_b = gy.sum(1) if bias is not None else None
            return grad_x, grad_w.to(weight.dtype), grad_b, None
        grad_x = grad_y @ feedback.to(grad_y.dtype)  # B in place of W
        grad_w = grad_y.reshape(-1, grad_y.shape[-1]).T @ x.reshape(-1, x.shape[-1])
        grad_b = grad_y.reshape(-1, grad_y.shape[-1]).sum(0) if bias is not None else None
        return grad_x, grad_w.to(weight.dtype), grad_b, None


class FALinear(nn.Module):
    """A Linear sharing the parameters of ``linear`` whose input gradient uses the fixed B (one
    seed's, or S seeds' stacked with their weights)."""

    def __init__(self, linear: nn.Linear, feedback: Tensor):
        super().__init__()
        self.in_features, self.out_features = linear.in_features, linear.out_features
        self.weight, self.bias = linear.weight, linear.bias
        self.register_buffer("feedback", feedback)

    def forward(self, x: Tensor) -> Tensor:
        return _FALinearFn.apply(x, self.weight, self.bias, self.feedback)


def uniform_like_linear(out_f: int, in_f: int, gen: torch.Generator) -> Tensor:
    bound = 1 / math.sqrt(in_f)
    return (torch.rand(out_f, in_f, generator=gen, dtype=torch.float64) * 2 - 1).mul(bound).float()


def to_feedback_alignment(model: nn.Module, seed: int) -> nn.Module:
    """Replace every nn.Linear of ``model`` in place by an FALinear (names stay the same)."""
    gen = torch.Generator().manual_seed(seed + FEEDBACK_SEED_OFFSET)
    targets = [(name, m) for name, m in model.named_modules() if isinstance(m, nn.Linear)]
    if not targets:
        raise ValueError("feedback alignment needs at least one nn.Linear in the model")
    for name, linear in targets:
        parent_name, _, attr = name.rpartition(".")
        parent = model.get_submodule(parent_name) if parent_name else model
        fb = uniform_like_linear(linear.out_features, linear.in_features, gen)
        setattr(parent, attr, FALinear(linear, fb.to(linear.weight.device)))
    return model


def dfa_feedback(model: nn.Module, n_out: int, seed: int) -> list[Tensor]:
    """Fixed B_l of shape (n_out, d) for h_0 ... h_L, scaled as a Linear(n_out -> d) transpose."""
    check_fa_protocol(model)
    gen = torch.Generator().manual_seed(seed + FEEDBACK_SEED_OFFSET)
    d = model.out_head.in_features
    return [uniform_like_linear(d, n_out, gen).T.contiguous() for _ in range(len(model.blocks) + 1)]


def check_fa_protocol(model: nn.Module) -> None:
    missing = [a for a in ("embed", "blocks", "out_ln", "out_head") if not hasattr(model, a)]
    if missing:
        raise ValueError(f"DFA needs an FA-protocol model (embed, blocks, out_ln, out_head); "
                         f"{type(model).__name__} lacks {missing}: use family resmlp or vit")


def dfa_loss_and_backward(model: nn.Module, x: Tensor, y: Tensor, feedback: list[Tensor],
                          loss_of=F.cross_entropy) -> tuple[Tensor, Tensor, list[Tensor]]:
    """One DFA backward pass; returns (loss, logits, the signals delivered to h_0 ... h_L).

    h_0 = embed(x); h_l = h_{l-1}.detach() + block_l(h_{l-1}.detach()); each h_l gets B_l e at its
    class token (token models) or whole row; the head sees h_L.detach() and gets its true gradient.
    ``loss_of(logits, y)``: the batch's mean loss, or each seed's (S,) for stacked seeds, whose
    B_l are then (S, n_out, d) and whose e are their own rows' (the sum's gradient).
    """
    tokens = getattr(model, "tokens", False)
    h = model.embed(x)
    hidden = [h]
    for block in model.blocks:
        h_in = h.detach()
        h = h_in + block(h_in)
        hidden.append(h)
    top = h.detach()
    logits = model.out_head(model.out_ln(top[:, 0] if tokens else top))
    loss = loss_of(logits, y)
    total = loss if loss.dim() == 0 else loss.sum()
    (e,) = torch.autograd.grad(total, logits, retain_graph=True)  # (B, n_out)
    total.backward()
    signals = []
    for h_l, b_l in zip(hidden, feedback, strict=True):
        signal = stacked.linear(e, b_l.to(e.dtype).mT)  # e B_l: (B, d), each seed's own B_l
        if tokens:
            full = torch.zeros_like(h_l)
            full[:, 0] = signal
            signal = full
        if h_l.requires_grad:
            h_l.backward(signal)
        signals.append(signal)
    return loss.detach(), logits.detach(), signals

