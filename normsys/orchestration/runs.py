"""Getting the runs claims ask for: from the run cache, or trained (seeds stacked on CUDA).

A ``Runs`` object holds what one session fetched. ``run(config)`` is one record; ``runs(configs)``
several, which on CUDA trains the uncached seeds of each configuration as one seed-stacked model
(normsys.training.batched), and on any device trains first the runs (or seed groups) no other
pytest-xdist worker holds, leaving for last the ones another worker is training. Records fetched
once are kept for the rest of the session, and the data of each data setting is loaded once.

A session plans before any claim starts: ``plan`` takes the runs of every selected claim's
first look, and its later looks where its ledger entries show it took them
(plugin.planned_looks), each look's grouped as it trains, longest first as the tier's run times
record them. ``train_planned`` then trains them in every pytest-xdist worker, each taking the
next group no other holds, so that the longest runs start first whichever claim needs them and
no worker waits on another while runs remain; the claims read their runs after. A ``trainer``
(normsys.orchestration.cluster: a Ray cluster) trains the runs elsewhere instead: ``plan`` and ``runs``
hand it every missing run first, so that they train at once, and the records it returns are
kept in the run cache as the ones trained here.

What a claim needs is known once it has run: ``recording()`` collects the runs fetched inside
it, and ``write_index`` keeps them in the cache folder (``claims/<id>-<tier>.json``: each run's
config, data digest and training time), from which ``cost`` tells ``--claims-list`` how many
runs a claim needs, how many are cached now, and what training the others would take on this
machine, and ``planned`` the runs of a claim that declares no experiment.
"""

from __future__ import annotations

import contextlib
import json
import shutil
import time
from collections.abc import Iterator
from contextlib import contextmanager
from functools import partial
from pathlib import Path
from typing import Protocol

import torch
from filelock import FileLock, Timeout
from torch import nn

from normsys.orchestration.cache import cached_runs, lookup, writable
from normsys.orchestration.progress import SILENT, Progress, label
from normsys.orchestration.runtimes import (
    expected_wall,
    group_seconds,
    index_path,
    priced,
    similar_seconds,
)
from normsys.training.batched import check_batchable
from normsys.training.config import PRESETS, ModelConfig, RunConfig
from normsys.training.models import build_model
from normsys.training.norms import NORMS
from normsys.training.record import RunRecord
from normsys.training.store import atomic_write_text, cache_root
from normsys.training.tasks import Classify, LanguageModel, Task, make_task
from normsys.training.train import fit, resolve_device, run_environment


class Trainer(Protocol):
    """Where runs train when not in this process (normsys.orchestration.cluster.Cluster: a Ray
    cluster)."""

    cuda: bool  # whether its runs train on CUDA (seeds stack)

    def environment(self, cfg: RunConfig) -> dict[str, str]: ...  # where a run of cfg trains

    def submit(self, cfgs: list[RunConfig], task: Task) -> None: ...

    def train(self, cfgs: list[RunConfig], task: Task) -> list[tuple[RunRecord, dict | None]]: ...


KEEP_TASKS = 4  # MNIST is ~190 MB as float tensors: keep the last few data settings only


