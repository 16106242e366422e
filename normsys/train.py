"""The training core: ``train(config) -> RunRecord``.

One flat loop (``fit``) for every family and learning rule (bp, fa, dfa), for one run or for the
seeds of one configuration trained together as one seed-stacked model (normsys.stacked; the
checks are normsys.batched's), on any task kind of normsys.tasks.
Deterministic on CPU for a given config and seed. A non-finite loss ends a run early with
``diverged=True``. On CUDA: bf16 autocast, fused Adam, fused attention (scaled_dot_product_attention
in the models), and torch.compile for runs long enough to earn its compile time back.
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import AbstractContextManager, nullcontext
from dataclasses import dataclass, replace
from pathlib import Path

import torch
from torch import Tensor, nn

from normsys import __version__
from normsys import diagnostics as dg
from normsys.config import RunConfig
from normsys.feedback import dfa_feedback, dfa_loss_and_backward, to_feedback_alignment
from normsys.models import build_model, capture
from normsys.norms import fusion
from normsys.record import RunRecord
from normsys.stacked import stack_modules, unstack_into
from normsys.tasks import Task, make_task

HOST_READ_EVERY = 50  # CUDA: steps between host reads of the losses (the divergence check)
# train.compile=auto compiles on CUDA from this many steps on. On one H100, a paper-size encoder
# step took 18.3 ms in the eager notebook loop and 9.2 ms compiled, while compiling cost each
# 480-step paper-tier run 70-170 s (most of its time): compiling pays only after thousands of
# steps, so shorter runs (every claim's) train eager and reach their verdict sooner.
COMPILE_MIN_STEPS = 5_000


# ----------------------------------------------------------------------------- how a run runs


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but no CUDA device is available; use cpu or auto")
    return torch.device(name)


def compile_mode(cfg: RunConfig, device: torch.device, steps: int) -> str | None:
    """How the training step runs: None (eager), "default" (torch.compile) or "reduce-overhead"
    (torch.compile with CUDA graphs). train.compile=auto compiles on CUDA runs of at least
    COMPILE_MIN_STEPS steps; on compiles on any device (the CPU tests take the compiled path
    this way); cudagraphs needs CUDA. FA's custom backward and DFA's hooks always run eager."""
    t = cfg.train
    if t.method != "bp" or t.compile == "off":
        return None
    if t.compile == "on":
        return "default"
    if device.type != "cuda":
        return None
    if t.compile == "cudagraphs":
        return "reduce-overhead"
    return "default" if steps >= COMPILE_MIN_STEPS else None


@dataclass(frozen=True)
class RunContext:
    """What every step of a run shares besides its model and data."""

    device: torch.device
    amp: bool = False                     # bf16 autocast (CUDA, train.amp=auto)
    compile: str | None = None            # compile_mode's choice for the training step
    read_every: int = 1                   # steps between host reads of the step log
    feedback: list[Tensor] | None = None  # DFA's fixed B_l (None: gradients by autograd)

    def autocast(self) -> AbstractContextManager:
        return torch.autocast("cuda", torch.bfloat16) if self.amp else nullcontext()


def run_context(cfg: RunConfig, device: torch.device, steps: int,
                read_every: int | None = None) -> RunContext:
    """The context of a run of ``steps`` steps. The step log is read every step on the CPU (reads
    cost nothing, and a diverging run stops before its update, as an eager check would) and every
    HOST_READ_EVERY steps on CUDA, where each read stalls the queue of kernels."""
    if read_every is None:
        read_every = 1 if device.type == "cpu" else HOST_READ_EVERY
    return RunContext(device, device.type == "cuda" and cfg.train.amp == "auto",
                      compile_mode(cfg, device, steps), read_every)


def prepare_model(cfg: RunConfig) -> nn.Module:
    """Seeded model with the learning rule applied (FA swaps Linears; frozen blocks stop grads)."""
    torch.manual_seed(cfg.train.seed)
    model = build_model(cfg.model)
    if cfg.train.method == "fa":
        to_feedback_alignment(model, cfg.train.seed)
    if cfg.train.frozen_blocks:
        if not hasattr(model, "blocks"):
            raise ValueError(f"train.frozen_blocks needs a block family, not {cfg.model.family}")
        model.blocks.requires_grad_(False)
    return model


def trained_model(record: RunRecord, learning_rule: bool = True, device: str = "cpu",
                  epoch: int | None = None) -> nn.Module:
    """The model of a run with its trained weights, in eval mode. ``learning_rule=False`` loads
    the weights into a plain model, whose backward is autograd's through the true weights (an FA
    net's feedback matrices left out): what a diagnostic of the net itself measures. ``epoch``:
    the weights after that epoch instead (one of the config's train.snapshots)."""
    if record.state_path is None or not Path(record.state_path).is_file():
        raise FileNotFoundError(f"run {record.fingerprint} kept no weights (state_path="
                                f"{record.state_path}); set train.keep_state=True and rerun")
    cfg = record.run_config
    stored = torch.load(record.state_path, map_location=device)
    if epoch is not None and epoch not in cfg.train.snapshots:
        raise ValueError(f"run {record.fingerprint} kept no weights after epoch {epoch}; "
                         f"train.snapshots={cfg.train.snapshots}")
    prefix = snapshot_key(epoch, "") if epoch is not None else None
    state = {k.removeprefix(prefix): v for k, v in stored.items() if k.startswith(prefix)} \
        if prefix else {k: v for k, v in stored.items() if not k.startswith("snapshot@")}
    if learning_rule:
        model = prepare_model(cfg)
    else:
        model = build_model(cfg.model)
        state = {k: v for k, v in state.items() if not k.endswith(".feedback")}
    model.load_state_dict(state)
    return model.to(device).eval()


def make_optimizer(cfg: RunConfig, params, device: torch.device) -> torch.optim.Optimizer:
    t = cfg.train
    opt_cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    return opt_cls(params, lr=t.lr, weight_decay=t.weight_decay, fused=device.type == "cuda")


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
    """Loss (each seed's, for stacked seeds) and outputs of one batch; gradients accumulated."""
    if ctx.feedback is not None:
        loss, out, _ = dfa_loss_and_backward(model, x, y, ctx.feedback)
        return loss, out
    out = model(x)
    loss = task.loss(out, y, seeds)
    (loss if seeds == 1 else loss.sum()).backward()  # the sum gives each seed its own gradient
    return loss.detach(), out.detach()


def grad_norms(params: list[Tensor], seeds: int = 1) -> Tensor:
    """||dL/dW|| over every parameter, as a device tensor: one run's, or each seed's (S,) of
    seed-stacked parameters (fused into one kernel on CUDA)."""
    grads = [p.grad.detach() for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(() if seeds == 1 else seeds, device=params[0].device)
    if seeds == 1:
        return torch.nn.utils.get_total_norm(grads)
    return torch.stack([g.float().reshape(seeds, -1).pow(2).sum(1) for g in grads]).sum(0).sqrt()


class StepLog:
    """Per-step loss, gradient norm and batch accuracy of S runs trained together (S = 1 for one
    run), kept on the device and moved to the curves in one transfer every ``read_every`` steps
    and at each epoch's end. A run whose loss turns non-finite is marked diverged and records
    nothing after it."""

    def __init__(self, curves: list[dict], read_every: int, accuracy: bool):
        self.curves, self.accuracy, self.every = curves, accuracy, read_every
        self.diverged = [False] * len(curves)
        self.correct, self.seen = [0.0] * len(curves), [0] * len(curves)
        self.pending: list[tuple[Tensor, int]] = []

    def add(self, losses: Tensor, norms: Tensor, out: Tensor, y: Tensor) -> bool:
        """Log one step: losses and norms (S,) or (), outputs and targets of the (seed-folded)
        batch. True when the log was read and every run has diverged."""
        s = len(self.curves)
        if self.accuracy:
            y = y.reshape(s, -1)
            hits = (out.reshape(s, -1, out.shape[-1]).argmax(-1) == y).sum(-1)
        else:
            hits = torch.zeros(s, device=losses.device)
        row = torch.stack([losses.float().reshape(s), norms.float().reshape(s), hits.float()])
        self.pending.append((row, y.shape[-1] if self.accuracy else 0))
        return len(self.pending) >= self.every and self.read()

    def read(self) -> bool:
        """Move the pending steps to the curves; True when every run has diverged."""
        rows = torch.stack([row for row, _ in self.pending]).tolist() if self.pending else []
        for (losses, norms, hits), (_, batch) in zip(rows, self.pending, strict=True):
            for s, curves in enumerate(self.curves):
                if self.diverged[s] or not math.isfinite(losses[s]):
                    self.diverged[s] = True
                    continue
                curves["loss"].append(losses[s])
                curves["grad_norm"].append(norms[s])
                if self.accuracy:
                    curves["batch_acc"].append(hits[s] / batch)
                    self.correct[s] += hits[s]
                    self.seen[s] += batch
        self.pending.clear()
        return all(self.diverged)

    def end_epoch(self) -> bool:
        """Close the epoch's running accuracy of the live runs; True when every run has diverged."""
        done = self.read()
        for s, curves in enumerate(self.curves):
            if self.accuracy and not self.diverged[s]:
                curves["train_acc_running"].append(self.correct[s] / max(self.seen[s], 1))
                self.correct[s], self.seen[s] = 0.0, 0
        return done

    def close(self) -> None:
        """Read what is pending and close the last (or, for a diverged run, partial) epoch."""
        self.read()
        for s, curves in enumerate(self.curves):
            if self.accuracy and self.seen[s]:
                curves["train_acc_running"].append(self.correct[s] / self.seen[s])


def empty_curves() -> dict[str, list[float]]:
    """Per-step loss and gradient norm, per-epoch running accuracy, per-step batch accuracy."""
    return {"loss": [], "grad_norm": [], "train_acc_running": [], "batch_acc": []}


class Learner:
    """What updates a model: its optimizer, its step (compiled where the context says so) and its
    step log. The model is one run's, or the seed-stacked model of ``seeds`` runs."""

    def __init__(self, cfg: RunConfig, model: nn.Module, task: Task, ctx: RunContext,
                 seeds: int = 1):
        self.model, self.task, self.ctx, self.seeds = model, task, ctx, seeds
        self.params = [p for p in model.parameters() if p.requires_grad]
        self.opt = make_optimizer(cfg, self.params, ctx.device)
        self.forward = model if ctx.compile is None else OneShape(model, ctx.compile)
        self.log = StepLog([empty_curves() for _ in range(seeds)], ctx.read_every, task.accuracy)
        self.wanted, self.snapshots = set(cfg.train.snapshots), {}

    def epoch_done(self, epoch: int) -> None:
        """Keep the weights after ``epoch`` (counting from 1) when the config asks for them."""
        if epoch in self.wanted:
            self.snapshots[epoch] = {k: v.detach().cpu().clone()
                                     for k, v in self.model.state_dict().items()}

    def step(self, x: Tensor, y: Tensor) -> bool:
        """One update on a batch, logged without a host sync. True (and no update) when the log
        was read and every run's loss is non-finite."""
        self.opt.zero_grad(set_to_none=True)
        with self.ctx.autocast():
            loss, out = forward_backward(self.forward, self.task, self.ctx, x, y, self.seeds)
        if self.log.add(loss, grad_norms(self.params, self.seeds), out, y):
            return True
        self.opt.step()
        return False


# ----------------------------------------------------------------------------- measurements


@dataclass(frozen=True)
class AtInit:
    """What a run measured before its first update, on its fixed probe batch."""

    x: Tensor
    loss: float
    grads: dict[str, float]  # ||dL/dW|| per parameter


def gradients_at_init(model: nn.Module, task: Task, ctx: RunContext,
                      x0: Tensor, y0: Tensor) -> AtInit:
    """Loss and ||dL/dW|| per parameter on the fixed batch; buffers (BN stats) restored."""
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    model.train()
    with ctx.autocast():
        loss, _ = forward_backward(model, task, ctx, x0, y0)
    grads = {n: float(p.grad.float().norm()) for n, p in model.named_parameters()
             if p.grad is not None}
    model.load_state_dict(buffers, strict=False)
    model.zero_grad(set_to_none=True)
    return AtInit(x0, float(loss), grads)


@torch.no_grad()
def probe(model, cfg: RunConfig, x: Tensor, ctx: RunContext) -> dict[str, dict]:
    """Spectra and ranks of the probed hidden states on the fixed batch (rows = batch*tokens)."""
    if not cfg.train.probe:
        return {}
    model.eval()
    with capture(model, cfg.train.probe) as hidden, ctx.autocast():
        model(x)
    # token models: the rows that are not padding ([PAD] = 0), for measurements without them
    nonpad = (x != 0) if cfg.model.family == "encoder" else None
    result = {}
    for name in cfg.train.probe:
        h = hidden[name][0] if isinstance(hidden[name], tuple) else hidden[name]
        result[name] = spectrum(h.float())
        result[name]["unit_corr"] = dg.hidden_unit_correlation(h.float())
        if h.dim() == 3:
            result[name]["token_cosine"] = dg.token_cosine(h.float())
        if nonpad is not None:
            result[name]["nonpad"] = spectrum(h.float()[nonpad])
    return result


def spectrum(h: Tensor) -> dict:
    """Singular values, effective rank, rho = erank/d, stable rank and mean row norm of (..., d)."""
    s = dg.singular_values(h)
    erank = dg.effective_rank(s=s)
    return {"singular_values": s.tolist(), "erank": erank, "rho": erank / h.shape[-1],
            "stable_rank": dg.stable_rank(h), "mean_norm": float(h.norm(dim=-1).mean())}


def environment(device: torch.device) -> dict[str, str]:
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True,
                                cwd=Path(__file__).parent, timeout=5).stdout.strip() or "unknown"
    except (OSError, subprocess.SubprocessError):
        commit = "unknown"
    # platform.processor() is empty on many Linux hosts; the architecture still says something
    name = (torch.cuda.get_device_name(device) if device.type == "cuda"
            else platform.processor() or platform.machine())
    return {"torch": torch.__version__, "device": f"{device.type}: {name or 'unknown'}",
            "commit": commit, "normsys": __version__, "python": platform.python_version(),
            "threads": str(torch.get_num_threads()), "date": time.strftime("%Y-%m-%d %H:%M")}


def finish(cfg: RunConfig, model, task: Task, ctx: RunContext, init: AtInit, curves: dict,
           diverged: bool, start: float,
           snapshots: dict[int, dict] | None = None) -> tuple[RunRecord, dict | None]:
    """Evaluate, probe and package one trained model as a RunRecord (+ its state_dict, with the
    weights of earlier epochs kept under ``snapshot_key``); ``start``: the perf_counter time the
    run began."""
    steps = len(curves["loss"])
    metrics = {"init_loss": init.loss}
    if steps:
        metrics["final_loss"] = sum(curves["loss"][-10:]) / len(curves["loss"][-10:])
    if diverged:
        metrics.update({k: float("nan") for k in ("train_acc", "test_acc", "val_loss")})
    elif steps:  # a run without training steps measures gradients at init only
        metrics.update(task.evaluate(model, cfg, ctx))
    probes = {} if diverged else probe(model, cfg, init.x, ctx)
    record = RunRecord(
        config=json.loads(json.dumps(cfg.to_dict())), fingerprint=cfg.fingerprint(),
        version=__version__, metrics=metrics, curves=curves, probes=probes,
        init_grad_norms=init.grads, diverged=diverged, steps=steps,
        wall_time=time.perf_counter() - start, env=environment(ctx.device),
        data_source=task.source)
    if not cfg.train.keep_state:
        return record, None
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()}
    for epoch, weights in (snapshots or {}).items():
        state.update({snapshot_key(epoch, k): v for k, v in weights.items()})
    return record, state


