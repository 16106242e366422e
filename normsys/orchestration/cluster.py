"""Training the runs claims need on a Ray cluster: the same runs, trained on other machines.

A ``Cluster`` is the trainer of a session's runs (normsys.orchestration.runs.Runs): each group of
runs the run cache lacks (one run, or one configuration's seeds stacked on a GPU) becomes a Ray
task that loads the data and trains them (normsys.training.train.fit) on whichever node Ray gives
it, asking for a fraction of a GPU on a cluster with GPUs (several small runs share one) or a
number of CPUs otherwise. The records and weights come back through Ray's object store (no shared
filesystem) and the session keeps them in the local run cache under the cluster's numeric
environment (its device and CPU kernels or GPU, the task's threads, torch, autocast: asked of a
worker once), so a later session reads them when its runs train on the same cluster, and never as
runs trained here in another environment. A run trained on the cluster is otherwise the run trained
here: same config, same data (its digest is checked), same code.

    pytest claims --claims-ray local               a Ray cluster on this machine
    pytest claims --claims-ray auto                the running cluster (or $RAY_ADDRESS)
    python -m normsys scorecard mine.py:Mine --ray ray://head:10001

Ray retries a task whose worker died; a run that diverges comes back recorded as diverged; a
cluster that cannot be reached is a ``ClusterError`` before anything trains; ``cancel`` (Ctrl-C)
cancels what is still running, and since a record is kept only once it is whole, the cache
stays whole.
"""

from __future__ import annotations

import os
import socket
import time
from collections.abc import Callable

from normsys.orchestration.runs import Runs
from normsys.orchestration.usernorm import load
from normsys.training.config import RunConfig
from normsys.training.record import RunRecord
from normsys.training.tasks import Task
from normsys.training.train import fit

RETRIES = 3  # a task whose worker process or node died is run again, this many times at most
CANCEL_SETTLE = 30.0  # seconds ``cancel`` keeps cancelling tasks that have not ended


class ClusterError(RuntimeError):
    """The cluster cannot be used: which address, what Ray said, what to do."""


def connect(address: str) -> None:
    """Join the Ray cluster at ``address`` (``local``: start one on this machine; ``auto``: the
    running one, or $RAY_ADDRESS as Ray reads it; ``ray://host:port``: through Ray Client)."""
    try:
        import ray
    except ImportError:
        raise ClusterError(f"Ray is not installed, so the cluster {address!r} cannot be used; "
                           f"pip install -e \".[ray]\"") \
            from None
    target = os.environ.get("RAY_ADDRESS", "") if address == "auto" else address
    if target not in ("", "local", "auto"):  # a named head: asked at once, not after Ray's retries
        host, _, port = target.removeprefix("ray://").rpartition(":")
        named = f"{address!r}" + (f" ($RAY_ADDRESS={target})" if target != address else "")
        try:
            socket.create_connection((host or "localhost", int(port)), timeout=10).close()
        except (OSError, ValueError) as err:
            raise ClusterError(f"Ray cluster {named} cannot be reached ({err}); expected "
                               f"`local`, `auto`, HOST:PORT of its head or ray://HOST:PORT") \
                from None
    try:
        ray.init(address=address, include_dashboard=False, log_to_driver=False,
                 configure_logging=False, ignore_reinit_error=True)
    except Exception as err:  # noqa: BLE001 - Ray says it in many ways: one line for all
        first = (str(err) or "-").splitlines()[0][:200]
        raise ClusterError(f"Ray cluster {address!r} cannot be reached ({type(err).__name__}: "
                           f"{first}); start one (`ray start --head`), name its address, or "
                           f"use `local`") from None