class Runs:
    """The runs one session fetches: each record read or trained once and kept, the data of each
    data setting loaded once, and the recordings open (what the claims running now fetched).
    The claims plugin keeps one per pytest session, the command line one per command."""

    def __init__(self, progress: Progress = SILENT, trainer: Trainer | None = None):
        self.progress = progress
        self.trainer = trainer  # None: train in this process (normsys.training.train.fit)
        self.records: dict[RunConfig, RunRecord] = {}
        self.digests: dict[RunConfig, str] = {}  # the data digest of each run fetched
        self.tasks: dict[tuple, Task] = {}  # loaded data, by the fields make_task reads
        self.data_digests: dict[tuple, str] = {}  # the digest of each data setting loaded
        self.recordings: list[list[RunConfig]] = []  # the open recordings (innermost last)
        self.planned: list[list[RunConfig]] = []  # groups train_planned has still to train
        self.board: Board | None = None  # the runs wanted now by the session's workers
        self.held: set[RunConfig] = set()  # runs the cache was seen to hold (a price asks again)

    def task_of(self, cfg: RunConfig) -> Task:
        """The data of ``cfg`` (tasks.make_task), loaded once for each data setting, checked
        against the model's outputs and vocabulary (``fits``)."""
        key = data_key(cfg)
        if key not in self.tasks:
            while len(self.tasks) >= KEEP_TASKS:
                del self.tasks[next(iter(self.tasks))]
            self.tasks[key] = make_task(cfg)
            self.data_digests[key] = self.tasks[key].digest
        fits(cfg, self.tasks[key])
        return self.tasks[key]

    def digest_of(self, cfg: RunConfig) -> str:
        """The digest of ``cfg``'s data (what keys its runs in the cache), kept for the session
        once its data has been loaded, which a planner asks of every planned group."""
        return self.data_digests.get(data_key(cfg)) or self.task_of(cfg).digest

    def run(self, cfg: RunConfig, wait: bool = True) -> RunRecord | None:
        """The record of ``cfg`` from the run cache, training it first if needed. ``wait=False``:
        None instead of waiting while another process trains the same run."""
        if not self._fetch([cfg], wait):
            return None
        for fetched in self.recordings:
            fetched.append(cfg)
        return self.records[cfg]

    def runs(self, cfgs: list[RunConfig]) -> list[RunRecord]:
        """Records of several configs (see the module doc for how they are trained): first every
        group of runs nobody else holds is trained or read, then the others are waited for.
        The groups missing are posted on the session's board meanwhile, for idle workers."""
        groups = seed_groups(list(dict.fromkeys(cfgs)), self._cuda())
        self.submit(groups)
        # what this session does not hold yet (the cache is read once, by _fetch; a helper finds
        # a group the cache holds and passes it over)
        posted = self.board.post([g for g in groups if any(c not in self.records for c in g)]) \
            if self.board else []
        for group in groups:
            self._fetch(group, wait=False)
        for group in groups:
            self._fetch(group, wait=True)
        if self.board:
            self.board.take(posted)
        for fetched in self.recordings:
            fetched.extend(cfgs)
        return [self.records[c] for c in cfgs]

    def _fetch(self, group: list[RunConfig], wait: bool) -> bool:
        """Put the records of ``group`` (one config's seeds, or one run) in the memo: read from
        the cache, or trained together. False if ``wait`` is off and another process holds one."""
        missing = [c for c in group if c not in self.records]
        if missing:
            task = self.task_of(missing[0])
            train = fit if self.trainer is None else self.trainer.train
            found = cached_runs(missing, task.digest, lambda todo: train(todo, task), wait,
                                self.progress, self.environment)
            if found is None:
                return False
            self.records.update(zip(missing, found, strict=True))
            self.digests.update(dict.fromkeys(missing, task.digest))
        return True

    def _cuda(self) -> bool | None:
        return None if self.trainer is None else self.trainer.cuda

    def environment(self, cfg: RunConfig) -> dict[str, str]:
        """The numeric environment a run of ``cfg`` trains in: here (run_environment), or the
        trainer's; the run cache serves only records made in it."""
        return run_environment(cfg) if self.trainer is None else self.trainer.environment(cfg)

    def submit(self, groups: list[list[RunConfig]]) -> int:
        """Hand the trainer the runs of ``groups`` that neither this session nor the run cache
        holds, to start before anyone asks for them (a trainer that runs elsewhere: a Ray
        cluster); how many were handed (none without a trainer)."""
        if self.trainer is None:
            return 0
        handed = 0
        for group in groups:
            if missing := self._missing(group):
                self.trainer.submit(missing, self.task_of(group[0]))
                handed += len(missing)
        return handed

    def _missing(self, group: list[RunConfig]) -> list[RunConfig]:
        """The runs of ``group`` that neither this session nor the run cache holds."""
        digest, missing = self.digest_of(group[0]), []
        for c in group:
            if c in self.records or c in self.held:
                continue
            if lookup(c, digest, self.environment) is None:
                missing.append(c)
            else:
                self.held.add(c)
        return missing

    def plan(self, looks: list[list[RunConfig]]) -> int:
        """Plan the runs of ``looks`` (what the selected claims need, look by look:
        plugin.planned_looks), each look's new runs grouped as they train (``seed_groups``), so
        that a configuration's seeds stack as the looks that ask for them stack them; longest
        first as the tier's run times record them: a trainer gets the missing ones now
        (``submit``: how many, the return value); here ``train_planned`` trains them before the
        first claim starts (0 handed), where a run cache keeps them for the claims."""
        seen: set[RunConfig] = set()
        groups, cuda = [], self._cuda()
        for look in looks:
            new = [c for c in dict.fromkeys(look) if c not in seen]
            seen.update(new)
            groups += seed_groups(new, cuda)
        groups.sort(key=lambda g: -group_seconds(g))  # stable
        if self.trainer is not None:
            return self.submit(groups)
        root = cache_root()
        # only a cache that keeps them hands the runs on to the claims: without one, each claim
        # trains its own
        self.planned = groups if root is not None and writable(root) else []
        return 0

    def planned_work(self, places: int) -> tuple[dict[str, float], float]:
        """The planned runs the cache lacks, each (by config fingerprint) with its share of the
        seconds its group trains in, and the wall time their training takes on ``places``
        processes laid out longest first (runtimes.expected_wall), as their tier's run times
        record them (0 for a run never timed)."""
        missing = [group for group in self.planned if self._lacks(group)]
        shares = {c.fingerprint(): group_seconds(g) / len(g) for g in missing for c in g}
        return shares, expected_wall([group_seconds(g) for g in missing], max(1, places))

    def cost(self, cfgs: list[RunConfig]) -> tuple[str, float | None]:
        """``10 runs (4 cached; the others ~3.2 min of training as recorded)``: what the runs
        ``cfgs`` (a claim's plan, ``plugin.planned_configs``) cost now, with this cache, grouped
        as they train; and those seconds (None where a run was never timed)."""
        cfgs = list(dict.fromkeys(cfgs))
        missing = [c for c in cfgs if self._lacks([c])]
        return priced(len(cfgs), len(cfgs) - len(missing), self.missing_groups(missing))

    def missing_groups(self, missing: list[RunConfig]) -> list[list[tuple[float, str]]]:
        """Per group the runs ``missing`` train in (seed_groups), the (seconds, device) of each
        of its runs the run times record (similar_seconds; empty: never timed)."""
        return [[t for c in g if (t := similar_seconds(c)) is not None]
                for g in seed_groups(missing, self._cuda())]

    def missing_seconds(self, cfgs: list[RunConfig]) -> list[float]:
        """The seconds each group of ``cfgs``' runs the cache lacks trains in, as recorded (a
        group never timed left out)."""
        missing = [c for c in dict.fromkeys(cfgs) if self._lacks([c])]
        return [max(s for s, _ in t) for t in self.missing_groups(missing) if t]

    def _lacks(self, group: list[RunConfig]) -> bool:
        """Whether the cache lacks a run of ``group``; a group whose data cannot be read lacks
        them (its claim says why)."""
        try:
            return bool(self._missing(group))
        except Exception:  # noqa: BLE001 -- said in full by the claim that needs the group
            return True

    def train_planned(self) -> int:
        """Train the planned groups, longest first, that neither the run cache nor another
        process (a pytest-xdist worker, which trains the same plan) holds: the workers split
        the plan as places free up, so that no run waits for a claim to ask for it while a
        worker idles, and the claims then read their runs. A group that cannot train (missing
        data, a config that does not fit it) is left to the claim that needs it, which says why.
        How many runs this process trained."""
        trained = 0
        while self.planned:
            group = self.planned.pop(0)
            try:
                trained += self._train_free(group)
            except Exception as err:  # noqa: BLE001 -- said again, in full, by its claim
                self.progress.note(f"planned run {label(group[0])} left to its claim ({err})")
        return trained

    def _train_free(self, group: list[RunConfig]) -> int:
        """Train the runs of ``group`` the cache lacks, unless another process holds one: how
        many were trained (0: none lacking, or held elsewhere)."""
        if not (missing := self._missing(group)):
            return 0
        task = self.task_of(group[0])
        found = cached_runs(missing, task.digest, partial(fit, task=task), False, self.progress,
                            self.environment)
        return 0 if found is None else len(missing)

    def help(self, me: str) -> int:
        """A worker whose claims are done trains what the others' claims wait for: each group
        posted on the board (a claim's later look) that no process holds, until nothing is
        wanted and no other worker is at work. How many runs it trained."""
        trained = 0
        while self.board is not None:
            took = 0
            for group in self.board.wanted():
                try:
                    took += self._train_free(group)
                except Exception:  # noqa: BLE001 -- the claim that posted it trains it and says why
                    continue
            trained += took
            if not took:
                if not self.board.others_at_work(me):
                    return trained
                time.sleep(HELP_POLL)
        return trained

    @contextmanager
    def recording(self) -> Iterator[list[RunConfig]]:
        """The configs of the runs fetched inside the block, in order (repeats included)."""
        fetched: list[RunConfig] = []
        self.recordings.append(fetched)
        try:
            yield fetched
        finally:
            self.recordings.remove(fetched)

    def write_index(self, claim: str, tier: str, fetched: list[RunConfig],
                    empty: bool = False) -> None:
        """Keep which runs ``claim`` at ``tier`` fetched, with their data digests and training
        times (``empty``: also that it fetched none)."""
        path = index_path(claim, tier)
        if path is None or not (fetched or empty):
            return
        runs_ = [{"config": c.to_dict(), "data": self.digests.get(c, ""),
                  "seconds": self.records[c].wall_time if c in self.records else None}
                 for c in dict.fromkeys(fetched)]
        atomic_write_text(json.dumps({"runs": runs_}), path)


