"""The task kinds a run trains on, one small class each with one interface (batches, probe batch,
loss, evaluate): classification (AG News, MNIST), next-character language modeling (Tiny
Shakespeare) and regression on fresh random data (the notebook MLPs). ``make_task`` builds a
config's task from its data (normsys.training.data), with the digest the run cache keys on.
"""

from __future__ import annotations

import math
from collections.abc import Iterator
from dataclasses import dataclass, field, replace

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from normsys.training import data
from normsys.training.config import RunConfig
from normsys.training.record import TEST_ACC, TEST_LOSS, TRAIN_ACC, TRAIN_LOSS, VAL_LOSS

EVAL_SEED = 1_000_003  # fixed evaluation batches (LM), identical for every seed and norm
# rows per forward pass when evaluating a classifier: on one CPU core the seed encoder evaluated
# 1,024 rows in 1.02 s in chunks of 128 against 1.78 s in chunks of 512, with bit-identical logits
# (mlp, cnn with batchnorm, resmlp, vit too)
EVAL_CHUNK = 128


class Task:
    """Data and loss of one run: what the loop asks of each kind of task."""

    source: str = ""
    digest: str = ""  # what the data read hashes to ("" for data drawn fresh from the config)
    accuracy = False  # whether the step log counts correct predictions (classification)

    def to(self, device: torch.device) -> Task:
        """The same task with its tensors resident on ``device`` (no host copies per step)."""
        raise NotImplementedError

    def steps(self, cfg: RunConfig) -> int:
        return cfg.train.steps

    def batches(self, cfg: RunConfig, gen: torch.Generator) -> Iterator[tuple[int, Tensor, Tensor]]:
        """(epoch, x, y) for every step of the run, drawn with ``gen``."""
        raise NotImplementedError

    def probe_batch(self, cfg: RunConfig) -> tuple[Tensor, Tensor]:
        """The fixed batch for gradients at init and for probes."""
        raise NotImplementedError

    def evaluate(self, model: nn.Module, cfg: RunConfig, ctx) -> dict[str, float]:
        """Held-out metrics of ``model``, under ``ctx.autocast()`` (train.RunContext)."""
        return {}

    def criterion(self, out: Tensor, y: Tensor, reduction: str = "mean") -> Tensor:
        return F.cross_entropy(out.reshape(-1, out.shape[-1]), y.reshape(-1), reduction=reduction)

    def loss(self, out: Tensor, y: Tensor, seeds: int = 1) -> Tensor:
        """Mean loss of a batch; of a seed-folded batch (seeds > 1), each seed's mean (S,)."""
        if seeds == 1:
            return self.criterion(out, y)
        return self.criterion(out, y, reduction="none").reshape(seeds, -1).mean(1)


@dataclass
class Classify(Task):
    x_train: Tensor
    y_train: Tensor
    x_test: Tensor
    y_test: Tensor
    source: str = ""
    digest: str = ""
    accuracy = True

    def to(self, device: torch.device) -> Classify:
        return Classify(self.x_train.to(device), self.y_train.to(device), self.x_test.to(device),
                        self.y_test.to(device), self.source, self.digest)

    def steps(self, cfg: RunConfig) -> int:
        t = cfg.train
        return t.steps or t.epochs * math.ceil(len(self.y_train) / t.batch_size)

    def batches(self, cfg, gen):
        t = cfg.train
        n, step = len(self.y_train), 0
        for epoch in range(t.epochs if not t.steps else 10**9):
            perm = torch.randperm(n, generator=gen).to(self.y_train.device)
            for i in range(0, n, t.batch_size):
                if t.steps and step >= t.steps:
                    return
                idx = perm[i : i + t.batch_size]
                yield epoch, self.x_train[idx], self.y_train[idx]
                step += 1

    def probe_batch(self, cfg):
        return self.x_train[: cfg.train.probe_batch], self.y_train[: cfg.train.probe_batch]

    @torch.no_grad()
    def evaluate(self, model, cfg, ctx):
        """Accuracy and mean loss on the first eval_train_rows training rows and the test rows."""
        model.eval()
        out: dict[str, float] = {}
        n_train = cfg.train.eval_train_rows or len(self.y_train)
        for (acc, mean_loss), x_all, y_all in (
                ((TRAIN_ACC, TRAIN_LOSS), self.x_train[:n_train], self.y_train[:n_train]),
                ((TEST_ACC, TEST_LOSS), self.x_test, self.y_test)):
            correct, loss = 0, 0.0
            for i in range(0, len(y_all), EVAL_CHUNK):
                x, y = x_all[i : i + EVAL_CHUNK], y_all[i : i + EVAL_CHUNK]
                with ctx.autocast():
                    logits = model(x).float()
                loss += float(F.cross_entropy(logits, y, reduction="sum"))
                correct += int((logits.argmax(-1) == y).sum())
            out[acc], out[mean_loss] = correct / len(y_all), loss / len(y_all)
        return out


