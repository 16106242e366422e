"""The training core: ``train(config) -> RunRecord``.

One flat loop (``fit``) for every family and learning rule (bp, fa, dfa), for one run or for the
seeds of one configuration trained together as one seed-stacked model (normsys.training.stacked; the
checks are normsys.training.batched's), on any task kind of normsys.training.tasks.
Deterministic on CPU for a given config and seed. A non-finite loss ends a run early with
``diverged=True``. On CUDA: bf16 autocast, fused Adam, fused attention (scaled_dot_product_attention
in the models), torch.compile for runs long enough to earn its compile time back, and for shorter
runs the eager step captured once as a CUDA graph and replayed (``CapturedStep``).
"""

from __future__ import annotations

import json
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, field, replace

import torch
from torch import Tensor, nn

from normsys import __version__
from normsys.training.config import RunConfig
from normsys.training.feedback import dfa_feedback
from normsys.training.measure import AtInit, backward, gradients_at_init, probe
from normsys.training.models import prepare_model
from normsys.training.norms import BUILTIN, fusion
from normsys.training.provenance import environment, numeric_environment
from normsys.training.record import (
    FINAL_LOSS,
    INIT_LOSS,
    TEST_ACC,
    TRAIN_ACC,
    VAL_LOSS,
    RunRecord,
    snapshot_key,
)
from normsys.training.stacked import stack_modules, unstack_into
from normsys.training.steplog import StepLog, empty_curves
from normsys.training.tasks import Task, make_task

HOST_READ_EVERY = 50  # CUDA: steps between host reads of the losses (the divergence check)
# train.compile=auto compiles on CUDA from this many steps on. On one H100, a paper-size encoder
# step took 18.3 ms in the eager notebook loop and 9.2 ms compiled, while compiling cost each
# 480-step paper-tier run 70-170 s (most of its time): compiling pays only after thousands of
# steps, so shorter runs (every claim's) train eager and reach their verdict sooner.
COMPILE_MIN_STEPS = 5_000
# Shorter CUDA runs capture their eager step instead: its forward and backward recorded once as a
# CUDA graph and replayed, one launch where the eager step launches thousands of small kernels (a
# char-LSTM step ~2,000-2,900), with no compile time and the eager step's very kernels.
CAPTURE_WARMUP = 3  # eager steps on the capture stream before it captures (cuBLAS, autograd state)
COMPILED = ("default", "reduce-overhead")  # the compile_mode choices that torch.compile the step


# ----------------------------------------------------------------------------- how a run runs


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but no CUDA device is available; use cpu or auto")
    return torch.device(name)


def compile_mode(cfg: RunConfig, device: torch.device, steps: int) -> str | None:
    """How the training step runs: None (eager), "capture" (the eager step as a CUDA graph,
    ``CapturedStep``), "default" (torch.compile) or "reduce-overhead" (torch.compile with CUDA
    graphs). train.compile=auto on CUDA compiles bp runs of at least COMPILE_MIN_STEPS steps and
    captures the others, except a registered norm kind's (its author's code may read the host,
    which a captured graph cannot hold: those train eager); on compiles on any device (the CPU
    tests take the compiled path this way); cudagraphs needs CUDA. FA's custom backward and DFA's
    hooks are never compiled."""
    t = cfg.train
    if t.compile == "off" or (t.compile != "auto" and t.method != "bp"):
        return None
    if t.compile == "on":
        return "default"
    if device.type != "cuda":
        return None
    if t.compile == "cudagraphs":
        return "reduce-overhead"
    if t.method == "bp" and steps >= COMPILE_MIN_STEPS:
        return "default"
    return "capture" if cfg.model.norm in BUILTIN else None


@dataclass(frozen=True)
class RunContext:
    """What every step of a run shares besides its model and data."""

    device: torch.device
    amp: bool = False                     # bf16 autocast (CUDA, train.amp=auto)
    compile: str | None = None            # compile_mode's choice for the training step
    read_every: int = 1                   # steps between host reads of the step log
    feedback: list[Tensor] | None = None  # DFA's fixed B_l (None: gradients by autograd)

    def autocast(self) -> AbstractContextManager:
        """bf16 autocast where the run takes it; without autocast's cache of cast weights in a
        captured run (a graph cannot hold it; the casts are the same)."""
        if not self.amp:
            return nullcontext()
        return torch.autocast("cuda", torch.bfloat16, cache_enabled=self.compile != "capture")


