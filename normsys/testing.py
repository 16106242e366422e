"""Helpers shared by the tests, benchmarks and claims: seeded tensors and the tolerance table.

Hypothesis draws shapes, scales and seeds; a seeded torch generator fills the tensor (element-wise
draws shrink to constant rows, where eps dominates a norm; STYLE.md).
"""

from __future__ import annotations

import torch

# (dtype, atol, rtol, reason): one row per dtype used in parity checks against torch's own ops.
TOLERANCES: dict[torch.dtype, tuple[float, float, str]] = {
    torch.float64: (1e-12, 1e-10, "same formula, different reduction order: ~1e-15 relative"),
    torch.float32: (1e-5, 1e-5, "relaxed: torch's kernels use Welford / fused rsqrt, "
                                "rounding differs by a few ulp at d ~ 1e3"),
    torch.bfloat16: (2e-2, 2e-2, "relaxed: 8-bit mantissa, ~4e-3 relative per rounding"),
}


def seeded_randn(shape: tuple[int, ...], seed: int, dtype: torch.dtype = torch.float64,
                 scale: float = 1.0, device: str = "cpu") -> torch.Tensor:
    """A standard normal tensor of ``shape`` times ``scale`` from a generator seeded with ``seed``."""
    gen = torch.Generator(device="cpu").manual_seed(seed)
    return (torch.randn(shape, generator=gen, dtype=torch.float64) * scale).to(device, dtype)


def tolerance(dtype: torch.dtype) -> dict[str, float]:
    """``atol``/``rtol`` keyword arguments for torch.testing.assert_close at ``dtype``."""
    atol, rtol, _ = TOLERANCES[dtype]
    return {"atol": atol, "rtol": rtol}
