"""How a claims session uses the machine: on the CPU every run trains on one thread, and processes
(pytest-xdist workers) share the cores; on a GPU host the cores split between the workers, on a
multi-GPU node one GPU per worker, and ``-n auto`` starts several workers a GPU (every claim's runs
are small: one run leaves most of a GPU idle)."""

from __future__ import annotations

import os

# Workers a GPU under `-n auto`: the setting the whole paper tier was measured with (every claim
# decided in 7:50 on one H200, cold cache); other counts are not measured yet.
WORKERS_PER_GPU = 8


def auto_workers() -> int | None:
    """What ``-n auto`` starts: WORKERS_PER_GPU a GPU on a CUDA host; None elsewhere (xdist's own
    count, one worker a CPU core)."""
    import torch

    if not torch.cuda.is_available():
        return None
    return WORKERS_PER_GPU * torch.cuda.device_count()


# The torch threads a run trains on, on the CPU. Its numbers depend on them (a reduction split over
# more threads rounds otherwise, and training carries that on: ld-layernorm-decorrelates' per-seed
# values moved by up to 0.016 between one thread and two), and the CPU ledgers and the run cache
# hold one-thread runs (CI's two workers on two cores), as the scorecard's workers and the
# cluster's one-CPU tasks train them.
RUN_THREADS = 1


def oversubscribed(n: object, cores: int | None = None) -> str:
    """What ``-n n`` costs where it starts more workers than the CPU has cores: every run trains
    on RUN_THREADS, so the workers take turns on the cores; '' where it does not (or on a CUDA
    host, whose workers share its GPUs)."""
    import torch

    cores = cores or os.cpu_count() or 1
    if not isinstance(n, int) or n <= cores or torch.cuda.is_available():
        return ""
    return (f"-n {n} starts more workers than this machine's {cores} cores: each run trains on "
            f"{RUN_THREADS} thread, so the workers take turns on the cores and the session is no "
            f"faster (its numbers are the same); -n {cores} uses every core")


def share_the_machine() -> None:
    """On the CPU: torch trains on RUN_THREADS in every process, xdist worker or not. On a CUDA
    host, in an xdist worker: torch threads = cores // workers; GPU = worker index % GPU
    count."""
    import torch

    if not torch.cuda.is_available():
        torch.set_num_threads(RUN_THREADS)
        return
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        torch.cuda.set_device(int(worker.removeprefix("gw")) % torch.cuda.device_count())