def run_context(cfg: RunConfig, device: torch.device, steps: int,
                read_every: int | None = None) -> RunContext:
    """The context of a run of ``steps`` steps. The step log is read every step on the CPU (reads
    cost nothing, and a diverging run stops before its update, as an eager check would) and every
    HOST_READ_EVERY steps on CUDA, where each read stalls the queue of kernels."""
    if read_every is None:
        read_every = 1 if device.type == "cpu" else HOST_READ_EVERY
    return RunContext(device, autocasts(cfg, device), compile_mode(cfg, device, steps), read_every)


def autocasts(cfg: RunConfig, device: torch.device) -> bool:
    """Whether a run of ``cfg`` on ``device`` trains under bf16 autocast: on CUDA, train.amp=auto."""
    return device.type == "cuda" and cfg.train.amp == "auto"


def run_environment(cfg: RunConfig) -> dict[str, str]:
    """The numeric environment a run of ``cfg`` trains in here (``numeric_environment``: the
    device its train.device resolves to, this process's threads, torch, the autocast dtype): what
    the run cache keys the run on."""
    device = resolve_device(cfg.train.device)
    return numeric_environment(device, autocasts(cfg, device))


def make_optimizer(cfg: RunConfig, params, device: torch.device) -> torch.optim.Optimizer:
    """The run's optimizer over ``params`` (tensors, or torch's parameter groups: dicts)."""
    t = cfg.train
    if t.optimizer == "sgd":
        return torch.optim.SGD(params, lr=t.lr, momentum=t.momentum, weight_decay=t.weight_decay)
    opt_cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    return opt_cls(params, lr=t.lr, betas=(0.9, t.beta2), weight_decay=t.weight_decay,
                   fused=device.type == "cuda")


def angles(before: Tensor, after: Tensor, seeds: int = 1) -> Tensor:
    """The angle between a parameter before and after a step, one run's (1,) or each seed's (S,)
    of a seed-stacked one, in float64: 2 atan2(|a - b|, |a + b|) of the unit vectors, exact where
    the angle is small (an arccos of the cosine is not)."""
    a, b = (w.detach().double().reshape(seeds, -1) for w in (before, after))
    a, b = a / a.norm(dim=1, keepdim=True), b / b.norm(dim=1, keepdim=True)
    return 2 * torch.atan2((a - b).norm(dim=1), (a + b).norm(dim=1))


class OneShape:
    """The compiled model for inputs of the first shape it is called with, the eager model for any
    other (the short last batch of an epoch): the compiled graph keeps one static shape, so it
    never recompiles nor turns dynamic."""

    def __init__(self, model: nn.Module, mode: str):
        self.model, self.shape = model, None
        self.compiled = torch.compile(model, mode=None if mode == "default" else mode, dynamic=False)

    def __call__(self, x: Tensor) -> Tensor:
        if self.shape is None:
            self.shape = x.shape
        return (self.compiled if x.shape == self.shape else self.model)(x)


# ----------------------------------------------------------------------------- one step


def forward_backward(model, task: Task, ctx: RunContext, x: Tensor, y: Tensor,
                     seeds: int = 1) -> tuple[Tensor, Tensor]:
    """Loss (each seed's, for stacked seeds) and outputs of one batch under the run's autocast,
    with the learning rule's gradients accumulated (measure.backward)."""
    with ctx.autocast():
        return backward(model, task, x, y, ctx.feedback, seeds)