def snapshot_key(epoch: int, name: str) -> str:
    """Where a snapshot's weight sits in a run's stored state."""
    return f"snapshot@{epoch}/{name}"


# ----------------------------------------------------------------------------- the loop


def fit(cfgs: list[RunConfig], task: Task | None = None,
        read_every: int | None = None) -> list[tuple[RunRecord, dict | None]]:
    """Train the runs of ``cfgs``: one config, or the seeds of one configuration (see
    normsys.batched) as one seed-stacked model, each seed with its own initialization and data
    order. Returns each run's record and (train.keep_state) trained state_dict. ``task``: the data
    (default ``make_task`` of the config); ``read_every``: steps between host reads of the log."""
    start = time.perf_counter()
    cfg, seeds = cfgs[0], len(cfgs)
    device = resolve_device(cfg.train.device)
    task = (task if task is not None else make_task(cfg)).to(device)
    ctx = run_context(cfg, device, task.steps(cfg), read_every)
    with fusion(ctx.compile is not None):  # the norms' fused kernels follow the step's choice
        models = [prepare_model(c).to(device) for c in cfgs]
        if cfg.train.method == "dfa":
            ctx = replace(ctx, feedback=[b.to(device) for b in dfa_feedback(
                models[0], cfg.model.n_out, cfg.train.seed)])
        inits = [gradients_at_init(m, task, ctx, *task.probe_batch(c))
                 for m, c in zip(models, cfgs, strict=True)]
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
        return [finish(c, m, task, ctx, init, curves, diverged, start, snaps)
                for c, m, init, curves, diverged, snaps in zip(
                    cfgs, models, inits, learner.log.curves, learner.log.diverged, snapshots,
                    strict=True)]


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
    learner.epoch_done(epoch_now + 1)  # the last epoch


def progress_bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, delay=3, leave=False,
                disable=None if sys.stderr.isatty() else True)


def train_with_state(cfg: RunConfig, read_every: int | None = None) -> tuple[RunRecord, dict | None]:
    """Train ``cfg``; return its record and (if train.keep_state) the trained state_dict."""
    return fit([cfg], read_every=read_every)[0]


def train(cfg: RunConfig) -> RunRecord:
    """Train one run (no cache) and return its record."""
    return train_with_state(cfg)[0]
