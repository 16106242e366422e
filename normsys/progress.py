"""What the run cache is doing, a line per training run as it starts and as it ends (trained or
read from the cache), with how many of the session's runs are done.

Silent until ``enable`` gives it a stream: the claims plugin hands it the terminal (a copy of the
standard error taken before pytest captures output, so the lines show while claims wait on
training, from pytest-xdist workers too) and a counter file shared by the session's processes;
the command line hands it standard error.
"""

from __future__ import annotations

import os
import time
from pathlib import Path

from filelock import FileLock

from normsys.config import PRESETS, RunConfig, preset

_state: dict = {"fd": None, "counter": None, "done": 0}


def enable(fd: int | None, counter: Path | None = None) -> None:
    """Write progress lines to file descriptor ``fd`` (None: silent), counting finished runs in
    ``counter`` (a file shared by every process of the session) or in this process."""
    _state.update(fd=fd, counter=counter, done=0)


def _write(line: str) -> None:
    if _state["fd"] is not None:
        os.write(_state["fd"], f"normsys: {line}\n".encode())


def _count() -> int:
    counter = _state["counter"]
    if counter is None:
        _state["done"] += 1
        return _state["done"]
    with FileLock(str(counter) + ".lock"):
        done = int(counter.read_text() or 0) + 1 if counter.exists() else 1
        counter.write_text(str(done))
    return done


SHOWN = {"model.norm", "train.method", "train.seed"}  # in every label already
UNSHOWN = {"train.probe", "train.probe_batch", "train.snapshots", "train.keep_state"}


def label(cfg) -> str:
    """family/norm/method/seed, what else differs from the family's preset, (tier, fingerprint):
    two runs of one family, norm and seed read apart, e.g. ``tanh_mlp/none/bp/s0 residual=False``."""
    name = (f"{cfg.model.family}/{cfg.model.norm}/{cfg.train.method}/s{cfg.train.seed}"
            + "".join(f" {k.split('.')[1]}={v}" for k, v in differences(cfg)))
    return f"{name} ({cfg.data.tier} tier, {cfg.fingerprint()[:8]})"


def differences(cfg, most: int = 4) -> list[tuple[str, object]]:
    """Up to ``most`` fields in which ``cfg`` differs from its family's preset at its tier."""
    if cfg.model.family not in PRESETS:
        return []
    ours, base = cfg.flat(), preset(cfg.model.family, cfg.data.tier).flat()
    return [(k, v) for k, v in ours.items()
            if k not in SHOWN | UNSHOWN and base.get(k) != v][:most]


def started(cfgs) -> None:
    what = label(cfgs[0]) if len(cfgs) == 1 else f"{label(cfgs[0])} with {len(cfgs)} seeds stacked"
    _write(f"training {what} ...")


def finished(record, cached: bool) -> None:
    """A run ended: trained now, or read from the cache (when and where it was trained)."""
    cfg = RunConfig.from_dict(record.config)
    done = _count()
    where = record.env.get("device", "?")
    if where.startswith("cpu") and "threads" in record.env:
        where = f"cpu, {record.env['threads']} thread(s)"
    if cached:
        when = record.env.get("date", "an earlier session")
        _write(f"[{done} runs done] {label(cfg)}: cached, trained in {record.wall_time:.0f} s "
               f"on {when} ({where})")
    else:
        _write(f"[{done} runs done] {label(cfg)}: trained in {record.wall_time:.0f} s ({where})")


def note(line: str) -> None:
    _write(line)


def now() -> str:
    return time.strftime("%Y-%m-%d %H:%M")