def grad_norms(params: list[Tensor], seeds: int = 1) -> Tensor:
    """||dL/dW|| over every parameter, as a device tensor: one run's, or each seed's (S,) of
    seed-stacked parameters (fused into one kernel on CUDA)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]  # an unused one has none
    if seeds == 1:
        return torch.nn.utils.get_total_norm(grads)
    return torch.stack([g.float().reshape(seeds, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()


def parameter_groups(cfg: RunConfig, model: nn.Module) -> list:
    """The trained parameters of ``model`` as the optimizer takes them: one list, or (with
    train.invariant) the others, then a group of those it names at train.invariant_lr and
    train.invariant_decay."""
    t = cfg.train
    trained = {n: p for n, p in model.named_parameters() if p.requires_grad}
    if not t.invariant:
        return list(trained.values())
    if unknown := [n for n in t.invariant if n not in trained]:
        raise KeyError(f"train.invariant: no trained parameter named {unknown}; the model's: "
                       f"{', '.join(trained)}")
    return [{"params": [p for n, p in trained.items() if n not in t.invariant]},
            {"params": [trained[n] for n in t.invariant], "lr": t.invariant_lr,
             "weight_decay": t.invariant_decay}]


def warmup(opt: torch.optim.Optimizer, steps: int) -> torch.optim.lr_scheduler.LRScheduler | None:
    """The linear warm-up of ``opt`` over ``steps`` (train.warmup): the k-th update, from 1, at
    min(1, k / steps) of each group's learning rate; None for none."""
    if not steps:
        return None
    return torch.optim.lr_scheduler.LambdaLR(opt, lambda done: min(1.0, (done + 1) / steps))