HELP_POLL = 1.0  # seconds between an idle worker's looks at the board


class Board:
    """What one session's workers want trained now, in the run cache folder (``sessions/<id>/``):
    a claim's groups of runs as it asks for them (a later look's seeds, which no plan holds), for
    a pytest-xdist worker whose claims are done to train instead of idling; and a lock per
    worker held while its claims run, by which an idle one knows when to stop."""

    def __init__(self, folder: Path):
        self.folder = folder
        (folder / "wanted").mkdir(parents=True, exist_ok=True)

    def _path(self, group: list[RunConfig]) -> Path:
        return self.folder / "wanted" / f"{group[0].fingerprint()}-{len(group)}.json"

    def post(self, groups: list[list[RunConfig]]) -> list[list[RunConfig]]:
        """Post ``groups``; those that could be (a board that cannot be written to helps nobody
        and stops no claim)."""
        posted = []
        for group in groups:
            try:
                atomic_write_text(json.dumps([c.to_dict() for c in group]), self._path(group))
            except OSError:
                continue
            posted.append(group)
        return posted

    def take(self, groups: list[list[RunConfig]]) -> None:
        for group in groups:
            with contextlib.suppress(OSError):
                self._path(group).unlink(missing_ok=True)

    def wanted(self) -> list[list[RunConfig]]:
        """The groups posted and not yet taken, oldest first (one that cannot be read: none)."""
        out = []
        for path in sorted((self.folder / "wanted").glob("*.json"), key=_mtime):
            try:
                out.append([RunConfig.from_dict(c) for c in json.loads(path.read_text())])
            except (OSError, ValueError, KeyError, TypeError):
                continue
        return out

    @contextmanager
    def at_work(self, me: str) -> Iterator[None]:
        """Hold ``me``'s lock while its claims run (a process that dies lets it go)."""
        with FileLock(self.folder / f"{me}.lock"):
            yield

    def close(self) -> None:
        """Remove the board, once no worker is at work (the last to leave does; what another
        still holds stays)."""
        if not self.others_at_work(""):
            shutil.rmtree(self.folder, ignore_errors=True)

    def others_at_work(self, me: str) -> bool:
        for path in sorted(self.folder.glob("*.lock")):  # one order on every file system
            if path.stem == me:
                continue
            lock = FileLock(path)
            try:
                lock.acquire(timeout=0)
            except Timeout:
                return True
            lock.release()
        return False


