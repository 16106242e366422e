"""Getting the runs claims ask for: from the run cache, or trained (seeds stacked on CUDA).

``run(config)`` is one record; ``runs(configs)`` several, which on CUDA trains the uncached seeds
of one configuration as one seed-stacked model (normsys.batched), and on the CPU trains first the
runs no other pytest-xdist worker holds, leaving for last the ones another worker is training, so
that workers needing the same runs share them out instead of queueing. Records fetched once are
kept for the rest of the process, and the data of each data setting is loaded once.
"""

from __future__ import annotations

from normsys.batched import check_batchable
from normsys.cache import cached_runs
from normsys.config import RunConfig
from normsys.record import RunRecord
from normsys.tasks import Task, make_task
from normsys.train import fit, resolve_device

_MEMO: dict[RunConfig, RunRecord] = {}  # records this process has fetched, shared by claims
_TASKS: dict[tuple, Task] = {}  # data this process has loaded, by the fields make_task reads
_KEEP_TASKS = 4  # MNIST is ~190 MB as float tensors: keep the last few data settings only


def task_of(cfg: RunConfig) -> Task:
    """The data of ``cfg`` (tasks.make_task), loaded once per process for each data setting."""
    key = (cfg.data, cfg.model.seq_len, cfg.model.d)
    if key not in _TASKS:
        while len(_TASKS) >= _KEEP_TASKS:
            del _TASKS[next(iter(_TASKS))]
        _TASKS[key] = make_task(cfg)
    return _TASKS[key]


def run(cfg: RunConfig, wait: bool = True) -> RunRecord | None:
    """The record of ``cfg`` from the run cache, training it first if needed. ``wait=False``:
    None instead of waiting while another process trains the same run."""
    if cfg in _MEMO:
        return _MEMO[cfg]
    task = task_of(cfg)
    found = cached_runs([cfg], task.digest, lambda cfgs: fit(cfgs, task), wait)
    if found is None:
        return None
    _MEMO[cfg] = found[0]
    return found[0]


def runs(cfgs: list[RunConfig]) -> list[RunRecord]:
    """Records of several configs (see the module doc for how they are trained)."""
    if len(cfgs) > 1 and resolve_device(cfgs[0].train.device).type == "cuda":
        try:
            check_batchable(cfgs)
        except ValueError:
            pass
        else:
            missing = [c for c in cfgs if c not in _MEMO]
            if missing:
                task = task_of(missing[0])
                _MEMO.update(zip(missing, cached_runs(missing, task.digest,
                                                      lambda todo: fit(todo, task)), strict=True))
            return [_MEMO[c] for c in cfgs]
    for cfg in dict.fromkeys(cfgs):  # first pass: train or read every run nobody else holds
        run(cfg, wait=False)
    return [run(cfg) for cfg in cfgs]  # then wait for the others
