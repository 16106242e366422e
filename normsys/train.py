"""The training core: ``train(config) -> RunRecord`` and the cached ``run(config)``.

One flat loop for every family and learning rule (bp, fa, dfa). Three task kinds feed it:
classification (AG News, MNIST), next-character language modeling (Tiny Shakespeare) and regression
on fresh random data (the notebook MLPs). Deterministic on CPU for a given config and seed. A
non-finite loss ends the run early with ``diverged=True``. On CUDA: bf16 autocast, fused Adam, and
fused attention (scaled_dot_product_attention in the models).
"""

from __future__ import annotations

import json
import math
import platform
import subprocess
import sys
import time
from contextlib import nullcontext
from dataclasses import dataclass
from pathlib import Path

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys import __version__
from normsys import diagnostics as dg
from normsys.config import RunConfig
from normsys.feedback import dfa_feedback, dfa_loss_and_backward, to_feedback_alignment
from normsys.models import build_model, capture
from normsys.norms import fusion
from normsys.record import RunRecord

EVAL_SEED = 1_000_003  # fixed evaluation batches (LM), identical for every seed and norm
LM_FAMILIES = ("char_gpt", "lstm")
HOST_READ_EVERY = 50  # CUDA: steps between host reads of the losses (the divergence check)


# ----------------------------------------------------------------------------- tasks


@dataclass
class Task:
    """Data and loss of one run; ``kind`` is classify, lm or regress."""

    kind: str
    x_train: Tensor | None = None
    y_train: Tensor | None = None
    x_test: Tensor | None = None
    y_test: Tensor | None = None
    source: str = ""

    def to(self, device: torch.device) -> Task:
        """The same task with its tensors resident on ``device`` (no host copies per step)."""
        move = lambda z: None if z is None else z.to(device)  # noqa: E731
        return Task(self.kind, move(self.x_train), move(self.y_train), move(self.x_test),
                    move(self.y_test), self.source)

    def loss(self, out: Tensor, y: Tensor) -> Tensor:
        if self.kind == "regress":
            return F.mse_loss(out, y)
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1))


def make_task(cfg: RunConfig) -> Task:
    from normsys import data

    d, m = cfg.data, cfg.model
    if d.name == "random":
        if not d.batch_shape:
            raise ValueError("data.name=random needs data.batch_shape, e.g. (32, 64)")
        return Task("regress", source=f"random normal batches of shape {d.batch_shape}")
    if d.name == "tinyshakespeare":
        train_ids, val_ids, _ = data.tiny_shakespeare()
        return Task("lm", train_ids, None, val_ids, None,
                    f"Tiny Shakespeare: {len(train_ids)} train / {len(val_ids)} val characters")
    split = data.ag_news(d.tier, m.seq_len) if d.name == "ag_news" else data.mnist()
    n_tr, n_te = d.n_train or len(split.y_train), d.n_test or len(split.y_test)
    source = split.source if (n_tr, n_te) == (len(split.y_train), len(split.y_test)) else \
        f"{split.source}; first {n_tr} train / {n_te} test rows"
    return Task("classify", split.x_train[:n_tr], split.y_train[:n_tr], split.x_test[:n_te],
                split.y_test[:n_te], source)