def _mtime(path: Path) -> float:
    try:
        return path.stat().st_mtime
    except OSError:
        return 0.0


def data_key(cfg: RunConfig) -> tuple:
    """What a run's data depends on: its data settings and the model's sequence length and width."""
    return cfg.data, cfg.model.seq_len, cfg.model.d


def takes_tokens(cfg: ModelConfig) -> bool:
    """Whether the family reads token ids (it embeds its input) rather than float features."""
    with torch.device("meta"):  # the structure only: no memory, no random draws
        model = build_model(cfg)
    return any(isinstance(m, nn.Embedding) for m in model.modules())


def fits(cfg: RunConfig, task: Task) -> None:
    """The model can take the data: token ids where it embeds its input, float features where it
    does not, as many outputs as the task has classes (or characters) and a vocabulary holding
    every token id. A ValueError naming the setting and the fix otherwise, before anything
    trains (inside training it would be a dtype or an index error)."""
    m = cfg.model
    if isinstance(task, Classify | LanguageModel):
        tokens = isinstance(task, LanguageModel) or not task.x_train.is_floating_point()
        if tokens != takes_tokens(m):
            kinds = ("token ids", "float features")
            want, have = kinds[not takes_tokens(m)], kinds[not tokens]
            fitting = sorted({p.model.family for p in PRESETS.values()
                              if takes_tokens(p.model) == tokens})
            raise ValueError(f"model.family={m.family} reads {want}; the {cfg.data.name} data are "
                             f"{have}: take a family that reads {have} ({', '.join(fitting)}), "
                             f"or data of {want}")
    if isinstance(task, Classify):
        classes = int(max(task.y_train.max(), task.y_test.max())) + 1
        if m.n_out < classes:
            raise ValueError(f"model.n_out={m.n_out}: the {cfg.data.name} data has {classes} "
                             f"classes (labels 0-{classes - 1}); set model.n_out >= {classes}")
        ids = task.x_train if not task.x_train.is_floating_point() else None
    elif isinstance(task, LanguageModel):
        ids = task.train_ids
        chars = int(max(task.train_ids.max(), task.val_ids.max())) + 1
        if m.n_out < chars:
            raise ValueError(f"model.n_out={m.n_out}: the {cfg.data.name} data has {chars} "
                             f"characters to predict; set model.n_out >= {chars}")
    else:
        return
    if ids is not None and m.vocab < (top := int(ids.max()) + 1):
        raise ValueError(f"model.vocab={m.vocab}: the {cfg.data.name} data holds token ids up to "
                         f"{top - 1}; set model.vocab >= {top}")