@dataclass
class LanguageModel(Task):
    train_ids: Tensor
    val_ids: Tensor
    source: str = ""
    digest: str = ""

    def to(self, device: torch.device) -> LanguageModel:
        return LanguageModel(self.train_ids.to(device), self.val_ids.to(device), self.source,
                             self.digest)

    def batches(self, cfg, gen):
        for _ in range(cfg.train.steps):
            yield 0, *lm_batch(self.train_ids, cfg.model.seq_len, cfg.train.batch_size, gen)

    def probe_batch(self, cfg):
        gen = torch.Generator().manual_seed(EVAL_SEED + cfg.train.seed)
        return lm_batch(self.val_ids, cfg.model.seq_len, cfg.train.batch_size, gen)

    @torch.no_grad()
    def evaluate(self, model, cfg, ctx):
        """Mean loss over eval_batches fixed windows of the train and the validation text."""
        model.eval()
        out: dict[str, float] = {}
        for name, ids in ((TRAIN_LOSS, self.train_ids), (VAL_LOSS, self.val_ids)):
            gen, total = torch.Generator().manual_seed(EVAL_SEED), 0.0
            for _ in range(cfg.train.eval_batches):
                x, y = lm_batch(ids, cfg.model.seq_len, cfg.train.batch_size, gen)
                with ctx.autocast():
                    total += float(self.loss(model(x), y))
            out[name] = total / cfg.train.eval_batches
        return out


@dataclass
class Regress(Task):
    """Fresh standard-normal inputs of ``shape`` and targets of width ``width`` every step."""

    shape: tuple[int, ...]
    width: int
    source: str = ""
    device: torch.device = field(default_factory=lambda: torch.device("cpu"))

    def to(self, device: torch.device) -> Regress:
        return replace(self, device=device)

    def draw(self, gen: torch.Generator) -> tuple[Tensor, Tensor]:
        x = torch.randn(self.shape, generator=gen)
        y = torch.randn(*self.shape[:-1], self.width, generator=gen)
        return x.to(self.device), y.to(self.device)

    def batches(self, cfg, gen):
        for _ in range(cfg.train.steps):
            yield 0, *self.draw(gen)

    def probe_batch(self, cfg):
        return self.draw(torch.Generator().manual_seed(EVAL_SEED + cfg.train.seed))

    def criterion(self, out, y, reduction="mean"):
        return F.mse_loss(out, y, reduction=reduction)


def make_task(cfg: RunConfig) -> Task:
    d, m = cfg.data, cfg.model
    if d.name == "random":
        if not d.batch_shape:
            raise ValueError("data.name=random needs data.batch_shape, e.g. (32, 64)")
        return Regress(d.batch_shape, m.d, f"random normal batches of shape {d.batch_shape}")
    if d.name == "tinyshakespeare":
        train_ids, val_ids, _ = data.tiny_shakespeare()
        return LanguageModel(train_ids, val_ids, f"Tiny Shakespeare: {len(train_ids)} train / "
                                                 f"{len(val_ids)} val characters",
                             data.checksum(data.SHAKESPEARE_FILE, "Tiny Shakespeare"))
    split = data.ag_news(d.tier, m.seq_len) if d.name == "ag_news" else data.mnist()
    n_tr, n_te = d.n_train or len(split.y_train), d.n_test or len(split.y_test)
    source = split.source if (n_tr, n_te) == (len(split.y_train), len(split.y_test)) else \
        f"{split.source}; first {n_tr} train / {n_te} test rows"
    return Classify(split.x_train[:n_tr], split.y_train[:n_tr], split.x_test[:n_te],
                    split.y_test[:n_te], source, split.digest)


def lm_batch(ids: Tensor, block: int, batch: int, gen: torch.Generator) -> tuple[Tensor, Tensor]:
    """Random windows of ``block`` characters (x) and the next characters (y), on ids' device."""
    ix = torch.randint(len(ids) - block - 1, (batch, 1), generator=gen).to(ids.device)
    offsets = ix + torch.arange(block + 1, device=ids.device)  # (batch, block + 1)
    window = ids[offsets]
    return window[:, :-1], window[:, 1:]
