"""Benchmark timing: device peaks, a measured copy bandwidth, and synchronized GPU timing (CUDA
events with an L2 flush between repeats) that replaces pytest-benchmark's host times. Used by
tests/benchmarks; the results' table and targets are tests/benchmarks/bench_results.py.
"""

from __future__ import annotations

import functools
import re
import statistics

import torch

from normsys.training.provenance import device_name

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
        "device": device_name(dev),
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
    """Device time per call with CUDA events and an L2 flush before every repeat.

    The flush reads 256 MB by default (flush="read"): the lines a read leaves in L2 are clean, so
    the timed call's own reads evict them without write-backs. Triton's do_bench writes instead
    (flush="write", zero_()), which leaves up to an L2 (50-60 MB) of dirty lines whose write-back
    could land inside a ~30 MB norm call; test_bench_norms measures both once.

    hide_launch (kernel benchmarks): as in Triton's do_bench, the host does not wait between
    repeats; after the flush a ~1 ms spin kernel keeps the GPU busy while the host launches the
    call, so the events time the call's kernels, not the Python that launches them (a norm kernel
    over 8M elements takes ~10 us, its launch from Python as long or longer). Without it (training
    steps) the host synchronizes before every repeat and the time includes launch overhead, which
    is part of what a training loop costs.
    """

    LEAD_CYCLES = 2_000_000  # ~1 ms at H100/H200 clocks, far longer than launching one norm call

    def __init__(self, hide_launch: bool, flush: str = "read", flush_bytes: int = 256 << 20):
        if flush not in ("read", "write"):
            raise ValueError(f"flush must be 'read' or 'write', not {flush!r}")
        self.buffer = torch.zeros(flush_bytes, dtype=torch.uint8, device="cuda")
        self.flush = self.buffer.max if flush == "read" else self.buffer.zero_
        self.hide_launch = hide_launch
        self.events: list[tuple[torch.cuda.Event, torch.cuda.Event]] = []

    def setup(self):
        self.flush()  # evict the operands from L2
        if self.hide_launch:
            torch.cuda._sleep(self.LEAD_CYCLES)
        else:
            torch.cuda.synchronize()

    def wrap(self, fn):
        def timed():
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            fn()
            end.record()
            if not self.hide_launch:
                torch.cuda.synchronize()
            self.events.append((start, end))
        return timed

    def seconds(self) -> list[float]:
        torch.cuda.synchronize()
        return [start.elapsed_time(end) / 1e3 for start, end in self.events]


def run_benchmark(benchmark, fn, rounds: int = 50, hide_launch: bool = False,
                  flush: str = "read") -> float:
    """Benchmark ``fn`` and return the median seconds per call. On CUDA these are CUDA-event
    device times (see CudaTimer), and they replace pytest-benchmark's host wall-clock times in its
    stats, so that its JSON and ``pytest-benchmark compare`` show what the GB/s were computed from."""
    if device().type == "cuda":
        timer = CudaTimer(hide_launch, flush)
        fn()  # warm-up (and compilation)
        torch.cuda.synchronize()
        benchmark.pedantic(timer.wrap(fn), setup=timer.setup, rounds=rounds, iterations=1)
        times = timer.seconds()
        use_times(benchmark, times)
        benchmark.extra_info["timer"] = (f"cuda events, {flush} flush"
                                         + (", launch hidden" if hide_launch else ""))
        return statistics.median(times)
    fn()
    benchmark.pedantic(fn, rounds=min(rounds, 5), iterations=1)
    stats = getattr(benchmark, "stats", None)
    return stats.stats.median if stats is not None else float("nan")


def use_times(benchmark, times: list[float]) -> None:
    """Put ``times`` in place of the host times pytest-benchmark measured (one per round); nothing
    to do when benchmarks are disabled (a plain pytest run calls the function once)."""
    stats = getattr(getattr(benchmark, "stats", None), "stats", None)
    if stats is None:
        return
    if len(times) != len(stats.data):
        raise ValueError(f"{len(times)} device times for {len(stats.data)} benchmark rounds")
    stats.data[:] = times
    for name in [k for k in vars(stats) if k != "data"]:  # statistics cached from the host times
        delattr(stats, name)


# ----------------------------------------------------------------------------- captured steps

# a run with its step captured as a CUDA graph against the same run eager, one line each: what
# tests/test_gpu_fast_path.py prints and tests/benchmarks/bench_results.py reads back
CAPTURED_VS_EAGER = ("captured vs eager {run} s{seed}: {steps} steps, {replays} replays, "
                     "bit-identical={same}, gaps {gaps}, largest per-step loss gap {worst:.2e}; "
                     "wall {captured:.1f} s captured, {eager:.1f} s eager")
CAPTURED_LINE = re.compile(r"captured vs eager (\S+) (s\d+): (\d+) steps, (\d+) replays, "
                           r"bit-identical=(True|False), gaps (\{.*\}), largest per-step loss "
                           r"gap (\S+); wall ([0-9.]+) s captured, ([0-9.]+) s eager")
