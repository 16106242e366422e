"""Norm kernels: every registry kind, forward and forward+backward, bf16 and fp32, hidden 128-8192
with >= 8M elements, against torch's own op (where one exists) and torch.compile of the normsys
function. Achieved GB/s (forward: read x + write y; backward: read x and dy, write dx) and the
fraction of the device's peak bandwidth go to ``extra_info``.

GPU: ``pytest tests/benchmarks -m gpu --benchmark-enable --benchmark-json out.json``.
A plain ``pytest`` runs only the tiny CPU smoke cases (benchmarks disabled: each runs once).
"""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from bench import peaks, run_benchmark

from normsys.claims.testing import seeded_randn
from normsys.training.norms import NORMS, build_norm

TORCH_OPS = {  # torch's own op for the kinds that have one, same parameters
    "layernorm": lambda m, x: F.layer_norm(x, (m.dim,), m.weight, m.bias, m.eps),
    "rmsnorm": lambda m, x: F.rms_norm(x, (m.dim,), m.weight, m.eps),
}
HIDDEN = [128, 512, 1024, 2048, 4096, 8192]
ELEMENTS = 8 << 20
GPU_CASES = [pytest.param(h, ELEMENTS // h, dtype, marks=pytest.mark.gpu, id=f"{h}-{dtype}")
             for h in HIDDEN for dtype in ("bf16", "fp32")]
CPU_SMOKE = [pytest.param(256, 64, "fp32", id="cpu-smoke")]
DTYPES = {"bf16": torch.bfloat16, "fp32": torch.float32}


CPU_COMPILE_SMOKE = ("layernorm", "l2")  # CPU compiles take seconds each: two kinds stand for all


def norm_fn(kind: str, provider: str, module):
    if provider == "torch":
        if kind not in TORCH_OPS:
            pytest.skip(f"torch has no own op for {kind}")
        return lambda x: TORCH_OPS[kind](module, x)
    if provider == "compile":
        if not torch.cuda.is_available() and kind not in CPU_COMPILE_SMOKE:
            pytest.skip(f"CPU smoke compiles {', '.join(CPU_COMPILE_SMOKE)} only")
        return torch.compile(module, dynamic=False)
    return module


@pytest.mark.parametrize("hidden,rows,dtype", GPU_CASES + CPU_SMOKE)
@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
@pytest.mark.parametrize("provider", ["normsys", "torch", "compile"])
@pytest.mark.parametrize("kind", list(NORMS))
def test_norm_kernel(benchmark, dev, kind, provider, mode, hidden, rows, dtype):
    measure(benchmark, dev, kind, provider, mode, hidden, rows, dtype)


@pytest.mark.gpu
@pytest.mark.parametrize("mode", ["fwd", "fwd+bwd"])
@pytest.mark.parametrize("flush", ["read", "write"])
def test_layernorm_bf16_4096_after_each_l2_flush(benchmark, dev, flush, mode):
    """The same kernel timed after the read flush the benchmarks use and after the write flush of
    Triton's do_bench (dirty lines left in L2): how much the choice moves a target's GB/s."""
    measure(benchmark, dev, "layernorm", "torch", mode, 4096, ELEMENTS // 4096, "bf16", flush)
    benchmark.extra_info["flush"] = flush


def measure(benchmark, dev, kind, provider, mode, hidden, rows, dtype, flush="read"):
    """Time one case and put its bytes, GB/s and fraction of peak in extra_info."""
    # Every case compiles from a fresh dynamo state, the compile provider's module and normsys's
    # fused kernels (l2 family, dyt on CUDA) alike: dynamo keys its cache on the code, so without a
    # reset a function's second shape gets a dynamic-shape kernel (automatic dynamic) and its ninth
    # none at all (the recompile limit falls back to eager). Training compiles one static shape.
    torch._dynamo.reset()
    dt = DTYPES[dtype]
    module = build_norm(kind, hidden).to(dev, dt).train()
    fn = norm_fn(kind, provider, module)
    x = seeded_randn((rows, hidden), 0, dtype=dt, device=str(dev)).requires_grad_(mode != "fwd")
    dy = seeded_randn((rows, hidden), 1, dtype=dt, device=str(dev))
    wrt = [x, *(p for p in module.parameters() if p.requires_grad)]

    def step():
        y = fn(x)
        if mode != "fwd":  # dx and the parameter gradients as fresh tensors: no accumulation pass
            torch.autograd.grad(y, wrt, dy)

    seconds = run_benchmark(benchmark, step, hide_launch=True, flush=flush)
    element = torch.finfo(dt).bits // 8
    moved = rows * hidden * element * (2 if mode == "fwd" else 5)  # fwd 2N, fwd+bwd 2N + 3N
    if kind == "none":  # the identity returns x (and dy) itself: it moves no bytes, runs no kernel
        moved = 0
    bandwidth, _ = peaks(dev)
    gbps = moved / seconds / 1e9
    benchmark.extra_info.update({
        "kind": kind, "provider": provider, "mode": mode, "hidden": hidden, "rows": rows,
        "dtype": dtype, "bytes": moved, "GBps": gbps,
        "fraction_of_peak_bandwidth": gbps * 1e9 / bandwidth if bandwidth else None,
    })
    with torch.no_grad():
        reference = module(x)
        assert torch.allclose(fn(x).float(), reference.float(), rtol=2e-2, atol=2e-2), \
            f"{provider} computes another function than the normsys module"