def lm_batch(ids: Tensor, block: int, batch: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random windows of ``block`` characters (x) and the next characters (y), on ids' device."""
    ix = torch.randint(len(ids) - block - 1, (batch, 1), generator=gen).to(ids.device)
    offsets = ix + torch.arange(block + 1, device=ids.device)  # (batch, block + 1)
    window = ids[offsets]
    return window[:, :-1], window[:, 1:]


def random_batch(cfg: RunConfig, gen: torch.Generator, device=None) -> tuple[Tensor, Tensor]:
    """Random inputs of data.batch_shape and random targets of the model's output width d."""
    shape = cfg.data.batch_shape
    x, y = torch.randn(shape, generator=gen), torch.randn(*shape[:-1], cfg.model.d, generator=gen)
    return x.to(device), y.to(device)


def batches(task: Task, cfg: RunConfig, gen: torch.Generator):
    """Yield (epoch, x, y) for the whole run, on the device where the task's tensors live."""
    t = cfg.train
    device = resolve_device(t.device)
    if task.kind == "classify":
        n, step = len(task.y_train), 0
        for epoch in range(t.epochs if not t.steps else 10**9):
            perm = torch.randperm(n, generator=gen).to(task.y_train.device)
            for i in range(0, n, t.batch_size):
                if t.steps and step >= t.steps:
                    return
                idx = perm[i : i + t.batch_size]
                yield epoch, task.x_train[idx], task.y_train[idx]
                step += 1
        return
    for _ in range(t.steps):
        if task.kind == "lm":
            yield 0, *lm_batch(task.x_train, cfg.model.seq_len, t.batch_size, gen)
        else:
            yield 0, *random_batch(cfg, gen, device)


def total_steps(task: Task, cfg: RunConfig) -> int:
    if cfg.train.steps or task.kind != "classify":
        return cfg.train.steps
    return cfg.train.epochs * math.ceil(len(task.y_train) / cfg.train.batch_size)


def first_batch(task: Task, cfg: RunConfig) -> tuple[Tensor, Tensor]:
    """The fixed batch for gradients at init and for probes (first rows, or a seeded draw)."""
    if task.kind == "classify":
        return task.x_train[: cfg.train.probe_batch], task.y_train[: cfg.train.probe_batch]
    gen = torch.Generator().manual_seed(EVAL_SEED + cfg.train.seed)
    if task.kind == "lm":
        return lm_batch(task.x_test, cfg.model.seq_len, cfg.train.batch_size, gen)
    return random_batch(cfg, gen, resolve_device(cfg.train.device))


# ----------------------------------------------------------------------------- model and step


def resolve_device(name: str) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda" and not torch.cuda.is_available():
        raise RuntimeError("train.device=cuda but no CUDA device is available; use cpu or auto")
    return torch.device(name)


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


def forward_backward(model, task, x, y, feedback) -> tuple[Tensor, Tensor]:
    if feedback is not None:
        loss, out, _ = dfa_loss_and_backward(model, x, y, feedback)
        return loss, out
    out = model(x)
    loss = task.loss(out, y)
    loss.backward()
    return loss.detach(), out.detach()


def grad_norm(model: nn.Module) -> Tensor:
    """||dL/dW|| over every parameter, as a device tensor (fused into one kernel on CUDA)."""
    grads = [p.grad.detach() for p in model.parameters() if p.grad is not None]
    if not grads:
        return torch.zeros((), device=next(model.parameters()).device)
    return torch.nn.utils.get_total_norm(grads)


@torch.no_grad()
def evaluate(model, task: Task, cfg: RunConfig, autocast) -> dict[str, float]:
    model.eval()
    if task.kind == "regress":
        return {}
    out: dict[str, float] = {}
    if task.kind == "lm":
        for name, ids in (("train", task.x_train), ("val", task.x_test)):
            gen, total = torch.Generator().manual_seed(EVAL_SEED), 0.0
            for _ in range(cfg.train.eval_batches):
                x, y = lm_batch(ids, cfg.model.seq_len, cfg.train.batch_size, gen)
                with autocast:
                    total += float(task.loss(model(x), y))
            out[f"{name}_loss"] = total / cfg.train.eval_batches
        return out
    n_train = cfg.train.eval_train_rows or len(task.y_train)
    for name, x_all, y_all in (("train", task.x_train[:n_train], task.y_train[:n_train]),
                               ("test", task.x_test, task.y_test)):
        correct, loss = 0, 0.0
        for i in range(0, len(y_all), 512):
            x, y = x_all[i : i + 512], y_all[i : i + 512]
            with autocast:
                logits = model(x).float()
            loss += float(F.cross_entropy(logits, y, reduction="sum"))
            correct += int((logits.argmax(-1) == y).sum())
        out[f"{name}_acc"], out[f"{name}_loss"] = correct / len(y_all), loss / len(y_all)
    return out


@torch.no_grad()
def probe(model, cfg: RunConfig, x: Tensor, autocast) -> dict[str, dict]:
    """Spectra and ranks of the probed hidden states on the fixed batch (rows = batch*tokens)."""
    if not cfg.train.probe:
        return {}
    model.eval()
    with capture(model, cfg.train.probe) as hidden, autocast:
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
    name = torch.cuda.get_device_name(device) if device.type == "cuda" else platform.processor()
    return {"torch": torch.__version__, "device": f"{device.type}: {name or 'cpu'}",
            "commit": commit, "normsys": __version__, "python": platform.python_version(),
            "threads": str(torch.get_num_threads())}


# ----------------------------------------------------------------------------- the loop


def autocast_for(device: torch.device, cfg: RunConfig):
    """bf16 autocast on CUDA (train.amp=auto), nothing on CPU."""
    if device.type == "cuda" and cfg.train.amp == "auto":
        return torch.autocast("cuda", torch.bfloat16)
    return nullcontext()


def gradients_at_init(model, task, cfg, x0, y0, autocast, feedback) -> tuple[float, dict]:
    """Loss and ||dL/dW|| per parameter on the fixed first batch; buffers (BN stats) restored."""
    buffers = {k: v.clone() for k, v in model.named_buffers()}
    model.train()
    with autocast:
        init_loss, _ = forward_backward(model, task, x0, y0, feedback)
    grads = {n: float(p.grad.float().norm()) for n, p in model.named_parameters()
             if p.grad is not None}
    model.load_state_dict(buffers, strict=False)
    model.zero_grad(set_to_none=True)
    return float(init_loss), grads


def finish(cfg: RunConfig, model, task: Task, device, autocast, x0, init: tuple[float, dict],
           curves: dict, diverged: bool, steps: int, start: float) -> tuple[RunRecord, dict | None]:
    """Evaluate, probe and package one trained model as a RunRecord (+ its state_dict)."""
    metrics = {"init_loss": init[0]}
    if steps:
        metrics["final_loss"] = sum(curves["loss"][-10:]) / len(curves["loss"][-10:])
    if diverged:
        metrics.update({k: float("nan") for k in ("train_acc", "test_acc", "val_loss")})
    elif steps:  # a run without training steps measures gradients at init only
        metrics.update(evaluate(model, task, cfg, autocast))
    probes = {} if diverged else probe(model, cfg, x0, autocast)
    record = RunRecord(
        config=json.loads(json.dumps(cfg.to_dict())), fingerprint=cfg.fingerprint(),
        version=__version__, metrics=metrics, curves=curves, probes=probes,
        init_grad_norms=init[1], diverged=diverged, steps=steps,
        wall_time=time.perf_counter() - start, env=environment(device), data_source=task.source)
    keep = cfg.train.keep_state
    state = {k: v.detach().cpu() for k, v in model.state_dict().items()} if keep else None
    return record, state


class StepLog:
    """Per-step loss, gradient norm and batch accuracy of S runs trained together (S = 1 for one
    run), kept on the device and moved to the curves in one transfer every ``every`` steps and at
    each epoch's end. On CUDA each host read stalls the queue of kernels, so it reads every
    ``HOST_READ_EVERY`` steps; on the CPU reads cost nothing and it reads every step, which stops a
    diverging run before its update exactly as an eager check would. A run whose loss turns
    non-finite is marked diverged and records nothing after it.
    """

    def __init__(self, curves: list[dict], device: torch.device, classify: bool):
        self.curves, self.classify = curves, classify
        self.every = host_read_every(device)
        self.diverged = [False] * len(curves)
        self.correct, self.seen = [0.0] * len(curves), [0] * len(curves)
        self.pending: list[tuple[Tensor, int]] = []

    def add(self, losses: Tensor, norms: Tensor, out: Tensor, y: Tensor) -> bool:
        """Log one step (losses and norms of shape (S,) or (), logits and targets with a leading S
        when S > 1). True when the log was read and every run has diverged."""
        hits = (out.argmax(-1) == y).sum(-1) if self.classify else torch.zeros_like(losses)
        row = torch.stack([losses.float(), norms.float(), hits.float()]).reshape(3, -1)
        self.pending.append((row, y.shape[-1] if self.classify else 0))
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
                if self.classify:
                    curves["batch_acc"].append(hits[s] / batch)
                    self.correct[s] += hits[s]
                    self.seen[s] += batch
        self.pending.clear()
        return all(self.diverged)

    def end_epoch(self) -> bool:
        """Close the epoch's running accuracy of the live runs; True when every run has diverged."""
        done = self.read()
        for s, curves in enumerate(self.curves):
            if self.classify and not self.diverged[s]:
                curves["train_acc_running"].append(self.correct[s] / max(self.seen[s], 1))
                self.correct[s], self.seen[s] = 0.0, 0
        return done

    def close(self) -> None:
        """Read what is pending and close the last (or, for a diverged run, partial) epoch."""
        self.read()
        for s, curves in enumerate(self.curves):
            if self.classify and self.seen[s]:
                curves["train_acc_running"].append(self.correct[s] / self.seen[s])


def host_read_every(device: torch.device) -> int:
    """Steps between host reads of the step log: every step on the CPU, HOST_READ_EVERY on CUDA."""
    return 1 if device.type == "cpu" else HOST_READ_EVERY


def empty_curves() -> dict[str, list[float]]:
    """Per-step loss and gradient norm, per-epoch running accuracy, per-step batch accuracy."""
    return {"loss": [], "grad_norm": [], "train_acc_running": [], "batch_acc": []}


def progress_bar(total: int, desc: str):
    from tqdm.auto import tqdm

    return tqdm(total=total, desc=desc, delay=3, leave=False,
                disable=None if sys.stderr.isatty() else True)


def make_optimizer(cfg: RunConfig, params, device: torch.device) -> torch.optim.Optimizer:
    t = cfg.train
    opt_cls = torch.optim.AdamW if t.optimizer == "adamw" else torch.optim.Adam
    return opt_cls(params, lr=t.lr, weight_decay=t.weight_decay, fused=device.type == "cuda")


def compiled(fn, cfg: RunConfig, device: torch.device):
    """``torch.compile(fn)`` where it pays: backprop on CUDA with train.compile=auto, or cudagraphs
    (CUDA graphs replay each step's kernels in one launch: the shapes are static within an epoch).
    FA's custom backward and DFA's hooks stay eager; on the CPU compiling costs more than it saves.
    """
    t = cfg.train
    if t.compile != "off" and t.method == "bp" and compile_on(device):
        return torch.compile(fn, mode="reduce-overhead" if t.compile == "cudagraphs" else None)
    return fn


def compile_on(device: torch.device) -> bool:
    return device.type == "cuda"


def train_step(model, step_model, opt, task: Task, x, y, feedback, autocast, log: StepLog) -> bool:
    """One update: forward and backward through ``step_model`` (the model, or its compiled form),
    log the step without a host sync, then the optimizer step. True (and no update) when the log
    was read and the loss is non-finite."""
    opt.zero_grad(set_to_none=True)
    with autocast:
        loss, out = forward_backward(step_model, task, x, y, feedback)
    if log.add(loss, grad_norm(model), out, y):
        return True
    opt.step()
    return False


def drive(stream, step, log: StepLog, bar) -> None:
    """The loop shared by one run and batched seeds: ``step(x, y)`` on every (epoch, x, y) of
    ``stream`` until it returns True (every run diverged), closing the log at each epoch's end."""
    epoch_now = 0
    for epoch, x, y in stream:
        if epoch != epoch_now and log.end_epoch():
            break
        epoch_now = epoch
        if step(x, y):
            break
        bar.update()
    bar.close()
    log.close()


def train_with_state(cfg: RunConfig) -> tuple[RunRecord, dict | None]:
    """Train ``cfg``; return its record and (if train.keep_state) the trained state_dict.
    train.compile=off turns every compile off, the norms' fused kernels included."""
    with fusion(cfg.train.compile != "off"):
        return _train_with_state(cfg)


def _train_with_state(cfg: RunConfig) -> tuple[RunRecord, dict | None]:
    start = time.perf_counter()
    t = cfg.train
    device = resolve_device(t.device)
    autocast = autocast_for(device, cfg)
    task = make_task(cfg).to(device)
    model = prepare_model(cfg).to(device)
    feedback = dfa_feedback(model, cfg.model.n_out, t.seed) if t.method == "dfa" else None
    if feedback is not None:
        feedback = [b.to(device) for b in feedback]
    opt = make_optimizer(cfg, [p for p in model.parameters() if p.requires_grad], device)
    x0, y0 = first_batch(task, cfg)
    init = gradients_at_init(model, task, cfg, x0, y0, autocast, feedback)
    step_model = compiled(model, cfg, device)

    gen = torch.Generator().manual_seed(t.seed)
    curves = empty_curves()
    log = StepLog([curves], device, task.kind == "classify")
    model.train()
    drive(batches(task, cfg, gen),
          lambda x, y: train_step(model, step_model, opt, task, x, y, feedback, autocast, log),
          log, progress_bar(total_steps(task, cfg), f"{cfg.model.family}/{cfg.model.norm}/s{t.seed}"))
    diverged, steps = log.diverged[0], len(curves["loss"])
    return finish(cfg, model, task, device, autocast, x0, init, curves, diverged, steps, start)


def train(cfg: RunConfig) -> RunRecord:
    """Train one run (no cache) and return its record."""
    return train_with_state(cfg)[0]


def run(cfg: RunConfig, wait: bool = True) -> RunRecord | None:
    """The record of ``cfg`` from the run cache, training it first if needed (claims use this).
    ``wait=False``: None instead of waiting while another process trains the same run."""
    from normsys.cache import cached_run

    return cached_run(cfg, train_with_state, wait)
