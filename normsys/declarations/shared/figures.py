"""Figures of the claims report. Each function draws on a matplotlib Figure handed in by
``claim.figure(name, draw)``; none imports matplotlib at module level."""

from __future__ import annotations

import numpy as np


def _band(ax, x, rows, label, **kw):
    arr = np.array(rows, dtype=float)
    ax.plot(x, arr.mean(0), label=label, **kw)
    ax.fill_between(x, arr.min(0), arr.max(0), alpha=0.2)


def profiles(fig, by_label: dict[str, list[list[float]]], ylabel: str = "||dL/dW_l|| at init",
             xlabel: str = "layer", title: str = "Per-layer weight-gradient norms") -> None:
    """One line per setting over layers: mean over seeds, band min-max, log scale."""
    ax = fig.subplots()
    for label, rows in by_label.items():
        _band(ax, np.arange(1, len(rows[0]) + 1), rows, label, marker="o")
    ax.set_yscale("log")
    ax.set(xlabel=xlabel, ylabel=ylabel, title=f"{title} (mean over seeds, band min-max)")
    ax.legend()


def curves(fig, by_label: dict[str, list[list[float]]], keys: tuple[str, ...],
           title: str) -> None:
    """Per-step curves (e.g. loss, grad_norm): ``by_label[label]`` is a list of per-seed dicts."""
    axes = np.atleast_1d(fig.subplots(1, len(keys)))
    fig.set_size_inches(6 * len(keys), 4)
    for ax, key in zip(axes, keys, strict=True):
        for label, runs in by_label.items():
            rows = [r[key] for r in runs]
            n = min(len(r) for r in rows)
            _band(ax, np.arange(1, n + 1), [r[:n] for r in rows], label)
        ax.set_yscale("log")
        ax.set(xlabel="step", ylabel=key)
        ax.legend(fontsize=8)
    fig.suptitle(f"{title} (mean over seeds, band min-max)")


def depth_residuals(fig, by_label: dict[str, list[list[float]]]) -> None:
    """Dong et al.'s relative residual against depth, log scale (zeros drawn at 1e-16)."""
    ax = fig.subplots()
    for label, rows in by_label.items():
        arr = np.maximum(np.array(rows), 1e-16)
        _band(ax, np.arange(arr.shape[1]), arr, label, marker="o")
    ax.set_yscale("log")
    ax.set(xlabel="depth (self-attention layers)", ylabel="||X - 1 x^T|| / ||X||",
           title="Rank-collapse residual against depth (floor 1e-16)")
    ax.legend()