class Learner:
    """What updates a model: its optimizer, its step (compiled where the context says so) and its
    step log. The model is one run's, or the seed-stacked model of ``seeds`` runs."""

    def __init__(self, cfg: RunConfig, model: nn.Module, task: Task, ctx: RunContext,
                 seeds: int = 1):
        self.model, self.task, self.ctx, self.seeds = model, task, ctx, seeds
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = make_optimizer(cfg, parameter_groups(cfg, model), ctx.device)
        self.schedule = warmup(self.opt, cfg.train.warmup)
        self.forward = OneShape(model, ctx.compile) if ctx.compile in COMPILED else model
        self.captured = CapturedStep(self) if ctx.compile == "capture" else None
        self.log = StepLog([empty_curves() for _ in range(seeds)], ctx.read_every, task.accuracy)
        self.wanted, self.snapshots = set(cfg.train.snapshots), {}
        named = dict(model.named_parameters())
        if unknown := [n for n in cfg.train.angular if n not in named]:
            raise KeyError(f"train.angular: no parameter named {unknown}; the model's: "
                           f"{', '.join(named)}")
        self.angular = {n: named[n] for n in cfg.train.angular}
        self.turns: list[Tensor] = []  # per step: (parameters, S) angular updates

    def epoch_done(self, epoch: int) -> None:
        """Keep the weights after ``epoch`` (counting from 1) when the config asks for them."""
        if epoch in self.wanted:
            self.snapshots[epoch] = {k: v.detach().cpu().clone()
                                     for k, v in self.model.state_dict().items()}

    def step(self, x: Tensor, y: Tensor) -> bool:
        """One update on a batch, logged without a host sync. True (and no update) when the log
        was read and every run's loss is non-finite."""
        if self.captured is not None:
            loss, out, norms = self.captured(x, y)
        else:
            self.opt.zero_grad(set_to_none=True)
            loss, out, norms = self.gradients(x, y)
        if self.log.add(loss, norms, out, y):
            return True
        before = [p.detach().clone() for p in self.angular.values()]
        self.opt.step()
        if self.schedule is not None:
            self.schedule.step()
        if before:
            self.turns.append(torch.stack([angles(b, p, self.seeds) for b, p in
                                           zip(before, self.angular.values(), strict=True)]))
        return False

    def close(self) -> None:
        """Write the angular updates into each run's curves, up to its last logged step."""
        if not self.turns:
            return
        turns = torch.stack(self.turns).tolist()  # (steps, parameters, S)
        for s, curves in enumerate(self.log.curves):
            for i, name in enumerate(self.angular):
                curves[f"angular_update.{name}"] = [t[i][s] for t in turns][:len(curves["loss"])]

    def gradients(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Losses, outputs and gradient norms of one batch, its gradients accumulated in .grad."""
        loss, out = forward_backward(self.forward, self.task, self.ctx, x, y, self.seeds)
        return loss, out, grad_norms(self.params, self.seeds)


class CapturedStep:
    """A learner's ``gradients`` as a CUDA graph: CAPTURE_WARMUP eager steps on a side stream, then
    the next batch's step captured there and replayed for every batch of its shape; a batch of
    another shape (an epoch's short last one) runs eager. The optimizer's update stays outside the
    graph, so a run that diverges stops before its update as an eager one does.

    The graph writes the gradients into the tensors it allocated when it was captured, at every
    replay: after the capture the gradients are zeroed in place (an eager step then accumulates
    into them), never set to None, or the optimizer would lose them."""

    def __init__(self, learner: Learner):
        self.learner, self.stream = learner, torch.cuda.Stream(learner.ctx.device)
        self.graph: torch.cuda.CUDAGraph | None = None
        self.inputs: tuple[Tensor, Tensor] | None = None
        self.outputs: tuple[Tensor, Tensor, Tensor] | None = None
        self.eager_steps = 0

    def __call__(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        if self.graph is not None and (x.shape, y.shape) == tuple(t.shape for t in self.inputs):
            self.inputs[0].copy_(x)
            self.inputs[1].copy_(y)
            self.graph.replay()
            return self.outputs
        if self.graph is None and self.eager_steps >= CAPTURE_WARMUP:
            return self.capture(x, y)
        self.eager_steps += 1
        self.learner.opt.zero_grad(set_to_none=self.graph is None)
        here = torch.cuda.current_stream(self.learner.ctx.device)
        self.stream.wait_stream(here)
        with torch.cuda.stream(self.stream):
            result = self.learner.gradients(x, y)
        here.wait_stream(self.stream)
        return result

    def capture(self, x: Tensor, y: Tensor) -> tuple[Tensor, Tensor, Tensor]:
        """Capture the step on (copies of) this batch, then replay it for this batch."""
        self.learner.opt.zero_grad(set_to_none=True)  # the graph allocates the gradients it writes
        self.inputs = (x.clone(), y.clone())
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph, stream=self.stream, capture_error_mode="thread_local"):
            self.outputs = self.learner.gradients(*self.inputs)
        self.graph = graph
        graph.replay()
        return self.outputs


@dataclass
class Trained:
    """One run at the end of the loop: its config and model, what it measured before training,
    its curves, whether it diverged, and its weights after earlier epochs (train.snapshots)."""

    cfg: RunConfig
    model: nn.Module
    init: AtInit
    curves: dict
    diverged: bool
    snapshots: dict[int, dict] = field(default_factory=dict)


def finish(run: Trained, task: Task, ctx: RunContext,
           start: float) -> tuple[RunRecord, dict | None]:
    """Evaluate, probe and package one trained model as a RunRecord (+ its state_dict, with the
    weights of earlier epochs kept under ``snapshot_key``); ``start``: the perf_counter time the
    run began."""
    cfg, curves = run.cfg, run.curves
    steps = len(curves["loss"])
    metrics = {INIT_LOSS: run.init.loss}
    if steps:
        metrics[FINAL_LOSS] = sum(curves["loss"][-10:]) / len(curves["loss"][-10:])
    if run.diverged:
        metrics.update({k: float("nan") for k in (TRAIN_ACC, TEST_ACC, VAL_LOSS)})
    elif steps:  # a run without training steps measures gradients at init only
        metrics.update(task.evaluate(run.model, cfg, ctx))
    probes = {} if run.diverged else probe(run.model, cfg, run.init.x, ctx.autocast)
    record = RunRecord(
        config=json.loads(json.dumps(cfg.to_dict())), fingerprint=cfg.fingerprint(),
        version=__version__, metrics=metrics, curves=curves, probes=probes,
        init_grad_norms=run.init.grads, diverged=run.diverged, steps=steps,
        wall_time=time.perf_counter() - start, env=environment(ctx.device, ctx.amp),
        data_source=task.source)
    if not cfg.train.keep_state:
        return record, None
    state = {k: v.detach().cpu() for k, v in run.model.state_dict().items()}
    for epoch, weights in run.snapshots.items():
        state.update({snapshot_key(epoch, k): v for k, v in weights.items()})
    return record, state


# ----------------------------------------------------------------------------- the loop


def fit(cfgs: list[RunConfig], task: Task | None = None,
        read_every: int | None = None) -> list[tuple[RunRecord, dict | None]]:
    """Train the runs of ``cfgs``: one config, or the seeds of one configuration (see
    normsys.training.batched) as one seed-stacked model, each seed with its own initialization and data
    order. Returns each run's record and (train.keep_state) trained state_dict. ``task``: the data
    (default ``make_task`` of the config); ``read_every``: steps between host reads of the log."""
    start = time.perf_counter()
    cfg, seeds = cfgs[0], len(cfgs)
    device = resolve_device(cfg.train.device)
    task = (task if task is not None else make_task(cfg)).to(device)
    ctx = run_context(cfg, device, task.steps(cfg), read_every)
    with fusion(ctx.compile in COMPILED):  # the norms' fused kernels follow the step's choice
        models = [prepare_model(c).to(device) for c in cfgs]
        own = [with_feedback(ctx, c, m) for c, m in zip(cfgs, models, strict=True)]
        inits = [gradients_at_init(m, rule(task, o), *task.probe_batch(c))
                 for m, c, o in zip(models, cfgs, own, strict=True)]
        ctx = own[0] if seeds == 1 or own[0].feedback is None else replace(ctx, feedback=[
            torch.stack(bs) for bs in zip(*(o.feedback for o in own), strict=True)])
        learner = Learner(cfg, models[0] if seeds == 1 else stack_modules(models), task, ctx, seeds)
        learner.model.train()
        streams = [task.batches(c, torch.Generator().manual_seed(c.train.seed)) for c in cfgs]
        desc = f"{cfg.model.family}/{cfg.model.norm}/" + (
            f"s{cfg.train.seed}" if seeds == 1 else f"x{seeds} seeds")
        drive(streams[0] if seeds == 1 else folded(streams), learner,
              progress_bar(task.steps(cfg), desc))
        if seeds > 1:
            unstack_into(learner.model, models)
        snapshots = [{e: {k: v if seeds == 1 else v[s] for k, v in w.items()}
                      for e, w in learner.snapshots.items()} for s in range(seeds)]
        runs = zip(cfgs, models, inits, learner.log.curves, learner.log.diverged, snapshots,
                   strict=True)
        return [finish(Trained(*run), task, ctx, start) for run in runs]


def with_feedback(ctx: RunContext, cfg: RunConfig, model: nn.Module) -> RunContext:
    """``ctx`` with the fixed B_l of ``cfg``'s seed on its device where ``cfg`` trains by DFA."""
    if cfg.train.method != "dfa":
        return ctx
    return replace(ctx, feedback=[b.to(ctx.device) for b in dfa_feedback(
        model, cfg.model.n_out, cfg.train.seed)])


def rule(task: Task, ctx: RunContext):
    """(model, x, y) -> loss, the learning rule's gradients accumulated: what gradients_at_init
    measures a model by."""
    return lambda model, x, y: forward_backward(model, task, ctx, x, y)[0]


def folded(streams: list[Iterator]) -> Iterator[tuple[int, Tensor, Tensor]]:
    """The seeds' batches as one seed-major batch: (epoch, x (S*B, ...), y (S*B, ...))."""
    for items in zip(*streams, strict=True):
        yield items[0][0], torch.cat([x for _, x, _ in items]), torch.cat([y for _, _, y in items])


def drive(stream, learner: Learner, bar) -> None:
    """``learner.step`` on every (epoch, x, y) of ``stream`` until it returns True (every run
    diverged), closing the log at each epoch's end."""
    log, epoch_now = learner.log, 0
    for epoch, x, y in stream:
        if epoch != epoch_now:
            if log.end_epoch():
                break
            learner.epoch_done(epoch_now + 1)
        epoch_now = epoch
        if learner.step(x, y):
            break
        bar.update()
    bar.close()
    log.close()
    learner.close()
    learner.epoch_done(epoch_now + 1)  # the last epoch


# Whether this process draws a run's step bar on a terminal: not where it is one of a pool of
# training processes (pytest-xdist's workers, the scorecard's), whose bars would overwrite each
# other on the one line they share; their progress is the session's lines and its bar.
STEP_BARS = True


def progress_bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, delay=3, leave=False,
                disable=None if STEP_BARS and sys.stderr.isatty() else True)


def train_with_state(cfg: RunConfig, read_every: int | None = None) -> tuple[RunRecord, dict | None]:
    """Train ``cfg``; return its record and (if train.keep_state) the trained state_dict."""
    return fit([cfg], read_every=read_every)[0]


def train(cfg: RunConfig) -> RunRecord:
    """Train one run (no cache) and return its record."""
    return train_with_state(cfg)[0]
