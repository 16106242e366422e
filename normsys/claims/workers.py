"""pytest-xdist workers share the machine: the CPU cores split between them instead of each taking
them all, on a multi-GPU node one GPU per worker, and ``-n auto`` on a GPU host starts several
workers a GPU (every claim's runs are small: one run leaves most of a GPU idle)."""

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


def share_the_machine() -> None:
    """In an xdist worker: torch threads = cores // workers; GPU = worker index % GPU count."""
    worker = os.environ.get("PYTEST_XDIST_WORKER")
    if worker is None:
        return
    import torch

    n = int(os.environ.get("PYTEST_XDIST_WORKER_COUNT", "1"))
    torch.set_num_threads(max(1, (os.cpu_count() or 1) // n))
    if torch.cuda.is_available() and torch.cuda.device_count() > 1:
        torch.cuda.set_device(int(worker.removeprefix("gw")) % torch.cuda.device_count())