class Cluster:
    """The trainer of a session's runs on a Ray cluster (see the module doc): ``submit`` starts
    runs, ``train`` waits for them (submitting what is not started yet), ``cancel`` stops what
    is still running. ``gpus``: the fraction of a GPU each task asks for on a cluster with GPUs;
    ``cpus``: the CPUs a task asks for otherwise (and its torch threads); ``specs``: the user's
    norms (usernorm.load's specs and names), registered again in each worker."""

    def __init__(self, address: str, gpus: float = 0.25, cpus: int = 1,
                 specs: list[tuple[str, str]] | None = None, work: Callable | None = None):
        connect(address)  # first: without Ray installed, a ClusterError that says so
        import ray

        self.cuda = gpus > 0 and ray.cluster_resources().get("GPU", 0) > 0
        self.options = {"num_gpus": gpus, "num_cpus": 0} if self.cuda else {"num_cpus": cpus}
        self.threads = cpus
        self.specs = list(specs or [])
        self.remote = ray.remote(max_retries=RETRIES)(work or train_group)
        self.probe = ray.remote(max_retries=RETRIES)(worker_environment)
        self.environments: dict[tuple, dict[str, str]] = {}  # a worker's, by what decides it
        self.pending: dict[RunConfig, object] = {}  # each submitted run's task (ObjectRef)
        self.ready: dict[RunConfig, tuple[RunRecord, dict | None]] = {}  # came back, not asked

    def environment(self, cfg: RunConfig) -> dict[str, str]:
        """The numeric environment a run of ``cfg`` trains in on the cluster, asked of a worker
        under this cluster's task options once for each device and autocast setting."""
        import ray

        key = (cfg.train.device, cfg.train.amp)
        if key not in self.environments:
            ref = self.probe.options(**self.options).remote(cfg, self.threads)
            self.environments[key] = ray.get(ref)
        return self.environments[key]

    def submit(self, cfgs: list[RunConfig], task: Task) -> None:
        """Start training ``cfgs`` (one run, or one configuration's seeds) as one task."""
        todo = [c for c in cfgs if c not in self.pending and c not in self.ready]
        if todo:
            ref = self.remote.options(**self.options).remote(todo, self.specs, self.threads)
            self.pending.update(dict.fromkeys(todo, ref))

    def train(self, cfgs: list[RunConfig], task: Task) -> list[tuple[RunRecord, dict | None]]:
        """The records and weights of ``cfgs``, trained on the cluster: ``task`` is this
        machine's data, whose digest the workers' must match (same data, same cache key)."""
        import ray

        self.submit(cfgs, task)
        for ref in dict.fromkeys(self.pending.pop(c) for c in cfgs if c in self.pending):
            digest, node, results = ray.get(ref)
            if digest != task.digest:
                raise ClusterError(f"the data on {node} differ from this machine's "
                                   f"({task.source}: digest {digest[:12] or 'none'}, here "
                                   f"{task.digest[:12] or 'none'}); give every node the same "
                                   f"data (NORMSYS_DATA)")
            for record_json, state in results:
                record = RunRecord.from_json(record_json)
                self.ready[record.run_config] = record, state
            for c in [c for c, r in self.pending.items() if r == ref]:
                del self.pending[c]
        return [self.ready.pop(c) for c in cfgs]

    def cancel(self, settle: float = CANCEL_SETTLE) -> int:
        """Cancel every task still running or waiting (Ctrl-C): nothing of theirs is kept. How
        many runs they held. Ray drops a cancel that arrives while a task's arguments are still
        being resolved or its worker is still being leased, and the task then runs to its end;
        so the tasks that have not ended are cancelled again, each second, for ``settle``
        seconds at most."""
        import ray

        left = list(dict.fromkeys(self.pending.values()))
        deadline = time.monotonic() + settle
        while left:
            for ref in left:
                ray.cancel(ref, force=True)
            if time.monotonic() >= deadline:
                break
            _, left = ray.wait(left, num_returns=len(left), timeout=1.0, fetch_local=False)
        cancelled = len(self.pending)
        self.pending.clear()
        return cancelled

    def close(self) -> None:
        import ray

        self.cancel()
        ray.shutdown()


def node_name() -> str:
    import ray

    return f"{socket.gethostname()} ({ray.util.get_node_ip_address()})"


def worker_environment(cfg: RunConfig, threads: int) -> dict[str, str]:
    """A Ray task: the numeric environment a run of ``cfg`` trains in on this worker at
    ``threads`` torch threads (train_group's)."""
    import torch

    from normsys.training.train import run_environment

    torch.set_num_threads(threads)
    return run_environment(cfg)


_WORKER_RUNS: Runs | None = None  # a worker process's data settings, loaded once each


def train_group(cfgs: list[RunConfig], specs: list[tuple[str, str]],
                threads: int) -> tuple[str, str, list[tuple[str, dict | None]]]:
    """A Ray task: train ``cfgs`` together on this node (its data loaded once per worker, the
    user's norms and the kinds the claims register registered again); the data's digest, the
    node's name and each run's record (as JSON, naming the node) and weights."""
    import torch

    from normsys import declarations
    from normsys.training.norms import NORMS

    global _WORKER_RUNS
    declarations.declared()
    for spec, name in specs:
        if name not in NORMS:
            load(spec, name)
    if _WORKER_RUNS is None:
        _WORKER_RUNS = Runs()
    torch.set_num_threads(threads)
    task = _WORKER_RUNS.task_of(cfgs[0])
    node = node_name()
    results = []
    for record, state in fit(cfgs, task):
        record.env["node"] = node
        results.append((record.to_json(), state))
    return task.digest, node, results

