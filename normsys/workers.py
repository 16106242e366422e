"""pytest-xdist workers share the machine: the CPU cores split between them instead of each taking
them all, and on a multi-GPU node one GPU per worker."""

from __future__ import annotations

import os


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
