"""Train several seeds of one configuration together, as one seed-stacked model.

The seeds' models are stacked (stacked.stack_modules): every parameter becomes the seeds' copies,
(S, *shape), and the seeds' batches are folded into one batch of S*B rows. The models' own code
runs on it: the ops that apply a parameter (Linear, Embedding, the norms' gains) apply each seed's
copy to that seed's rows with batched matmuls, and everything else (attention through the same
scaled_dot_product_attention call, residuals, activations) sees an ordinary batch. S seeds cost one
set of wider kernels instead of S launches each, with no vmap and no batching rules, so the CPU
runs the very code that CUDA runs. Adam is element-wise, so one optimizer over the stacked
parameters is S independent Adams; the summed per-seed losses give each seed exactly its own
gradient. Each seed keeps its own initialization (prepare_model) and data order (Generator(seed)),
so the records match separate runs up to floating-point reduction order
(tests/test_batched.py).

Every learning rule stacks: FA's Linears apply each seed's B to its rows, DFA delivers each seed's
B_l e to its rows (normsys.training.feedback). Limits: models made of stackable layers only
(``STACKABLE``: no convolutions, no registered norm kind's module); the configs may differ in
train.seed alone. Batchnorm stacks: each seed's rows are normalized by their own statistics
(normsys.training.norms.batch_norm).
"""

from __future__ import annotations

import torch
from torch import nn

from normsys.training import feedback, models, norms, stacked
from normsys.training.config import RunConfig
from normsys.training.record import RunRecord
from normsys.training.tasks import Task
from normsys.training.train import fit

# the layers whose parameters may be seed-stacked, each applying them through
# normsys.training.stacked: the models' own (FA's Linear too), and the module of every built-in
# norm kind of the registry (tests/test_batched.py trains each kind stacked; a registered kind's
# module is its author's code, whose seeds train separately)
STACKABLE = (stacked.Linear, stacked.Embedding, feedback.FALinear, models.PatchEmbed,
             models.TBlockClassifier,
             *dict.fromkeys(type(norms.NORMS[kind].build(2)) for kind in sorted(norms.BUILTIN)))


def unstackable(model: nn.Module) -> list[str]:
    """Names (and types) of the layers of ``model`` that hold parameters or buffers of their own
    and have no seed-stacked form."""
    return [f"{name or 'model'} ({type(m).__name__})" for name, m in model.named_modules()
            if not isinstance(m, STACKABLE)
            and any(True for _ in (*m.parameters(recurse=False), *m.buffers(recurse=False)))]


def check_batchable(cfgs: list[RunConfig]) -> None:
    """A ValueError saying why ``cfgs`` cannot train as one seed-stacked model, if they cannot."""
    if not cfgs:
        raise ValueError("train_seeds needs at least one config")
    base = cfgs[0].override(**{"train.seed": 0})
    for c in cfgs:
        if c.override(**{"train.seed": 0}) != base:
            raise ValueError("batched seeds: the configs may differ only in train.seed")
    with torch.device("meta"):  # the structure only: no memory, no random draws
        model = models.build_model(base.model)
    if bad := unstackable(model):
        raise ValueError(f"batched seeds cannot stack {', '.join(bad[:4])}: convolutions (and "
                         f"layers outside normsys.training.stacked) have no seed-stacked form; "
                         f"train those seeds separately")


def train_seeds(cfgs: list[RunConfig], task: Task | None = None,
                read_every: int | None = None) -> list[tuple[RunRecord, dict | None]]:
    """Train the seeds of ``cfgs`` (same config, different train.seed) as one seed-stacked model,
    on ``task`` (default: ``make_task`` of the config's data). Records in the order of cfgs."""
    check_batchable(cfgs)
    return fit(cfgs, task, read_every)
