"""Measurements of a model that a run takes of itself: the gradient its learning rule gives a batch
(which the training loop's step uses too), the gradients at initialization on the run's fixed
probe batch, and the spectra and ranks of its probed hidden states (diagnostics holds the pure
functions they end in). ``at_init`` measures a config's model at initialization, optionally
edited first, as the negative controls need.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field

import torch
from torch import Tensor, nn

from normsys.training import diagnostics as dg
from normsys.training.config import RunConfig
from normsys.training.feedback import dfa_loss_and_backward
from normsys.training.models import capture, prepare_model
from normsys.training.record import Probe, Spectrum
from normsys.training.tasks import Task

Autocast = Callable[[], AbstractContextManager]


def backward(model, task: Task, x: Tensor, y: Tensor, feedback: list[Tensor] | None = None,
             seeds: int = 1) -> tuple[Tensor, Tensor]:
    """Loss (each seed's, for stacked seeds) and outputs of one batch, with the gradients of the
    model's learning rule accumulated: DFA's B_l e when ``feedback`` is given, else autograd's
    (through FA's B where the model's Linears carry one)."""
    if feedback is not None:
        loss, out, _ = dfa_loss_and_backward(model, x, y, feedback,
                                             lambda out, labels: task.loss(out, labels, seeds))
        return loss, out
    out = model(x)
    loss = task.loss(out, y, seeds)
    (loss if seeds == 1 else loss.sum()).backward()  # the sum gives each seed its own gradient
    return loss.detach(), out.detach()


@dataclass(frozen=True)
class AtInit:
    """What a model measured before its first update, on its fixed probe batch."""

    x: Tensor
    loss: float
    grads: dict[str, float]  # ||dL/dW|| per parameter
    probes: dict[str, dict] = field(default_factory=dict)  # at_init only; a run probes at its end


def gradients_at_init(model: nn.Module, rule: Callable[[nn.Module, Tensor, Tensor], Tensor],
                      x0: Tensor, y0: Tensor) -> AtInit:
    """Loss and ||dL/dW|| per parameter of ``rule(model, x0, y0)`` (a backward pass that returns
    the loss); buffers (BN statistics) restored and gradients cleared after."""
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    model.train()
    loss = rule(model, x0, y0)
    grads = {n: float(p.grad.float().norm()) for n, p in model.named_parameters()
             if p.grad is not None}
    model.load_state_dict(buffers, strict=False)
    model.zero_grad(set_to_none=True)
    return AtInit(x0, float(loss), grads)


@torch.no_grad()
def probe(model, cfg: RunConfig, x: Tensor,
          autocast: Autocast = nullcontext) -> dict[str, Probe]:
    """Spectra and ranks of the probed hidden states (cfg.train.probe) on the batch ``x`` (rows =
    batch*tokens): singular values, erank, rho, stable rank, mean row norm, hidden-unit
    correlation, token cosine for (B, T, d) states, and for the encoder the same without the
    padding rows ("nonpad")."""
    if not cfg.train.probe:
        return {}
    model.eval()
    with capture(model, cfg.train.probe) as hidden, autocast():
        model(x)
    # token models: the rows that are not padding ([PAD] = 0), for measurements without them
    nonpad = (x != 0) if cfg.model.family == "encoder" else None
    result: dict[str, Probe] = {}
    for name in cfg.train.probe:
        h = (hidden[name][0] if isinstance(hidden[name], tuple) else hidden[name]).float()
        result[name] = Probe(**spectrum(h), unit_corr=dg.hidden_unit_correlation(h))
        if h.dim() == 3:
            result[name]["token_cosine"] = dg.token_cosine(h)
        if nonpad is not None:
            result[name]["nonpad"] = spectrum(h[nonpad])
    return result


def spectrum(h: Tensor) -> Spectrum:
    """Singular values, effective rank, rho = erank/d, stable rank and mean row norm of (..., d)."""
    s = dg.singular_values(h)
    erank = dg.effective_rank(s=s)
    return Spectrum(singular_values=s.tolist(), erank=erank, rho=erank / h.shape[-1],
                    stable_rank=dg.stable_rank(h), mean_norm=float(h.norm(dim=-1).mean()))


def at_init(cfg: RunConfig, task: Task, edit: Callable[[nn.Module], None] | None = None) -> AtInit:
    """The model of ``cfg`` at initialization (changed in place by ``edit`` first, if given),
    measured as a run measures itself on its fixed probe batch: gradients (backprop) and probes."""
    model = prepare_model(cfg)
    if edit is not None:
        with torch.no_grad():
            edit(model)
    x0, y0 = task.probe_batch(cfg)
    init = gradients_at_init(model, lambda m, x, y: backward(m, task, x, y)[0], x0, y0)
    return AtInit(init.x, init.loss, init.grads, probe(model, cfg, x0))
