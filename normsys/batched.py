"""Train several seeds of one configuration together in one batched pass.

The seeds' models are stacked (torch.func.stack_module_state) and one functional copy runs under
torch.func.vmap, so S seeds cost one set of wider kernels instead of S launches each. Adam is
element-wise, so one optimizer over the stacked parameters is S independent Adams; the summed loss
gives each seed exactly its own gradient. Each seed keeps its own initialization (prepare_model)
and its own data order (Generator(seed)), so the records match separate runs up to floating-point
reduction order (tests/test_batched.py).

On CUDA (train.compile=auto or cudagraphs) the vmapped loss is compiled as one graph, as a single
run's model is.

Limits: backprop only (FA/DFA's custom backward has no vmap rule), no batchnorm (its running
statistics mutate inside the pass), and the configs may differ in train.seed alone.
"""

from __future__ import annotations

import copy
import time

import torch
from torch.func import functional_call, stack_module_state, vmap

from normsys.config import RunConfig
from normsys.norms import fusion
from normsys.record import RunRecord
from normsys.train import (
    StepLog,
    Task,
    autocast_for,
    batches,
    compiled,
    drive,
    empty_curves,
    finish,
    first_batch,
    gradients_at_init,
    make_optimizer,
    make_task,
    prepare_model,
    progress_bar,
    resolve_device,
    total_steps,
)


def check_batchable(cfgs: list[RunConfig]) -> None:
    if not cfgs:
        raise ValueError("train_seeds needs at least one config")
    base = cfgs[0].override(**{"train.seed": 0})
    for c in cfgs:
        if c.override(**{"train.seed": 0}) != base:
            raise ValueError("batched seeds: the configs may differ only in train.seed")
    if base.train.method != "bp":
        raise ValueError(f"batched seeds support method bp only, not {base.train.method!r}")
    if base.model.norm == "batchnorm":
        raise ValueError("batched seeds do not support batchnorm (running stats mutate); "
                         "train those seeds separately")


class SeedStack:
    """The seeds' models stacked into one functional model, its optimizer and its update step."""

    def __init__(self, cfgs: list[RunConfig], models: list, task, device: torch.device):
        cfg = cfgs[0]
        self.autocast = autocast_for(device, cfg)
        self.params, self.buffers = stack_module_state(models)  # name -> (S, ...)
        self.trainable = [v for v in self.params.values() if v.requires_grad]
        self.opt = make_optimizer(cfg, self.trainable, device)
        skeleton = copy.deepcopy(models[0]).to("meta")

        def loss_of(p, b, x, y):
            out = functional_call(skeleton, (p, b), (x,))
            return task.loss(out, y), out

        self.loss = compiled(vmap(loss_of), cfg, device)

    def step(self, x: torch.Tensor, y: torch.Tensor, log: StepLog) -> bool:
        """One update of every seed on its own batch (x, y stacked (S, B, ...)), logged without a
        host sync; True when the log was read and every seed has diverged."""
        self.opt.zero_grad(set_to_none=True)
        with self.autocast:
            losses, outs = self.loss(self.params, self.buffers, x, y)
        losses.sum().backward()
        norms = torch.stack([g.grad.float().flatten(1).pow(2).sum(1) for g in self.trainable])
        done = log.add(losses.detach(), norms.sum(0).sqrt(), outs.detach(), y)
        self.opt.step()
        return done


def train_seeds(cfgs: list[RunConfig], task: Task | None = None) -> list[tuple[RunRecord, dict | None]]:
    """Train the seeds of ``cfgs`` (same config, different train.seed) in one vmapped pass, on
    ``task`` (default: ``make_task`` of the config's data)."""
    check_batchable(cfgs)
    with fusion(cfgs[0].train.compile != "off"):
        return _train_seeds(cfgs, task)


def _train_seeds(cfgs: list[RunConfig], task: Task | None) -> list[tuple[RunRecord, dict | None]]:
    start = time.perf_counter()
    cfg = cfgs[0]
    device = resolve_device(cfg.train.device)
    autocast = autocast_for(device, cfg)
    task = (task if task is not None else make_task(cfg)).to(device)
    models = [prepare_model(c).to(device) for c in cfgs]
    firsts = [first_batch(task, c) for c in cfgs]  # (x0, y0): fixed probe and init batch
    inits = [gradients_at_init(m, task, c, *xy, autocast, None)
             for m, c, xy in zip(models, cfgs, firsts, strict=True)]
    stack = SeedStack(cfgs, models, task, device)
    curves = [empty_curves() for _ in cfgs]
    log = StepLog(curves, device, task.kind == "classify")
    streams = [batches(task, c, torch.Generator().manual_seed(c.train.seed)) for c in cfgs]
    stacked = ((items[0][0], torch.stack([it[1] for it in items]), torch.stack([it[2] for it in items]))
               for items in zip(*streams, strict=True))  # (epoch, x (S, B, ...), y (S, B))
    desc = f"{cfg.model.family}/{cfg.model.norm}/x{len(cfgs)} seeds"
    drive(stacked, lambda x, y: stack.step(x, y, log), log, progress_bar(total_steps(task, cfg), desc))

    results = []
    with torch.no_grad():
        for s, (model, c) in enumerate(zip(models, cfgs, strict=True)):
            model.load_state_dict({k: v[s] for k, v in {**stack.params, **stack.buffers}.items()})
            results.append(finish(c, model, task, device, autocast, firsts[s][0], inits[s], curves[s],
                                  log.diverged[s], len(curves[s]["loss"]), start))
    return results