def seed_groups(cfgs: list[RunConfig], cuda: bool | None = None) -> list[list[RunConfig]]:
    """What trains together: on CUDA the seeds of each configuration that stack (one
    seed-stacked model, normsys.training.batched), in the order first asked; else each run alone (the
    CPU, where one run a core is faster, and a registered norm, which knows no stacked form).
    ``cuda``: whether the runs train on CUDA (None: as the config's device resolves here)."""
    if cuda is None:
        cuda = bool(cfgs) and resolve_device(cfgs[0].train.device).type == "cuda"
    if not cfgs or not cuda:
        return [[c] for c in cfgs]
    by_config: dict[RunConfig, list[RunConfig]] = {}
    for c in cfgs:
        by_config.setdefault(c.override(**{"train.seed": 0}), []).append(c)
    groups = []
    for group in by_config.values():
        if _stacks(group):
            groups.append(group)
        else:
            groups.extend([c] for c in group)
    return groups


def _stacks(group: list[RunConfig]) -> bool:
    """Whether one configuration's seeds train as one stacked model: not with a registered norm
    (it knows no stacked form), nor with layers that have none (``check_batchable``)."""
    if NORMS[group[0].model.norm].source:
        return False
    try:
        check_batchable(group)
    except ValueError:
        return False
    return True


# ----------------------------------------------------------------------------- what claims need


def planned(claim: str, tier: str) -> list[RunConfig]:
    """The runs ``claim`` at ``tier`` fetched the last time it ran with this cache (its index),
    [] where none is kept or readable."""
    path = index_path(claim, tier)
    try:
        return [RunConfig.from_dict(r["config"]) for r in json.loads(path.read_text())["runs"]]
    except (AttributeError, OSError, ValueError, KeyError, TypeError):
        return []


def meta_pass(cfg: RunConfig, x: torch.Tensor, kind: type[nn.Module]
              ) -> tuple[list[tuple[nn.Module, torch.Size]], int]:
    """Each module of type ``kind`` in ``cfg``'s model with the shape of the input it takes when
    two examples of ``x`` pass through the model in training mode on the meta device (shapes
    only, no memory, no random draws), and the bytes autograd keeps for their backward pass (what
    training holds besides the weights: the storages of the tensors saved for backward). A
    setting the model and the data cannot take together raises as the forward pass does."""
    with torch.device("meta"):
        model = build_model(cfg.model).train()
    seen = []
    for module in model.modules():
        if isinstance(module, kind):
            module.register_forward_pre_hook(lambda m, args: seen.append((m, args[0].shape)))
    # by storage: a view saved by many ops (a weight transposed at every step) is held once, and
    # the weights are not what a longer sequence or a larger batch adds
    weights = {p.untyped_storage()._cdata for p in model.parameters()}
    kept: dict[int, int] = {}

    def pack(t: torch.Tensor) -> torch.Tensor:
        storage = t.untyped_storage()
        if storage._cdata not in weights:
            kept[storage._cdata] = storage.nbytes()
        return t

    with torch.autograd.graph.saved_tensors_hooks(pack, lambda t: t):
        model(x[:2].to("meta"))
    return seen, sum(kept.values())
