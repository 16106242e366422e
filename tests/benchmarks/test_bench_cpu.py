"""The CPU tier's training on a CPU: steps per second of the loop's own step (Learner.step) for
every model family the CPU tier's claims train (the seed encoder, the char LSTM, the char GPT, the
FA protocol's residual MLP, the deep-dive CNN and MLP) at their CPU-tier settings, their GFLOP/s
(FLOPs of one step counted by torch.utils.flop_counter) and the fraction of the machine's fp32
matmul peak, measured in the same session on the one thread a claim's run trains on
(normsys.orchestration.workers.RUN_THREADS). Where a run's time goes besides its steps:
``profile_training.py``.

    pytest tests/benchmarks/test_bench_cpu.py --benchmark-json tests/benchmarks/results/cpu-<name>.json

puts a CPU beside a GPU in ``pytest-benchmark compare``. Under ``pytest -n`` (CI) benchmarks are
off and each case runs once as a smoke test.
"""

from __future__ import annotations

import functools
import time

import pytest
import torch
from torch.utils.flop_counter import FlopCounterMode

from normsys.training.config import preset
from normsys.training.models import prepare_model
from normsys.training.tasks import make_task
from normsys.training.train import Learner, run_context

# the CPU-tier presets as the claims use them
MODELS = {"encoder": {}, "lstm": {}, "char_gpt": {}, "resmlp": {}, "cnn": {}, "mlp": {}}
STEPS = 5


@functools.lru_cache(maxsize=4)
def matmul_peak_gflops(threads: int, n: int = 2048, repeats: int = 5) -> float:
    """Best-of-``repeats`` fp32 GFLOP/s of an n x n matmul on ``threads`` threads."""
    a, b = torch.randn(n, n), torch.randn(n, n)
    a @ b  # warm-up
    best = min(timed(lambda: a @ b) for _ in range(repeats))
    return 2 * n**3 / best / 1e9


def timed(fn) -> float:
    start = time.perf_counter()
    fn()
    return time.perf_counter() - start


def flops_of_step(learner: Learner, x, y) -> int:
    """FLOPs of one training step (forward, backward; the optimizer's element-wise work is
    left out) as torch's FLOP counter sees them."""
    with FlopCounterMode(display=False) as counter:
        learner.step(x, y)
    return counter.get_total_flops()


@pytest.fixture
def run_threads():
    """torch on the threads a claim's run trains on, for the test (numbers and speed depend on
    them)."""
    from normsys.orchestration.workers import RUN_THREADS

    was = torch.get_num_threads()
    torch.set_num_threads(RUN_THREADS)
    yield RUN_THREADS
    torch.set_num_threads(was)


@pytest.mark.parametrize("name", MODELS)
def test_cpu_tier_training_step(benchmark, name, data_env, run_threads):
    cfg = preset(name, **MODELS[name])
    dev = torch.device("cpu")
    task = make_task(cfg)
    model = prepare_model(cfg).train()
    learner = Learner(cfg, model, task, run_context(cfg, dev, STEPS))
    _, x, y = next(task.batches(cfg, torch.Generator().manual_seed(0)))
    flops = flops_of_step(learner, x, y)

    def steps():
        for _ in range(STEPS):
            learner.step(x, y)
        learner.log.read()

    benchmark.pedantic(steps, rounds=7, iterations=1, warmup_rounds=1)
    seconds = benchmark.stats.stats.median / STEPS if benchmark.stats else timed(steps) / STEPS
    threads = torch.get_num_threads()
    peak = matmul_peak_gflops(threads)
    gflops = flops / seconds / 1e9
    benchmark.extra_info.update({
        "steps_per_s": 1 / seconds, "flops_per_step": flops, "gflops": gflops,
        "matmul_peak_gflops": peak, "fraction_of_matmul_peak": gflops / peak,
        "threads": threads, "batch": cfg.train.batch_size, "seq_len": cfg.model.seq_len})
    assert flops > 0 and gflops > 0
