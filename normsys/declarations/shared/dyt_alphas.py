"""Dynamic tanh (Zhu et al. 2025) at initial alphas other than its default: each a registered norm
kind, ``dyt-alpha-<a>`` (the built-in ``dyt`` at the default). A file of their own, as the run
cache keys a registered kind's runs on the code of the file that defines it: an edit of a claim
elsewhere trains none of them again."""

from __future__ import annotations

import inspect

from torch import nn

from normsys.training.norms import DyT, register

DEFAULT_ALPHA = inspect.signature(DyT).parameters["alpha0"].default


def dyt_kind(alpha0: float) -> str:
    """The norm kind of DyT with initial alpha ``alpha0``, registered on first use."""
    if alpha0 == DEFAULT_ALPHA:
        return "dyt"

    def build(dim: int) -> nn.Module:
        return DyT(dim, alpha0=alpha0)

    name = f"dyt-alpha-{alpha0:g}".replace(".", "_")
    return register(name, build, f"g * tanh(a x) + b, scalar a (a0 = {alpha0:g})")
