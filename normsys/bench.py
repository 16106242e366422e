"""Benchmark helpers: device peaks, a measured copy bandwidth, and synchronized GPU timing
(CUDA events with an L2 flush between repeats). Used by tests/benchmarks."""

from __future__ import annotations

import functools

import torch

# Datasheet peaks: (memory bandwidth B/s, dense bf16 FLOP/s). Measured ceilings go next to them.
PEAKS = {
    "H200": (4.8e12, 989e12),
    "H100 80GB HBM3": (3.35e12, 989e12),   # SXM5
    "H100 PCIe": (2.0e12, 756e12),
    "A100-SXM4-80GB": (2.039e12, 312e12),
    "A100-SXM4-40GB": (1.555e12, 312e12),
}


def device() -> torch.device:
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def machine_info() -> dict:
    """What a benchmark JSON needs to compare hardware: device, peaks, versions."""
    dev = device()
    bandwidth, flops = peaks(dev)
    return {
        "device": torch.cuda.get_device_name(dev) if dev.type == "cuda" else "cpu",
        "peak_memory_bandwidth_Bps": bandwidth,
        "peak_bf16_flops": flops,
        "measured_copy_bandwidth_Bps": measured_copy_bandwidth(),
        "torch": torch.__version__,
        "cuda": torch.version.cuda,
        "cpu_threads": torch.get_num_threads(),
    }


def peaks(dev: torch.device) -> tuple[float | None, float | None]:
    if dev.type != "cuda":
        return None, None
    name = torch.cuda.get_device_name(dev)
    for key, value in PEAKS.items():
        if key in name:
            return value
    return None, None


@functools.lru_cache(maxsize=1)
def measured_copy_bandwidth() -> float | None:
    """Bytes/s of a large device-to-device copy (read + write), the practical memory ceiling."""
    if not torch.cuda.is_available():
        return None
    src = torch.empty(1 << 30, dtype=torch.uint8, device="cuda").random_()
    dst = torch.empty_like(src)
    times = []
    for _ in range(5):
        start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        start.record()
        dst.copy_(src)
        end.record()
        torch.cuda.synchronize()
        times.append(start.elapsed_time(end) / 1e3)
    return 2 * src.numel() / sorted(times)[len(times) // 2]


class CudaTimer:
    """Synchronized per-call timing with CUDA events and an L2 flush before every repeat."""

    def __init__(self, flush_bytes: int = 256 << 20):
        self.flush = torch.empty(flush_bytes, dtype=torch.uint8, device="cuda")
        self.times: list[float] = []

    def setup(self):
        self.flush.zero_()  # evict the operands from L2
        torch.cuda.synchronize()

    def wrap(self, fn):
        def timed():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            torch.cuda.synchronize()
            self.times.append(start.elapsed_time(end) / 1e3)
        return timed

    def median(self) -> float:
        return sorted(self.times)[len(self.times) // 2]


def run_benchmark(benchmark, fn, rounds: int = 50):
    """Benchmark ``fn`` and return the median seconds per call (CUDA events on a GPU)."""
    if device().type == "cuda":
        timer = CudaTimer()
        fn()  # warm-up (and compilation)
        torch.cuda.synchronize()
        benchmark.pedantic(timer.wrap(fn), setup=timer.setup, rounds=rounds, iterations=1)
        return timer.median()
    fn()
    benchmark.pedantic(fn, rounds=min(rounds, 5), iterations=1)
    stats = getattr(benchmark, "stats", None)
    return stats.stats.median if stats is not None else float("nan")
