"""The training loop's per-step log: loss, gradient norm and batch accuracy of S runs trained
together (S = 1 for one run), kept on the device and read to the host in windows, so that a GPU
never waits on the host; a run whose loss turns non-finite is marked diverged there."""

from __future__ import annotations

import math

import torch
from torch import Tensor


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
